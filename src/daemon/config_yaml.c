/* The YAML file (--config): one document parsed by libyaml, walked section by
 * section in a fixed order (environments are judged against the final
 * maxima, the pool against the final environments). Errors name the key's
 * place: "FILE:LINE:COL: section.key". */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/config_int.h"

static bool kind_takes_list(enum kind k)
{
    return k == K_CIDRS || k == K_PORTS || k == K_TARGETS || k == K_BLOCKED || k == K_KEYS;
}

/* --- YAML -------------------------------------------------------------------------- */

yaml_node_t *cfg_ynode(struct loader *L, int index)
{
    return yaml_document_get_node(L->doc, index);
}

void cfg_where_node(struct loader *L, const yaml_node_t *n, const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%zu:%zu: %s", L->file, n->start_mark.line + 1, n->start_mark.column + 1,
             path);
}

int cfg_yfail(struct loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
    char where[WHERE_MAX], msg[SBX_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cfg_where_node(L, n, path, where, sizeof(where));
    return cfg_fail(L, where, EINVAL, "%s", msg);
}

/* "parent.key" and "parent[i]" into a KEYPATH_MAX buffer, "..." when cut. */
void cfg_keypath(char *buf, const char *parent, const char *key)
{
    if (snprintf(buf, KEYPATH_MAX, "%s.%s", parent, key) >= KEYPATH_MAX)
        strcpy(buf + KEYPATH_MAX - 4, "...");
}

void cfg_indexpath(char *buf, const char *parent, size_t i)
{
    if (snprintf(buf, KEYPATH_MAX, "%s[%zu]", parent, i) >= KEYPATH_MAX)
        strcpy(buf + KEYPATH_MAX - 4, "...");
}

const char *cfg_yscalar_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool yis_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = cfg_yscalar_text(n);
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

/* The text of a scalar value; refuses null, lists, mappings and NUL bytes. */
int cfg_yscalar(struct loader *L, const yaml_node_t *n, const char *path, const char **out)
{
    if (n->type != YAML_SCALAR_NODE)
        return cfg_yfail(L, n, path, "expects a single value, not a %s",
                         n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
    if (yis_null(n))
        return cfg_yfail(L, n, path, "has no value");
    if (strlen(cfg_yscalar_text(n)) != n->data.scalar.length)
        return cfg_yfail(L, n, path, "holds a NUL byte");
    *out = cfg_yscalar_text(n);
    return 0;
}

/* A mapping whose keys are plain, distinct scalars. */
int cfg_ymapping(struct loader *L, const yaml_node_t *n, const char *path)
{
    if (n->type != YAML_MAPPING_NODE)
        return cfg_yfail(L, n, path, "expects a mapping (KEY: VALUE)");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = cfg_ynode(L, p->key);
        if (k->type != YAML_SCALAR_NODE || strlen(cfg_yscalar_text(k)) != k->data.scalar.length)
            return cfg_yfail(L, k, path, "keys must be plain strings");
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
            if (strcmp(cfg_yscalar_text(cfg_ynode(L, q->key)), cfg_yscalar_text(k)) == 0) {
                char kp[KEYPATH_MAX];
                snprintf(kp, sizeof(kp), "%s%s%s", path, *path ? "." : "", cfg_yscalar_text(k));
                return cfg_yfail(L, k, kp, "given twice (first at line %zu)",
                                 cfg_ynode(L, q->key)->start_mark.line + 1);
            }
    }
    return 0;
}

yaml_node_t *cfg_ylookup(struct loader *L, const yaml_node_t *map, const char *key,
                         yaml_node_t **keynode)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if (strcmp(cfg_yscalar_text(cfg_ynode(L, p->key)), key) == 0) {
            if (keynode)
                *keynode = cfg_ynode(L, p->key);
            return cfg_ynode(L, p->value);
        }
    return NULL;
}

/* A key and the seed's name for it may not both be given. */
static int yalias_conflict(struct loader *L, const yaml_node_t *map, const char *path,
                           const char *a, const char *b)
{
    yaml_node_t *ka, *kb;
    if (!b || !cfg_ylookup(L, map, a, &ka) || !cfg_ylookup(L, map, b, &kb))
        return 0;
    return cfg_yfail(L, kb, path, "%s and %s are the same setting: give one", a, b);
}

/* Join a list of scalars with commas (for kinds that take either). */
static int yjoin(struct loader *L, const yaml_node_t *n, const char *path, char **out)
{
    size_t len = 1;
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        const char *s;
        if (cfg_yscalar(L, cfg_ynode(L, *i), path, &s) < 0)
            return -1;
        if (strchr(s, ','))
            return cfg_yfail(L, cfg_ynode(L, *i), path, "'%.80s': one entry per list item", s);
        len += strlen(s) + 1;
    }
    char *buf = calloc(1, len);
    if (!buf)
        return cfg_oom(L);
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        if (i != n->data.sequence.items.start)
            strcat(buf, ",");
        strcat(buf, cfg_yscalar_text(cfg_ynode(L, *i)));
    }
    *out = buf;
    return 0;
}

/* One value of a setting from the file. */
int cfg_yapply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
               const yaml_node_t *key, const yaml_node_t *val, const char *path, char *where,
               size_t where_len)
{
    char wbuf[WHERE_MAX];
    if (!where)
        where = wbuf, where_len = sizeof(wbuf);
    cfg_where_node(L, key, path, where, where_len);
    if (k == K_OPT_SEGMENT && yis_null(val)) {
        free(*(char **)dst);
        *(char **)dst = NULL;
        return 0;
    }
    if (val->type == YAML_SEQUENCE_NODE && kind_takes_list(k)) {
        cleanup_free char *text = NULL;
        if (yjoin(L, val, path, &text) < 0)
            return -1;
        return cfg_apply(L, k, dst, min, max, text, where);
    }
    const char *text;
    if (cfg_yscalar(L, val, path, &text) < 0)
        return -1;
    return cfg_apply(L, k, dst, min, max, text, where);
}

static const struct setting *find_setting(const char *section, const char *key)
{
    for (size_t i = 0; i < cfg_n_settings; i++)
        if (cfg_settings[i].section && strcmp(cfg_settings[i].section, section) == 0 &&
            (strcmp(cfg_settings[i].key, key) == 0 ||
             (cfg_settings[i].alias && strcmp(cfg_settings[i].alias, key) == 0)))
            return &cfg_settings[i];
    return NULL;
}

int cfg_ylim_aliases(struct loader *L, const yaml_node_t *map, const char *path)
{
    for (int i = 0; i < N_LIM; i++)
        if (yalias_conflict(L, map, path, cfg_lim_fields[i].key, cfg_lim_fields[i].alias) < 0)
            return -1;
    return 0;
}

/* A key of a limits block into lim, recording where it was set. */
int cfg_ylimit(struct loader *L, int i, struct sbx_limits *lim, const yaml_node_t *key,
               const yaml_node_t *val, const char *path, char *origin)
{
    const struct lim_field *f = &cfg_lim_fields[i];
    return cfg_yapply(L, f->kind, (char *)lim + f->off, f->min, f->max, key, val, path, origin,
                      origin ? WHERE_MAX : 0);
}

typedef int (*special_fn)(struct loader *L, const char *key, const yaml_node_t *k,
                          const yaml_node_t *v, const char *path);

/* A mapping of table settings of `section`, other keys left to fn. */
static int ywalk(struct loader *L, const yaml_node_t *map, const char *path, const char *section,
                 special_fn fn)
{
    if (cfg_ymapping(L, map, path) < 0)
        return -1;
    for (size_t i = 0; i < cfg_n_settings; i++)
        if (cfg_settings[i].section && strcmp(cfg_settings[i].section, section) == 0 &&
            yalias_conflict(L, map, path, cfg_settings[i].key, cfg_settings[i].alias) < 0)
            return -1;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = cfg_ynode(L, p->key), *v = cfg_ynode(L, p->value);
        const char *key = cfg_yscalar_text(k);
        char kpath[KEYPATH_MAX];
        cfg_keypath(kpath, path, key);
        const struct setting *s = find_setting(section, key);
        int rc = 0;
        if (s && !(s->kind == K_SECCOMP && v->type == YAML_MAPPING_NODE))
            rc =
                cfg_yapply(L, s->kind, (char *)L->c + s->off, s->min, s->max, k, v, kpath, NULL, 0);
        else if (fn && (rc = fn(L, key, k, v, kpath)) == 0)
            return cfg_yfail(L, k, kpath, "unknown key");
        else if (!fn)
            return cfg_yfail(L, k, kpath, "unknown key");
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* server.tokens: [{name, token, tenant?}] */
static int ytokens(struct loader *L, const yaml_node_t *list, const char *path)
{
    if (list->type != YAML_SEQUENCE_NODE)
        return cfg_yfail(L, list, path, "expects a list of {name, token, tenant}");
    size_t idx = 0;
    for (yaml_node_item_t *i = list->data.sequence.items.start; i < list->data.sequence.items.top;
         i++, idx++) {
        yaml_node_t *item = cfg_ynode(L, *i);
        char ipath[KEYPATH_MAX], kpath[KEYPATH_MAX];
        cfg_indexpath(ipath, path, idx);
        if (cfg_ymapping(L, item, ipath) < 0)
            return -1;
        const char *f[3] = {NULL, NULL, NULL};
        static const char *const keys[] = {"name", "token", "tenant"};
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
             p++) {
            const char *key = cfg_yscalar_text(cfg_ynode(L, p->key));
            cfg_keypath(kpath, ipath, key);
            size_t j = 0;
            while (j < 3 && strcmp(keys[j], key) != 0)
                j++;
            if (j == 3)
                return cfg_yfail(L, cfg_ynode(L, p->key), kpath,
                                 "unknown key (name, token, tenant)");
            if (j == 2 && yis_null(cfg_ynode(L, p->value)))
                continue;
            if (cfg_yscalar(L, cfg_ynode(L, p->value), kpath, &f[j]) < 0)
                return -1;
            const char *why = j == 0 && !cfg_token_name_ok(f[0])
                                  ? "must be 1 to 64 of A-Z a-z 0-9 . _ - @ :"
                              : j == 1 ? cfg_token_problem(f[1])
                              : j == 2 && !cfg_segment_ok(f[2])
                                  ? "is not a tenant code (1 to 64 of A-Z a-z 0-9 . _ -)"
                                  : NULL;
            if (why)
                return cfg_yfail(L, cfg_ynode(L, p->key), kpath, "%s", why);
        }
        if (!f[0] || !f[1])
            return cfg_yfail(L, item, ipath, "needs %s", !f[0] ? "a name" : "a token");
        if (cfg_token_add(L, f[0], f[1], f[2]) < 0)
            return -1;
    }
    return 0;
}

static int yserver_special(struct loader *L, const char *key, const yaml_node_t *k,
                           const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "tokens") == 0)
        return ytokens(L, v, path) < 0 ? -1 : 1;
    if (strcmp(key, "default_clone") == 0)
        return ywalk(L, v, path, "server.default_clone", NULL) < 0 ? -1 : 1;
    return 0;
}

static int ysandbox_special(struct loader *L, const char *key, const yaml_node_t *k,
                            const yaml_node_t *v, const char *path)
{
    int i = cfg_lim_index(key);
    if (i >= 0)
        return cfg_ylimit(L, i, &L->c->limits, k, v, path, L->lim_origin[i]) < 0 ? -1 : 1;
    if (strcmp(key, "seccomp_profile") == 0) /* a table: a mapping */
        return cfg_yseccomp_table(L, k, v, path, &L->c->seccomp_table) < 0 ? -1 : 1;
    if (strcmp(key, "mount_roots") == 0) {
        if (cfg_ylist(L, v, path, &L->c->mount_roots, NULL, false) < 0)
            return -1;
        for (size_t j = 0; j < L->c->mount_roots.n; j++) {
            char *r = L->c->mount_roots.v[j];
            struct stat st;
            size_t n = strlen(r);
            while (n > 1 && r[n - 1] == '/')
                r[--n] = '\0';
            if (r[0] != '/' || strcmp(r, "/") == 0 || strstr(r, "/..") || strstr(r, "/./") ||
                cfg_has_control(r))
                return cfg_yfail(L, k, path,
                                 "'%.80s' is not an absolute directory path other "
                                 "than / without . or ..",
                                 r);
            if (lstat(r, &st) < 0 || !S_ISDIR(st.st_mode))
                return cfg_yfail(L, k, path,
                                 "'%.80s' is not a directory (nor a symlink: give "
                                 "the real path)",
                                 r);
        }
        return 1;
    }
    if (strcmp(key, "max") != 0)
        return 0;
    if (cfg_ymapping(L, v, path) < 0 || cfg_ylim_aliases(L, v, path) < 0)
        return -1;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *mk = cfg_ynode(L, p->key);
        char kpath[KEYPATH_MAX];
        cfg_keypath(kpath, path, cfg_yscalar_text(mk));
        int j = cfg_lim_index(cfg_yscalar_text(mk));
        if (j < 0)
            return cfg_yfail(L, mk, kpath, "unknown key");
        if (cfg_ylimit(L, j, &L->c->max, mk, cfg_ynode(L, p->value), kpath, L->max_origin[j]) < 0)
            return -1;
    }
    return 1;
}

/* A list of scalars, each checked by fn (which fills e), into out (replaced). */
int cfg_ylist(struct loader *L, const yaml_node_t *n, const char *path, struct sbx_strv *out,
              int (*fn)(const char *s, bool arg, sbx_err *e), bool arg)
{
    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_yfail(L, n, path, "expects a list");
    struct sbx_strv v = {0};
    size_t idx = 0;
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
         i++, idx++) {
        char ipath[KEYPATH_MAX];
        const char *s;
        sbx_err e = {0};
        cfg_indexpath(ipath, path, idx);
        if (cfg_yscalar(L, cfg_ynode(L, *i), ipath, &s) < 0 ||
            (fn && fn(s, arg, &e) < 0 && cfg_yfail(L, cfg_ynode(L, *i), ipath, "%s", e.msg) < 0)) {
            cfg_strv_clear(&v, false);
            return -1;
        }
        if (cfg_strv_push(&v, s) < 0) {
            cfg_strv_clear(&v, false);
            return cfg_oom(L);
        }
    }
    cfg_strv_clear(out, false);
    *out = v;
    return 0;
}

static int upstream_fn(const char *s, bool arg, sbx_err *e)
{
    return cfg_check_upstream(s, e);
}

static int ydns_special(struct loader *L, const char *key, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "upstream") != 0)
        return 0;
    return cfg_ylist(L, v, path, &L->c->network.dns_upstream, upstream_fn, false) < 0 ? -1 : 1;
}

static int ynetwork_special(struct loader *L, const char *key, const yaml_node_t *k,
                            const yaml_node_t *v, const char *path)
{
    struct sbx_config *c = L->c;
    if (strcmp(key, "allow") == 0 || strcmp(key, "deny") == 0)
        return cfg_ylist(L, v, path, key[0] == 'a' ? &c->network.allow : &c->network.deny,
                         cfg_check_rule, key[0] == 'd') < 0
                   ? -1
                   : 1;
    if (strcmp(key, "dns") == 0)
        return ywalk(L, v, path, "network.dns", ydns_special) < 0 ? -1 : 1;
    if (strcmp(key, "limits") == 0)
        return ywalk(L, v, path, "network.limits", NULL) < 0 ? -1 : 1;
    if (strcmp(key, "hosts") != 0)
        return 0;
    if (cfg_ymapping(L, v, path) < 0)
        return -1;
    struct sbx_strv hosts = {0};
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *hk = cfg_ynode(L, p->key);
        char kpath[KEYPATH_MAX], *entry = NULL;
        const char *addr;
        sbx_err e = {0};
        cfg_keypath(kpath, path, cfg_yscalar_text(hk));
        const char *list[] = {NULL, NULL};
        struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW, .hosts = list};
        int rc = cfg_yscalar(L, cfg_ynode(L, p->value), kpath, &addr);
        if (rc == 0 && asprintf(&entry, "%s=%s", cfg_yscalar_text(hk), addr) < 0)
            rc = cfg_oom(L), entry = NULL;
        list[0] = entry;
        if (rc == 0 && cfg_check_policy(&o, &e) < 0)
            rc = cfg_yfail(L, hk, kpath, "%s", e.msg);
        if (rc == 0 && cfg_strv_push(&hosts, entry) < 0)
            rc = cfg_oom(L);
        free(entry);
        if (rc < 0) {
            cfg_strv_clear(&hosts, false);
            return -1;
        }
    }
    cfg_strv_clear(&c->network.hosts, false);
    c->network.hosts = hosts;
    return 1;
}

static struct sbx_tenant_conf *tenant_add(struct sbx_config *c, const char *code)
{
    struct sbx_tenant_conf *v = realloc(c->tenants, (c->n_tenants + 1) * sizeof(*v));
    if (!v)
        return NULL;
    c->tenants = v;
    struct sbx_tenant_conf *t = &v[c->n_tenants];
    *t = (struct sbx_tenant_conf){0};
    if (!(t->code = strdup(code)))
        return NULL;
    c->n_tenants++;
    return t;
}

/* tenants.<code>.model: {base_url, name, key_env, key_file} */
static int ytenant_model(struct loader *L, const char *code, const yaml_node_t *map,
                         const char *path)
{
    if (cfg_ymapping(L, map, path) < 0)
        return -1;
    struct sbx_config *c = L->c;
    struct sbx_tenant_model *v = realloc(c->tenant_models, (c->n_tenant_models + 1) * sizeof(*v));
    if (!v)
        return cfg_oom(L);
    c->tenant_models = v;
    struct sbx_tenant_model *t = &v[c->n_tenant_models];
    *t = (struct sbx_tenant_model){0};
    if (!(t->code = strdup(code)))
        return cfg_oom(L);
    c->n_tenant_models++;
    static const char *const keys[] = {"base_url", "name", "key_env", "key_file"};
    char **dst[] = {&t->model.base_url, &t->model.name, &t->model.key_env, &t->model.key_file};
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = cfg_ynode(L, p->key);
        const char *key = cfg_yscalar_text(k);
        char kpath[KEYPATH_MAX];
        cfg_keypath(kpath, path, key);
        size_t j = 0;
        while (j < 4 && strcmp(keys[j], key) != 0)
            j++;
        if (j == 4)
            return cfg_yfail(L, k, kpath, "unknown key (base_url, name, key_env, key_file)");
        if (cfg_yapply(L, j == 3 ? K_PATH : K_TEXT, dst[j], 0, 0, k, cfg_ynode(L, p->value), kpath,
                       NULL, 0) < 0)
            return -1;
    }
    return 0;
}

/* tenants: {code: {env_keys: [...], env: {KEY: value}, model: {...}}} */
static int ytenants(struct loader *L, const yaml_node_t *map, const char *path)
{
    if (cfg_ymapping(L, map, path) < 0)
        return -1;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = cfg_ynode(L, p->key), *body = cfg_ynode(L, p->value);
        const char *code = cfg_yscalar_text(k);
        char tpath[KEYPATH_MAX];
        cfg_keypath(tpath, path, code);
        if (!cfg_segment_ok(code))
            return cfg_yfail(L, k, tpath, "is not a tenant code (1 to 64 of A-Z a-z 0-9 . _ -)");
        struct sbx_tenant_conf *t = tenant_add(L->c, code);
        if (!t)
            return cfg_oom(L);
        if (yis_null(body))
            continue;
        if (cfg_ymapping(L, body, tpath) < 0)
            return -1;
        yaml_node_t *kk, *keys = cfg_ylookup(L, body, "env_keys", &kk);
        yaml_node_t *env = cfg_ylookup(L, body, "env", NULL);
        for (yaml_node_pair_t *q = body->data.mapping.pairs.start; q < body->data.mapping.pairs.top;
             q++) {
            const char *key = cfg_yscalar_text(cfg_ynode(L, q->key));
            char kpath[KEYPATH_MAX];
            cfg_keypath(kpath, tpath, key);
            if (strcmp(key, "model") == 0) {
                if (ytenant_model(L, code, cfg_ynode(L, q->value), kpath) < 0)
                    return -1;
                continue;
            }
            if (strcmp(key, "env_keys") != 0 && strcmp(key, "env") != 0)
                return cfg_yfail(L, cfg_ynode(L, q->key), kpath,
                                 "unknown key (env_keys, env, model)");
        }
        if (keys) {
            char kpath[KEYPATH_MAX];
            cfg_keypath(kpath, tpath, "env_keys");
            if (cfg_yapply(L, K_KEYS, &t->env_keys, 0, 0, kk, keys, kpath, NULL, 0) < 0)
                return -1;
        }
        if (!env)
            continue;
        char epath[KEYPATH_MAX];
        cfg_keypath(epath, tpath, "env");
        if (cfg_ymapping(L, env, epath) < 0)
            return -1;
        for (yaml_node_pair_t *q = env->data.mapping.pairs.start; q < env->data.mapping.pairs.top;
             q++) {
            yaml_node_t *vk = cfg_ynode(L, q->key);
            const char *key = cfg_yscalar_text(vk), *val, *why = cfg_env_key_problem(key);
            char kpath[KEYPATH_MAX], *kv;
            cfg_keypath(kpath, epath, key);
            if (why)
                return cfg_yfail(L, vk, kpath, "'%.80s' %s", key, why);
            if (sbx_strv_has(&t->env_keys, key))
                return cfg_yfail(L, vk, kpath, "is also in env_keys: give one");
            if (cfg_yscalar(L, cfg_ynode(L, q->value), kpath, &val) < 0)
                return -1;
            if (asprintf(&kv, "%s=%s", key, val) < 0)
                return cfg_oom(L);
            int rc = cfg_strv_push(&t->env, kv);
            cfg_free_secret(kv);
            if (rc < 0)
                return cfg_oom(L);
        }
    }
    return 0;
}

static int ypool_special(struct loader *L, const char *key, const yaml_node_t *k,
                         const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "environments") != 0)
        return 0;
    struct sbx_strv names = {0};
    if (cfg_ylist(L, v, path, &names, cfg_check_name, false) < 0)
        return -1;
    cfg_strv_clear(&L->c->pool.environments, false);
    for (size_t i = 0; i < names.n; i++) {
        const struct sbx_environment *env = sbx_config_environment(L->c, names.v[i]);
        int rc = 0;
        if (!env)
            rc = cfg_yfail(L, k, path, "'%s' is not an environment", names.v[i]);
        else if (!sbx_strv_has(&L->c->pool.environments, env->name) &&
                 cfg_strv_push(&L->c->pool.environments, env->name) < 0)
            rc = cfg_oom(L);
        if (rc < 0) {
            cfg_strv_clear(&names, false);
            return -1;
        }
    }
    cfg_strv_clear(&names, false);
    return 1;
}

static int yroot(struct loader *L, const yaml_node_t *root)
{
    static const char *const sections[] = {"server",  "sandbox",   "network",
                                           "tenants", "retention", "environments",
                                           "pool",    "skills",    "model"};
    if (root->type != YAML_MAPPING_NODE)
        return cfg_yfail(L, root, "(top)",
                         "expects a mapping of sections (server, sandbox, "
                         "network, tenants, retention, environments, pool, skills, model)");
    if (cfg_ymapping(L, root, "") < 0)
        return -1;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = cfg_ynode(L, p->key);
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(sections) && strcmp(sections[j], cfg_yscalar_text(k)) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(sections))
            return cfg_yfail(L, k, cfg_yscalar_text(k),
                             "unknown section (server, sandbox, network, "
                             "tenants, retention, environments, pool, skills, model)");
    }
    /* in this order: environments are judged against the final maxima, the
     * pool against the final environments */
    for (size_t j = 0; j < SBX_ARRAY_LEN(sections); j++) {
        const char *name = sections[j];
        yaml_node_t *n = cfg_ylookup(L, root, name, NULL);
        if (!n || yis_null(n))
            continue;
        int rc = 0;
        if (strcmp(name, "server") == 0)
            rc = ywalk(L, n, name, name, yserver_special);
        else if (strcmp(name, "sandbox") == 0) {
            if (n->type == YAML_MAPPING_NODE) {
                if (cfg_ylim_aliases(L, n, name) < 0)
                    return -1;
            }
            rc = ywalk(L, n, name, name, ysandbox_special);
        } else if (strcmp(name, "network") == 0)
            rc = ywalk(L, n, name, name, ynetwork_special);
        else if (strcmp(name, "tenants") == 0)
            rc = ytenants(L, n, name);
        else if (strcmp(name, "retention") == 0 || strcmp(name, "skills") == 0)
            rc = ywalk(L, n, name, name, NULL);
        else if (strcmp(name, "environments") == 0)
            rc = cfg_yenvironments(L, n, name);
        else if (strcmp(name, "model") == 0)
            rc = ywalk(L, n, name, name, NULL);
        else
            rc = ywalk(L, n, name, name, ypool_special);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int yaml_error(struct loader *L, const yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR)
        return cfg_oom(L);
    if (p->error == YAML_READER_ERROR)
        return sbx_err_set(L->err, EINVAL, "%s: byte %zu: %s", L->file, p->problem_offset,
                           p->problem ? p->problem : "unreadable");
    char ctx[96] = "";
    if (p->context)
        snprintf(ctx, sizeof(ctx), " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return sbx_err_set(L->err, EINVAL, "%s:%zu:%zu: YAML syntax error: %s%s", L->file,
                       p->problem_mark.line + 1, p->problem_mark.column + 1,
                       p->problem ? p->problem : "malformed", ctx);
}

int cfg_load_file(struct loader *L, const char *path)
{
    L->file = path;
    FILE *f = fopen(path, "re");
    struct stat st;
    if (!f)
        return sbx_err_set(L->err, errno, "--config: cannot open '%s': %s", path, strerror(errno));
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sbx_err_set(L->err, EINVAL, "--config: '%s' is not a regular file", path);
    }
    /* relative paths in the file are relative to the file */
    sbx_err e = {0};
    cleanup_free char *abs = NULL;
    if (cfg_make_path(L, path, &abs, &e) < 0) {
        fclose(f);
        return sbx_err_set(L->err, e.errnum, "--config: %s", e.msg);
    }
    *strrchr(abs, '/') = '\0';
    L->file_dir = strdup(abs[0] ? abs : "/");
    if (!L->file_dir || !(L->c->config_path = strdup(path))) {
        fclose(f);
        return cfg_oom(L);
    }

    yaml_parser_t parser;
    yaml_document_t doc, next;
    int rc = -1;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return cfg_oom(L);
    }
    yaml_parser_set_input_file(&parser, f);
    L->in_file = true;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_error(L, &parser);
        goto out;
    }
    L->doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!yaml_parser_load(&parser, &next)) {
        rc = yaml_error(L, &parser);
    } else {
        yaml_node_t *more = yaml_document_get_root_node(&next);
        if (more)
            rc = cfg_yfail(L, more, "(document)", "only one YAML document is read");
        else
            rc = root && !yis_null(root) ? yroot(L, root) : 0;
        yaml_document_delete(&next);
    }
    L->in_file = false;
    L->doc = NULL;
    yaml_document_delete(&doc);
out:
    L->in_file = false;
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
