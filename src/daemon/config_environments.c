/* Environments: the built-in ones (python, node, shell) and the
 * `environments:` section of the YAML file that changes, adds or disables
 * them. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/config_int.h"

static const struct {
    const char *name;
    const char *command[3];
    const char *aliases[4];
} builtin_envs[] = {
    [SBX_LANG_PYTHON] = {"python", {"python3", "-c"}, {"python3"}},
    [SBX_LANG_NODE] = {"node", {"node", "-e"}, {"nodejs", "javascript", "js"}},
    [SBX_LANG_SHELL] = {"shell", {"/bin/sh", "-c"}, {"sh"}},
};

static int default_command(struct sbx_environment *env)
{
    cfg_strv_clear(&env->command, false);
    for (size_t i = 0; builtin_envs[env->language].command[i]; i++)
        if (cfg_strv_push(&env->command, builtin_envs[env->language].command[i]) < 0)
            return -1;
    return 0;
}

void cfg_env_free(struct sbx_environment *env)
{
    free(env->name);
    cfg_strv_clear(&env->command, false);
    cfg_strv_clear(&env->aliases, false);
    free(env->rootfs);
    free(env->working_dir);
    free(env->image);
    free(env->image_error);
    for (size_t i = 0; i < env->n_mounts; i++) {
        free(env->mounts[i].root);
        free(env->mounts[i].source);
        free(env->mounts[i].target);
    }
    sbx_seccomp_table_free(env->seccomp_table);
    if (env->seccomp_fd >= 0)
        close(env->seccomp_fd);
    memset(env, 0, sizeof(*env));
    env->seccomp_fd = -1;
}

static struct sbx_environment *env_by_name(struct sbx_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_environments; i++)
        if (strcmp(c->environments[i].name, name) == 0)
            return &c->environments[i];
    return NULL;
}

/* A new environment of that language with its built-in command, or NULL. */
static struct sbx_environment *env_add(struct loader *L, const char *name, enum sbx_language lang)
{
    struct sbx_config *c = L->c;
    if (c->n_environments == MAX_ENVIRONMENTS)
        return NULL;
    struct sbx_environment *v = realloc(c->environments, (c->n_environments + 1) * sizeof(*v));
    if (!v)
        return NULL;
    c->environments = v;
    struct sbx_environment *env = &v[c->n_environments];
    memset(env, 0, sizeof(*env));
    env->language = lang;
    env->seccomp_fd = -1;
    if (!(env->name = strdup(name)) || !(env->working_dir = strdup("/workspace")) ||
        default_command(env) < 0) {
        cfg_env_free(env);
        return NULL;
    }
    L->env_set[c->n_environments] = 0;
    L->env_disabled[c->n_environments] = false;
    c->n_environments++;
    return env;
}

/* The built-in environments, with their aliases; -1 when out of memory. */
int cfg_env_add_builtins(struct loader *L)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(builtin_envs); i++) {
        struct sbx_environment *env = env_add(L, builtin_envs[i].name, (enum sbx_language)i);
        if (!env)
            return -1;
        for (size_t j = 0; builtin_envs[i].aliases[j]; j++)
            if (cfg_strv_push(&env->aliases, builtin_envs[i].aliases[j]) < 0)
                return -1;
    }
    return 0;
}

/* What an environment's body may hold besides the limit keys. */
static const char *const env_keys[] = {
    "name",           "language",        "command", "aliases",          "rootfs", "working_dir",
    "network_policy", "seccomp_profile", "enabled", "read_only_rootfs", "image",  "mounts"};

int cfg_check_name(const char *s, bool arg, sbx_err *e)
{
    return cfg_segment_ok(s)
               ? 0
               : sbx_err_set(e, EINVAL, "'%.80s' is not a name (1 to 64 of A-Z a-z 0-9 . _ -)", s);
}

/* The placeholders a mount's source may hold. */
static const char *const mount_vars[] = {"{{.TaskID}}", "{{.TenantCode}}", "{{.CloneID}}",
                                         "{{.SessionID}}"};

/* Whether every "{{" of s opens one of mount_vars. */
static bool mount_template_ok(const char *s)
{
    for (const char *p = strstr(s, "{{"); p; p = strstr(p + 2, "{{")) {
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(mount_vars) && strncmp(p, mount_vars[j], strlen(mount_vars[j])))
            j++;
        if (j == SBX_ARRAY_LEN(mount_vars))
            return false;
    }
    return true;
}

/* An absolute path with no empty, . or .. component. */
static bool clean_abs_path(const char *s)
{
    if (s[0] != '/' || cfg_has_control(s))
        return false;
    for (const char *p = s; *p == '/';) {
        const char *q = strchrnul(p + 1, '/');
        size_t n = (size_t)(q - p - 1);
        if ((n == 0 && *q) || (n == 1 && p[1] == '.') || (n == 2 && p[1] == '.' && p[2] == '.'))
            return false;
        p = q;
    }
    return true;
}

/* mounts: [{source, target, writable}] */
static int yenv_mounts(struct loader *L, struct sbx_environment *env, const yaml_node_t *k,
                       const yaml_node_t *v, const char *path)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return cfg_yfail(L, k, path, "expects a list of {source, target, writable}");
    size_t idx = 0;
    for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top;
         i++, idx++) {
        yaml_node_t *item = cfg_ynode(L, *i);
        char ipath[KEYPATH_MAX], kpath[KEYPATH_MAX];
        cfg_indexpath(ipath, path, idx);
        if (cfg_ymapping(L, item, ipath) < 0)
            return -1;
        if (env->n_mounts == SBX_ENV_MOUNTS_MAX)
            return cfg_yfail(L, item, ipath, "too many mounts (at most %d)", SBX_ENV_MOUNTS_MAX);
        /* its strings are the environment's from here (freed with it) */
        struct sbx_env_mount *m = &env->mounts[env->n_mounts++];
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
             p++) {
            yaml_node_t *mk = cfg_ynode(L, p->key), *mv = cfg_ynode(L, p->value);
            const char *key = cfg_yscalar_text(mk), *s;
            cfg_keypath(kpath, ipath, key);
            if (strcmp(key, "writable") == 0) {
                if (cfg_yapply(L, K_BOOL, &m->writable, 0, 0, mk, mv, kpath, NULL, 0) < 0)
                    return -1;
                continue;
            }
            if (strcmp(key, "source") != 0 && strcmp(key, "target") != 0)
                return cfg_yfail(L, mk, kpath, "unknown key (source, target, writable)");
            if (cfg_yscalar(L, mv, kpath, &s) < 0)
                return -1;
            if (!clean_abs_path(s))
                return cfg_yfail(L, mk, kpath,
                                 "'%.80s' is not an absolute path without ., .. or //", s);
            if (key[0] == 's' && !mount_template_ok(s))
                return cfg_yfail(L, mk, kpath,
                                 "'%.80s': only {{.TaskID}}, {{.TenantCode}}, {{.CloneID}} and "
                                 "{{.SessionID}} may be used",
                                 s);
            if (key[0] == 't' && (strcmp(s, "/") == 0 || strstr(s, "{{") ||
                                  strncmp(s, "/proc", 5) == 0 || strncmp(s, "/dev", 4) == 0))
                return cfg_yfail(L, mk, kpath, "'%.80s' cannot be a mount's target", s);
            if (cfg_set_str(key[0] == 's' ? &m->source : &m->target, s) < 0)
                return cfg_oom(L);
        }
        if (!m->source || !m->target)
            return cfg_yfail(L, item, ipath, "needs a source and a target");
    }
    return 0;
}

int cfg_env_mounts_check(struct loader *L, struct sbx_environment *env)
{
    struct sbx_config *c = L->c;
    for (size_t i = 0; i < env->n_mounts; i++) {
        struct sbx_env_mount *m = &env->mounts[i];
        if (m->root)
            continue;
        const char *root = NULL;
        for (size_t j = 0; j < c->mount_roots.n && !root; j++) {
            size_t n = strlen(c->mount_roots.v[j]);
            const char *var = strstr(m->source, "{{");
            if (strncmp(m->source, c->mount_roots.v[j], n) == 0 && m->source[n] == '/' &&
                m->source[n + 1] && (!var || var > m->source + n))
                root = c->mount_roots.v[j];
        }
        if (!root)
            return sbx_err_set(L->err, EACCES,
                               "environments.%s.mounts[%zu].source: '%.200s' is not under "
                               "sandbox.mount_roots (%s)",
                               env->name, i, m->source,
                               c->mount_roots.n ? "give a source beneath one of them"
                                                : "none are listed");
        char *rel = strdup(m->source + strlen(root) + 1);
        if (!rel || !(m->root = strdup(root))) {
            free(rel);
            return cfg_oom(L);
        }
        free(m->source);
        m->source = rel;
    }
    return 0;
}

int cfg_yseccomp_table(struct loader *L, const yaml_node_t *k, const yaml_node_t *v,
                       const char *path, struct sbx_seccomp_table **out)
{
    if (cfg_ymapping(L, v, path) < 0)
        return -1;
    struct sbx_seccomp_table *t = calloc(1, sizeof(*t));
    if (!t)
        return cfg_oom(L);
    t->default_action = SBX_SCT_ALLOW;
    char kpath[KEYPATH_MAX], ipath[KEYPATH_MAX];
    int rc = 0;
    sbx_err e = {0};
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
         rc == 0 && p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *tk = cfg_ynode(L, p->key), *tv = cfg_ynode(L, p->value);
        const char *key = cfg_yscalar_text(tk), *s;
        cfg_keypath(kpath, path, key);
        if (strcmp(key, "default_action") == 0) {
            if ((rc = cfg_yscalar(L, tv, kpath, &s)) == 0 &&
                sbx_seccomp_action_parse(s, &t->default_action, &e) < 0)
                rc = cfg_yfail(L, tk, kpath, "%s", e.msg);
            continue;
        }
        if (strcmp(key, "syscalls") != 0) {
            rc = cfg_yfail(L, tk, kpath, "unknown key (default_action, syscalls)");
            break;
        }
        if (tv->type != YAML_SEQUENCE_NODE) {
            rc = cfg_yfail(L, tk, kpath, "expects a list of {names, action}");
            break;
        }
        size_t n = (size_t)(tv->data.sequence.items.top - tv->data.sequence.items.start);
        if (!(t->rules = calloc(n ? n : 1, sizeof(*t->rules)))) {
            rc = cfg_oom(L);
            break;
        }
        size_t idx = 0;
        for (yaml_node_item_t *i = tv->data.sequence.items.start;
             rc == 0 && i < tv->data.sequence.items.top; i++, idx++) {
            yaml_node_t *item = cfg_ynode(L, *i), *nk, *ak;
            struct sbx_sc_table_rule *r = &t->rules[t->n_rules];
            cfg_indexpath(ipath, kpath, idx);
            if ((rc = cfg_ymapping(L, item, ipath)) < 0)
                break;
            yaml_node_t *names = cfg_ylookup(L, item, "names", &nk);
            yaml_node_t *act = cfg_ylookup(L, item, "action", &ak);
            if (!names || !act ||
                item->data.mapping.pairs.top - item->data.mapping.pairs.start != 2) {
                rc = cfg_yfail(L, item, ipath, "expects {names: [...], action: ...}");
                break;
            }
            struct sbx_strv sv = {0};
            char npath[KEYPATH_MAX];
            cfg_keypath(npath, ipath, "names");
            if ((rc = cfg_ylist(L, names, npath, &sv, NULL, false)) < 0)
                break;
            r->names = sv.v ? sv.v : calloc(1, sizeof(char *));
            t->n_rules++;
            if (!r->names) {
                rc = cfg_oom(L);
                break;
            }
            for (size_t j = 0; rc == 0 && r->names[j]; j++)
                if (sbx_seccomp_syscall_check(r->names[j], &e) < 0)
                    rc = cfg_yfail(L, nk, npath, "%s", e.msg);
            cfg_keypath(npath, ipath, "action");
            if (rc == 0 && (rc = cfg_yscalar(L, act, npath, &s)) == 0 &&
                sbx_seccomp_action_parse(s, &r->action, &e) < 0)
                rc = cfg_yfail(L, ak, npath, "%s", e.msg);
        }
    }
    (void)k;
    if (rc < 0) {
        sbx_seccomp_table_free(t);
        return -1;
    }
    sbx_seccomp_table_free(*out);
    *out = t;
    return 0;
}

/* The environment a body configures, found or added: its language is read
 * first (a new environment needs it, and it decides the command). */
static int yenv_find(struct loader *L, const char *name, const yaml_node_t *namek,
                     const yaml_node_t *body, const char *path, struct sbx_environment **out)
{
    struct sbx_config *c = L->c;
    yaml_node_t *lk, *lang = cfg_ylookup(L, body, "language", &lk);
    enum sbx_language language = SBX_LANG_PYTHON;
    if (lang) {
        const char *s;
        char kpath[KEYPATH_MAX];
        cfg_keypath(kpath, path, "language");
        if (cfg_yscalar(L, lang, kpath, &s) < 0)
            return -1;
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(builtin_envs) && strcmp(builtin_envs[j].name, s) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(builtin_envs))
            return cfg_yfail(L, lk, kpath, "'%.80s' is not python, node or shell", s);
        language = (enum sbx_language)j;
    }
    struct sbx_environment *env = env_by_name(c, name);
    if (!env && !lang) {
        /* seed 004 names them "python-3.9", "node-18" and gives no language */
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(builtin_envs) &&
               strncmp(name, builtin_envs[j].name, strlen(builtin_envs[j].name)) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(builtin_envs))
            return cfg_yfail(L, namek, path,
                             "a new environment needs a language (python, node, shell)");
        language = (enum sbx_language)j;
    }
    if (!env) {
        if (!(env = env_add(L, name, language)))
            return c->n_environments == MAX_ENVIRONMENTS
                       ? cfg_yfail(L, namek, path, "too many environments (at most %d)",
                                   MAX_ENVIRONMENTS)
                       : cfg_oom(L);
    } else if (lang && env->language != language) {
        env->language = language;
        if (default_command(env) < 0)
            return cfg_oom(L);
    }
    *out = env;
    return 0;
}

/* One key of an environment's body other than a limit. */
static int yenv_key(struct loader *L, struct sbx_environment *env, size_t ei, const yaml_node_t *k,
                    const yaml_node_t *v, const char *key, const char *kpath)
{
    const char *s;
    char where[WHERE_MAX];
    int rc = 0;
    if (strcmp(key, "name") == 0 || strcmp(key, "language") == 0) {
        return 0; /* read by yenv_find */
    } else if (strcmp(key, "command") == 0) {
        if (v->type == YAML_SCALAR_NODE) {
            if ((rc = cfg_yscalar(L, v, kpath, &s)) == 0) {
                cfg_strv_clear(&env->command, false);
                rc = cfg_strv_push(&env->command, s) < 0 ? cfg_oom(L) : 0;
            }
        } else if ((rc = cfg_ylist(L, v, kpath, &env->command, NULL, false)) == 0 &&
                   env->command.n == 0) {
            rc = cfg_yfail(L, k, kpath, "is empty");
        }
        for (size_t a = 0; rc == 0 && a < env->command.n; a++)
            if (!env->command.v[a][0])
                rc = cfg_yfail(L, k, kpath, "has an empty argument");
    } else if (strcmp(key, "aliases") == 0) {
        rc = cfg_ylist(L, v, kpath, &env->aliases, cfg_check_name, false);
    } else if (strcmp(key, "rootfs") == 0) {
        struct stat st;
        cfg_where_node(L, k, kpath, where, sizeof(where));
        if ((rc = cfg_yscalar(L, v, kpath, &s)) == 0 &&
            (rc = cfg_apply(L, K_PATH, &env->rootfs, 0, 0, s, where)) == 0 &&
            (stat(env->rootfs, &st) < 0 || !S_ISDIR(st.st_mode)))
            rc = cfg_fail(L, where, ENOTDIR, "'%.80s' is not a directory", env->rootfs);
    } else if (strcmp(key, "working_dir") == 0) {
        if ((rc = cfg_yscalar(L, v, kpath, &s)) == 0) {
            if (s[0] != '/' || strstr(s, "/..") || cfg_has_control(s))
                rc = cfg_yfail(L, k, kpath, "'%.80s' is not an absolute path without ..", s);
            else if (cfg_set_str(&env->working_dir, s) < 0)
                rc = cfg_oom(L);
        }
    } else if (strcmp(key, "network_policy") == 0) {
        rc = cfg_yapply(L, K_NETPOL, &env->net, 0, 0, k, v, kpath, NULL, 0);
        L->env_set[ei] |= ENV_SET_NET;
    } else if (strcmp(key, "seccomp_profile") == 0) {
        if (v->type == YAML_MAPPING_NODE) {
            env->seccomp = SBX_SECCOMP_DEFAULT;
            rc = cfg_yseccomp_table(L, k, v, kpath, &env->seccomp_table);
        } else {
            rc = cfg_yapply(L, K_SECCOMP, &env->seccomp, 0, 0, k, v, kpath, NULL, 0);
            if (rc == 0 && env->seccomp_table) {
                sbx_seccomp_table_free(env->seccomp_table);
                env->seccomp_table = NULL;
            }
        }
        L->env_set[ei] |= ENV_SET_SECCOMP;
    } else if (strcmp(key, "enabled") == 0) {
        bool on = true;
        rc = cfg_yapply(L, K_BOOL, &on, 0, 0, k, v, kpath, NULL, 0);
        L->env_disabled[ei] = !on;
    } else if (strcmp(key, "read_only_rootfs") == 0) {
        bool ro = true;
        rc = cfg_yapply(L, K_BOOL, &ro, 0, 0, k, v, kpath, NULL, 0);
        env->writable_root = !ro;
        L->env_set[ei] |= ENV_SET_ROOTFS_RW;
    } else if (strcmp(key, "image") == 0) {
        struct stat st;
        cfg_where_node(L, k, kpath, where, sizeof(where));
        if ((rc = cfg_yscalar(L, v, kpath, &s)) == 0 &&
            (rc = cfg_apply(L, K_PATH, &env->image, 0, 0, s, where)) == 0 &&
            stat(env->image, &st) < 0)
            rc = cfg_fail(L, where, errno,
                          "'%.80s': no such OCI layout directory or image archive (a "
                          "docker save or podman save tar)",
                          env->image);
    } else {
        rc = yenv_mounts(L, env, k, v, kpath);
    }
    return rc;
}

static int yenv_body(struct loader *L, const char *name, const yaml_node_t *namek,
                     const yaml_node_t *body, const char *path)
{
    struct sbx_config *c = L->c;
    struct sbx_environment *env = NULL;
    if (!cfg_segment_ok(name))
        return cfg_yfail(L, namek, path, "'%.80s' is not a name (1 to 64 of A-Z a-z 0-9 . _ -)",
                         name);
    if (cfg_ymapping(L, body, path) < 0 || cfg_ylim_aliases(L, body, path) < 0 ||
        yenv_find(L, name, namek, body, path, &env) < 0)
        return -1;
    size_t ei = (size_t)(env - c->environments);
    for (yaml_node_pair_t *p = body->data.mapping.pairs.start; p < body->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = cfg_ynode(L, p->key), *v = cfg_ynode(L, p->value);
        const char *key = cfg_yscalar_text(k);
        char kpath[KEYPATH_MAX];
        cfg_keypath(kpath, path, key);
        int li = cfg_lim_index(key);
        if (li >= 0) {
            char a[48], b[48];
            if (cfg_ylimit(L, li, &env->limits, k, v, kpath, NULL) < 0)
                return -1;
            if (cfg_lim_above(li, &env->limits, &c->max, a, b, sizeof(a)))
                return cfg_yfail(L, k, kpath, "%s is above the maximum %s (sandbox.max.%s)", a, b,
                                 cfg_lim_fields[li].key);
            L->env_set[ei] |= 1u << li;
            continue;
        }
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(env_keys) && strcmp(env_keys[j], key) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(env_keys))
            return cfg_yfail(L, k, kpath, "unknown key");
        if (yenv_key(L, env, ei, k, v, key, kpath) < 0)
            return -1;
    }
    return 0;
}

/* Every name and alias of the enabled environments names one of them. */
static int yenv_names(struct loader *L, const yaml_node_t *n, const char *path)
{
    struct sbx_config *c = L->c;
    for (size_t i = 0; i < c->n_environments; i++) {
        if (L->env_disabled[i])
            continue;
        const struct sbx_environment *a = &c->environments[i];
        for (size_t j = 0; j < c->n_environments; j++) {
            const struct sbx_environment *b = &c->environments[j];
            if (L->env_disabled[j])
                continue;
            for (size_t k = 0; k < b->aliases.n; k++)
                if (strcmp(b->aliases.v[k], a->name) == 0 ||
                    (i < j && sbx_strv_has(&a->aliases, b->aliases.v[k])))
                    return cfg_yfail(L, n, path, "alias '%s' of %s also names %s", b->aliases.v[k],
                                     b->name, a->name);
        }
    }
    /* drop the disabled ones */
    size_t m = 0;
    for (size_t i = 0; i < c->n_environments; i++) {
        if (L->env_disabled[i]) {
            cfg_env_free(&c->environments[i]);
            continue;
        }
        c->environments[m] = c->environments[i];
        L->env_set[m] = L->env_set[i];
        L->env_disabled[m] = false;
        m++;
    }
    c->n_environments = m;
    return 0;
}

int cfg_yenvironments(struct loader *L, const yaml_node_t *n, const char *path)
{
    if (n->type == YAML_SEQUENCE_NODE) { /* seed 004: a list of {name: ..., ...} */
        size_t idx = 0;
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
             i++, idx++) {
            yaml_node_t *item = cfg_ynode(L, *i), *nk, *nv;
            char ipath[KEYPATH_MAX];
            const char *name;
            cfg_indexpath(ipath, path, idx);
            if (cfg_ymapping(L, item, ipath) < 0)
                return -1;
            if (!(nv = cfg_ylookup(L, item, "name", &nk)))
                return cfg_yfail(L, item, ipath, "needs a name");
            if (cfg_yscalar(L, nv, ipath, &name) < 0)
                return -1;
            for (yaml_node_item_t *j = n->data.sequence.items.start; j < i; j++)
                if (strcmp(cfg_yscalar_text(cfg_ylookup(L, cfg_ynode(L, *j), "name", NULL)),
                           name) == 0)
                    return cfg_yfail(L, nk, ipath, "environment '%s' is given twice", name);
            if (yenv_body(L, name, nk, item, ipath) < 0)
                return -1;
        }
    } else {
        if (cfg_ymapping(L, n, path) < 0)
            return -1;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = cfg_ynode(L, p->key), *v = cfg_ynode(L, p->value), *nk;
            char epath[KEYPATH_MAX];
            cfg_keypath(epath, path, cfg_yscalar_text(k));
            if (v->type == YAML_MAPPING_NODE && cfg_ylookup(L, v, "name", &nk))
                return cfg_yfail(L, nk, epath, "the name is the key above");
            if (yenv_body(L, cfg_yscalar_text(k), k, v, epath) < 0)
                return -1;
        }
    }
    return yenv_names(L, n, path);
}
