"""MCP, OpenAPI and metrics of `sandboxd serve`, checked with real clients
from npm: the MCP SDK's Client over Streamable HTTP and over stdio
(`sandboxctl mcp`), `openclaw mcp probe`, an OpenAPI validator and a
Prometheus text-format parser.

The npm clients are third-party programs: the whole test (daemon, clients)
runs in a network namespace of its own with only loopback, made by
re-running this script under `unshare --net`, so nothing they might try
(update checks, telemetry) can leave the machine."""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import sbxtest  # noqa: E402
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "op-" + "0123456789abcdef0123456789abc"
ACME_TOKEN = "acme-" + "fedcba9876543210fedcba98765"

if os.environ.get("SBX_MCP_NETNS") != "1":
    # Outside: install (or find) the npm clients, then run again, isolated.
    node24, modules = sbxtest.npm_clients()
    env = dict(os.environ, SBX_MCP_NETNS="1", SBX_NODE24=node24, SBX_NODE_MODULES=modules,
               SBX_NODE_TOOLS=sbxtest.npm_checkers())
    os.execvpe("unshare", ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__)],
               env)

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
NODE = os.environ["SBX_NODE24"]
MODULES = os.environ["SBX_NODE_MODULES"]
TOOLS = os.path.realpath(os.environ["SBX_NODE_TOOLS"])
SANDBOXCTL = os.path.join(os.path.dirname(sbxtest.SANDBOXD), "sandboxctl")
REPO = os.path.join(HERE, "..", "..")
S = Suite("mcp")
TMP = tempfile.mkdtemp(prefix="sbx-mcp-")
os.chmod(TMP, 0o755)  # the skills are bound into their sandboxes from here
_daemons = []
# Skills: the repository's builtin root (ur-api) and a shared root made here
# (docs/skills.md): greeter runs, wrecker is blocked by the scan.
SKILLS = {k: os.path.join(TMP, "skills-" + k) for k in ("shared", "mapped", "common")}


def write_skill(name, description, script, body):
    d = os.path.join(SKILLS["shared"], name)
    os.makedirs(os.path.join(d, "scripts"))
    with open(os.path.join(d, "SKILL.md"), "w") as f:
        f.write("---\nname: %s\ndescription: %s\n---\n# %s\n" % (name, description, name))
    with open(os.path.join(d, "scripts", script), "w") as f:
        f.write(body)


for _d in SKILLS.values():
    os.makedirs(_d)
write_skill("greeter", "greets whoever is named", "greet.sh", 'printf "%s|" "$@"; echo\n')
write_skill("wrecker", "wipes everything", "clean.sh", "rm -rf /\n")
for _root, _dirs, _files in os.walk(TMP):
    os.chmod(_root, 0o755)


class Daemon(ServeDaemon):
    def __init__(self, name, config_text, extra=()):
        cfg = os.path.join(TMP, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(config_text)
        super().__init__(os.path.join(TMP, name), TOKEN, config=cfg, extra=extra,
                         registry=_daemons)

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=30):
        """Our answers on the original's routes; JSON only as its Content-Type says."""
        return super().req(method, path, body, token=token, headers=headers, timeout=timeout,
                           extended=True, by_type=True)


CONFIG = """\
skills:
  builtin_root: %s
  shared_root: %s
  mapped_root: %s
  common_root: %s
server:
  tokens:
    - name: acme-agent
      token: "%s"
      tenant: acme
""" % (os.path.abspath(os.path.join(REPO, "skills", "builtin")), SKILLS["shared"],
       SKILLS["mapped"], SKILLS["common"], ACME_TOKEN)


def node(script, *args, env=None, timeout=300):
    """Runs a Node 24 script; returns its stdout, failing with its output."""
    p = subprocess.run([NODE, script] + list(args), capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (
            os.path.basename(script), p.returncode, p.stdout[-6000:], p.stderr[-6000:]))
    return p.stdout


def node_eval(code, stdin_text, timeout=60):
    """Runs Node code (ESM) with stdin_text on its stdin; returns stdout."""
    p = subprocess.run([NODE, "--input-type=module", "-e", code], input=stdin_text,
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, TOOLS=TOOLS))
    if p.returncode != 0:
        raise AssertionError("node exited %d: %s %s" % (p.returncode, p.stdout, p.stderr))
    return p.stdout


PARSE_METRICS = """
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const parse = require(process.env.TOOLS + '/parse-prometheus-text-format');
let text = '';
for await (const chunk of process.stdin) text += chunk;
console.log(JSON.stringify(parse(text)));
"""

VALIDATE_OPENAPI = """
const m = await import(process.env.TOOLS + '/@readme/openapi-parser/dist/index.js');
let text = '';
for await (const chunk of process.stdin) text += chunk;
const r = await m.validate(JSON.parse(text));
console.log(JSON.stringify(r));
"""


def scrape(d):
    """The daemon's metrics, parsed by the npm parser (which refuses a line
    that is not the text format): {name: family}, and the text under "".
    The parser folds the series of a labelled histogram into one (its
    flattenMetrics), so their counts are read from the _count lines."""
    st, text, h = d.req("GET", "/metrics")
    check(st == 200 and h.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          "GET /metrics is the text format", (st, h))
    fams = {f["name"]: f for f in json.loads(node_eval(PARSE_METRICS, text))}
    fams[""] = text
    return fams


def _labels(text):
    out = {}
    for part in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text):
        out[part[0]] = part[1]
    return out


def value(fams, name, **labels):
    """The sum of the samples of name whose labels include labels (0 if
    none); a histogram's is its count of observations."""
    f = fams.get(name)
    if not f:
        return 0.0
    total = 0.0
    if f["type"] == "HISTOGRAM":
        for line in fams[""].splitlines():
            m = re.match(r"%s_count(?:\{(.*)\})? (\S+)$" % re.escape(name), line)
            if m and all(_labels(m.group(1) or "").get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total
    for m in f["metrics"]:
        ls = m.get("labels", {})
        if all(ls.get(k) == v for k, v in labels.items()):
            total += float(m["value"])
    return total


D = Daemon("main", CONFIG).start()


@S.case
def mcp_http_basics():
    """Version negotiation, sessions ids, 405 on GET, tokens, bad input."""
    def post(body, headers=None, token=TOKEN):
        h = {"Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        return D.req("POST", "/mcp", body, token=token, headers=h)

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    for asked, got in [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"),
                       ("2025-03-26", "2025-03-26"), ("1999-01-01", "2025-11-25")]:
        init["params"]["protocolVersion"] = asked
        st, b, h = post(init)
        check(st == 200 and b["result"]["protocolVersion"] == got,
              "initialize %s answers %s" % (asked, got), (st, b))
        check(h.get("Mcp-Session-Id"), "a session id is given", h)
    st, b, _ = post({"jsonrpc": "2.0", "id": 2, "method": "ping"},
                    headers={"MCP-Protocol-Version": "2025-06-18"})
    check(st == 200 and b == {"jsonrpc": "2.0", "id": 2, "result": {}}, "ping", (st, b))
    st, b, _ = post({"jsonrpc": "2.0", "id": 3, "method": "ping"},
                    headers={"MCP-Protocol-Version": "1999-01-01"})
    check(st == 400 and "1999-01-01" in b["error"]["message"], "unknown protocol version: 400",
          (st, b))
    st, b, _ = post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    check(st == 202, "a notification is taken with 202", (st, b))
    st, b, h = D.req("GET", "/mcp")
    check(st == 405 and "POST" in h.get("Allow", ""), "GET /mcp is 405 with Allow: POST", (st, h))
    st, b, _ = post(init, token=None)
    check(st == 401, "no token: 401", (st, b))
    st, b, _ = post("{not json")
    check(st == 400 and b["error"]["code"] == -32700 and b["id"] is None, "parse error", (st, b))
    st, b, _ = post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    check(st == 400 and b["error"]["code"] == -32600, "a batch is refused", (st, b))
    st, b, _ = post({"jsonrpc": "1.0", "id": 1, "method": "ping"})
    check(st == 400 and b["error"]["code"] == -32600, "not JSON-RPC 2.0", (st, b))
    st, b, _ = post({"jsonrpc": "2.0", "id": 4, "method": "resources/list"})
    check(st == 200 and b["error"]["code"] == -32601, "unknown method", (st, b))
    st, b, _ = post(init, headers={"Origin": "http://evil.example"})
    check(st == 403, "a foreign browser Origin is refused", (st, b))


def wait_task(marker, status, timeout=20):
    """The task whose command holds marker, once it has status."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        st, b, _ = D.req("GET", "/runtime/tasks?limit=50")
        last = [t for t in b["tasks"] if marker in " ".join(t["command"])]
        if last and last[0]["status"] == status:
            return last[0]
        time.sleep(0.1)
    raise AssertionError("no %s task with %s: %r" % (status, marker, last))


@S.case
def mcp_client_gone_cancels():
    """A client that hangs up mid-call (JSON and event-stream answers alike)
    leaves no task running for nobody."""
    for stream in (False, True):
        marker = "gone-%s" % ("sse" if stream else "json")
        params = {"name": "exec", "arguments": {"command": "sleep 60 # " + marker}}
        if stream:
            params["_meta"] = {"progressToken": "t"}
        c = http.client.HTTPConnection("127.0.0.1", D.port, timeout=30)
        c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                              "params": params}),
                  {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"})
        wait_task(marker, "running")
        c.sock.close()
        c.close()
        t0 = time.monotonic()
        t = wait_task(marker, "canceled")
        print("     %s: canceled %.1fs after the hang-up" % (marker, time.monotonic() - t0))
        check(t["result"]["exitCode"] == 124, "canceled with exit code 124", t)


BEFORE = scrape(D)
SUMMARY = {}


@S.case
def mcp_sdk_clients():
    """The SDK's Client over HTTP and stdio: every tool, errors, cancels."""
    out = node(os.path.join(HERE, "mcp_clients.mjs"), env={
        "SBX_NODE_MODULES": MODULES, "SBX_URL": D.url(), "SBX_TOKEN": TOKEN,
        "SBX_TENANT_TOKEN": ACME_TOKEN, "SBX_SANDBOXCTL": SANDBOXCTL})
    print(out, end="")
    line = [ln for ln in out.splitlines() if ln.startswith("SUMMARY ")]
    check(line, "the script summed up its calls", out)
    SUMMARY.update(json.loads(line[0][len("SUMMARY "):]))
    check(out.count("ok http: ") >= 9 and out.count("ok stdio: ") >= 9, "every case ran", out)


@S.case
def metrics_count_the_work():
    """The counters moved by exactly the work the clients did."""
    after = scrape(D)
    for key, n in SUMMARY["calls"].items():
        tool, result = key.split()
        got = value(after, "sandbox_mcp_tool_calls_total", tool=tool, result=result) - \
            value(BEFORE, "sandbox_mcp_tool_calls_total", tool=tool, result=result)
        check(got == n, "tool calls %s counted %d, made %d" % (key, got, n))
    # The tasks the calls made (the cancelled ones too), each ended and timed.
    tasks, cancels = SUMMARY["tasks"], SUMMARY["cancels"]
    check(tasks > 10 and cancels == 3, "the script made tasks and cancelled 3", SUMMARY)
    d_sub = value(after, "sandbox_tasks_submitted_total") - \
        value(BEFORE, "sandbox_tasks_submitted_total")
    check(d_sub == tasks, "tasks submitted %d, MCP made %d" % (d_sub, tasks))
    d_end = value(after, "sandbox_tasks_finished_total") - \
        value(BEFORE, "sandbox_tasks_finished_total")
    check(d_end == tasks, "tasks finished %d of %d" % (d_end, tasks))
    d_cancel = value(after, "sandbox_tasks_finished_total", status="canceled") - \
        value(BEFORE, "sandbox_tasks_finished_total", status="canceled")
    check(d_cancel == cancels, "3 tasks canceled, counted %d" % d_cancel)
    d_dur = value(after, "sandbox_exec_roundtrip_seconds") - \
        value(BEFORE, "sandbox_exec_roundtrip_seconds")
    check(d_dur == tasks, "a round-trip observed per task", d_dur)
    d_posts = value(after, "sandbox_http_requests_total", route="/mcp") - \
        value(BEFORE, "sandbox_http_requests_total", route="/mcp")
    check(d_posts > sum(SUMMARY["calls"].values()), "every MCP POST counted", d_posts)
    # Now exact counts from plain HTTP work.
    base = scrape(D)
    for cmd in (["true"], ["true"], ["sh", "-c", "exit 4"]):
        st, b, _ = D.req("POST", "/runtime/exec", {"command": cmd})
        check(st == 200, "exec", (st, b))
    st, _, _ = D.req("GET", "/no/such/route")
    check(st == 404, "404")
    now = scrape(D)

    def delta(name, **labels):
        return value(now, name, **labels) - value(base, name, **labels)
    check(delta("sandbox_tasks_submitted_total") == 3, "3 tasks submitted")
    check(delta("sandbox_tasks_finished_total", status="succeeded", outcome="exited") == 2,
          "2 succeeded")
    check(delta("sandbox_tasks_finished_total", status="failed", outcome="exited") == 1,
          "1 failed")
    check(delta("sandbox_task_duration_seconds") == 3, "3 durations observed")
    check(delta("sandbox_queue_wait_seconds") == 3, "3 queue waits observed")
    qw = now["sandbox_queue_wait_seconds"]["metrics"][0]
    check(float(qw["count"]) == value(now, "sandbox_queue_wait_seconds") and
          float(qw["buckets"]["+Inf"]) == float(qw["count"]), "the parser reads the same", qw)
    check(delta("sandbox_http_requests_total", method="POST", route="/runtime/exec",
                status="200") == 3, "3 POST /runtime/exec 200")
    check(delta("sandbox_http_requests_total", method="GET", route="-", status="404") == 1,
          "1 unrouted 404")
    # /metrics counts its own scrape once it is answered: the one before this one.
    check(delta("sandbox_http_requests_total", method="GET", route="/metrics",
                status="200") == 1, "the scrape in between counted")
    check(value(now, "sandbox_cgroup_mode") == 1 and len(now["sandbox_cgroup_mode"]["metrics"])
          == 1, "one cgroup mode", now.get("sandbox_cgroup_mode"))
    check(value(now, "sandbox_tasks_running") == 0 and value(now, "sandbox_queue_depth") == 0,
          "nothing running or queued now")
    check(value(now, "process_resident_memory_bytes") > 1 << 20, "RSS is reported")
    check(value(now, "process_open_fds") > 3, "fds are reported")
    st, b, _ = D.req("GET", "/metrics", token=ACME_TOKEN)
    check(st == 403, "a tenant token may not read the whole daemon's metrics", (st, b))
    st, b, _ = D.req("GET", "/metrics", token=None)
    check(st == 401, "metrics need a token", (st, b))


@S.case
def metrics_sessions_gauge():
    base = scrape(D)
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "gauge-s"})
    check(st == 200, "session started", (st, b))
    mid = scrape(D)
    check(value(mid, "sandbox_sessions_live") == value(base, "sandbox_sessions_live") + 1,
          "a live session counted")
    D.req("POST", "/runtime/stop", {"sessionID": "gauge-s"})
    check(value(scrape(D), "sandbox_sessions_live") == value(base, "sandbox_sessions_live"),
          "and gone")


@S.case
def metrics_tenant_label():
    """Tenants are a label only where the operator turns it on."""
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]},
                     token=ACME_TOKEN, headers={"X-Tenant-Code": "acme"})
    check(st == 200, "acme exec", (st, b))
    fams = scrape(D)
    check(all("tenant" not in m.get("labels", {})
              for m in fams["sandbox_tasks_finished_total"]["metrics"]),
          "no tenant label by default", fams["sandbox_tasks_finished_total"])
    d = Daemon("tenants", CONFIG + "  metrics_tenant_label: true\n").start()
    try:
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["true"]},
                         token=ACME_TOKEN, headers={"X-Tenant-Code": "acme"})
        check(st == 200, "acme exec", (st, b))
        fams = scrape(d)
        check(value(fams, "sandbox_tasks_finished_total", tenant="acme",
                    status="succeeded") == 1, "the tenant label when turned on",
              fams["sandbox_tasks_finished_total"])
        check(value(fams, "sandbox_tasks_submitted_total", tenant="acme") == 1,
              "submitted by tenant")
    finally:
        d.stop()


@S.case
def metrics_egress_and_dns():
    """Egress denials and DNS answers and refusals, counted by the egress
    itself (proxy policy; every target is loopback or a name the daemon
    answers from its own hosts table, in this test's network namespace)."""
    d = Daemon("egress", CONFIG + """\
network:
  default: deny
  allow: [svc.test]
  hosts:
    svc.test: 203.0.113.10
""", extra=["--net", "proxy"]).start()
    try:
        base = scrape(d)
        script = ("curl -s --noproxy '' -o /dev/null -w '%{http_code}\\n' "
                  "-x http://127.0.0.1:3128 "
                  "http://127.0.0.1:9/; getent ahostsv4 svc.test; getent ahostsv4 other.test; "
                  "true")
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["sh", "-c", script]})
        check(st == 200 and b["stdout"].startswith("403\n") and "203.0.113.10" in b["stdout"],
              "the proxy refused loopback, DNS answered svc.test", (st, b))
        now = scrape(d)

        def delta(name, **labels):
            return value(now, name, **labels) - value(base, name, **labels)
        check(delta("sandbox_egress_connections_total", verdict="deny", via="http") == 1,
              "one denied HTTP-proxy connection", now.get("sandbox_egress_connections_total"))
        check(delta("sandbox_egress_connections_total", verdict="allow") == 0,
              "none allowed")
        check(delta("sandbox_egress_bytes_total", verdict="deny") == 0, "no bytes relayed")
        check(delta("sandbox_dns_answers_total") >= 1, "svc.test answered",
              now.get("sandbox_dns_answers_total"))
        check(delta("sandbox_dns_refusals_total") >= 1, "other.test refused",
              now.get("sandbox_dns_refusals_total"))

        # set_network over MCP narrows a live session's egress at once.
        def tool(name, **args):
            st, b, _ = d.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                              "params": {"name": name, "arguments": args}})
            check(st == 200 and "result" in b, "tools/call %s" % name, (st, b))
            return b["result"]
        r = tool("start_session", session="net-s")
        check(not r.get("isError"), "session started", r)
        look = "getent ahostsv4 svc.test || echo refused"
        r = tool("exec", session="net-s", command=look)
        check("203.0.113.10" in r["structuredContent"]["stdout"], "svc.test resolves", r)
        r = tool("set_network", session="net-s", deny=["svc.test"])
        check(not r.get("isError") and "net-s" in r["content"][0]["text"], "set_network", r)
        r = tool("exec", session="net-s", command=look)
        check(r["structuredContent"]["stdout"] == "refused\n", "now svc.test is refused", r)
        r = tool("set_network", session="net-s", default="allow", taskId="x")
        check(r.get("isError") and "not both" in r["content"][0]["text"], "one target", r)
        r = tool("stop_session", session="net-s")
        check(not r.get("isError"), "session stopped", r)
    finally:
        d.stop()


@S.case
def openapi_document():
    """GET /openapi.json: token-free, the repository's file, valid OpenAPI 3.1."""
    st, body, h = D.req("GET", "/openapi.json", token=None)
    check(st == 200 and h.get("Content-Type") == "application/json", "served without a token",
          (st, h))
    with open(os.path.join(REPO, "docs", "openapi.json")) as f:
        check(json.loads(f.read()) == body, "the repository's docs/openapi.json")
    check(body["openapi"] == "3.1.0" and "/mcp" in body["paths"], "OpenAPI 3.1 with /mcp")
    r = json.loads(node_eval(VALIDATE_OPENAPI, json.dumps(body)))
    check(r.get("valid") is True and not r.get("warnings"), "valid for @readme/openapi-parser", r)
    # The validator does refuse a broken document.
    body["paths"]["/mcp"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] = \
        {"$ref": "#/components/schemas/Missing"}
    r = json.loads(node_eval(VALIDATE_OPENAPI, json.dumps(body)))
    check(r.get("valid") is False, "a broken reference is caught", r)


@S.case
def mcp_skills():
    """list_skills shows the builtin and shared skills, the blocked one with its
    reason; run_skill refuses it (a tool error, no task), as POST /runtime/exec
    does; a tenant's catalog is its clone's."""
    def tool(name, token=TOKEN, headers=None, **args):
        st, b, _ = D.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {"name": name, "arguments": args}},
                         token=token, headers=headers)
        check(st == 200 and "result" in b, "tools/call %s" % name, (st, b))
        return b["result"]
    r = tool("list_skills")
    by_name = {s["name"]: s for s in r["structuredContent"]["skills"]}
    check(not r["isError"] and {"ur-api", "greeter", "wrecker"} <= set(by_name),
          "list_skills: builtin and shared", r)
    st, http, _ = D.req("GET", "/runtime/skills?extended=1")
    check(st == 200 and http == r["structuredContent"]["skills"],
          "the same SkillInfo as GET /runtime/skills?extended=1", (st, http, r))
    text = r["content"][0]["text"]
    check(by_name["wrecker"]["enabled"] is False and
          "- wrecker (shared) actions: clean: wipes everything [cannot run: " in text,
          "the blocked skill is shown with its reason", text)
    check("- ur-api (builtin" in text and "check" in text, "ur-api is listed", text)
    r = tool("run_skill", skill="wrecker", action="clean")
    check(r["isError"] is True and "skill blocked" in r["content"][0]["text"] and
          "structuredContent" not in r, "a blocked skill is refused", r)
    st, b, _ = D.req("POST", "/runtime/exec", {"skill": "wrecker", "action": "clean"})
    check(st == 400 and b["error"]["message"] in r["content"][0]["text"],
          "with the message of POST /runtime/exec", (st, b, r))
    r = tool("run_skill", skill="greeter")
    check(r["isError"] is True and "skill and action are required" in r["content"][0]["text"],
          "action is required", r)
    r = tool("run_skill", skill="greeter", action="greet", args=["x"], tenant="acme")
    check(r["isError"] is True and "tenant" in r["content"][0]["text"], "unknown argument", r)
    r = tool("run_skill", token=ACME_TOKEN, headers={"X-Tenant-Code": "acme"}, skill="greeter",
             action="greet", args=["acme"])
    check(not r["isError"] and r["structuredContent"]["stdout"] == "acme|\n",
          "a tenant token runs a skill", r)
    st, t, _ = D.req("GET", "/runtime/tasks/" + r["structuredContent"]["taskId"])
    check(st == 200 and t["skill"] == "greeter" and t["skillSource"] == "shared" and
          t["tenantCode"] == "acme", "the task names its skill and tenant", (st, t))


@S.case
def openclaw_probe():
    """openclaw (Node 24) configured with /mcp, probed: it lists the tools."""
    home = os.path.join(TMP, "openclaw-home")
    os.makedirs(home, exist_ok=True)
    env = {"HOME": home, "NO_COLOR": "1"}
    entry = os.path.join(MODULES, "openclaw", "openclaw.mjs")
    server = {"url": D.url() + "/mcp", "transport": "streamable-http",
              "headers": {"Authorization": "Bearer " + TOKEN}}
    out = node(entry, "mcp", "set", "sandbox", json.dumps(server), env=env, timeout=180)
    check('Saved MCP server "sandbox"' in out, "openclaw saved the server", out)
    out = node(entry, "mcp", "probe", "sandbox", "--json", env=env, timeout=180)
    probe = json.loads(out[out.index("{"):])
    check(probe["servers"]["sandbox"]["tools"] == 10, "openclaw counts 10 tools", probe)
    check(sorted(probe["tools"]) == sorted("sandbox__" + t for t in (
        "exec", "list_files", "list_skills", "read_file", "run_code", "run_skill", "set_network",
        "start_session", "stop_session", "write_file")), "openclaw lists every tool", probe)
    check(probe.get("diagnostics") == [], "and has nothing to say against it", probe)


rc = D.stop()
if rc != 0:
    print("FAIL main daemon exit status %r: %s" % (rc, D.output()))
    S.failed += 1
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
