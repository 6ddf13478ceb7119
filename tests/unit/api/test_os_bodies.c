/* api/opensandbox/bodies.c: the OpenSandbox request bodies, accepted and
 * refused with the messages the handlers answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/opensandbox/bodies.h"

static struct sbx_environment envs[] = {{.name = "python"}, {.name = "node"}};
static const struct sbx_runtime_settings set = {
    .environments = envs,
    .n_environments = 2,
    .max = {.timeout_s = 60, .memory_bytes = 1ull << 30, .cpu_cores = 2},
};

static int create(const char *text, struct os_create *c, sbx_err *e, json_t **body)
{
    *body = json_loads(text, 0, NULL);
    assert_non_null(*body);
    *e = (sbx_err){0};
    return os_create_parse(&set, *body, c, e);
}

static void create_bodies(void **state)
{
    struct os_create c;
    sbx_err e;
    json_t *b;
    assert_int_equal(create("{\"image\":{\"uri\":\"python\"},\"entrypoint\":[\"tail\",\"-f\","
                            "\"/dev/null\"],\"resourceLimits\":{\"cpu\":\"500m\",\"memory\":"
                            "\"256Mi\"},\"env\":{},\"metadata\":{\"a\":\"b\"},\"timeout\":600,"
                            "\"networkPolicy\":{\"egress\":[{\"action\":\"allow\",\"target\":"
                            "\"pypi.org\"}]}}",
                            &c, &e, &b),
                     0);
    assert_string_equal(c.image, "python");
    assert_int_equal(json_array_size(c.entrypoint), 3);
    assert_int_equal(json_integer_value(c.to), 600);
    assert_true(c.lim.cpu_cores > 0.49 && c.lim.cpu_cores < 0.51);
    assert_int_equal(c.lim.memory_bytes, 256u << 20);
    json_decref(b);
    /* From a snapshot: no image (the snapshot's), the id given on. */
    assert_int_equal(create("{\"snapshotId\":\"s1\",\"timeout\":60}", &c, &e, &b), 0);
    assert_null(c.image);
    assert_string_equal(c.snapshot_id, "s1");
    json_decref(b);
    static const struct {
        const char *body, *msg;
    } bad[] = {
        {"{\"image\":{\"uri\":\"python\"},\"volumes\":[]}", "volumes are not supported"},
        {"{\"image\":{\"uri\":\"python\"},\"snapshotId\":\"s1\"}", "not both"},
        {"{\"snapshotId\":\"\"}", "snapshotId must be the id of a snapshot"},
        {"{\"snapshotId\":7}", "snapshotId must be the id of a snapshot"},
        {"{}", "image.uri is required"},
        {"{\"image\":{\"uri\":\"ubuntu\"}}", "image 'ubuntu' is not one of our environments "
                                             "(python, node)"},
        {"{\"image\":{\"uri\":\"node\"},\"entrypoint\":\"sleep 1\"}", "entrypoint must be"},
        {"{\"image\":{\"uri\":\"node\"},\"entrypoint\":[\"a\",1]}", "entrypoint[1] must be"},
        {"{\"image\":{\"uri\":\"node\"},\"timeout\":0}", "timeout must be whole seconds"},
        {"{\"image\":{\"uri\":\"node\"},\"timeout\":604801}", "timeout must be whole seconds"},
        {"{\"image\":{\"uri\":\"node\"},\"env\":{\"A\":1}}", "env.A must be a string"},
        {"{\"image\":{\"uri\":\"node\"},\"metadata\":[]}", "metadata must be an object"},
        {"{\"image\":{\"uri\":\"node\"},\"resourceLimits\":{\"cpu\":\"3\"}}",
         "resourceLimits.cpu 3 is above the maximum 2"},
        {"{\"image\":{\"uri\":\"node\"},\"resourceLimits\":{\"gpu\":\"1\"}}",
         "resourceLimits.gpu is not one we limit"},
        {"{\"image\":{\"uri\":\"node\"},\"networkPolicy\":{\"egress\":[{\"action\":\"maybe\","
         "\"target\":\"a\"}]}}",
         "networkPolicy.egress[0] must be"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(create(bad[i].body, &c, &e, &b), -1);
        if (!strstr(e.msg, bad[i].msg))
            fail_msg("%s: %s", bad[i].body, e.msg);
        assert_int_equal(e.errnum, EINVAL);
        json_decref(b);
    }
}

static void policy_and_metadata(void **state)
{
    sbx_err e = {0};
    assert_null(os_policy_network(NULL, &e));
    assert_int_equal(e.errnum, 0);
    json_t *np = json_loads("{\"defaultAction\":\"allow\",\"egress\":[{\"action\":\"deny\","
                            "\"target\":\"10.0.0.0/8\"}]}",
                            0, NULL);
    json_t *net = os_policy_network(np, &e);
    char *s = json_dumps(net, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"allow\":[],\"default\":\"allow\",\"deny\":[\"10.0.0.0/8\"]}");
    free(s);
    json_decref(net);
    json_decref(np);

    json_t *m = json_pack("{s:s, s:s}", "a", "1", "b", "2");
    json_t *patch = json_loads("{\"c\":\"3\",\"a\":7}", 0, NULL);
    assert_int_equal(os_metadata_merge(m, patch, &e), -1);
    assert_string_equal(e.msg, "metadata.a must be a string or null");
    assert_int_equal(json_object_size(m), 2); /* nothing applied */
    json_decref(patch);
    patch = json_loads("{\"c\":\"3\",\"a\":null}", 0, NULL);
    assert_int_equal(os_metadata_merge(m, patch, &e), 0);
    s = json_dumps(m, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"b\":\"2\",\"c\":\"3\"}");
    free(s);
    json_decref(patch);
    json_decref(m);
}

static int command(const char *text, struct os_run *r, sbx_err *e)
{
    json_t *b = json_loads(text, 0, NULL);
    *e = (sbx_err){0};
    int rc = os_command_parse(&set, b, r, e);
    json_decref(b);
    return rc;
}

static void commands(void **state)
{
    struct os_run r;
    sbx_err e;
    json_t *b = json_loads("{\"command\":\"ls\",\"cwd\":\"/tmp\",\"background\":true,\"timeout\":"
                           "1500,\"envs\":{\"A\":\"1\"}}",
                           0, NULL);
    assert_int_equal(os_command_parse(&set, b, &r, &e), 0);
    assert_string_equal(r.command, "ls");
    assert_string_equal(r.cwd, "/tmp");
    assert_true(r.background);
    assert_true(r.timeout_s > 1.49 && r.timeout_s < 1.51);
    json_decref(b);
    assert_int_equal(command("{\"command\":\"\"}", &r, &e), -1);
    assert_string_equal(e.msg, "command must be a non-empty string");
    assert_int_equal(command("{\"command\":\"a\\u0000b\"}", &r, &e), -1);
    assert_int_equal(command("{\"command\":\"a\",\"cwd\":\"\"}", &r, &e), -1);
    assert_string_equal(e.msg, "cwd must be a path");
    assert_int_equal(command("{\"command\":\"a\",\"background\":1}", &r, &e), -1);
    assert_int_equal(command("{\"command\":\"a\",\"timeout\":0}", &r, &e), -1);
    assert_int_equal(command("{\"command\":\"a\",\"timeout\":61000}", &r, &e), -1);
    assert_string_equal(e.msg, "timeout 61000 ms is above the maximum 60 s");
    assert_int_equal(command("{\"command\":\"a\",\"gid\":0}", &r, &e), -1);
    assert_non_null(strstr(e.msg, "uid and gid are not supported"));
    assert_int_equal(command("{\"command\":\"a\",\"envs\":{\"B\":2}}", &r, &e), -1);
    assert_string_equal(e.msg, "envs.B must be a string");
}

static void file_entries(void **state)
{
    struct sbx_ws_path p, q;
    sbx_err e = {0};
    int mode;
    assert_int_equal(os_path("/workspace/a/b", &p, &e), 0);
    assert_string_equal(p.rel, "a/b");
    assert_int_equal(os_path("/etc/passwd", &p, &e), -1);
    assert_non_null(strstr(e.msg, "is outside /workspace"));
    json_t *v = json_loads("{\"mode\":\"750\"}", 0, NULL);
    assert_int_equal(os_mode_entry("/workspace/d", v, true, &p, &mode, &e), 0);
    assert_int_equal(mode, 0750);
    json_decref(v);
    v = json_loads("{}", 0, NULL);
    assert_int_equal(os_mode_entry("d", v, true, &p, &mode, &e), 0);
    assert_int_equal(mode, 0755);
    assert_int_equal(os_mode_entry("d", v, false, &p, &mode, &e), 0);
    assert_int_equal(mode, -2); /* chmod without a mode: nothing to change */
    json_decref(v);
    v = json_loads("{\"mode\":\"8\"}", 0, NULL);
    assert_int_equal(os_mode_entry("d", v, false, &p, &mode, &e), -1);
    assert_string_equal(e.msg, "d: {mode: octal digits like 755} expected");
    json_decref(v);
    v = json_loads("{\"src\":\"a\",\"dest\":\"/workspace/b\"}", 0, NULL);
    assert_int_equal(os_move_entry(v, &p, &q, &e), 0);
    assert_string_equal(q.rel, "b");
    json_decref(v);
    v = json_loads("{\"src\":\"a\"}", 0, NULL);
    assert_int_equal(os_move_entry(v, &p, &q, &e), -1);
    assert_string_equal(e.msg, "path is required");
    json_decref(v);
    const char *old, *new;
    v = json_loads("{\"old\":\"\",\"new\":\"x\"}", 0, NULL);
    assert_int_equal(os_replace_entry("f", v, &p, &old, &new, &e), -1);
    assert_string_equal(e.msg, "f: {old, new} strings expected (old not empty)");
    json_decref(v);
    mode = -1;
    assert_int_equal(
        os_upload_meta_parse("{\"path\":\"/workspace/u.bin\",\"mode\":640}", &p, &mode, &e), 0);
    assert_string_equal(p.rel, "u.bin");
    assert_int_equal(mode, 0640);
    assert_int_equal(os_upload_meta_parse("{\"path\":\"x\",\"mode\":\"rw\"}", &p, &mode, &e), -1);
    assert_string_equal(e.msg, "metadata.mode must be octal digits like 644");
    assert_int_equal(os_upload_meta_parse("not json", &p, &mode, &e), -1);
    assert_string_equal(e.msg, "the metadata part must be JSON {path, mode}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_bodies),
        cmocka_unit_test(policy_and_metadata),
        cmocka_unit_test(commands),
        cmocka_unit_test(file_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
