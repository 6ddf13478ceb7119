/* execd's code interpreter (/code/context, /code/contexts, /code) and its
 * bash sessions (/session, /session/{id}/run) for one OpenSandbox sandbox.
 *
 * A context is an interpreter that stays: a background command of the
 * sandbox's session running SERVER below, listening on a unix socket in the
 * session's own /tmp (which every command of the session shares). Python
 * contexts keep one namespace (variables persist; the last expression's
 * value is the result), JavaScript ones one vm context (Node), bash
 * contexts one shell (cwd, variables). Each
 * run is a short command of the session running CLIENT, which hands the
 * code over (its stdin) and writes the interpreter's events, one JSON line
 * each, to its stdout, which execd.c turns into the run's event stream. An
 * interrupt is SIGINT to the interpreter. Nothing here leaves the sandbox. */
#include "api/opensandbox/os_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXECD "/v1/sandboxes/{id}/proxy/" OS_EXECD_PORT

/* argv: socket path, language, working directory. */
static const char SERVER[] =
    "import ast, json, os, select, signal, socket, subprocess, sys, traceback\n"
    "path, lang, cwd = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "os.chdir(cwd)\n"
    "ns = {'__name__': '__main__'}\n"
    "count = 0\n"
    "sh = None\n"
    "def send(conn, **ev):\n"
    "    try:\n"
    "        conn.sendall((json.dumps(ev) + '\\n').encode())\n"
    "    except OSError:\n"
    "        pass\n"
    "class Out:\n"
    "    def __init__(self, conn, name):\n"
    "        self.conn, self.name, self.buf = conn, name, ''\n"
    "    def write(self, t):\n"
    "        self.buf += t\n"
    "        i = self.buf.rfind('\\n')\n"
    "        if i >= 0:\n"
    "            send(self.conn, type=self.name, text=self.buf[:i + 1])\n"
    "            self.buf = self.buf[i + 1:]\n"
    "        return len(t)\n"
    "    def flush(self):\n"
    "        if self.buf:\n"
    "            send(self.conn, type=self.name, text=self.buf)\n"
    "            self.buf = ''\n"
    "def fail(conn, e):\n"
    "    tb = e.__traceback__\n"
    "    while tb and tb.tb_frame.f_code.co_filename != '<cell>':\n"
    "        tb = tb.tb_next\n"
    "    send(conn, type='error', error={'ename': type(e).__name__, 'evalue': str(e),\n"
    "         'traceback': traceback.format_exception(type(e), e, tb)})\n"
    "def run_python(conn, code):\n"
    "    saved = sys.stdout, sys.stderr\n"
    "    sys.stdout, sys.stderr = Out(conn, 'stdout'), Out(conn, 'stderr')\n"
    "    try:\n"
    "        tree = ast.parse(code, '<cell>', 'exec')\n"
    "        last = None\n"
    "        if tree.body and isinstance(tree.body[-1], ast.Expr):\n"
    "            last = ast.Expression(tree.body.pop().value)\n"
    "        exec(compile(tree, '<cell>', 'exec'), ns)\n"
    "        if last is not None:\n"
    "            v = eval(compile(last, '<cell>', 'eval'), ns)\n"
    "            if v is not None:\n"
    "                send(conn, type='result', results={'text/plain': repr(v), 'text': repr(v)})\n"
    "        return True\n"
    "    except BaseException as e:\n"
    "        fail(conn, e)\n"
    "        return False\n"
    "    finally:\n"
    "        sys.stdout.flush(), sys.stderr.flush()\n"
    "        sys.stdout, sys.stderr = saved\n"
    "def shell():\n"
    "    global sh\n"
    "    if sh is None or sh.poll() is not None:\n"
    "        sh = subprocess.Popen(['/bin/bash', '--noprofile', '--norc'], stdin=subprocess.PIPE,\n"
    "                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,\n"
    "                              start_new_session=True)\n"
    "    return sh\n"
    "def run_bash(conn, code):\n"
    "    p = shell()\n"
    "    mark = '__opensandbox_%s__' % os.urandom(8).hex()\n"
    "    p.stdin.write(('%s\\nprintf \"\\\\n%s %%d\\\\n\" $?\\nprintf \"\\\\n%s\\\\n\" >&2\\n'\n"
    "                   % (code, mark, mark)).encode())\n"
    "    bufs = {p.stdout.fileno(): b'', p.stderr.fileno(): b''}\n"
    "    names = {p.stdout.fileno(): 'stdout', p.stderr.fileno(): 'stderr'}\n"
    "    done, rc = set(), None\n"
    "    m = ('\\n' + mark).encode()\n"
    "    try:\n"
    "        while len(done) < 2:\n"
    "            fds = [f for f in bufs if f not in done]\n"
    "            for f in select.select(fds, [], [])[0]:\n"
    "                chunk = os.read(f, 65536)\n"
    "                if not chunk:\n"
    "                    done.add(f)\n"
    "                    continue\n"
    "                b = bufs[f] + chunk\n"
    "                i = b.find(m)\n"
    "                if i >= 0:\n"
    "                    if b[:i]:\n"
    "                        send(conn, type=names[f], text=b[:i].decode(errors='replace'))\n"
    "                    if names[f] == 'stdout':\n"
    "                        rc = int(b[i + len(m):].split()[0])\n"
    "                    done.add(f)\n"
    "                    continue\n"
    "                keep = len(m)\n"
    "                if len(b) > keep:\n"
    "                    send(conn, type=names[f], text=b[:-keep].decode(errors='replace'))\n"
    "                    b = b[-keep:]\n"
    "                bufs[f] = b\n"
    "    except KeyboardInterrupt as e:\n"
    "        os.killpg(p.pid, signal.SIGKILL)\n"
    "        fail(conn, e)\n"
    "        return False\n"
    "    if rc is None:\n"
    "        send(conn, type='error', error={'ename': 'SessionEnded', 'evalue': 'the shell "
    "exited',\n"
    "             'traceback': []})\n"
    "        return False\n"
    "    if rc != 0:\n"
    "        send(conn, type='error', error={'ename': 'CommandExecError', 'evalue': str(rc),\n"
    "             'traceback': []})\n"
    "        return False\n"
    "    return True\n"
    "srv = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    os.unlink(path)\n"
    "except OSError:\n"
    "    pass\n"
    "srv.bind(path + '.new')\n"
    "os.rename(path + '.new', path)\n"
    "srv.listen(16)\n"
    "with open(path + '.pid', 'w') as f:\n"
    "    f.write(str(os.getpid()))\n"
    "while True:\n"
    "    try:\n"
    "        conn, _ = srv.accept()\n"
    "        with conn:\n"
    "            code = b''\n"
    "            while True:\n"
    "                d = conn.recv(65536)\n"
    "                if not d:\n"
    "                    break\n"
    "                code += d\n"
    "            count += 1\n"
    "            send(conn, type='execution_count', execution_count=count)\n"
    "            code = code.decode(errors='replace')\n"
    "            run_python(conn, code) if lang == 'python' else run_bash(conn, code)\n"
    "    except KeyboardInterrupt:\n"
    "        pass\n";

/* The same for JavaScript (Node): one vm context; the completion value of
 * the code is the result. argv: socket path, language, working directory. */
static const char SERVER_JS[] =
    "const net = require('net'), vm = require('vm'), fs = require('fs'), util = require('util');\n"
    "const [path, lang, cwd] = process.argv.slice(1);\n"
    "process.chdir(cwd);\n"
    "let count = 0, conn = null;\n"
    "const send = (ev) => { if (conn) conn.write(JSON.stringify(ev) + '\\n'); };\n"
    "const fmt = (a) => a.map((x) => typeof x === 'string' ? x : util.inspect(x)).join(' ') + "
    "'\\n';\n"
    "const out = (...a) => send({ type: 'stdout', text: fmt(a) });\n"
    "const err = (...a) => send({ type: 'stderr', text: fmt(a) });\n"
    "const ctx = vm.createContext({ require, process, Buffer, URL, TextEncoder, TextDecoder,\n"
    "  setTimeout, clearTimeout, setInterval, clearInterval,\n"
    "  console: { log: out, info: out, debug: out, error: err, warn: err } });\n"
    "process.on('SIGINT', () => {});\n"
    "try { fs.unlinkSync(path); } catch {}\n"
    "net.createServer((c) => {\n"
    "  let code = '';\n"
    "  c.setEncoding('utf8');\n"
    "  c.on('data', (d) => { code += d; });\n"
    "  c.on('end', () => {\n"
    "    conn = c;\n"
    "    send({ type: 'execution_count', execution_count: ++count });\n"
    "    try {\n"
    "      const v = vm.runInContext(code, ctx, { filename: '<cell>', breakOnSigint: true });\n"
    "      if (v !== undefined) {\n"
    "        const t = util.inspect(v);\n"
    "        send({ type: 'result', results: { 'text/plain': t, text: t } });\n"
    "      }\n"
    "    } catch (e) {\n"
    "      send({ type: 'error', error: { ename: (e && e.name) || 'Error',\n"
    "        evalue: String(e && e.message !== undefined ? e.message : e),\n"
    "        traceback: String((e && e.stack) || e).split('\\n') } });\n"
    "    }\n"
    "    conn = null;\n"
    "    c.end();\n"
    "  });\n"
    "}).listen(path + '.new', () => {\n"
    "  fs.renameSync(path + '.new', path);\n"
    "  fs.writeFileSync(path + '.pid', String(process.pid));\n"
    "});\n";

/* argv: socket path; the code on stdin. */
static const char CLIENT[] =
    "import json, os, socket, sys, time\n"
    "code = sys.stdin.buffer.read()\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "for i in range(200):\n"
    "    try:\n"
    "        s.connect(sys.argv[1])\n"
    "        break\n"
    "    except OSError:\n"
    "        time.sleep(0.025)\n"
    "else:\n"
    "    print(json.dumps({'type': 'error', 'error': {'ename': 'ContextError',\n"
    "          'evalue': 'the context is not running', 'traceback': []}}))\n"
    "    sys.exit(0)\n"
    "s.sendall(code)\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "while True:\n"
    "    d = s.recv(65536)\n"
    "    if not d:\n"
    "        break\n"
    "    os.write(1, d)\n";

static void socket_path(const struct os_ctx *x, char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/.opensandbox-%s.sock", x->id);
}

static struct os_ctx *ctx_find(struct os_box *b, const char *id)
{
    for (struct os_ctx *x = b->ctxs; x; x = x->next)
        if (strcmp(x->id, id) == 0)
            return x;
    return NULL;
}

static void ctx_free(struct os_box *b, struct os_ctx *x)
{
    for (struct os_ctx **p = &b->ctxs; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    struct os_cmd *c = os_cmd_find(b, x->server);
    if (c && c->running)
        sbx_runtime_cancel(b->os->api->rt, c->id, NULL);
    free(x);
}

void os_ctxs_free(struct os_box *b)
{
    while (b->ctxs)
        ctx_free(b, b->ctxs);
}

/* "python", "bash" (also "shell", "sh"), "javascript" (also "js", "node"),
 * or NULL. */
static const char *language(const char *l)
{
    if (!l || !*l || strcmp(l, "python") == 0 || strcmp(l, "python3") == 0)
        return "python";
    if (strcmp(l, "bash") == 0 || strcmp(l, "shell") == 0 || strcmp(l, "sh") == 0)
        return "bash";
    if (strcmp(l, "javascript") == 0 || strcmp(l, "js") == 0 || strcmp(l, "node") == 0 ||
        strcmp(l, "nodejs") == 0)
        return "javascript";
    return NULL;
}

static struct os_ctx *ctx_new(struct os_box *b, const char *lang, const char *cwd, sbx_err *err)
{
    struct os_ctx *x = calloc(1, sizeof(*x));
    if (!x) {
        sbx_err_set(err, ENOMEM, "context");
        return NULL;
    }
    char path[96];
    if (sbx_id_new(x->id, err) < 0) {
        free(x);
        return NULL;
    }
    snprintf(x->language, sizeof(x->language), "%s", lang);
    socket_path(x, path, sizeof(path));
    bool js = strcmp(lang, "javascript") == 0;
    const char *argv[] = {js ? "node" : "python3",
                          js ? "-e" : "-c",
                          js ? SERVER_JS : SERVER,
                          path,
                          lang,
                          cwd ? cwd : "/workspace",
                          NULL};
    struct os_run run = {
        .argv = argv, .timeout_s = api_set(b->os->api)->max.timeout_s, .background = true};
    struct os_cmd *c = os_cmd_start(b, &run, err);
    if (!c) {
        free(x);
        return NULL;
    }
    snprintf(x->server, sizeof(x->server), "%s", c->id);
    x->next = b->ctxs;
    b->ctxs = x;
    return x;
}

static json_t *ctx_json(const struct os_ctx *x)
{
    return json_pack("{s:s, s:s}", "id", x->id, "language", x->language);
}

/* One run of code in x: its event stream answers req. */
static void ctx_run(sbx_http_request *req, struct os_box *b, struct os_ctx *x, const char *code,
                    double timeout_s)
{
    char path[96];
    socket_path(x, path, sizeof(path));
    const char *argv[] = {"python3", "-c", CLIENT, path, NULL};
    sbx_err e = {0};
    struct os_run run = {.argv = argv, .stdin_data = code, .timeout_s = timeout_s, .code = true};
    struct os_cmd *c = os_cmd_start(b, &run, &e);
    if (!c) {
        sbx_http_respond_err(req, &e);
        return;
    }
    os_cmd_stream(req, c);
}

static void h_context_create(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    static const char *const fields[] = {"language", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *l = json_object_get(body, "language");
    const char *lang = language(json_string_value(l));
    sbx_err e = {0};
    if ((l && !json_is_string(l)) || !lang) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "language must be python, bash (shell) or javascript (js, node)");
        return;
    }
    json_decref(body);
    struct os_ctx *x = ctx_new(b, lang, NULL, &e);
    if (!x)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, ctx_json(x));
}

static void h_contexts(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    const char *l = sbx_http_req_query(req, "language");
    const char *lang = l ? language(l) : NULL;
    if (l && !lang) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "language must be python, bash or javascript");
        return;
    }
    bool del = strcmp(sbx_http_req_method(req), "DELETE") == 0;
    json_t *arr = json_array();
    for (struct os_ctx *x = b->ctxs, *next; x; x = next) {
        next = x->next;
        if (lang && strcmp(x->language, lang) != 0)
            continue;
        if (del)
            ctx_free(b, x);
        else
            json_array_append_new(arr, ctx_json(x));
    }
    if (del) {
        json_decref(arr);
        sbx_http_respond_data(req, 200, NULL, "", 0);
    } else {
        sbx_http_respond_json(req, 200, arr);
    }
}

static struct os_ctx *ctx_of(sbx_http_request *req, struct os_box *b, const char *param)
{
    const char *id = sbx_http_req_param(req, param);
    struct os_ctx *x = id ? ctx_find(b, id) : NULL;
    if (!x)
        sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no context %s", id ? id : "");
    return x;
}

static void h_context(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    struct os_ctx *x = b ? ctx_of(req, b, "ctx") : NULL;
    if (!x)
        return;
    if (strcmp(sbx_http_req_method(req), "DELETE") == 0) {
        ctx_free(b, x);
        sbx_http_respond_data(req, 200, NULL, "", 0);
    } else {
        sbx_http_respond_json(req, 200, ctx_json(x));
    }
}

static void h_code(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    static const char *const fields[] = {"code", "context", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *code = json_object_get(body, "code"), *ctx = json_object_get(body, "context");
    const char *id = json_string_value(json_object_get(ctx, "id"));
    const char *lang = language(json_string_value(json_object_get(ctx, "language")));
    struct os_ctx *x = NULL;
    sbx_err e = {0};
    if (!json_is_string(code) || strlen(json_string_value(code)) != json_string_length(code))
        sbx_err_set(&e, EINVAL, "code must be a string");
    else if (ctx && !json_is_object(ctx))
        sbx_err_set(&e, EINVAL, "context must be {id, language}");
    else if (!lang)
        sbx_err_set(&e, EINVAL, "context.language must be python, bash or javascript");
    else if (id && !(x = ctx_find(b, id)))
        sbx_err_set(&e, ENOENT, "no context %s", id);
    if (!e.errnum && !x) {
        /* No context named: the language's default one, made on first use. */
        for (struct os_ctx *y = b->ctxs; y && !x; y = y->next)
            if (strcmp(y->language, lang) == 0)
                x = y;
        if (!x)
            x = ctx_new(b, lang, NULL, &e);
    }
    if (e.errnum) {
        json_decref(body);
        sbx_http_respond_err(req, &e);
        return;
    }
    ctx_run(req, b, x, json_string_value(code), 0);
    json_decref(body);
}

/* An interrupt: SIGINT to the context's interpreter (pid in its file). */
static void interrupt(sbx_http_request *req, struct os_box *b, struct os_ctx *x)
{
    char path[96], cmd[160];
    socket_path(x, path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "kill -INT \"$(cat %s.pid)\"", path);
    sbx_err e = {0};
    struct os_run run = {.command = cmd, .timeout_s = 10, .background = true};
    if (!os_cmd_start(b, &run, &e))
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_data(req, 200, NULL, "", 0);
}

static void h_code_interrupt(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    const char *id = sbx_http_req_query(req, "id");
    struct os_ctx *x = id ? ctx_find(b, id) : NULL;
    if (!x) {
        sbx_http_respond_error(req, id ? SBX_HTTP_NOT_FOUND : SBX_HTTP_BAD_REQUEST, "%s%s",
                               id ? "no context " : "id is required", id ? id : "");
        return;
    }
    interrupt(req, b, x);
}

/* ---- bash sessions ---- */

static void h_session_create(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    static const char *const fields[] = {"cwd", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *cwd = json_object_get(body, "cwd");
    sbx_err e = {0};
    struct os_ctx *x = NULL;
    if (cwd && (!json_is_string(cwd) || !json_string_length(cwd)))
        sbx_err_set(&e, EINVAL, "cwd must be a path");
    else
        x = ctx_new(b, "bash", json_string_value(cwd), &e);
    json_decref(body);
    if (!x)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, json_pack("{s:s}", "session_id", x->id));
}

static void h_session_run(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    struct os_ctx *x = b ? ctx_of(req, b, "sid") : NULL;
    if (!x)
        return;
    static const char *const fields[] = {"command", "cwd", "timeout", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *cmd = json_object_get(body, "command"), *cwd = json_object_get(body, "cwd");
    json_t *to = json_object_get(body, "timeout");
    char *code = NULL;
    if (!json_is_string(cmd) || !json_string_length(cmd) ||
        strlen(json_string_value(cmd)) != json_string_length(cmd) ||
        (cwd && !json_is_string(cwd)) ||
        (to && (!json_is_integer(to) || json_integer_value(to) < 1 ||
                (double)json_integer_value(to) / 1000 > api_set(b->os->api)->max.timeout_s))) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "the body must be {command, cwd?, timeout? (ms, within the "
                               "maximum)}");
        return;
    }
    /* cwd: the session's working directory from this run on. */
    struct evbuffer *q = evbuffer_new();
    if (q && cwd) {
        evbuffer_add_printf(q, "cd -- '");
        for (const char *c = json_string_value(cwd); *c; c++)
            evbuffer_add_printf(q, *c == '\'' ? "'\\''" : "%c", *c);
        evbuffer_add_printf(q, "' && ");
    }
    if (q) {
        evbuffer_add_printf(q, "%s", json_string_value(cmd));
        evbuffer_add(q, "", 1);
        code = strdup((const char *)evbuffer_pullup(q, -1));
        evbuffer_free(q);
    }
    double timeout_s = to ? (double)json_integer_value(to) / 1000 : 0;
    json_decref(body);
    if (!code) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    ctx_run(req, b, x, code, timeout_s);
    free(code);
}

static void h_session_delete(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    struct os_ctx *x = b ? ctx_of(req, b, "sid") : NULL;
    if (!x)
        return;
    ctx_free(b, x);
    sbx_http_respond_data(req, 200, NULL, "", 0);
}

int os_interp_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
    } routes[] = {
        {"POST", EXECD "/code/context", h_context_create},
        {"GET", EXECD "/code/contexts", h_contexts},
        {"DELETE", EXECD "/code/contexts", h_contexts},
        {"GET", EXECD "/code/contexts/{ctx}", h_context},
        {"DELETE", EXECD "/code/contexts/{ctx}", h_context},
        {"POST", EXECD "/code", h_code},
        {"DELETE", EXECD "/code", h_code_interrupt},
        {"POST", EXECD "/session", h_session_create},
        {"POST", EXECD "/session/{sid}/run", h_session_run},
        {"DELETE", EXECD "/session/{sid}", h_session_delete},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, os, 0, err) < 0)
            return -1;
    return 0;
}
