/* The claw-skill broker. Each clone gets one unix socket, in a directory of
 * its own under <state>/skills/sock, bound (read-only; connecting needs no
 * write to the mount) at /run/sandbox in every sandbox of that clone, with
 * the claw-skill program at /opt/sandbox/bin/{claw-skill,sandbox-skill}.
 * Whoever connects to a clone's socket acts for that clone only: the
 * listener, not the request, says which clone. A request runs the skill as
 * a task of its own through the runtime (never in the caller's sandbox),
 * so nothing the caller holds is raised by it.
 *
 * Frames, both ways: one type byte, a 32-bit big-endian length, the data.
 * claw-skill sends 'a' (its arguments, a JSON array of strings), 'i' (stdin
 * bytes, any number), 'I' (end of stdin). The daemon sends 'o' and 'e'
 * (stdout, stderr bytes) and 'x' (the exit code, 4 bytes), then closes. */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/log.h"
#include "skills/skills_int.h"

#define FRAME_MAX (1u << 20)
#define STDIN_MAX (16u << 20)     /* one request's */
#define STDIN_ALL_MAX (64u << 20) /* all requests' buffered stdin together */
#define CONNS_PER_CLONE 16        /* requests of one clone at once */
#define REQUEST_TIMEOUT_S 60      /* to send a whole request */

/* The claw-skill program (src/skills/client/, static, musl), linked in by
 * claw_blob.S. */
extern const unsigned char sbx_claw_blob[], sbx_claw_blob_end[];

struct sk_broker_clone {
    struct sbx_skills *sk;
    struct sbx_clone clone;
    char dir[PATH_MAX];
    struct evconnlistener *l;
    unsigned conns;
    struct sk_broker_clone *next;
};

struct sk_conn {
    struct sbx_skills *sk;
    struct sk_broker_clone *bc;
    struct bufferevent *bev;
    json_t *args;
    struct evbuffer *in; /* stdin */
    char task[SBX_ID_SIZE];
    bool running, closed, finishing, waiting, dispatched;
    struct sk_conn *next;
};

static void conn_free(struct sk_conn *c)
{
    struct sbx_skills *sk = c->sk;
    for (struct sk_conn **p = &sk->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    if (c->waiting)
        sbx_skills_unwait(sk, c);
    if (c->bev)
        bufferevent_free(c->bev);
    if (c->in) {
        sk->stdin_bytes -= evbuffer_get_length(c->in);
        evbuffer_free(c->in);
    }
    c->bc->conns--;
    json_decref(c->args);
    free(c);
}

static void frame(struct sk_conn *c, char type, const void *data, size_t len)
{
    if (c->closed || !c->bev)
        return;
    unsigned char h[5] = {(unsigned char)type};
    uint32_t n = htonl((uint32_t)len);
    memcpy(h + 1, &n, 4);
    bufferevent_write(c->bev, h, 5);
    if (len)
        bufferevent_write(c->bev, data, len);
}

static void on_drained(struct bufferevent *bev, void *ud)
{
    conn_free(ud);
}

static void on_dropped(struct bufferevent *bev, short what, void *ud)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_free(ud);
}

/* The last frame: the exit code; the connection closes once it is out. */
static void finish(struct sk_conn *c, int code, const char *err_text)
{
    if (err_text && err_text[0]) {
        frame(c, 'e', err_text, strlen(err_text));
        frame(c, 'e', "\n", 1);
    }
    uint32_t n = htonl((uint32_t)code);
    frame(c, 'x', &n, 4);
    c->finishing = true;
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_setcb(c->bev, NULL, on_drained, on_dropped, c);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        conn_free(c);
}

static void on_task_output(void *ud, int stream, const char *buf, size_t n)
{
    struct sk_conn *c = ud;
    frame(c, stream == 1 ? 'o' : 'e', buf, n);
}

static void on_task_done(void *ud, const struct sbx_store_task *t)
{
    struct sk_conn *c = ud;
    c->running = false;
    if (c->closed)
        return conn_free(c);
    json_error_t je;
    json_t *rep = t->result ? json_loads(t->result, 0, &je) : NULL;
    json_t *code = json_object_get(rep, "exitCode");
    int rc = json_is_integer(code) ? (int)json_integer_value(code) : 125;
    const char *outcome = json_string_value(json_object_get(rep, "outcome"));
    /* what the skill's own stderr did not say: a setup failure, a timeout */
    bool say = t->error && t->error[0] && outcome && strcmp(outcome, "exited") != 0;
    char msg[700];
    snprintf(msg, sizeof(msg), "claw-skill: %s", say ? t->error : "");
    finish(c, rc, say ? msg : NULL);
    json_decref(rep);
}

static const char usage[] = "usage: claw-skill <skill> <command> [args...]\n"
                            "       claw-skill list\n"
                            "       claw-skill <skill> --help\n";

static bool is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0 || strcmp(s, "help") == 0;
}

static void list(struct sk_conn *c)
{
    json_t *all = sbx_skills_list(c->sk, &c->bc->clone);
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
    {
        char *acts = NULL;
        json_t *a = json_object_get(s, "actions");
        acts = a ? json_dumps(a, JSON_COMPACT) : NULL;
        const char *ver = json_string_value(json_object_get(s, "version"));
        const char *why = json_string_value(json_object_get(s, "blockedReason"));
        char *line = NULL;
        int n = asprintf(
            &line, "%s\t%s\t%s\t%s\t%s%s\n", json_string_value(json_object_get(s, "name")),
            json_string_value(json_object_get(s, "source")), ver ? ver : "-", acts ? acts : "[]",
            json_is_true(json_object_get(s, "enabled")) ? "enabled" : "blocked: ",
            json_is_true(json_object_get(s, "enabled")) ? ""
            : why                                       ? why
                                                        : "");
        if (n > 0)
            frame(c, 'o', line, (size_t)n);
        free(line);
        free(acts);
    }
    json_decref(all);
    finish(c, 0, NULL);
}

static void help(struct sk_conn *c, const char *name)
{
    struct sk_resolved r;
    if (!sbx_skill_name_ok(name, strlen(name)) || !sk_find(c->sk, &c->bc->clone, name, &r)) {
        char msg[200];
        snprintf(msg, sizeof(msg), "unsupported skill: %.100s", name);
        return finish(c, 2, msg);
    }
    json_t *md = json_object_get(r.ver, "md");
    char *acts = json_dumps(json_object_get(r.ver, "actions"), JSON_COMPACT);
    char *text = NULL;
    const char *reason;
    bool on = sk_enabled(&r, &reason);
    int n = asprintf(
        &text,
        "%s (%s, %s%s%s)%s%s\n%s\nactions: %s\nusage: claw-skill %s <action> [args...]\n\n%s", name,
        json_string_value(json_object_get(r.skill, "source")),
        json_string_value(json_object_get(r.skill, "trustLevel")), r.version[0] ? ", version " : "",
        r.version, on ? "" : "\nblocked: ", on ? "" : reason,
        md ? json_string_value(json_object_get(md, "description")) : "", acts ? acts : "[]", name,
        md ? json_string_value(json_object_get(md, "body")) : "");
    if (n > 0)
        frame(c, 'o', text, (size_t)n);
    free(text);
    free(acts);
    finish(c, 0, NULL);
}

static void run(struct sk_conn *c)
{
    size_t n = json_array_size(c->args);
    const char *name = json_string_value(json_array_get(c->args, 0));
    const char *action = json_string_value(json_array_get(c->args, 1));
    const char **args = calloc(n + 1, sizeof(char *));
    if (!args)
        return finish(c, 1, "claw-skill: out of memory");
    for (size_t i = 2; i < n; i++)
        args[i - 2] = json_string_value(json_array_get(c->args, i));
    struct sbx_task_request req = {.clone = c->bc->clone, .net = -1, .net_default = -1};
    size_t in_len = evbuffer_get_length(c->in);
    req.stdin_data = in_len ? (const char *)evbuffer_pullup(c->in, -1) : NULL;
    req.stdin_len = in_len;
    req.on_output = on_task_output;
    req.output_ud = c;
    struct sbx_skill_task hold;
    sbx_err e = {0};
    int rc = sbx_skills_task(c->sk, name, action, args, &req, &hold, &e);
    free(args);
    if (rc < 0)
        /* blocked: 1; a skill or action that does not exist: 2 (usage) */
        return finish(c, strncmp(e.msg, "skill blocked", 13) == 0 ? 1 : 2, e.msg);
    if (!c->sk->rt) {
        sbx_skill_task_free(&hold);
        return finish(c, 1, "claw-skill: no runtime");
    }
    c->running = true;
    char id[SBX_ID_SIZE];
    rc = sbx_runtime_submit(c->sk->rt, &req, on_task_done, c, id, &e);
    sbx_skill_task_free(&hold);
    if (rc < 0) {
        c->running = false;
        char msg[700];
        snprintf(msg, sizeof(msg), "claw-skill: %s", e.msg);
        return finish(c, 1, msg);
    }
    if (c->running)
        memcpy(c->task, id, SBX_ID_SIZE);
}

static void dispatch(struct sk_conn *c);

static void on_loaded(void *ud, const sbx_err *err)
{
    struct sk_conn *c = ud;
    c->waiting = false;
    dispatch(c);
}

static void dispatch(struct sk_conn *c)
{
    size_t n = json_array_size(c->args);
    const char *a0 = json_string_value(json_array_get(c->args, 0));
    const char *a1 = json_string_value(json_array_get(c->args, 1));
    if (n == 0) {
        frame(c, 'e', usage, strlen(usage));
        return finish(c, 2, NULL);
    }
    if (n == 1 && is_help(a0)) {
        frame(c, 'o', usage, strlen(usage));
        return finish(c, 0, NULL);
    }
    int loaded = sbx_skills_when_loaded(c->sk, on_loaded, c);
    if (loaded == 0) {
        c->waiting = true;
        return;
    }
    if (n == 1 && strcmp(a0, "list") == 0)
        return list(c);
    if (n == 1) {
        char msg[200];
        snprintf(msg, sizeof(msg), "usage: claw-skill %.100s <command>", a0);
        return finish(c, 2, msg);
    }
    if (is_help(a1))
        return help(c, a0);
    run(c);
}

/* 'a' once, then 'i'... until 'I'. */
static void on_read(struct bufferevent *bev, void *ud)
{
    struct sk_conn *c = ud;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->dispatched) { /* read on only to see the caller leave */
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    for (;;) {
        unsigned char h[5];
        if (evbuffer_copyout(in, h, 5) < 5)
            return;
        uint32_t len;
        memcpy(&len, h + 1, 4);
        len = ntohl(len);
        if (len > FRAME_MAX)
            return finish(c, 2, "claw-skill: a frame over 1 MiB");
        if (evbuffer_get_length(in) < 5 + (size_t)len)
            return;
        evbuffer_drain(in, 5);
        if (h[0] == 'a' && !c->args) {
            json_error_t je;
            char *text = malloc(len + 1);
            if (!text)
                return finish(c, 1, "claw-skill: out of memory");
            evbuffer_remove(in, text, len);
            c->args = json_loadb(text, len, 0, &je);
            free(text);
            bool ok = json_is_array(c->args) && json_array_size(c->args) <= 4096;
            size_t i;
            json_t *v;
            json_array_foreach(c->args, i, v) ok =
                ok && json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
            if (!ok)
                return finish(c, 2, "claw-skill: arguments must be strings without NUL");
        } else if (h[0] == 'i' && c->args) {
            if (evbuffer_get_length(c->in) + len > STDIN_MAX)
                return finish(c, 1, "claw-skill: stdin over 16 MiB");
            if (c->sk->stdin_bytes + len > STDIN_ALL_MAX)
                return finish(c, 1, "claw-skill: the daemon holds too much stdin: try later");
            evbuffer_remove_buffer(in, c->in, len);
            c->sk->stdin_bytes += len;
        } else if (h[0] == 'I' && c->args) {
            c->dispatched = true;
            bufferevent_set_timeouts(bev, NULL, NULL);
            return dispatch(c);
        } else {
            return finish(c, 2, "claw-skill: unexpected frame");
        }
    }
}

static void on_event(struct bufferevent *bev, short what, void *ud)
{
    struct sk_conn *c = ud;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        return;
    if (c->running) {
        /* the caller went away: its skill stops with it */
        c->closed = true;
        sbx_err e = {0};
        if (sbx_runtime_cancel(c->sk->rt, c->task, &e) < 0)
            c->running = true; /* done will come */
        return;                /* done frees c */
    }
    conn_free(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *ud)
{
    struct sk_broker_clone *bc = ud;
    struct sk_conn *c = bc->conns < CONNS_PER_CLONE ? calloc(1, sizeof(*c)) : NULL;
    if (!c || !(c->in = evbuffer_new()) ||
        !(c->bev = bufferevent_socket_new(bc->sk->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        if (c && c->in)
            evbuffer_free(c->in);
        free(c);
        close(fd);
        return;
    }
    c->sk = bc->sk;
    c->bc = bc;
    bc->conns++;
    c->next = bc->sk->conns;
    bc->sk->conns = c;
    /* the request must come whole in time; then reading stops */
    struct timeval tv = {REQUEST_TIMEOUT_S, 0};
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ);
}

static struct sk_broker_clone *listen_for(struct sbx_skills *sk, const struct sbx_clone *cl)
{
    for (struct sk_broker_clone *b = sk->clones; b; b = b->next)
        if (strcmp(b->clone.tenant, cl->tenant) == 0 && strcmp(b->clone.key, cl->key) == 0 &&
            strcmp(b->clone.id, cl->id) == 0)
            return b;
    struct sk_broker_clone *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->sk = sk;
    b->clone = *cl;
    char ident[3 * (SBX_SEGMENT_MAX + 1)], hex[SBX_SHA256_HEX_SIZE], path[PATH_MAX];
    int n = snprintf(ident, sizeof(ident), "%s/%s/%s", cl->tenant, cl->key, cl->id);
    sbx_err e = {0};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = -1;
    if (sbx_sha256_hex(ident, (size_t)n, hex, &e) < 0)
        goto fail;
    hex[32] = '\0';
    snprintf(b->dir, sizeof(b->dir), "%s/skills/sock/%s", sk->state_dir, hex);
    if (snprintf(path, sizeof(path), "%s/skill.sock", b->dir) >= (int)sizeof(sa.sun_path)) {
        sbx_err_set(&e, ENAMETOOLONG, "%s", path);
        goto fail;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (mkdir(b->dir, 0755) < 0 && errno != EEXIST) {
        sbx_err_set(&e, errno, "mkdir %s", b->dir);
        goto fail;
    }
    chmod(b->dir, 0755);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0) {
        sbx_err_set(&e, errno, "socket %s", path);
        goto fail;
    }
    b->l = evconnlistener_new(sk->base, on_accept, b, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                              64, fd);
    if (!b->l) {
        sbx_err_set(&e, errno ? errno : ENOMEM, "listen %s", path);
        goto fail;
    }
    b->next = sk->clones;
    sk->clones = b;
    return b;
fail:
    if (fd >= 0)
        close(fd);
    sbx_log(SBX_LOG_ERROR, "claw-skill socket: %s", e.msg);
    free(b);
    return NULL;
}

size_t sbx_skills_clone_mounts(void *ud, const struct sbx_clone *c, struct sbx_mount *m, size_t max)
{
    struct sbx_skills *sk = ud;
    if (!sk->bin_path[0] || max < 3)
        return 0;
    struct sk_broker_clone *b = listen_for(sk, c);
    size_t n = 0;
    m[n++] = (struct sbx_mount){.host = sk->bin_path, .inside = "/opt/sandbox/bin/claw-skill"};
    m[n++] = (struct sbx_mount){.host = sk->bin_path, .inside = "/opt/sandbox/bin/sandbox-skill"};
    if (b)
        m[n++] = (struct sbx_mount){.host = b->dir, .inside = "/run/sandbox"};
    return n;
}

static int mkdir_one(const char *path, sbx_err *err)
{
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", path);
    return 0;
}

int sk_broker_init(struct sbx_skills *sk, sbx_err *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/skills", sk->state_dir);
    if (mkdir_one(dir, err) < 0)
        return -1;
    snprintf(dir, sizeof(dir), "%s/skills/sock", sk->state_dir);
    if (mkdir_one(dir, err) < 0)
        return -1;
    snprintf(dir, sizeof(dir), "%s/skills/bin", sk->state_dir);
    if (mkdir_one(dir, err) < 0)
        return -1;
    if (snprintf(sk->bin_path, sizeof(sk->bin_path), "%s/claw-skill", dir) >=
        (int)sizeof(sk->bin_path))
        return sk->bin_path[0] = '\0', sbx_err_set(err, ENAMETOOLONG, "%s", dir);
    snprintf(tmp, sizeof(tmp), "%s.new", sk->bin_path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0555);
    if (fd < 0)
        return sk->bin_path[0] = '\0', sbx_err_set(err, errno, "write %s", tmp);
    size_t len = (size_t)(sbx_claw_blob_end - sbx_claw_blob);
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, sbx_claw_blob + done, len - done);
        if (w <= 0) {
            close(fd);
            sk->bin_path[0] = '\0';
            return sbx_err_set(err, w < 0 ? errno : EIO, "write %s", tmp);
        }
        done += (size_t)w;
    }
    fchmod(fd, 0555);
    close(fd);
    if (rename(tmp, sk->bin_path) < 0) {
        sk->bin_path[0] = '\0';
        return sbx_err_set(err, errno, "rename %s", tmp);
    }
    return 0;
}

void sk_broker_free(struct sbx_skills *sk)
{
    while (sk->conns) {
        struct sk_conn *c = sk->conns;
        if (c->running) {
            /* the runtime (freed first) told it; if not, stop listening to it */
            c->running = false;
        }
        conn_free(c);
    }
    while (sk->clones) {
        struct sk_broker_clone *b = sk->clones;
        sk->clones = b->next;
        evconnlistener_free(b->l);
        free(b);
    }
}
