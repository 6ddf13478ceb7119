/* The configuration loader's own parts, shared by its files (config.h is the
 * public surface; nothing outside src/daemon/config*.c includes this):
 *
 *     config.c               the precedence chain, defaults, last checks, free
 *     config_schema.c        the key table: every scalar setting and its names
 *     config_values.c        one parser per kind of value (sizes, durations, ...)
 *     config_yaml.c          the YAML file (libyaml's document walked)
 *     config_environments.c  the built-in environments and `environments:`
 *     config_env.c           the CLAW_* variables
 *     config_flags.c         the command-line flags
 *
 * Every value of every source goes through cfg_apply(), so "256m" means the
 * same in the file, a variable and a flag. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "daemon/config.h"

#define WHERE_MAX 224
#define KEYPATH_MAX 160
#define MAX_ENVIRONMENTS 64
#define SEGMENT_MAX 64
#define TOKEN_MIN 16
#define TOKEN_MAX 512
#define ENV_KEY_MAX 128
#define DAY (86400.0)

/* --- the schema (config_schema.c) ------------------------------------------ */

enum kind {
    K_SEGMENT,     /* char *: a tenant/clone/runtime id */
    K_OPT_SEGMENT, /* char *: same, or unset (YAML null) */
    K_PATH,        /* char *: made absolute */
    K_LISTEN,      /* struct sbx_listen */
    K_LOGLEVEL,    /* enum sbx_log_level */
    K_UINT,        /* uint64_t in [min, max] */
    K_U32,         /* uint32_t in [min, max] */
    K_U16,         /* uint16_t in [min, max] */
    K_SIZE,        /* uint64_t bytes, >= min */
    K_SIZE0,       /* same, or 0 */
    K_DURATION,    /* double seconds in (0, max]: "30s", "5m" */
    K_SECONDS,     /* double seconds in (0, max]: a plain number */
    K_BOOL,        /* bool */
    K_TRUE_ONLY,   /* nothing stored: only true is possible */
    K_NETPOL,      /* enum sbx_net_policy */
    K_NETBOOL,     /* enum sbx_net_policy from true/false */
    K_SECCOMP,     /* enum sbx_seccomp_profile */
    K_WSQUOTA,     /* enum sbx_ws_quota_mode */
    K_CGMODE,      /* bool: true for rlimit, false for auto */
    K_DEFAULT,     /* enum sbx_default */
    K_CPU,         /* double cores, or "N%" */
    K_CPU0,        /* same, or 0: none */
    K_CPU_PCT,     /* double cores from percent */
    K_MB,          /* uint64_t bytes from MiB, >= min bytes */
    K_CIDRS,       /* char *: comma list, as the policy takes it */
    K_PORTS,
    K_TARGETS,
    K_BLOCKED,
    K_KEYS, /* struct sbx_strv of variable names */
    K_TEXT, /* char *: printable text, 1 to 2048 bytes (a URL, a model's name) */
};

/* Limits: the keys of a limits block (sandbox, sandbox.max, an environment). */
enum { LIM_TIMEOUT, LIM_MEMORY, LIM_PIDS, LIM_CPU, LIM_FILE, LIM_OUTPUT, LIM_TMP, N_LIM };

struct lim_field {
    const char *key, *alias;
    enum kind kind;
    size_t off;
    uint64_t min, max;
    /* built in, written as in the file: a task's default, the most it may ask */
    const char *builtin, *builtin_max;
};
extern const struct lim_field cfg_lim_fields[N_LIM];

/* Bits of an environment's explicitly set fields, besides the limits. */
#define ENV_SET_NET (1u << N_LIM)
#define ENV_SET_SECCOMP (1u << (N_LIM + 1))
#define ENV_SET_ROOTFS_RW (1u << (N_LIM + 2))

/* One scalar setting and the names it has in each source. */
struct setting {
    const char *section; /* YAML mapping it lives in, NULL: not in YAML */
    const char *key, *alias;
    const char *env; /* CLAW_* */
    enum kind env_kind;
    const char *flag;
    enum kind kind; /* YAML and flag */
    size_t off;     /* in struct sbx_config */
    uint64_t min, max;
    int lim; /* index in cfg_lim_fields when it is a default limit, else -1 */
};

extern const struct setting cfg_settings[];
extern const size_t cfg_n_settings;

/* The index in cfg_lim_fields of a limits key (or its alias), or -1. */
int cfg_lim_index(const char *key);
/* Is field i of lim above that of max? The text of both into a and b. */
bool cfg_lim_above(int i, const struct sbx_limits *lim, const struct sbx_limits *max, char *a,
                   char *b, size_t len);

/* --- the loader ------------------------------------------------------------- */

struct loader {
    struct sbx_config *c;
    sbx_err *err;
    const char *file; /* --config as given, for messages */
    char *file_dir;   /* its directory, absolute */
    char *cwd;        /* fetched when a relative path needs it */
    bool in_file;     /* relative paths against file_dir */
    yaml_document_t *doc;
    char lim_origin[N_LIM][WHERE_MAX]; /* who set each default limit ("" built-in) */
    char max_origin[N_LIM][WHERE_MAX];
    unsigned env_set[MAX_ENVIRONMENTS]; /* per environment: fields set explicitly */
    bool env_disabled[MAX_ENVIRONMENTS];
};

/* Tokens (config.c): one more; the operator ones of lower sources dropped. */
int cfg_token_add(struct loader *L, const char *name, const char *token, const char *tenant);
void cfg_drop_operator_tokens(struct sbx_config *c);

/* --- values (config_values.c) ----------------------------------------------- */

/* err: "<where>: <message>"; returns -1. */
int cfg_fail(struct loader *L, const char *where, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int cfg_oom(struct loader *L);
/* Small helpers: string lists, secrets zeroed before they are freed, and the
 * checks of names (NULL or the reason a name is refused). */
void cfg_free_secret(char *s);
void cfg_strv_clear(struct sbx_strv *s, bool secret);
int cfg_strv_push(struct sbx_strv *s, const char *str);
int cfg_set_str(char **dst, const char *src);
const char *cfg_env_get(char **envp, const char *name);
bool cfg_is_blank(char ch);
bool cfg_has_control(const char *s);
bool cfg_segment_ok(const char *s);
const char *cfg_env_key_problem(const char *s);
const char *cfg_token_problem(const char *s);
bool cfg_token_name_ok(const char *s);
void cfg_fmt_size(uint64_t v, char *buf, size_t len);
/* Values judged by the engines that will use them (e: the reason). */
int cfg_check_upstream(const char *s, sbx_err *e);
int cfg_check_policy(const struct sbx_policy_opts *o, sbx_err *e);
int cfg_check_rule(const char *rule, bool deny, sbx_err *e);
/* text parsed as kind k into dst, within [min, max]; errors name where. */
int cfg_apply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
              const char *text, const char *where);
int cfg_make_path(struct loader *L, const char *s, char **out, sbx_err *e);
int cfg_parse_listen(struct loader *L, const char *s, struct sbx_listen *out, sbx_err *e);

/* --- YAML (config_yaml.c, config_environments.c) ----------------------------- */

/* err: "FILE:LINE:COL: <path>: <message>" at node n; returns -1. */
int cfg_yfail(struct loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The document's nodes: scalars, mappings with plain distinct keys, lists;
 * paths "section.key" and "list[i]" name them in messages. */
yaml_node_t *cfg_ynode(struct loader *L, int index);
void cfg_where_node(struct loader *L, const yaml_node_t *n, const char *path, char *buf,
                    size_t len);
void cfg_keypath(char *buf, const char *parent, const char *key);
void cfg_indexpath(char *buf, const char *parent, size_t i);
const char *cfg_yscalar_text(const yaml_node_t *n);
int cfg_yscalar(struct loader *L, const yaml_node_t *n, const char *path, const char **out);
int cfg_ymapping(struct loader *L, const yaml_node_t *n, const char *path);
yaml_node_t *cfg_ylookup(struct loader *L, const yaml_node_t *map, const char *key,
                         yaml_node_t **keynode);
/* A setting's value from the file (a list joined for kinds that take one). */
int cfg_yapply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
               const yaml_node_t *key, const yaml_node_t *val, const char *path, char *where,
               size_t where_len);
int cfg_ylim_aliases(struct loader *L, const yaml_node_t *map, const char *path);
int cfg_ylimit(struct loader *L, int i, struct sbx_limits *lim, const yaml_node_t *key,
               const yaml_node_t *val, const char *path, char *origin);
int cfg_ylist(struct loader *L, const yaml_node_t *n, const char *path, struct sbx_strv *out,
              int (*fn)(const char *s, bool arg, sbx_err *e), bool arg);
/* The file's one document onto L->c (config_yaml.c). */
int cfg_load_file(struct loader *L, const char *path);

/* Environments (config_environments.c). */
void cfg_env_free(struct sbx_environment *env);
/* Seed 004's seccomp table {default_action, syscalls: [{names, action}]}
 * into *out (replacing what was there); unknown syscalls and actions are
 * errors naming them. */
int cfg_yseccomp_table(struct loader *L, const yaml_node_t *k, const yaml_node_t *v,
                       const char *path, struct sbx_seccomp_table **out);
/* An environment's mounts against sandbox.mount_roots: each source is cut
 * into its root and the part beneath; one outside every root is an error. */
int cfg_env_mounts_check(struct loader *L, struct sbx_environment *env);
int cfg_env_add_builtins(struct loader *L);
int cfg_check_name(const char *s, bool arg, sbx_err *e);
int cfg_yenvironments(struct loader *L, const yaml_node_t *n, const char *path);

/* --- the CLAW_* variables (config_env.c) and flags (config_flags.c) ---------- */

/* The CLAW_* entries of envp: settings, CLAW_API_TOKEN, unknown names refused. */
int cfg_load_env(struct loader *L, char **envp);
/* Only the variables `sandboxd run` takes (no tokens, no check of the others). */
int cfg_load_run_env(struct loader *L, char **envp);

struct flag {
    const struct setting *s; /* NULL for --config and --token */
    const char *name;        /* as the table writes it */
    const char *value;
};

/* argv into out (argc entries at most), *config set by --config; applied
 * after the file and the variables by cfg_apply_flags. */
int cfg_parse_flags(struct loader *L, int argc, char **argv, struct flag *out, size_t *n,
                    const char **config);
int cfg_apply_flags(struct loader *L, const struct flag *flags, size_t n);
