/* files get | put | ls | rm: a clone's workspace, streamed both ways. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cmd.h"
#include "cli/format.h"

#define FILES_PATH "/runtime/files"

struct file_sink {
    FILE *f;
    const char *name; /* for messages */
};

static int write_chunk(void *ud, const char *buf, size_t len, sbx_err *err)
{
    struct file_sink *s = ud;
    if (fwrite(buf, 1, len, s->f) != len)
        return sbx_err_set(err, errno, "%s: %s", s->name, strerror(errno));
    return 0;
}

/* A download into out: into a temporary file beside a regular (or new) out,
 * renamed on success, so a failed transfer leaves no half file behind;
 * straight into anything else (/dev/null, a pipe). */
struct dest {
    FILE *f;
    char *tmp; /* NULL when writing straight */
};

static int dest_open(const char *out, struct dest *d, sbx_err *err)
{
    *d = (struct dest){0};
    struct stat st;
    if (stat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (!(d->f = fopen(out, "wb")))
            return sbx_err_set(err, errno, "%s: %s", out, strerror(errno));
        return 0;
    }
    if (asprintf(&d->tmp, "%s.XXXXXX", out) < 0) {
        d->tmp = NULL;
        return sbx_err_set(err, ENOMEM, "%s", out);
    }
    int fd = mkostemp(d->tmp, O_CLOEXEC);
    if (fd < 0 || !(d->f = fdopen(fd, "wb"))) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(d->tmp);
        }
        free(d->tmp);
        d->tmp = NULL;
        return sbx_err_set(err, e, "%s: %s", out, strerror(e));
    }
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask); /* as a plain create would have made it */
    return 0;
}

/* Close d; on success move the temporary file into place. */
static int dest_close(struct dest *d, const char *out, bool ok, sbx_err *err)
{
    int rc = 0;
    if (fclose(d->f) != 0 && ok)
        rc = sbx_err_set(err, errno, "%s: %s", out, strerror(errno));
    if (d->tmp) {
        if (ok && rc == 0 && rename(d->tmp, out) < 0)
            rc = sbx_err_set(err, errno, "%s: %s", out, strerror(errno));
        if (!ok || rc < 0)
            unlink(d->tmp);
        free(d->tmp);
    }
    return rc;
}

static int get(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    bool to_stdout = !a->output || strcmp(a->output, "-") == 0;
    struct dest d = {.f = stdout};
    sbx_err e = {0};
    if (!to_stdout && dest_open(a->output, &d, &e) < 0)
        return sbx_cli_fail(&e);
    struct file_sink sink = {d.f, to_stdout ? "stdout" : a->output};
    const char *query[] = {"path", a->path, NULL};
    struct sbx_cli_request rq = {
        .method = "GET", .path = FILES_PATH, .query = query, .sink = write_chunk, .sink_ud = &sink};
    struct sbx_cli_response rs;
    int rc = 0;
    if (sbx_cli_send(c, &rq, &rs, &e) < 0)
        rc = e.errnum == EPIPE ? 1 : sbx_cli_fail(&e); /* a reader that left says no more */
    else if (rs.status < 200 || rs.status >= 300)
        rc = sbx_cli_fail_http(&rs);
    if (to_stdout) {
        if (fflush(stdout) != 0 && rc == 0)
            rc = errno == EPIPE ? 1 : sbx_cli_fail(&(sbx_err){errno, "", "stdout: write failed"});
    } else if (dest_close(&d, a->output, rc == 0, &e) < 0 && rc == 0) {
        rc = sbx_cli_fail(&e);
    }
    sbx_cli_response_clear(&rs);
    return rc;
}

static int put(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    bool from_stdin = strcmp(a->local, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(a->local, "rb");
    if (!f) {
        fprintf(stderr, "sandboxctl: %s: %s\n", a->local, strerror(errno));
        return 1;
    }
    int64_t size = -1; /* stdin, a pipe: chunked */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
        size = st.st_size;
    else if (!from_stdin && S_ISDIR(st.st_mode)) {
        fclose(f);
        fprintf(stderr, "sandboxctl: %s: is a directory\n", a->local);
        return 1;
    }
    const char *query[] = {"path", a->path, NULL};
    struct sbx_cli_request rq = {
        .method = "PUT", .path = FILES_PATH, .query = query, .upload = f, .upload_size = size};
    struct sbx_cli_response rs;
    sbx_err e = {0};
    int rc = 0;
    if (sbx_cli_send(c, &rq, &rs, &e) < 0) {
        if (ferror(f))
            fprintf(stderr, "sandboxctl: %s: read error\n", a->local);
        rc = sbx_cli_fail(&e);
    } else if (rs.status < 200 || rs.status >= 300) {
        rc = sbx_cli_fail_http(&rs);
    } else if (a->json) {
        rc = sbx_cli_print_raw(&rs);
    }
    if (!from_stdin)
        fclose(f);
    sbx_cli_response_clear(&rs);
    return rc;
}

static int ls(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    const char *query[] = {"path", a->path, NULL};
    struct sbx_cli_request rq = {
        .method = "GET", .path = FILES_PATH, .query = query, .require_type = "application/json"};
    struct sbx_cli_response rs;
    json_t *j;
    int rc = sbx_cli_call_json(c, &rq, &rs, &j);
    json_t *entries = json_object_get(j, "entries");
    if (rc == 0 && (rs.wrong_type || !json_is_array(entries))) {
        fprintf(stderr, "sandboxctl: files ls: %s is not a directory\n", a->path);
        rc = 1;
    } else if (rc == 0) {
        if (a->json)
            rc = sbx_cli_print_raw(&rs);
        else
            sbx_cli_print_entries(stdout, entries);
        if (json_is_true(json_object_get(j, "truncated")))
            fprintf(stderr, "sandboxctl: files ls: %s: the listing was cut short\n", a->path);
    }
    json_decref(j);
    sbx_cli_response_clear(&rs);
    return rc;
}

static int rm(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    const char *query[] = {"path", a->path, NULL};
    struct sbx_cli_request rq = {.method = "DELETE", .path = FILES_PATH, .query = query};
    struct sbx_cli_response rs;
    sbx_err e = {0};
    int rc = 0;
    if (sbx_cli_send(c, &rq, &rs, &e) < 0)
        rc = sbx_cli_fail(&e);
    else if (rs.status < 200 || rs.status >= 300)
        rc = sbx_cli_fail_http(&rs);
    sbx_cli_response_clear(&rs);
    return rc;
}

int sbx_cli_cmd_files(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    switch (a->cmd) {
    case SBX_CLI_FILES_GET:
        return get(c, a);
    case SBX_CLI_FILES_PUT:
        return put(c, a);
    case SBX_CLI_FILES_LS:
        return ls(c, a);
    default:
        return rm(c, a);
    }
}
