/* The configuration of `sandboxd serve`: precedence, errors that name their
 * key, the original's variables, environments and tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/config.h"

#define TOK_A "tok-aaaaaaaaaaaaaaaa"
#define TOK_B "tok-bbbbbbbbbbbbbbbb"
#define TOK_C "tok-cccccccccccccccc"
#define TOK_D "tok-dddddddddddddddd"

static char dir[64];
static char file[128];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/sbx-config-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(file, sizeof(file), "%s/config.yaml", dir);
    return 0;
}

static int teardown(void **state)
{
    unlink(file);
    rmdir(dir);
    return 0;
}

static void write_yaml(const char *text)
{
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int argc_of(char **argv)
{
    int n = 0;
    while (argv[n])
        n++;
    return n;
}

/* Load with argv (NULL-terminated, argv[0] the command) and envp. */
static int load(struct sbx_config *c, char **argv, char **envp, sbx_err *e)
{
    char *none[] = {"serve", NULL};
    if (!argv)
        argv = none;
    memset(e, 0, sizeof(*e));
    return sbx_config_load(c, argc_of(argv), argv, envp, e);
}

/* Load expecting an error; returns its message (static). */
static const char *load_err(char **argv, char **envp)
{
    static sbx_err e;
    struct sbx_config c;
    assert_int_equal(load(&c, argv, envp, &e), -1);
    assert_null(c.environments); /* left empty */
    sbx_config_free(&c);
    return e.msg;
}

static const char *yaml_err(const char *text, char **envp)
{
    write_yaml(text);
    char *argv[] = {"serve", "--config", file, NULL};
    return load_err(argv, envp);
}

/* The message starts with "<file>:<rest>". */
static void assert_at(const char *msg, const char *rest)
{
    char want[512];
    snprintf(want, sizeof(want), "%s:%s", file, rest);
    if (strncmp(msg, want, strlen(want)) != 0)
        fail_msg("got \"%s\", want a message starting \"%s\"", msg, want);
}

static void assert_contains(const char *msg, const char *part)
{
    if (!strstr(msg, part))
        fail_msg("got \"%s\", want it to contain \"%s\"", msg, part);
}

static void defaults(void **state)
{
    struct sbx_config c;
    sbx_err e;
    assert_int_equal(load(&c, NULL, NULL, &e), 0);
    assert_false(c.help);
    assert_null(c.config_path);
    assert_false(c.listen.unix_socket);
    assert_null(c.listen.host);
    assert_int_equal(c.listen.port, 8080);
    assert_string_equal(c.listen.text, ":8080");
    assert_string_equal(c.state_dir, "/var/lib/sandbox");
    assert_string_equal(c.workspace_root, "/var/lib/sandbox/workspaces");
    assert_string_equal(c.control_dir, "/var/lib/sandbox/control");
    /* the seed's container: 2 cores, 3 GB, 512 processes for all sandboxes */
    assert_int_equal(c.total_memory_bytes, 3ull << 30);
    assert_int_equal(c.total_pids, 512);
    assert_true(c.total_cpu_cores == 2);
    assert_null(c.runtime_id);
    assert_string_equal(c.tenant_code, "default");
    assert_null(c.clone_key);
    assert_string_equal(c.clone_id, "default");
    assert_int_equal(c.n_tokens, 0);
    assert_int_equal(c.log_level, SBX_LOG_INFO);
    assert_int_equal(c.max_concurrent, 32);
    assert_int_equal(c.queue_per_tenant, 64);
    assert_true(c.queue_size >= c.queue_per_tenant);

    assert_true(c.limits.cpu_cores == 0.25);
    assert_int_equal(c.limits.memory_bytes, 256ull << 20);
    assert_int_equal(c.limits.pids, 32);
    assert_true(c.limits.timeout_s == 300);
    assert_int_equal(c.limits.file_size_bytes, 100ull << 20);
    assert_int_equal(c.limits.output_bytes, 10ull << 20);
    assert_true(c.max.timeout_s == 1800);
    assert_int_equal(c.workspace_quota_bytes, 1ull << 30);
    assert_int_equal(c.net, SBX_NET_PROXY);
    assert_true(c.mount_sandbox);
    assert_int_equal(c.seccomp, SBX_SECCOMP_DEFAULT);
    assert_int_equal(c.runner_uid, 10001);
    assert_int_equal(c.network.limits.proxy_port, 1080);
    assert_int_equal(c.network.def, SBX_DEFAULT_ALLOW);
    assert_null(c.network.allowed_cidrs);
    assert_int_equal(c.network.allow.n, 0);
    assert_int_equal(c.task_env_keys.n, 0);
    assert_true(c.retention.max_age_s > 0);
    assert_true(c.retention.events_per_session > 0);
    assert_true(c.pool.enabled); /* on by default: 2 per description, 32 in all */
    assert_int_equal(c.pool.size, 2);
    assert_int_equal(c.pool.max_total, 32);

    assert_int_equal(c.n_environments, 3);
    const struct sbx_environment *py = sbx_config_environment(&c, "python");
    assert_non_null(py);
    assert_int_equal(py->language, SBX_LANG_PYTHON);
    assert_int_equal(py->command.n, 2);
    assert_string_equal(py->command.v[0], "python3");
    assert_string_equal(py->command.v[1], "-c");
    assert_null(py->command.v[2]);
    assert_string_equal(py->working_dir, "/workspace");
    assert_null(py->rootfs);
    assert_int_equal(py->limits.memory_bytes, 256ull << 20);
    assert_int_equal(py->net, SBX_NET_PROXY);
    assert_ptr_equal(sbx_config_environment(&c, "python3"), py);
    assert_string_equal(sbx_config_environment(&c, "node")->command.v[0], "node");
    assert_string_equal(sbx_config_environment(&c, "sh")->name, "shell");
    assert_null(sbx_config_environment(&c, "ruby"));
    sbx_config_free(&c);
    assert_null(c.state_dir);
    sbx_config_free(&c); /* twice is harmless */
}

static void help_flag(void **state)
{
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--bogus", "--help", NULL};
    assert_int_equal(load(&c, argv, NULL, &e), 0);
    assert_true(c.help);
    assert_null(c.state_dir);
    assert_non_null(strstr(sbx_config_usage, "--config"));
    sbx_config_free(&c);
}

static const char *full_yaml =
    "# a full file\n"
    "server:\n"
    "  address: 127.0.0.1:9000   # the seed's name\n"
    "  state_dir: /srv/sandbox/\n"
    "  runtime_id: rt-1\n"
    "  log_level: debug\n"
    "  max_workers: 10\n"
    "  queue_size: 100\n"
    "  queue_per_tenant: 20\n"
    "  max_body: 4m\n"
    "  header_timeout: 5s\n"
    "  default_clone: {tenant_code: t1, clone_key: clone-a, clone_id: c1}\n"
    "  tokens:\n"
    "    - {name: ops, token: " TOK_A "}\n"
    "    - name: acme-bot\n"
    "      token: " TOK_B "\n"
    "      tenant: acme\n"
    "sandbox:\n"
    "  default_timeout: 30s\n"
    "  memory_limit: 512m\n"
    "  pids_limit: 50\n"
    "  cpu_limit: 50%\n"
    "  file_size_limit: 10MiB\n"
    "  read_only_rootfs: true\n"
    "  network_policy: bridge\n"
    "  seccomp_profile: strict\n"
    "  mount_sandbox: false\n"
    "  idle_timeout: 5m\n"
    "  workspace_quota: 2g\n"
    "  task_env_keys: [UR_BASE_URL, OPENAI_API_KEY]\n"
    "  max: {memory_limit: 4g, timeout: 1h}\n"
    "network:\n"
    "  default: deny\n"
    "  allow: [\"api.example.com:443\", \"*.pypi.org\", 10.1.2.0/24]\n"
    "  deny: [\"*.internal.example\"]\n"
    "  hosts: {db.local: 10.1.2.3}\n"
    "  dns: {upstream: [1.1.1.1, \"[2606:4700::1111]:53\"]}\n"
    "  proxy_port: 1081\n"
    "  allowed_cidrs: [172.17.0.1/32, 10.9.0.0/16]\n"
    "  allowed_ports: \"19091, 19092\"\n"
    "  limits: {max_connections: 64, max_bytes: 1g, connect_timeout: 3s}\n"
    "tenants:\n"
    "  acme:\n"
    "    env_keys: [ACME_KEY]\n"
    "    env: {ACME_URL: \"https://llm.acme.example/v1\"}\n"
    "  other: ~\n"
    "retention: {max_age: 2d, max_tasks: 500, events_per_session: 1000}\n"
    "environments:\n"
    "  python:\n"
    "    aliases: [python3, python-3.9]\n"
    "    memory_limit: 1g\n"
    "  py-safe:\n"
    "    language: python\n"
    "    command: [/opt/py/bin/python3, -I, -c]\n"
    "    network_policy: none\n"
    "    working_dir: /workspace/src\n"
    "  node: {enabled: false}\n"
    "pool:\n"
    "  enabled: true\n"
    "  max_idle: 5\n"
    "  max_active: 20\n"
    "  max_total: 9\n"
    "  idle_timeout: 5m\n"
    "  environments: [python-3.9, py-safe]\n"
    "  zygote_node_requires: [http, zlib]\n";

static void yaml_overrides_defaults(void **state)
{
    write_yaml(full_yaml);
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    char *envp[] = {"OPENAI_API_KEY=sk-test", "ACME_KEY=acme-secret", "PATH=/bin", NULL};
    if (load(&c, argv, envp, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(c.config_path, file);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 9000);
    assert_string_equal(c.state_dir, "/srv/sandbox");
    assert_string_equal(c.workspace_root, "/srv/sandbox/workspaces");
    assert_string_equal(c.runtime_id, "rt-1");
    assert_int_equal(c.log_level, SBX_LOG_DEBUG);
    assert_int_equal(c.max_concurrent, 10);
    assert_int_equal(c.queue_size, 100);
    assert_int_equal(c.queue_per_tenant, 20);
    assert_int_equal(c.max_body_bytes, 4ull << 20);
    assert_true(c.header_timeout_s == 5);
    assert_string_equal(c.tenant_code, "t1");
    assert_string_equal(c.clone_key, "clone-a");
    assert_string_equal(c.clone_id, "c1");
    assert_int_equal(c.n_tokens, 2);
    assert_string_equal(c.tokens[0].name, "ops");
    assert_string_equal(c.tokens[0].token, TOK_A);
    assert_null(c.tokens[0].tenant);
    assert_string_equal(c.tokens[1].name, "acme-bot");
    assert_string_equal(c.tokens[1].tenant, "acme");

    assert_true(c.limits.timeout_s == 30);
    assert_int_equal(c.limits.memory_bytes, 512ull << 20);
    assert_int_equal(c.limits.pids, 50);
    assert_true(c.limits.cpu_cores == 0.5);
    assert_int_equal(c.limits.file_size_bytes, 10ull << 20);
    assert_int_equal(c.max.memory_bytes, 4ull << 30);
    assert_true(c.max.timeout_s == 3600);
    assert_int_equal(c.net, SBX_NET_PROXY); /* the seed's bridge */
    assert_int_equal(c.seccomp, SBX_SECCOMP_STRICT);
    assert_false(c.mount_sandbox);
    assert_true(c.idle_timeout_s == 300);
    assert_int_equal(c.workspace_quota_bytes, 2ull << 30);

    assert_int_equal(c.network.def, SBX_DEFAULT_DENY);
    assert_int_equal(c.network.allow.n, 3);
    assert_string_equal(c.network.allow.v[1], "*.pypi.org");
    assert_null(c.network.allow.v[3]);
    assert_string_equal(c.network.deny.v[0], "*.internal.example");
    assert_string_equal(c.network.hosts.v[0], "db.local=10.1.2.3");
    assert_int_equal(c.network.dns_upstream.n, 2);
    assert_int_equal(c.network.limits.proxy_port, 1081);
    assert_string_equal(c.network.allowed_cidrs, "172.17.0.1/32,10.9.0.0/16");
    assert_string_equal(c.network.allowed_ports, "19091, 19092");
    assert_int_equal(c.network.limits.max_connections, 64);
    assert_int_equal(c.network.limits.max_bytes, 1ull << 30);
    assert_true(c.network.limits.connect_timeout_s == 3);

    /* injected variables: values from the environment given, absent ones skipped */
    assert_int_equal(c.task_env_keys.n, 2);
    assert_int_equal(c.task_env.n, 1);
    assert_string_equal(c.task_env.v[0], "OPENAI_API_KEY=sk-test");
    const struct sbx_tenant_conf *acme = sbx_config_tenant(&c, "acme");
    assert_non_null(acme);
    assert_int_equal(acme->env.n, 2);
    assert_string_equal(acme->env.v[0], "ACME_KEY=acme-secret");
    assert_string_equal(acme->env.v[1], "ACME_URL=https://llm.acme.example/v1");
    assert_non_null(sbx_config_tenant(&c, "other"));
    assert_null(sbx_config_tenant(&c, "nobody"));

    assert_true(c.retention.max_age_s == 2 * 86400);
    assert_int_equal(c.retention.max_tasks, 500);

    /* environments: node disabled, python widened, py-safe added */
    assert_int_equal(c.n_environments, 3);
    assert_null(sbx_config_environment(&c, "node"));
    assert_null(sbx_config_environment(&c, "js"));
    const struct sbx_environment *py = sbx_config_environment(&c, "python-3.9");
    assert_non_null(py);
    assert_string_equal(py->name, "python");
    assert_int_equal(py->limits.memory_bytes, 1ull << 30);
    assert_int_equal(py->limits.pids, 50); /* the sandbox's default */
    assert_int_equal(py->seccomp, SBX_SECCOMP_STRICT);
    const struct sbx_environment *safe = sbx_config_environment(&c, "py-safe");
    assert_non_null(safe);
    assert_int_equal(safe->command.n, 3);
    assert_string_equal(safe->command.v[0], "/opt/py/bin/python3");
    assert_int_equal(safe->net, SBX_NET_NONE);
    assert_string_equal(safe->working_dir, "/workspace/src");
    assert_int_equal(safe->limits.memory_bytes, 512ull << 20);

    assert_true(c.pool.enabled);
    assert_int_equal(c.pool.size, 5);
    assert_int_equal(c.pool.max_active, 20);
    assert_int_equal(c.pool.max_total, 9);
    assert_int_equal(c.pool.environments.n, 2);
    assert_string_equal(c.pool.environments.v[0], "python"); /* the alias resolved */
    assert_string_equal(c.pool.environments.v[1], "py-safe");
    assert_int_equal(c.pool.zygote_node_requires.n, 2);
    assert_string_equal(c.pool.zygote_node_requires.v[1], "zlib");
    sbx_config_free(&c);
}

static void env_overrides_yaml(void **state)
{
    write_yaml("server:\n"
               "  listen: \":9000\"\n"
               "  workspace_root: ws\n"
               "  default_clone: {tenant_code: t1, clone_id: c1}\n"
               "  tokens: [{name: ops, token: " TOK_A "}, {name: bot, token: " TOK_B
               ", tenant: acme}]\n"
               "sandbox:\n"
               "  memory_limit: 512m\n"
               "  pids_limit: 50\n"
               "  network_policy: host\n"
               "  idle_timeout: 1h\n"
               "network:\n"
               "  allowed_cidrs: [10.0.0.0/8]\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    char *envp[] = {"CLAW_LISTEN_ADDR=127.0.0.1:9100",
                    "CLAW_MEMORY_LIMIT_MB=300",
                    "CLAW_MAX_PROCESSES= 40 ",
                    "CLAW_CPU_LIMIT=25",
                    "CLAW_ENABLE_SANDBOX_NET=false",
                    "CLAW_ENABLE_MOUNT_SANDBOX=true",
                    "CLAW_SANDBOX_ALLOWED_CIDRS=172.17.0.1/32",
                    "CLAW_SANDBOX_ALLOWED_PORTS=19091",
                    "CLAW_ALLOWED_INTERNAL_TARGETS=10.0.0.5:5432",
                    "CLAW_SANDBOX_BLOCKED_CIDRS=203.0.113.0/24",
                    "CLAW_SANDBOX_PROXY_PORT=1090",
                    "CLAW_TENANT_CODE=t2",
                    "CLAW_CLONE_KEY=",
                    "CLAW_CLONE_ID=c2",
                    "CLAW_RUNTIME_ID=rt-9",
                    "CLAW_CONTROL_DIR=/runtime/control",
                    "CLAW_IDLE_TIMEOUT_SEC=30",
                    "CLAW_API_TOKEN=" TOK_C,
                    "CLAW_AGENT_ID=agent-1",
                    NULL};
    if (load(&c, argv, envp, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 9100);
    /* a relative path in the file is relative to the file */
    char want[256];
    snprintf(want, sizeof(want), "%s/ws", dir);
    assert_string_equal(c.workspace_root, want);
    assert_string_equal(c.control_dir, "/runtime/control");
    assert_int_equal(c.limits.memory_bytes, 300ull << 20);
    assert_int_equal(c.limits.pids, 40);
    assert_true(c.limits.cpu_cores == 0.25);
    assert_int_equal(c.net, SBX_NET_NONE);
    assert_true(c.mount_sandbox);
    assert_string_equal(c.network.allowed_cidrs, "172.17.0.1/32");
    assert_string_equal(c.network.allowed_ports, "19091");
    assert_string_equal(c.network.allowed_internal_targets, "10.0.0.5:5432");
    assert_string_equal(c.network.blocked_cidrs, "203.0.113.0/24");
    assert_int_equal(c.network.limits.proxy_port, 1090);
    assert_string_equal(c.tenant_code, "t2");
    assert_null(c.clone_key); /* empty is unset */
    assert_string_equal(c.clone_id, "c2");
    assert_string_equal(c.runtime_id, "rt-9");
    assert_true(c.idle_timeout_s == 30);
    /* CLAW_API_TOKEN replaced the operator token, the tenant one stays */
    assert_int_equal(c.n_tokens, 2);
    assert_string_equal(c.tokens[0].name, "bot");
    assert_string_equal(c.tokens[0].tenant, "acme");
    assert_string_equal(c.tokens[1].name, "CLAW_API_TOKEN#1");
    assert_string_equal(c.tokens[1].token, TOK_C);
    assert_null(c.tokens[1].tenant);
    /* environments follow the defaults they did not set */
    assert_int_equal(sbx_config_environment(&c, "python")->net, SBX_NET_NONE);
    assert_int_equal(sbx_config_environment(&c, "shell")->limits.memory_bytes, 300ull << 20);
    /* the original's variables without meaning here are reported */
    assert_int_equal(c.ignored_env.n, 1);
    assert_string_equal(c.ignored_env.v[0], "CLAW_AGENT_ID");
    sbx_config_free(&c);
}

/* The later version's names: SANDBOX_ in place of CLAW_, winning when both
 * are set; a bad value is named by the name it came under. */
static void sandbox_names_of_claw_settings(void **state)
{
    write_yaml("server:\n  workspace_root: ws\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    char *envp[] = {"CLAW_MAX_PROCESSES=40",           "SANDBOX_MAX_PROCESSES=41",
                    "SANDBOX_SANDBOX_PROXY_PORT=1091", "CLAW_IDLE_TIMEOUT_SEC=30",
                    "SANDBOX_IDLE_TIMEOUT_SEC=",       "SANDBOX_API_TOKEN=" TOK_C,
                    "SANDBOX_URL=http://127.0.0.1:1",  NULL};
    if (load(&c, argv, envp, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(c.limits.pids, 41);
    assert_int_equal(c.network.limits.proxy_port, 1091);
    assert_true(c.idle_timeout_s == 30); /* an empty later name is unset */
    assert_int_equal(c.n_tokens, 1);
    assert_string_equal(c.tokens[0].name, "SANDBOX_API_TOKEN#1");
    sbx_config_free(&c);
    char *bad[] = {"CLAW_MAX_PROCESSES=40", "SANDBOX_MAX_PROCESSES=many", NULL};
    assert_int_equal(load(&c, argv, bad, &e), -1);
    assert_contains(e.msg, "SANDBOX_MAX_PROCESSES");
    /* the aggregate caps: 0 is none; a bad one is named */
    char *off[] = {"serve",        "--config", file, "--total-memory", "0", "--total-cpu", "0",
                   "--total-pids", "0",        NULL};
    if (load(&c, off, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(c.total_memory_bytes, 0);
    assert_int_equal(c.total_pids, 0);
    assert_true(c.total_cpu_cores == 0);
    sbx_config_free(&c);
    char *badcpu[] = {"serve", "--config", file, "--total-cpu", "-1", NULL};
    assert_int_equal(load(&c, badcpu, NULL, &e), -1);
    assert_contains(e.msg, "--total-cpu");
}

static void flags_override_env(void **state)
{
    write_yaml("server:\n  max_concurrent: 4\n  log_level: warn\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve",
                    "--listen",
                    "unix:/run/sandboxd.sock",
                    "--config=",
                    NULL,
                    "--max-concurrent=8",
                    "--memory",
                    "1g",
                    "--cpu",
                    "150%",
                    "--pids=64",
                    "--timeout",
                    "10m",
                    "--net",
                    "host",
                    "--state-dir",
                    "/srv/s",
                    "--token",
                    TOK_A,
                    "--token=" TOK_B,
                    "--log-level=error",
                    NULL};
    char cfg[160];
    snprintf(cfg, sizeof(cfg), "--config=%s", file);
    argv[3] = cfg;
    argv[4] = "--workspace-root=/data/ws";
    char *envp[] = {"CLAW_LISTEN_ADDR=:9100", "CLAW_MEMORY_LIMIT_MB=300", "CLAW_CPU_LIMIT=25",
                    "CLAW_WORKSPACE=/env/ws", "CLAW_API_TOKEN=" TOK_C,    NULL};
    if (load(&c, argv, envp, &e) < 0)
        fail_msg("%s", e.msg);
    assert_true(c.listen.unix_socket);
    assert_string_equal(c.listen.path, "/run/sandboxd.sock");
    assert_int_equal(c.max_concurrent, 8);
    assert_int_equal(c.log_level, SBX_LOG_ERROR);
    assert_int_equal(c.limits.memory_bytes, 1ull << 30);
    assert_true(c.limits.cpu_cores == 1.5);
    assert_int_equal(c.limits.pids, 64);
    assert_true(c.limits.timeout_s == 600);
    assert_int_equal(c.net, SBX_NET_HOST);
    assert_string_equal(c.state_dir, "/srv/s");
    assert_string_equal(c.workspace_root, "/data/ws");
    assert_string_equal(c.control_dir, "/srv/s/control");
    assert_int_equal(c.n_tokens, 2);
    assert_string_equal(c.tokens[0].name, "--token#1");
    assert_string_equal(c.tokens[0].token, TOK_A);
    assert_string_equal(c.tokens[1].token, TOK_B);
    sbx_config_free(&c);
}

static void yaml_bad_values_name_key_and_position(void **state)
{
    assert_at(yaml_err("server:\n  listen: \":8080\"\nsandbox:\n  memory_limit: 12x\n", NULL),
              "4:3: sandbox.memory_limit: '12x'");
    assert_at(yaml_err("sandbox:\n  max:\n    pids_limit: -1\n", NULL),
              "3:5: sandbox.max.pids_limit: '-1' is not a number");
    assert_at(yaml_err("sandbox: {mount_sandbox: maybe}\n", NULL),
              "1:11: sandbox.mount_sandbox: 'maybe' is not true or false");
    assert_at(yaml_err("sandbox:\n  default_timeout: 30 seconds\n", NULL),
              "2:3: sandbox.default_timeout: '30 seconds' is not a duration");
    assert_at(yaml_err("sandbox:\n  memory_limit: 1m\n", NULL),
              "2:3: sandbox.memory_limit: '1m' is below the minimum 8M");
    assert_at(yaml_err("sandbox:\n  network_policy: open\n", NULL),
              "2:3: sandbox.network_policy: unknown network policy 'open'");
    assert_contains(yaml_err("sandbox:\n  read_only_rootfs: maybe\n", NULL),
                    "2:3: sandbox.read_only_rootfs: ");
    assert_at(yaml_err("server:\n  listen: \"[::1:80\"\n", NULL), "2:3: server.listen: ");
    assert_at(yaml_err("server:\n  listen: \"host:99999\"\n", NULL), "2:3: server.listen: ");
    assert_at(yaml_err("server:\n  max_concurrent: 0\n", NULL),
              "2:3: server.max_concurrent: '0' is out of range");
    assert_at(yaml_err("server:\n  listen: [a, b]\n", NULL),
              "2:11: server.listen: expects a single value, not a list");
    assert_at(yaml_err("server:\n  state_dir:\n", NULL), "2:13: server.state_dir: has no value");
    assert_at(yaml_err("server:\n  default_clone: {tenant_code: ../x}\n", NULL),
              "2:19: server.default_clone.tenant_code: '../x' must be");
    assert_at(yaml_err("network:\n  allow: [api.example.com, \"10.0.0.0/99\"]\n", NULL),
              "2:28: network.allow[1]: rule '10.0.0.0/99'");
    assert_at(yaml_err("network:\n  allowed_cidrs: \"10.0.0.0/8, nope\"\n", NULL),
              "2:3: network.allowed_cidrs: entry 'nope'");
    assert_at(yaml_err("network:\n  hosts: {db.local: not-an-ip}\n", NULL),
              "2:11: network.hosts.db.local: host entry 'db.local=not-an-ip': bad address");
    assert_at(yaml_err("network:\n  dns: {upstream: [\"1.1.1.1:0\"]}\n", NULL),
              "2:20: network.dns.upstream[0]: ");
    assert_at(yaml_err("sandbox:\n  task_env_keys: [OPENAI_API_KEY, CLAW_API_TOKEN]\n", NULL),
              "2:3: sandbox.task_env_keys: 'CLAW_API_TOKEN' is one of the daemon's own");
    assert_contains(yaml_err("sandbox:\n  seccomp_profile:\n    default_action: SCMP_ACT_ERRNO\n"
                             "    syscalls:\n      - {names: [read, nope_call], action: allow}\n",
                             NULL),
                    "sandbox.seccomp_profile.syscalls[0].names: unknown syscall 'nope_call'");
    assert_contains(
        yaml_err("sandbox:\n  seccomp_profile:\n    default_action: SCMP_ACT_MAYBE\n", NULL),
        "sandbox.seccomp_profile.default_action: 'SCMP_ACT_MAYBE' is not a seccomp "
        "action");
    assert_contains(
        yaml_err("sandbox:\n  seccomp_profile:\n    syscalls: [{names: [read]}]\n", NULL),
        "sandbox.seccomp_profile.syscalls[0]: expects {names: [...], action: ...}");
    assert_contains(yaml_err("sandbox:\n  mount_roots: [relative]\n", NULL),
                    "sandbox.mount_roots: 'relative' is not an absolute directory path");
    assert_at(yaml_err("server:\n  max_concurrent: 4\n  max_workers: 5\n", NULL),
              "3:3: server: max_concurrent and max_workers are the same setting");
    assert_at(yaml_err("server:\n  max_body: 4m\n  max_body: 5m\n", NULL),
              "3:3: server.max_body: given twice (first at line 2)");
    assert_at(yaml_err("server:\n  max_body: \"4\\0m\"\n", NULL),
              "2:13: server.max_body: holds a NUL byte");
}

static void env_and_flag_bad_values_name_key(void **state)
{
    char *e1[] = {"CLAW_MEMORY_LIMIT_MB=lots", NULL};
    assert_string_equal(load_err(NULL, e1), "CLAW_MEMORY_LIMIT_MB: 'lots' is not a number");
    char *e2[] = {"CLAW_ENABLE_SANDBOX_NET=maybe", NULL};
    assert_string_equal(load_err(NULL, e2),
                        "CLAW_ENABLE_SANDBOX_NET: 'maybe' is not true or false");
    char *e3[] = {"CLAW_LISTEN_ADDR=localhost", NULL};
    assert_contains(load_err(NULL, e3), "CLAW_LISTEN_ADDR: 'localhost' is not HOST:PORT");
    char *e4[] = {"CLAW_SANDBOX_ALLOWED_PORTS=80,http", NULL};
    assert_contains(load_err(NULL, e4), "CLAW_SANDBOX_ALLOWED_PORTS: entry 'http'");
    char *e5[] = {"CLAW_TENANT_CODE=a/b", NULL};
    assert_contains(load_err(NULL, e5), "CLAW_TENANT_CODE: 'a/b' must be");
    char *e6[] = {"CLAW_IDLE_TIMEOUT_SEC=5m", NULL};
    assert_contains(load_err(NULL, e6), "CLAW_IDLE_TIMEOUT_SEC: '5m' is not a number");
    char *e7[] = {"CLAW_MEMORY_LIMIT=512", NULL};
    assert_contains(load_err(NULL, e7), "CLAW_MEMORY_LIMIT: unknown setting");
    char *e8[] = {"CLAW_SANDBOX_PROXY_PORT=3128", NULL};
    assert_contains(load_err(NULL, e8),
                    "network.proxy_port (CLAW_SANDBOX_PROXY_PORT) 3128 is taken");

    char *a1[] = {"serve", "--listen", ":99999", NULL};
    assert_contains(load_err(a1, NULL), "--listen: '99999' is out of range");
    char *a2[] = {"serve", "--max-concurrent=many", NULL};
    assert_string_equal(load_err(a2, NULL), "--max-concurrent: 'many' is not a number");
    char *a3[] = {"serve", "--log-level", "loud", NULL};
    assert_contains(load_err(a3, NULL), "--log-level: 'loud' is not error, warn");
    char *a4[] = {"serve", "--listen", NULL};
    assert_string_equal(load_err(a4, NULL), "--listen: needs a value");
    char *a5[] = {"serve", "--lisen=:1", NULL};
    assert_contains(load_err(a5, NULL), "--lisen: unknown option");
    char *a9[] = {"serve", "-c", "x.yaml", NULL};
    assert_contains(load_err(a9, NULL), "-c: unknown option");
    char *a6[] = {"serve", "extra", NULL};
    assert_contains(load_err(a6, NULL), "extra: unexpected argument");
    char *a7[] = {"serve", "--config", "/nonexistent/sandbox.yaml", NULL};
    assert_contains(load_err(a7, NULL), "--config: cannot open '/nonexistent/sandbox.yaml'");
    char *a8[] = {"serve", "--net", "bridged", NULL};
    assert_contains(load_err(a8, NULL), "--net: unknown network policy 'bridged'");
}

static void unknown_yaml_keys_refused_with_path(void **state)
{
    assert_at(yaml_err("server:\n  listen: \":1\"\nservre:\n  x: 1\n", NULL),
              "3:1: servre: unknown section");
    assert_at(yaml_err("sandbox:\n  memroy_limit: 1g\n", NULL),
              "2:3: sandbox.memroy_limit: unknown key");
    assert_at(yaml_err("network:\n  limits:\n    max_conns: 3\n", NULL),
              "3:5: network.limits.max_conns: unknown key");
    assert_at(
        yaml_err("server:\n  tokens:\n    - {name: a, token: " TOK_A ", role: admin}\n", NULL),
        "3:46: server.tokens[0].role: unknown key");
    assert_at(yaml_err("environments:\n  python:\n    memory: 1g\n", NULL),
              "3:5: environments.python.memory: unknown key");
    assert_at(yaml_err("tenants:\n  acme:\n    env_key: [A]\n", NULL),
              "3:5: tenants.acme.env_key: unknown key");
    assert_at(yaml_err("sandbox:\n  max: {memory: 1g}\n", NULL),
              "2:9: sandbox.max.memory: unknown key");
    assert_at(yaml_err("- just\n- a list\n", NULL), "1:1: (top): expects a mapping");
}

/* The agent's model: the section, a tenant's own, bad values named. */
static void model_section(void **state)
{
    write_yaml("model:\n  base_url: http://127.0.0.1:9/v1\n  name: m1\n  key_env: MY_KEY\n"
               "  tool_output_limit: 8k\n  max_steps: 3\n  turn_timeout: 90s\n"
               "tenants:\n  acme:\n    env_keys: [A]\n    model: {name: m2, key_file: k}\n");
    char *argv[] = {"serve", "--config", file, NULL};
    struct sbx_config c;
    sbx_err e;
    assert_int_equal(load(&c, argv, NULL, &e), 0);
    assert_string_equal(c.model.base_url, "http://127.0.0.1:9/v1");
    assert_string_equal(c.model.name, "m1");
    assert_string_equal(c.model.key_env, "MY_KEY");
    assert_null(c.model.key_file);
    assert_int_equal(c.agent.tool_output_limit, 8192);
    assert_int_equal(c.agent.max_steps, 3);
    assert_true(c.agent.turn_timeout_s == 90);
    assert_int_equal(c.n_tenant_models, 1);
    assert_string_equal(c.tenant_models[0].code, "acme");
    assert_string_equal(c.tenant_models[0].model.name, "m2");
    assert_null(c.tenant_models[0].model.base_url);
    assert_int_equal(c.tenant_models[0].model.key_file[0], '/'); /* made absolute */
    sbx_config_free(&c);
    assert_at(yaml_err("model:\n  name: \"\"\n", NULL), "2:3: model.name: ");
    assert_at(yaml_err("model:\n  max_steps: 0\n", NULL),
              "2:3: model.max_steps: '0' is out of range");
    assert_at(yaml_err("model:\n  modle: x\n", NULL), "2:3: model.modle: unknown key");
    assert_at(yaml_err("tenants:\n  acme:\n    model: {url: x}\n", NULL),
              "3:13: tenants.acme.model.url: unknown key");
}

static void malformed_yaml_reports_line_and_column(void **state)
{
    const char *msg = yaml_err("server:\n  listen: \":8080\"\n  tokens: [unclosed\n", NULL);
    assert_at(msg, "4:1: YAML syntax error: ");
    msg = yaml_err("server:\n  listen: \":8080\"\n bad indent: 1\n", NULL);
    assert_at(msg, "3:");
    assert_contains(msg, "YAML syntax error");
    msg = yaml_err("server: {listen: \":1\"}\n---\nsandbox: {}\n", NULL);
    assert_at(msg, "3:1: (document): only one YAML document is read");

    /* an empty file is an empty configuration */
    write_yaml("# nothing yet\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    assert_int_equal(load(&c, argv, NULL, &e), 0);
    assert_int_equal(c.listen.port, 8080);
    sbx_config_free(&c);
}

static void cpu_limit_is_percent(void **state)
{
    struct {
        const char *value;
        double cores;
    } ok[] = {{"25", 0.25}, {"100", 1}, {"150", 1.5}, {"12.5", 0.125}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char var[64];
        snprintf(var, sizeof(var), "CLAW_CPU_LIMIT=%s", ok[i].value);
        char *envp[] = {var, NULL};
        struct sbx_config c;
        sbx_err e;
        assert_int_equal(load(&c, NULL, envp, &e), 0);
        assert_true(c.limits.cpu_cores == ok[i].cores);
        sbx_config_free(&c);
    }
    char *zero[] = {"CLAW_CPU_LIMIT=0", NULL};
    assert_contains(load_err(NULL, zero), "CLAW_CPU_LIMIT: '0' percent is out of range");
    char *cores[] = {"CLAW_CPU_LIMIT=0.5cores", NULL};
    assert_contains(load_err(NULL, cores), "CLAW_CPU_LIMIT: '0.5cores' is not a percentage");
    /* above the maximum (2 cores by default) */
    char *big[] = {"CLAW_CPU_LIMIT=300", NULL};
    assert_string_equal(load_err(NULL, big), "CLAW_CPU_LIMIT: 3 cores is above the maximum 2 "
                                             "cores (built-in sandbox.max.cpu_limit)");
}

static void limits_within_maxima(void **state)
{
    char *envp[] = {"CLAW_MEMORY_LIMIT_MB=4096", NULL};
    assert_string_equal(load_err(NULL, envp), "CLAW_MEMORY_LIMIT_MB: 4G is above the maximum 2G "
                                              "(built-in sandbox.max.memory_limit)");
    /* the file raises the maximum: fine */
    write_yaml("sandbox:\n  max: {memory_limit: 8g}\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    assert_int_equal(load(&c, argv, envp, &e), 0);
    assert_int_equal(c.limits.memory_bytes, 4ull << 30);
    sbx_config_free(&c);
    /* a maximum below the built-in default blames the maximum */
    assert_at(yaml_err("sandbox:\n  max:\n    memory_limit: 128m\n", NULL),
              "3:5: sandbox.max.memory_limit: 128M is below the default 256M");
    /* an environment above the maximum */
    assert_at(yaml_err("environments:\n  python: {timeout: 2h}\n", NULL),
              "2:12: environments.python.timeout: 7200s is above the maximum 1800s");
    /* a flag above a maximum from the file */
    write_yaml("sandbox:\n  max:\n    pids_limit: 100\n");
    char *argv2[] = {"serve", "--config", file, "--pids", "200", NULL};
    char want[256];
    snprintf(want, sizeof(want),
             "--pids: 200 is above the maximum 100 (%s:3:5: sandbox.max.pids_limit)", file);
    assert_string_equal(load_err(argv2, NULL), want);
    write_yaml("server: {queue_size: 10, queue_per_tenant: 20}\n");
    assert_contains(load_err(argv, NULL), "server.queue_per_tenant (20) is above");
}

static void token_lists(void **state)
{
    struct sbx_config c;
    sbx_err e;
    char *envp[] = {"CLAW_API_TOKEN= " TOK_A " , " TOK_B, NULL};
    assert_int_equal(load(&c, NULL, envp, &e), 0);
    assert_int_equal(c.n_tokens, 2);
    assert_string_equal(c.tokens[0].token, TOK_A);
    assert_string_equal(c.tokens[1].token, TOK_B);
    assert_string_equal(c.tokens[1].name, "CLAW_API_TOKEN#2");
    sbx_config_free(&c);

    char *empty_mid[] = {"CLAW_API_TOKEN=" TOK_A ",," TOK_B, NULL};
    assert_string_equal(load_err(NULL, empty_mid), "CLAW_API_TOKEN: entry 2 is empty");
    char *trailing[] = {"CLAW_API_TOKEN=" TOK_A ",", NULL};
    assert_string_equal(load_err(NULL, trailing), "CLAW_API_TOKEN: entry 2 is empty");
    char *blank[] = {"CLAW_API_TOKEN=" TOK_A ", ,", NULL};
    assert_string_equal(load_err(NULL, blank), "CLAW_API_TOKEN: entry 2 is empty");
    char *shorty[] = {"CLAW_API_TOKEN=secret", NULL};
    assert_contains(load_err(NULL, shorty), "CLAW_API_TOKEN: entry 1 is too short");
    char *twice[] = {"CLAW_API_TOKEN=" TOK_A "," TOK_A, NULL};
    assert_string_equal(load_err(NULL, twice),
                        "CLAW_API_TOKEN#2: the same secret as CLAW_API_TOKEN#1");
    char *spaced[] = {"serve", "--token", "tok with spaces inside it", NULL};
    assert_contains(load_err(spaced, NULL), "--token: may only hold printable characters");
    char *comma[] = {"serve", "--token", TOK_A "," TOK_B, NULL};
    assert_contains(load_err(comma, NULL), "--token: may only hold");
    /* all blank is unset */
    char *unset[] = {"CLAW_API_TOKEN=  ", NULL};
    assert_int_equal(load(&c, NULL, unset, &e), 0);
    assert_int_equal(c.n_tokens, 0);
    sbx_config_free(&c);

    assert_at(yaml_err("server:\n  tokens:\n    - {name: a, token: \"\"}\n", NULL),
              "3:17: server.tokens[0].token: is empty");
    assert_at(yaml_err("server:\n  tokens:\n    - {token: " TOK_A "}\n", NULL),
              "3:7: server.tokens[0]: needs a name");
    assert_at(
        yaml_err("server:\n  tokens:\n    - {name: a, token: " TOK_A ", tenant: \"a b\"}\n", NULL),
        "3:46: server.tokens[0].tenant: is not a tenant code");
    assert_contains(yaml_err("server:\n  tokens:\n    - {name: a, token: " TOK_A "}\n"
                             "    - {name: a, token: " TOK_B ", tenant: t}\n",
                             NULL),
                    "token name 'a' is given twice");
    /* a tenant token may not reuse an operator token's secret */
    write_yaml("server:\n  tokens: [{name: bot, token: " TOK_D ", tenant: acme}]\n");
    char *argv[] = {"serve", "--config", file, "--token", TOK_D, NULL};
    assert_string_equal(load_err(argv, NULL), "--token#1: the same secret as bot");
}

static void environments_and_aliases(void **state)
{
    /* the seed's list form */
    write_yaml("environments:\n"
               "  - name: python-3.9\n"
               "    language: python\n"
               "    working_dir: /workspace\n"
               "    memory_limit: 512m\n"
               "    seccomp_profile: strict\n"
               "    read_only_rootfs: true\n"
               "  - name: node\n"
               "    aliases: [node-18]\n"
               "    command: /usr/local/bin/node-runner\n");
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    if (load(&c, argv, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(c.n_environments, 4);
    const struct sbx_environment *p39 = sbx_config_environment(&c, "python-3.9");
    assert_non_null(p39);
    assert_string_equal(p39->name, "python-3.9");
    assert_string_equal(p39->command.v[0], "python3");
    assert_int_equal(p39->limits.memory_bytes, 512ull << 20);
    assert_int_equal(p39->seccomp, SBX_SECCOMP_STRICT);
    assert_int_equal(sbx_config_environment(&c, "python")->seccomp, SBX_SECCOMP_DEFAULT);
    const struct sbx_environment *node = sbx_config_environment(&c, "node-18");
    assert_non_null(node);
    assert_string_equal(node->name, "node");
    assert_int_equal(node->command.n, 1);
    assert_string_equal(node->command.v[0], "/usr/local/bin/node-runner");
    assert_null(sbx_config_environment(&c, "nodejs")); /* aliases replaced */
    sbx_config_free(&c);

    /* a language change brings that language's command */
    write_yaml("environments:\n  shell: {language: python}\n");
    assert_int_equal(load(&c, argv, NULL, &e), 0);
    assert_string_equal(sbx_config_environment(&c, "shell")->command.v[0], "python3");
    sbx_config_free(&c);

    assert_at(yaml_err("environments:\n  ruby: {command: [ruby, -e]}\n", NULL),
              "2:3: environments.ruby: a new environment needs a language");
    assert_at(yaml_err("environments:\n  ruby: {language: ruby}\n", NULL),
              "2:10: environments.ruby.language: 'ruby' is not python, node or shell");
    assert_contains(yaml_err("environments:\n  node: {aliases: [python3]}\n", NULL),
                    "alias 'python3' of node also names python");
    assert_contains(yaml_err("environments:\n  node: {aliases: [python]}\n", NULL),
                    "alias 'python' of node also names python");
    assert_at(yaml_err("environments:\n  - name: python-3.9\n    language: python\n"
                       "    image: opensandbox/python:3.9-buster\n",
                       NULL),
              "4:5: environments[0].image: '");
    assert_contains(yaml_err("environments:\n  - name: py\n    language: python\n"
                             "    mounts: [{source: /etc/x, target: /data}]\n",
                             NULL),
                    "environments.py.mounts[0].source: '/etc/x' is not under "
                    "sandbox.mount_roots (none are listed)");
    assert_contains(yaml_err("sandbox:\n  mount_roots: [/tmp]\nenvironments:\n  - name: py\n"
                             "    language: python\n"
                             "    mounts: [{source: /tmp/../etc, target: /data}]\n",
                             NULL),
                    "'/tmp/../etc' is not an absolute path without ., .. or //");
    assert_contains(yaml_err("sandbox:\n  mount_roots: [/tmp]\nenvironments:\n  - name: py\n"
                             "    language: python\n"
                             "    mounts: [{source: \"/tmp/{{.Evil}}\", target: /data}]\n",
                             NULL),
                    "only {{.TaskID}}, {{.TenantCode}}, {{.CloneID}} and {{.SessionID}}");
    assert_contains(yaml_err("sandbox:\n  mount_roots: [/tmp]\nenvironments:\n  - name: py\n"
                             "    language: python\n"
                             "    mounts: [{source: /tmp/a, target: /proc/x}]\n",
                             NULL),
                    "'/proc/x' cannot be a mount's target");
    assert_contains(yaml_err("environments:\n  - name: py\n    language: python\n"
                             "    rootfs: /\n    image: /\n",
                             NULL),
                    "environments.py: give rootfs or image, not both");
    assert_at(yaml_err("environments:\n  - {language: python}\n", NULL),
              "2:5: environments[0]: needs a name");
    assert_at(yaml_err("environments:\n  - {name: a, language: python}\n"
                       "  - {name: a, language: node}\n",
                       NULL),
              "3:6: environments[1]: environment 'a' is given twice");
    assert_at(yaml_err("environments:\n  python: {command: []}\n", NULL),
              "2:12: environments.python.command: is empty");
    assert_at(yaml_err("environments:\n  python: {working_dir: rel}\n", NULL),
              "2:12: environments.python.working_dir: 'rel' is not an absolute path");
    assert_at(yaml_err("environments:\n  python: {rootfs: /nonexistent/rootfs}\n", NULL),
              "2:12: environments.python.rootfs: '/nonexistent/rootfs' is not a directory");
    assert_at(yaml_err("environments:\n  python: {enabled: false}\npool:\n"
                       "  environments: [python]\n",
                       NULL),
              "4:3: pool.environments: 'python' is not an environment");
    assert_at(yaml_err("pool:\n  zygote_node_requires: [fs/promises]\n", NULL),
              "2:3: pool.zygote_node_requires: 'fs/promises' may only hold letters, digits and _");
}

/* Seed 004's config.yaml: what means something here is understood, what does
 * not is refused with the reason. */
/* The seed's file, with its sandbox.seccomp_profile and its environment's
 * extra lines as parameters. */
#define SEED_004(SECCOMP, ENV)                                                                     \
    "server:\n"                                                                                    \
    "  address: 0.0.0.0:8080\n"                                                                    \
    "  max_workers: 10\n"                                                                          \
    "sandbox:\n"                                                                                   \
    "  default_timeout: 30s\n"                                                                     \
    "  memory_limit: 512m\n"                                                                       \
    "  pids_limit: 50\n"                                                                           \
    "  read_only_rootfs: true\n"                                                                   \
    "  network_policy: none\n" SECCOMP "environments:\n"                                           \
    "  - name: python-3.9\n" ENV "    working_dir: /workspace\n"                                   \
    "pool:\n"                                                                                      \
    "  enabled: true\n"                                                                            \
    "  max_idle: 5\n"                                                                              \
    "  max_active: 20\n"                                                                           \
    "  idle_timeout: 5m\n"
#define SEED_SECCOMP                                                                               \
    "  seccomp_profile:\n"                                                                         \
    "    default_action: SCMP_ACT_ERRNO\n"                                                         \
    "    syscalls:\n"                                                                              \
    "      - names: [read, write, open, close]\n"                                                  \
    "        action: SCMP_ACT_ALLOW\n"
#define SEED_IMAGE "    image: opensandbox/python:3.9-buster\n"

static void seed_004_config(void **state)
{
    /* the seed's image is a registry name: an OCI layout or archive is needed */
    assert_contains(yaml_err(SEED_004(SEED_SECCOMP, SEED_IMAGE), NULL),
                    "17:5: environments[0].image: '");
    assert_contains(yaml_err(SEED_004(SEED_SECCOMP, SEED_IMAGE), NULL),
                    "no such OCI layout directory or image archive");
    /* its seccomp table is taken, stacked on the default profile */
    write_yaml(SEED_004(SEED_SECCOMP, "    read_only_rootfs: false\n"));
    {
        struct sbx_config t;
        sbx_err te;
        char *targv[] = {"serve", "--config", file, NULL};
        if (load(&t, targv, NULL, &te) < 0)
            fail_msg("%s", te.msg);
        const struct sbx_environment *p = sbx_config_environment(&t, "python-3.9");
        assert_non_null(p->seccomp_table);
        assert_ptr_equal(p->seccomp_table, t.seccomp_table);
        assert_int_equal(p->seccomp_table->default_action, SBX_SCT_ERRNO);
        assert_int_equal(p->seccomp_table->n_rules, 1);
        assert_string_equal(p->seccomp_table->rules[0].names[3], "close");
        assert_int_equal(p->seccomp_table->rules[0].action, SBX_SCT_ALLOW);
        assert_true(p->writable_root);
        sbx_config_free(&t);
    }

    write_yaml(SEED_004("  seccomp_profile: strict\n", ""));
    struct sbx_config c;
    sbx_err e;
    char *argv[] = {"serve", "--config", file, NULL};
    if (load(&c, argv, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 8080);
    assert_int_equal(c.max_concurrent, 10);
    assert_true(c.limits.timeout_s == 30);
    assert_int_equal(c.limits.memory_bytes, 512ull << 20);
    assert_int_equal(c.limits.pids, 50);
    assert_int_equal(c.net, SBX_NET_NONE);
    /* "python-3.9" without a language: python, from its name */
    const struct sbx_environment *py = sbx_config_environment(&c, "python-3.9");
    assert_non_null(py);
    assert_int_equal(py->language, SBX_LANG_PYTHON);
    assert_string_equal(py->command.v[0], "python3");
    assert_int_equal(py->net, SBX_NET_NONE);
    assert_int_equal(py->seccomp, SBX_SECCOMP_STRICT);
    assert_true(c.pool.enabled);
    assert_int_equal(c.pool.size, 5);
    assert_int_equal(c.pool.max_active, 20);
    assert_true(c.pool.idle_timeout_s == 300);
    assert_int_equal(c.pool.environments.n, 0);
    sbx_config_free(&c);
}

static void injected_task_variables(void **state)
{
    struct sbx_config c;
    sbx_err e;
    char *envp[] = {"CLAW_TASK_ENV_KEYS=OPENAI_API_KEY, UR_BASE_URL,,MISSING",
                    "OPENAI_API_KEY=sk-1", "UR_BASE_URL=https://ur.example", "SECRET=no", NULL};
    assert_int_equal(load(&c, NULL, envp, &e), 0);
    assert_int_equal(c.task_env_keys.n, 3);
    assert_int_equal(c.task_env.n, 2);
    assert_string_equal(c.task_env.v[0], "OPENAI_API_KEY=sk-1");
    assert_string_equal(c.task_env.v[1], "UR_BASE_URL=https://ur.example");
    sbx_config_free(&c);
    char *bad[] = {"CLAW_TASK_ENV_KEYS=OPENAI_API_KEY,CLAW_API_TOKEN", NULL};
    assert_contains(load_err(NULL, bad),
                    "CLAW_TASK_ENV_KEYS: 'CLAW_API_TOKEN' is one of the daemon's own");
    char *bad2[] = {"CLAW_TASK_ENV_KEYS=1ABC", NULL};
    assert_contains(load_err(NULL, bad2), "CLAW_TASK_ENV_KEYS: '1ABC' must start with");
    assert_at(yaml_err("tenants:\n  acme:\n    env_keys: [K]\n    env: {K: v}\n", NULL),
              "4:11: tenants.acme.env.K: is also in env_keys");
    assert_at(yaml_err("tenants:\n  \"a/b\": {}\n", NULL), "2:3: tenants.a/b: is not a tenant");
}

/* The skills section: the tiers' roots, the original's store variables, UR_BASE_URL,
 * the token's settings and their bounds. */
static void skills_settings(void **state)
{
    (void)state;
    struct sbx_config c;
    sbx_err e;
    assert_int_equal(load(&c, NULL, NULL, &e), 0);
    assert_string_equal(c.skills.shared_root, "/opt/skills/shared");
    assert_string_equal(c.skills.mapped_root, "/opt/skills/mapped");
    assert_string_equal(c.skills.common_root, "/opt/skills-store/common");
    assert_string_equal(c.skills.token_audience, "ur-api");
    assert_true(c.skills.token_ttl_s == 3600);
    assert_null(c.skills.ur_base_url);
    sbx_config_free(&c);
    write_yaml("skills:\n"
               "  builtin_root: builtin\n"
               "  shared_root: /srv/shared\n"
               "  mapped_root: /srv/mapped\n"
               "  max_size: 4m\n"
               "  ur_base_url: https://ur.example\n"
               "  token_secret: 0123456789abcdef\n"
               "  token_audience: platform\n"
               "  token_ttl: 10m\n");
    char *argv[] = {"serve", "--config", file, NULL};
    char *envp[] = {"CLAW_SKILL_STORE_MAPPED_ROOT=/data/mapped", "UR_BASE_URL=http://10.0.0.9:80",
                    NULL};
    if (load(&c, argv, envp, &e) < 0)
        fail_msg("%s", e.msg);
    char want[600];
    snprintf(want, sizeof(want), "%s/builtin", dir);
    assert_string_equal(c.skills.builtin_root, want); /* relative to the file */
    assert_string_equal(c.skills.shared_root, "/srv/shared");
    assert_string_equal(c.skills.mapped_root, "/data/mapped"); /* the variable wins */
    assert_string_equal(c.skills.ur_base_url, "http://10.0.0.9:80");
    assert_string_equal(c.skills.token_secret, "0123456789abcdef");
    assert_string_equal(c.skills.token_audience, "platform");
    assert_true(c.skills.token_ttl_s == 600);
    assert_int_equal(c.skills.max_bytes, 4 << 20);
    assert_int_equal(c.ignored_env.n, 0);
    sbx_config_free(&c);
    assert_contains(yaml_err("skills:\n  token_ttl: 2h\n", NULL), "skills.token_ttl");
    assert_contains(yaml_err("skills:\n  roots: x\n", NULL), "skills.roots");
    assert_contains(yaml_err("skills:\n  ur_base_url: \"a\\x01b\"\n", NULL),
                    "printable characters");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(help_flag),
        cmocka_unit_test_setup_teardown(yaml_overrides_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(env_overrides_yaml, setup, teardown),
        cmocka_unit_test_setup_teardown(sandbox_names_of_claw_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(flags_override_env, setup, teardown),
        cmocka_unit_test_setup_teardown(yaml_bad_values_name_key_and_position, setup, teardown),
        cmocka_unit_test(env_and_flag_bad_values_name_key),
        cmocka_unit_test_setup_teardown(unknown_yaml_keys_refused_with_path, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_yaml_reports_line_and_column, setup, teardown),
        cmocka_unit_test(cpu_limit_is_percent),
        cmocka_unit_test_setup_teardown(limits_within_maxima, setup, teardown),
        cmocka_unit_test_setup_teardown(token_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(environments_and_aliases, setup, teardown),
        cmocka_unit_test_setup_teardown(seed_004_config, setup, teardown),
        cmocka_unit_test_setup_teardown(injected_task_variables, setup, teardown),
        cmocka_unit_test_setup_teardown(skills_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(model_section, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
