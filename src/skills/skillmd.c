#include "skills/skillmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/json.h"
#include "base/parse.h"

#define FM_MAX_DEPTH 32
#define FM_MAX (64 * 1024)

/* The front matter's lines: after a first line "---", up to the next "---"
 * (or "..."). *body is where the markdown starts. */
static int split(const char *t, size_t len, size_t *fm_off, size_t *fm_len, size_t *body,
                 sbx_err *err)
{
    size_t i = 0;
    if (len >= 3 && (unsigned char)t[0] == 0xef && (unsigned char)t[1] == 0xbb &&
        (unsigned char)t[2] == 0xbf)
        i = 3; /* a UTF-8 byte order mark */
    if (len - i < 3 || memcmp(t + i, "---", 3) != 0)
        return sbx_err_set(err, EINVAL, "SKILL.md: no front matter (the file must begin with ---)");
    i += 3;
    while (i < len && (t[i] == ' ' || t[i] == '\t'))
        i++;
    if (i < len && t[i] == '\r')
        i++;
    if (i >= len || t[i] != '\n')
        return sbx_err_set(err, EINVAL,
                           "SKILL.md line 1: the front matter must begin with a line ---");
    *fm_off = ++i;
    for (size_t line = i; line < len;) {
        const char *nl = memchr(t + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - t) : len;
        size_t n = end - line;
        if (n && t[line + n - 1] == '\r')
            n--;
        if (n >= 3 && (memcmp(t + line, "---", 3) == 0 || memcmp(t + line, "...", 3) == 0)) {
            size_t k = 3;
            while (k < n && (t[line + k] == ' ' || t[line + k] == '\t'))
                k++;
            if (k == n) {
                *fm_len = line - *fm_off;
                *body = nl ? end + 1 : len;
                if (*fm_len > FM_MAX)
                    return sbx_err_set(err, EINVAL, "SKILL.md: front matter over %d KiB",
                                       FM_MAX / 1024);
                return 0;
            }
        }
        line = nl ? end + 1 : len;
    }
    return sbx_err_set(err, EINVAL, "SKILL.md: the front matter has no closing ---");
}

/* A plain scalar as YAML 1.1's core types would read it: null, booleans,
 * numbers; anything quoted stays a string. */
static json_t *scalar(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0)
            return json_null();
        if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
            return json_true();
        if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
            return json_false();
        char *end;
        if (strlen(s) == len && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
            long long v = strtoll(s, &end, 10);
            if (*end == '\0')
                return json_integer(v);
            double d = strtod(s, &end);
            if (*end == '\0' && isfinite(d))
                return json_real(d);
        }
    }
    return sbx_json_text(s, len);
}

static json_t *to_json(yaml_document_t *doc, yaml_node_t *n, int depth, sbx_err *err)
{
    if (!n)
        return json_null();
    if (depth > FM_MAX_DEPTH) {
        sbx_err_set(err, EINVAL, "SKILL.md line %zu: nested too deep", n->start_mark.line + 2);
        return NULL;
    }
    if (n->type == YAML_SCALAR_NODE)
        return scalar(n);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             a && it < n->data.sequence.items.top; it++) {
            json_t *v = to_json(doc, yaml_document_get_node(doc, *it), depth + 1, err);
            if (!v) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, v);
        }
        return a;
    }
    json_t *o = json_object();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE ||
            strlen((const char *)k->data.scalar.value) != k->data.scalar.length) {
            sbx_err_set(err, EINVAL, "SKILL.md line %zu: a key must be a plain string",
                        (k ? k->start_mark.line : n->start_mark.line) + 2);
            json_decref(o);
            return NULL;
        }
        json_t *v = to_json(doc, yaml_document_get_node(doc, p->value), depth + 1, err);
        if (!v) {
            json_decref(o);
            return NULL;
        }
        json_object_set_new(o, (const char *)k->data.scalar.value, v);
    }
    return o;
}

static bool is_text(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0 &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/* "30", "30s", "5m", "1h": seconds, at most a day. */
static int timeout_value(char *text, double *d, sbx_err *e)
{
    size_t n = strlen(text);
    double unit = 1;
    if (n > 1 && strchr("smh", text[n - 1])) {
        unit = text[n - 1] == 'h' ? 3600 : text[n - 1] == 'm' ? 60 : 1;
        text[n - 1] = '\0';
    }
    if (sbx_parse_seconds(text, 86400 / unit, d, e) < 0)
        return -1;
    *d *= unit;
    return 0;
}

/* Our `sandbox:` key: {network: [host | host:port], limits: {memory, pids, cpu, timeout}}. */
static json_t *sandbox_key(json_t *sb, sbx_err *err)
{
    static const char *const keys[] = {"network", "limits"};
    static const char *const lkeys[] = {"memory", "pids", "cpu", "timeout"};
    if (!json_is_object(sb)) {
        sbx_err_set(err, EINVAL, "SKILL.md: sandbox must be a mapping (network, limits)");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(sb, k, v)
    {
        size_t i = 0;
        while (i < 2 && strcmp(keys[i], k) != 0)
            i++;
        if (i == 2) {
            sbx_err_set(err, EINVAL, "SKILL.md: sandbox.%s is not a key (network, limits)", k);
            return NULL;
        }
    }
    json_t *out = json_object(), *hosts = json_array(), *lim = json_object();
    json_object_set_new(out, "network", hosts);
    json_object_set_new(out, "limits", lim);
    json_t *net = json_object_get(sb, "network");
    if (net && !json_is_null(net)) {
        if (!json_is_array(net) || json_array_size(net) > 64) {
            sbx_err_set(err, EINVAL,
                        "SKILL.md: sandbox.network must be a list of hosts (at most 64)");
            goto fail;
        }
        size_t i;
        json_array_foreach(net, i, v)
        {
            const char *h = json_string_value(v);
            if (!is_text(v) || strlen(h) > 253 || strpbrk(h, " \t/\\@,;\"'")) {
                sbx_err_set(err, EINVAL,
                            "SKILL.md: sandbox.network[%zu] must be a host or host:port", i);
                goto fail;
            }
            json_array_append(hosts, v);
        }
    }
    json_t *l = json_object_get(sb, "limits");
    if (l && !json_is_null(l)) {
        if (!json_is_object(l)) {
            sbx_err_set(err, EINVAL, "SKILL.md: sandbox.limits must be a mapping");
            goto fail;
        }
        json_object_foreach(l, k, v)
        {
            size_t i = 0;
            while (i < 4 && strcmp(lkeys[i], k) != 0)
                i++;
            char text[64];
            if (json_is_string(v))
                snprintf(text, sizeof(text), "%s", json_string_value(v));
            else if (json_is_number(v))
                snprintf(text, sizeof(text), "%.17g", json_number_value(v));
            else
                text[0] = '\0';
            sbx_err e = {0};
            uint64_t u = 0;
            double d = 0;
            int rc = -1;
            if (i == 0 && (rc = sbx_parse_size(text, &u, &e)) == 0)
                json_object_set_new(lim, "memoryBytes",
                                    json_integer((json_int_t)(u > INT64_MAX ? INT64_MAX : u)));
            else if (i == 1 && (rc = sbx_parse_uint(text, 1, 1u << 22, &u, &e)) == 0)
                json_object_set_new(lim, "pids", json_integer((json_int_t)u));
            else if (i == 2 && (rc = sbx_parse_cpu(text, 1024, &d, &e)) == 0)
                json_object_set_new(lim, "cpu", json_real(d));
            else if (i == 3 && (rc = timeout_value(text, &d, &e)) == 0)
                json_object_set_new(lim, "timeoutSeconds", json_real(d));
            if (i == 4) {
                sbx_err_set(err, EINVAL,
                            "SKILL.md: sandbox.limits.%s is not a key (memory, pids, cpu, timeout)",
                            k);
                goto fail;
            }
            if (rc < 0 || (i != 1 && u == 0 && d <= 0)) {
                sbx_err_set(err, EINVAL, "SKILL.md: sandbox.limits.%s: '%s' is not valid", k, text);
                goto fail;
            }
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* The checks of OpenClaw's loader (required strings) and the shapes of the
 * optional keys we read. */
static json_t *build(json_t *fm, const char *body, size_t body_len, sbx_err *err)
{
    if (!json_is_object(fm)) {
        sbx_err_set(err, EINVAL, "SKILL.md: the front matter must be a mapping");
        return NULL;
    }
    json_t *name = json_object_get(fm, "name"), *desc = json_object_get(fm, "description");
    if (!is_text(name)) {
        sbx_err_set(err, EINVAL, "SKILL.md: name is required (a non-empty string)");
        return NULL;
    }
    if (!is_text(desc)) {
        sbx_err_set(err, EINVAL, "SKILL.md: description is required (a non-empty string)");
        return NULL;
    }
    json_t *out = json_pack("{s:O, s:O}", "name", name, "description", desc);
    json_t *home = json_object_get(fm, "homepage");
    if (is_text(home))
        json_object_set(out, "homepage", home);
    json_t *ui = json_object_get(fm, "user-invocable");
    if (ui && !json_is_null(ui)) {
        if (!json_is_boolean(ui)) {
            json_decref(out);
            sbx_err_set(err, EINVAL, "SKILL.md: user-invocable must be true or false");
            return NULL;
        }
        json_object_set(out, "userInvocable", ui);
    }
    json_t *meta = json_object_get(fm, "metadata");
    if (meta && json_is_string(meta)) {
        /* OpenClaw also takes metadata as one JSON string */
        json_error_t je;
        json_t *m = json_loads(json_string_value(meta), JSON_REJECT_DUPLICATES, &je);
        meta = m && json_is_object(m) ? m : NULL;
        if (!meta)
            json_decref(m);
        else
            json_object_set_new(fm, "metadata", meta);
    }
    if (json_is_object(meta)) {
        json_object_set(out, "metadata", meta);
        static const char *const names[] = {"openclaw", "clawdbot", "clawdis"};
        for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
            json_t *oc = json_object_get(meta, names[i]);
            if (json_is_object(oc)) {
                json_object_set(out, "openclaw", oc);
                break;
            }
        }
    }
    json_t *oc = json_object_get(out, "openclaw");
    json_t *req = oc ? json_object_get(oc, "requires") : NULL;
    static const char *const lists[] = {"bins", "anyBins", "env", "config"};
    for (size_t i = 0; req && i < SBX_ARRAY_LEN(lists); i++) {
        json_t *l = json_object_get(req, lists[i]);
        size_t k;
        json_t *v;
        if (!l || json_is_null(l))
            continue;
        bool ok = json_is_array(l);
        json_array_foreach(l, k, v) ok = ok && json_is_string(v);
        if (!ok) {
            json_decref(out);
            sbx_err_set(err, EINVAL,
                        "SKILL.md: metadata.openclaw.requires.%s must be a list of strings",
                        lists[i]);
            return NULL;
        }
    }
    json_t *sb = json_object_get(fm, "sandbox");
    if (sb && !json_is_null(sb)) {
        json_t *s = sandbox_key(sb, err);
        if (!s) {
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, "sandbox", s);
    }
    json_object_set_new(out, "body", sbx_json_text(body, body_len));
    return out;
}

json_t *sbx_skillmd_parse(const char *text, size_t len, sbx_err *err)
{
    size_t off = 0, fm_len = 0, body = 0;
    if (split(text, len, &off, &fm_len, &body, err) < 0)
        return NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) {
        sbx_err_set(err, ENOMEM, "SKILL.md: yaml parser");
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text + off, fm_len);
    if (!yaml_parser_load(&p, &doc)) {
        sbx_err_set(err, EINVAL, "SKILL.md line %zu: %s", p.problem_mark.line + 2,
                    p.problem ? p.problem : "malformed YAML");
        yaml_parser_delete(&p);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    json_t *fm = root ? to_json(&doc, root, 0, err) : json_object();
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    if (!fm)
        return NULL;
    json_t *out = build(fm, text + body, len - body, err);
    json_decref(fm);
    return out;
}
