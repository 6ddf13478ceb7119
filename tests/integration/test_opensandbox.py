"""The OpenSandbox API of `sandboxd serve` at the HTTP level (docs/opensandbox.md):
every route of the lifecycle (/v1/sandboxes...), of execd under
/v1/sandboxes/{id}/proxy/44772 and of the egress sidecar's /policy on 18080,
their errors, and their tenancy (a tenant's token never sees nor touches
another tenant's sandboxes). A real daemon on loopback, --net none."""
import base64
import hashlib
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import ServeDaemon, Suite, check  # noqa: E402
from sdkutil import scratch  # noqa: E402

S = Suite("opensandbox")
TOKEN = "op-" + "os0123456789abcdef0123456789a"      # 32 chars, operator
ACME = "acme-" + "osfedcba9876543210fedcba987"       # 32 chars, tenant acme
BETA = "beta-" + "os00112233445566778899aabbc"        # 32 chars, tenant beta
assert len(TOKEN) == len(ACME) == len(BETA) == 32
TMP, _daemons = scratch("sbx-opensandbox-")
CFG = os.path.join(TMP, "os.yaml")
with open(CFG, "w") as f:
    f.write("""\
server:
  tokens:
    - name: acme-agent
      token: "%s"
      tenant: acme
    - name: beta-agent
      token: "%s"
      tenant: beta
sandbox:
  workspace_quota: 64m
""" % (ACME, BETA))


class Daemon(ServeDaemon):
    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=20, raw=False):
        """(status, JSON or text or bytes, headers); the token goes in
        OPEN-SANDBOX-API-KEY, as OpenSandbox's SDKs send it."""
        h = dict(headers or {})
        if token is not None:
            h["OPEN-SANDBOX-API-KEY"] = token
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            if raw:
                return r.status, data, dict(r.getheaders())
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = data.decode(errors="replace")
            return r.status, parsed, dict(r.getheaders())
        finally:
            c.close()


D = Daemon(os.path.join(TMP, "state"), TOKEN, config=CFG, registry=_daemons).start()


def create(body=None, token=TOKEN, **kw):
    b = {"image": {"uri": "python"}, "timeout": 600}
    b.update(body or {})
    st, r, _ = D.req("POST", "/v1/sandboxes", b, token=token, **kw)
    check(st == 202 and r["status"]["state"] == "Running", "created (202, Running)", (st, r))
    return r["id"]


def execd(sid, rest):
    return "/v1/sandboxes/%s/proxy/44772%s" % (sid, rest)


def run(sid, body, token=TOKEN):
    """POST /command: the events of its stream, parsed."""
    st, text, h = D.req("POST", execd(sid, "/command"), body, token=token, raw=True)
    check(st == 200 and h.get("Content-Type", "").startswith("text/event-stream"),
          "an event stream", (st, text))
    evs = []
    for line in text.decode().splitlines():
        if line.startswith("data:"):
            evs.append(json.loads(line[5:]))
    return evs


def out(evs, kind="stdout"):
    return "".join(e["text"] for e in evs if e["type"] == kind)


def multipart(meta, data, boundary="b0undary"):
    return ("--%s\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
            "Content-Type: application/json\r\n\r\n%s\r\n--%s\r\nContent-Disposition: form-data; "
            "name=\"file\"; filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            % (boundary, json.dumps(meta), boundary)).encode() + data + \
        ("\r\n--%s--\r\n" % boundary).encode()


def upload(sid, path, data, mode=None, token=TOKEN):
    meta = {"path": path}
    if mode is not None:
        meta["mode"] = mode
    return D.req("POST", execd(sid, "/files/upload"), multipart(meta, data), token=token,
                 headers={"Content-Type": "multipart/form-data; boundary=b0undary"})


SID = create({"metadata": {"team": "red"}, "env": {"GREETING": "hi"},
              "resourceLimits": {"cpu": "500m", "memory": "256Mi"},
              "entrypoint": ["sh", "-c", "echo started > /workspace/entry; exec sleep 600"]})


@S.case
def auth_by_the_open_sandbox_header():
    check(D.req("GET", "/v1/sandboxes", token=None)[0] == 401, "no token: 401")
    check(D.req("GET", "/v1/sandboxes", token="x" * 32)[0] == 401, "a wrong token: 401")
    st, b, _ = D.req("GET", "/v1/sandboxes", token=None,
                     headers={"Authorization": "Bearer " + TOKEN})
    check(st == 200, "a Bearer token works too", (st, b))


@S.case
def create_refuses_bad_requests_with_a_clear_error():
    cases = [
        ({}, "image.uri is required"),
        ({"image": {"uri": "ubuntu:22.04"}}, "python, node, shell"),
        ({"image": {"uri": "python"}, "timeout": 0}, "timeout"),
        ({"image": {"uri": "python"}, "timeout": "60"}, "timeout"),
        ({"image": {"uri": "python"}, "resourceLimits": {"memory": "900Gi"}}, "above the maximum"),
        ({"image": {"uri": "python"}, "resourceLimits": {"cpu": "lots"}}, "cpu"),
        ({"image": {"uri": "python"}, "resourceLimits": {"gpu": "1"}}, "gpu"),
        ({"image": {"uri": "python"}, "metadata": {"a": 1}}, "metadata.a"),
        ({"image": {"uri": "python"}, "env": ["A=1"]}, "env"),
        ({"image": {"uri": "python"}, "entrypoint": "sleep 1"}, "entrypoint"),
        ({"image": {"uri": "python"}, "networkPolicy": {"egress": [{"action": "maybe"}]}},
         "networkPolicy"),
        ({"image": {"uri": "python"}, "volumes": []}, "volumes"),
        ({"image": {"uri": "python"}, "bogus": 1}, "bogus"),
    ]
    for body, word in cases:
        st, b, _ = D.req("POST", "/v1/sandboxes", body)
        check(st == 400 and word in b["error"]["message"], "400 naming %r" % word, (body, st, b))
    st, b, _ = D.req("POST", "/v1/sandboxes", "{not json")
    check(st == 400 and b["error"]["code"] == "bad_request", "bad JSON: 400", (st, b))


@S.case
def get_shows_the_sandbox():
    st, b, _ = D.req("GET", "/v1/sandboxes/" + SID)
    check(st == 200 and b["id"] == SID and b["metadata"] == {"team": "red"} and
          b["image"] == {"uri": "python"} and b["status"]["state"] == "Running" and
          b["resourceLimits"] == {"cpu": "500m", "memory": "256Mi"}, "the sandbox", b)
    check(b["createdAt"].endswith("Z") and b["expiresAt"] > b["createdAt"], "RFC 3339 dates", b)
    check(D.req("GET", "/v1/sandboxes/nope")[0] == 404, "an unknown id: 404")
    # the entrypoint runs in the background
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st, data, _ = D.req("GET", execd(SID, "/files/download?path=/workspace/entry"), raw=True)
        if st == 200:
            break
        time.sleep(0.1)
    check(st == 200 and data == b"started\n", "the entrypoint ran", (st, data))


@S.case
def list_filters_and_pages():
    ids = [create({"metadata": {"team": "blue", "n": str(i)}}) for i in range(3)]
    st, b, _ = D.req("GET", "/v1/sandboxes?metadata=" + urllib.parse.quote("team=blue"))
    check(st == 200 and sorted(x["id"] for x in b["items"]) == sorted(ids),
          "filtered by metadata", b)
    st, b, _ = D.req("GET", "/v1/sandboxes?metadata=" + urllib.parse.quote("team=blue&n=1"))
    check([x["id"] for x in b["items"]] == [ids[1]], "every pair must match", b)
    st, b, _ = D.req("GET", "/v1/sandboxes?metadata=team%3Dblue&pageSize=2&page=2")
    check(len(b["items"]) == 1 and b["pagination"]["totalItems"] == 3 and
          b["pagination"]["totalPages"] == 2 and not b["pagination"]["hasNextPage"],
          "the second page", b)
    st, b, _ = D.req("GET", "/v1/sandboxes?state=Running&metadata=team%3Dblue")
    check(len(b["items"]) == 3, "filtered by state", b)
    st, b, _ = D.req("GET", "/v1/sandboxes?state=Paused&metadata=team%3Dblue")
    check(b["items"] == [], "no Paused ones", b)
    for q in ("state=Sleeping", "pageSize=0", "page=x"):
        st, b, _ = D.req("GET", "/v1/sandboxes?" + q)
        check(st == 400, "400 for " + q, (st, b))
    for i in ids:
        check(D.req("DELETE", "/v1/sandboxes/" + i)[0] == 204, "deleted: 204")


@S.case
def patch_metadata_merges():
    st, b, _ = D.req("PATCH", "/v1/sandboxes/%s/metadata" % SID, {"owner": "x", "team": None})
    check(st == 200 and b["metadata"] == {"owner": "x"}, "merged, null removes", b)
    st, b, _ = D.req("PATCH", "/v1/sandboxes/%s/metadata" % SID, {"n": 1})
    check(st == 400, "a non-string value: 400", (st, b))
    D.req("PATCH", "/v1/sandboxes/%s/metadata" % SID, {"owner": None, "team": "red"})


@S.case
def endpoints_point_back_at_this_listener():
    for port in (44772, 18080, 8080):
        st, b, _ = D.req("GET", "/v1/sandboxes/%s/endpoints/%d" % (SID, port))
        check(st == 200 and b["endpoint"] == "127.0.0.1:%d/v1/sandboxes/%s/proxy/%d" %
              (D.port, SID, port) and b["headers"] == {}, "the endpoint, no scheme", b)
    for port in ("0", "70000", "x"):
        check(D.req("GET", "/v1/sandboxes/%s/endpoints/%s" % (SID, port))[0] == 400,
              "a bad port: 400")
    check(D.req("POST", "/v1/metrics/events", {"eventType": "sandbox.create"})[0] == 204,
          "metrics events are taken")


@S.case
def commands_stream_their_output_and_exit_code():
    check(D.req("GET", execd(SID, "/ping"))[0] == 200, "ping")
    evs = run(SID, {"command": "echo out; echo err >&2; echo $GREETING; exit 5"})
    types = [e["type"] for e in evs]
    check(types[0] == "init" and evs[0]["text"] and types[-1] == "error", "init ... error", evs)
    check(out(evs) == "out\nhi\n" and out(evs, "stderr") == "err\n", "stdout and stderr", evs)
    check(evs[-1]["error"]["evalue"] == "5", "the exit code is the error's evalue", evs[-1])
    evs = run(SID, {"command": "pwd; echo $X", "cwd": "/tmp", "envs": {"X": "y"}})
    check(out(evs) == "/tmp\ny\n" and evs[-1]["type"] == "execution_complete", "cwd and envs", evs)
    evs = run(SID, {"command": "sleep 10", "timeout": 300})
    check(evs[-1]["type"] == "error" and evs[-1]["error"]["evalue"] == "124",
          "timeout in ms stops it", evs)
    st, st_b, _ = D.req("GET", execd(SID, "/command/status/" + evs[0]["text"]))
    check(st == 200 and st_b["running"] is False and st_b["exit_code"] == 124,
          "the status of a foreground command", st_b)
    # a quiet command: the stream carries ping events (OpenSandbox's keepalive, every 3 s)
    evs = run(SID, {"command": "sleep 3.5; echo done"})
    pings = [e for e in evs if e["type"] == "ping"]
    check(pings and pings[0]["text"] == "pong" and isinstance(pings[0]["timestamp"], int)
          and out(evs) == "done\n" and evs[-1]["type"] == "execution_complete",
          "ping events while it is quiet, then its output", evs)
    for body, word in (({}, "command"), ({"command": ""}, "command"),
                       ({"command": "true", "timeout": "1"}, "timeout"),
                       ({"command": "true", "envs": {"A": 1}}, "envs.A"),
                       ({"command": "true", "uid": 0}, "uid"),
                       ({"command": "true", "background": "yes"}, "background")):
        st, b, _ = D.req("POST", execd(SID, "/command"), body)
        check(st == 400 and word in b["error"]["message"], "400 naming " + word, (body, st, b))


@S.case
def background_commands_status_logs_interrupt():
    evs = run(SID, {"command": "echo a; sleep 0.3; echo b", "background": True})
    check([e["type"] for e in evs] == ["init"], "a background command answers init", evs)
    cid = evs[0]["text"]
    st, b, _ = D.req("GET", execd(SID, "/command/status/" + cid))
    check(st == 200 and b["running"] is True and b["exit_code"] is None and
          b["content"] == "echo a; sleep 0.3; echo b", "running", b)
    deadline = time.monotonic() + 10
    while b["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
        b = D.req("GET", execd(SID, "/command/status/" + cid))[1]
    check(b["exit_code"] == 0 and b["finished_at"], "ended, 0", b)
    st, text, h = D.req("GET", execd(SID, "/command/%s/logs" % cid), raw=True)
    check(st == 200 and text == b"a\nb\n" and h["EXECD-COMMANDS-TAIL-CURSOR"] == "4", "logs", text)
    st, text, h = D.req("GET", execd(SID, "/command/%s/logs?cursor=2" % cid), raw=True)
    check(text == b"b\n", "logs from a cursor", text)
    check(D.req("GET", execd(SID, "/command/%s/logs?cursor=-1" % cid))[0] == 400, "bad cursor")
    check(D.req("GET", execd(SID, "/command/status/nope"))[0] == 404, "unknown command: 404")
    cid = run(SID, {"command": "sleep 60", "background": True})[0]["text"]
    check(D.req("DELETE", execd(SID, "/command?id=" + cid))[0] == 204, "interrupt: 204")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        b = D.req("GET", execd(SID, "/command/status/" + cid))[1]
        if not b["running"]:
            break
        time.sleep(0.05)
    check(not b["running"] and b["exit_code"] == 124, "interrupted", b)
    check(D.req("DELETE", execd(SID, "/command"))[0] == 400, "interrupt without id: 400")


@S.case
def files_routes():
    st, b, _ = upload(SID, "/workspace/f/a.txt", b"0123456789", mode=600)
    check(st == 200, "upload", (st, b))
    st, data, h = D.req("GET", execd(SID, "/files/download?path=/workspace/f/a.txt"), raw=True)
    check(st == 200 and data == b"0123456789", "download", data)
    st, data, h = D.req("GET", execd(SID, "/files/download?path=f/a.txt"), raw=True,
                        headers={"Range": "bytes=2-4"})
    check(st == 206 and data == b"234" and h["Content-Range"] == "bytes 2-4/10", "a Range", h)
    st, data, h = D.req("GET", execd(SID, "/files/download?path=f/a.txt"), raw=True,
                        headers={"Range": "bytes=-3"})
    check(st == 206 and data == b"789", "a suffix Range", data)
    st, data, h = D.req("GET", execd(SID, "/files/download?path=f/a.txt&offset=8&limit=5"),
                        raw=True)
    check(st == 200 and data == b"89", "offset and limit", data)
    st, b, h = D.req("GET", execd(SID, "/files/download?path=f/a.txt"),
                     headers={"Range": "bytes=20-30"})
    check(st == 416 and h["Content-Range"] == "bytes */10", "an unsatisfiable Range: 416", (st, b))
    st, b, _ = D.req("GET", execd(SID, "/files/info?path=/workspace/f/a.txt&path=/workspace/f"))
    check(st == 200 and b["/workspace/f/a.txt"]["mode"] == 600 and
          b["/workspace/f/a.txt"]["size"] == 10 and b["/workspace/f"]["type"] == "dir",
          "info of two paths", b)
    check(D.req("POST", execd(SID, "/directories"), {"/workspace/g/h": {"mode": 700}})[0] == 200,
          "mkdir -p")
    st, b, _ = D.req("GET", execd(SID, "/directories/list?path=/workspace/g&depth=1"))
    check(st == 200 and [(x["path"], x["mode"]) for x in b] == [("/workspace/g/h", 700)],
          "list a directory", b)
    st, b, _ = D.req("POST", execd(SID, "/files/mv"),
                     [{"src": "/workspace/f/a.txt", "dest": "/workspace/g/h/b.txt"}])
    check(st == 200, "mv", (st, b))
    st, b, _ = D.req("GET", execd(SID, "/files/search?path=/workspace&pattern=b.*"))
    check([x["path"] for x in b] == ["/workspace/g/h/b.txt"], "search", b)
    st, b, _ = D.req("POST", execd(SID, "/files/replace?verbose=true"),
                     {"/workspace/g/h/b.txt": {"old": "345", "new": "-"}})
    check(st == 200 and b["/workspace/g/h/b.txt"]["replacedCount"] == 1, "replace", b)
    evs = run(SID, {"command": "cat /workspace/g/h/b.txt; stat -c %a /workspace/g/h/b.txt"})
    check(out(evs) == "012-6789600\n", "the sandbox sees it, mode kept", evs)
    check(D.req("POST", execd(SID, "/files/permissions"),
                {"/workspace/g/h/b.txt": {"mode": 644}})[0] == 200, "chmod")
    check(D.req("POST", execd(SID, "/files/permissions"),
                {"/workspace/g/h/b.txt": {"mode": 999}})[0] == 400, "a bad mode: 400")
    check(D.req("DELETE", execd(SID, "/files?path=/workspace/g/h/b.txt"))[0] == 204, "delete")
    check(D.req("GET", execd(SID, "/files/info?path=/workspace/g/h/b.txt"))[0] == 404, "gone")
    check(D.req("DELETE", execd(SID, "/directories?path=/workspace/g"))[0] == 204, "rmdir")
    # errors: outside /workspace, "..", not multipart, metadata after the file
    for path in ("/etc/passwd", "/workspace/../etc/passwd", ""):
        st, b, _ = D.req("GET", execd(SID, "/files/download?path=" + urllib.parse.quote(path)))
        check(st == 400, "refused: %r" % path, (st, b))
    st, b, _ = D.req("POST", execd(SID, "/files/upload"), b"plain",
                     headers={"Content-Type": "text/plain"})
    check(st == 400, "an upload that is not multipart: 400", (st, b))
    body = ("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nx\r\n"
            "--B--\r\n").encode()
    st, b, _ = D.req("POST", execd(SID, "/files/upload"), body,
                     headers={"Content-Type": "multipart/form-data; boundary=B"})
    check(st == 400 and "metadata" in b["error"]["message"], "the file before metadata: 400",
          (st, b))


@S.case
def a_symlink_planted_inside_does_not_reach_the_host():
    run(SID, {"command": "ln -s /etc /workspace/etc-link; ln -s ../../.. /workspace/up"})
    for path in ("/workspace/etc-link/passwd", "/workspace/up/etc/passwd"):
        st, data, _ = D.req("GET", execd(SID, "/files/download?path=" + path), raw=True)
        check(st == 404 and b"root:" not in data, "not the host's file: " + path, (st, data))


@S.case
def a_large_upload_streams_through():
    blob = os.urandom(1 << 20) * 3
    st, b, _ = upload(SID, "big.bin", blob)
    check(st == 200, "a 3 MiB upload", (st, b))
    st, data, _ = D.req("GET", execd(SID, "/files/download?path=big.bin"), raw=True)
    check(data == blob, "the same bytes back")
    st, b, _ = upload(SID, "/workspace/empty", b"")
    st2, data, _ = D.req("GET", execd(SID, "/files/download?path=/workspace/empty"), raw=True)
    check(st == 200 and st2 == 200 and data == b"", "an empty file", (st, b, st2))


@S.case
def egress_policy_routes():
    pol = "/v1/sandboxes/%s/proxy/18080/policy" % SID
    st, b, _ = D.req("GET", pol)
    check(st == 200 and b["policy"] == {"defaultAction": "deny", "egress": []} and
          b["mode"] == "none", "the default policy", b)
    st, b, _ = D.req("PATCH", pol, [{"action": "allow", "target": "a.test"},
                                    {"action": "deny", "target": "b.test"}])
    check(st == 200 and len(b["policy"]["egress"]) == 2, "patched", b)
    st, b, _ = D.req("PATCH", pol, [{"action": "deny", "target": "a.test"}])
    check([r["action"] for r in b["policy"]["egress"]] == ["deny", "deny"], "replaced by target",
          b)
    st, b, _ = D.req("DELETE", pol, ["a.test"])
    check(b["policy"]["egress"] == [{"action": "deny", "target": "b.test"}], "deleted", b)
    st, b, _ = D.req("POST", pol, {"defaultAction": "allow", "egress": []})
    check(st == 200 and b["policy"]["defaultAction"] == "allow", "replaced whole", b)
    for method, body in (("POST", "[]"), ("PATCH", "{}"), ("PATCH", [{"action": "x"}])):
        st, b, _ = D.req(method, pol, body)
        check(st == 400, "400 for %s %r" % (method, body), (st, b))


@S.case
def pause_and_resume():
    sid = create()
    check(D.req("POST", "/v1/sandboxes/%s/resume" % sid)[0] == 409, "resume a running one: 409")
    run(sid, {"command": "while true; do date +%s%N > /workspace/t; sleep 0.05; done",
              "background": True})
    time.sleep(0.3)
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/pause" % sid)
    check(st == 202, "pause: 202", (st, b))
    check(D.req("GET", "/v1/sandboxes/" + sid)[1]["status"]["state"] == "Paused", "Paused")
    check(D.req("POST", "/v1/sandboxes/%s/pause" % sid)[0] == 409, "pause twice: 409")
    a = D.req("GET", execd(sid, "/files/download?path=t"), raw=True)[1]
    time.sleep(0.5)
    b2 = D.req("GET", execd(sid, "/files/download?path=t"), raw=True)[1]
    check(a == b2, "no progress while paused", (a, b2))
    st, b, _ = D.req("POST", execd(sid, "/command"), {"command": "true"})
    check(st == 409 and "Paused" in b["error"]["message"], "no command while paused", (st, b))
    check(D.req("GET", execd(sid, "/ping"))[0] == 409, "no ping while paused")
    check(D.req("POST", "/v1/sandboxes/%s/resume" % sid)[0] == 202, "resume: 202")
    time.sleep(0.3)
    c = D.req("GET", execd(sid, "/files/download?path=t"), raw=True)[1]
    check(c != b2, "progress again", (b2, c))
    check(D.req("DELETE", "/v1/sandboxes/" + sid)[0] == 204, "deleted")


@S.case
def renew_and_expiry():
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/renew-expiration" % SID,
                     {"expiresAt": "2000-01-01T00:00:00Z"})
    check(st == 400, "a past time: 400", (st, b))
    for bad in ({"expiresAt": "tomorrow"}, {}, {"expiresAt": 5}):
        check(D.req("POST", "/v1/sandboxes/%s/renew-expiration" % SID, bad)[0] == 400,
              "400 for %r" % bad)
    when = time.strftime("%Y-%m-%dT%H:%M:%S+02:00", time.gmtime(time.time() + 7200 + 3600))
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/renew-expiration" % SID, {"expiresAt": when})
    check(st == 200 and b["expiresAt"] == time.strftime(
        "%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600)) or st == 200, "renewed", b)
    got = D.req("GET", "/v1/sandboxes/" + SID)[1]["expiresAt"]
    check(got == b["expiresAt"], "GET shows it", (got, b))
    sid = create({"timeout": 1})
    deadline = time.monotonic() + 10
    state = None
    while time.monotonic() < deadline:
        state = D.req("GET", "/v1/sandboxes/" + sid)[1]["status"]["state"]
        if state == "Terminated":
            break
        time.sleep(0.1)
    check(state == "Terminated", "expired: Terminated", state)
    st, b, _ = D.req("POST", execd(sid, "/command"), {"command": "true"})
    check(st == 409, "no command in a Terminated sandbox", (st, b))
    check(D.req("GET", "/v1/sandboxes?state=Terminated")[1]["items"][0]["id"] == sid,
          "listed as Terminated")
    D.req("DELETE", "/v1/sandboxes/" + sid)


def code_stream(path, body):
    st, text, h = D.req("POST", path, body, raw=True, timeout=60)
    check(st == 200, "an event stream", (st, text))
    return [json.loads(ln[5:]) for ln in text.decode().splitlines() if ln.startswith("data:")]


def code(sid, body):
    return code_stream(execd(sid, "/code"), body)


@S.case
def code_interpreter_keeps_state_per_context():
    st, ctx, _ = D.req("POST", execd(SID, "/code/context"), {"language": "python"})
    check(st == 200 and ctx["language"] == "python" and ctx["id"], "a context", ctx)
    c = {"id": ctx["id"], "language": "python"}
    evs = code(SID, {"code": "x = 40\nprint('hi')\nx + 2", "context": c})
    check(out(evs) == "hi\n" and [e["results"]["text"] for e in evs if e["type"] == "result"] ==
          ["42"] and evs[-1]["type"] == "execution_complete", "output and the last value", evs)
    evs = code(SID, {"code": "x * 10", "context": c})
    check([e["results"]["text/plain"] for e in evs if e["type"] == "result"] == ["400"] and
          [e["execution_count"] for e in evs if e["type"] == "execution_count"] == [2],
          "variables persist; the count goes on", evs)
    evs = code(SID, {"code": "1/0", "context": c})
    check(evs[-1]["type"] == "error" and evs[-1]["error"]["ename"] == "ZeroDivisionError" and
          "<cell>" in "".join(evs[-1]["error"]["traceback"]), "an exception is an error", evs)
    # another context is another namespace
    st, ctx2, _ = D.req("POST", execd(SID, "/code/context"), {"language": "python"})
    evs = code(SID, {"code": "x", "context": {"id": ctx2["id"], "language": "python"}})
    check(evs[-1]["type"] == "error" and evs[-1]["error"]["ename"] == "NameError",
          "contexts are apart", evs)
    # interrupt: SIGINT to the interpreter, whose state stays
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "evs", code(SID, {"code": "import time\ntime.sleep(30)", "context": c})))
    t.start()
    time.sleep(1.0)
    st, b, _ = D.req("DELETE", execd(SID, "/code?id=" + ctx["id"]))
    check(st == 200, "interrupt: 200", (st, b))
    t.join(20)
    check(box["evs"][-1]["type"] == "error" and
          box["evs"][-1]["error"]["ename"] == "KeyboardInterrupt", "interrupted", box)
    evs = code(SID, {"code": "x", "context": c})
    check([e["results"]["text"] for e in evs if e["type"] == "result"] == ["40"],
          "its state survives an interrupt", evs)
    st, b, _ = D.req("GET", execd(SID, "/code/contexts?language=python"))
    check(sorted(x["id"] for x in b) == sorted([ctx["id"], ctx2["id"]]), "listed", b)
    check(D.req("GET", execd(SID, "/code/contexts/" + ctx["id"]))[1] == ctx, "get one")
    check(D.req("DELETE", execd(SID, "/code/contexts/" + ctx2["id"]))[0] == 200, "delete one")
    check(D.req("GET", execd(SID, "/code/contexts/" + ctx2["id"]))[0] == 404, "gone")
    st, b, _ = D.req("POST", execd(SID, "/code"), {"code": "1", "context": {"id": ctx2["id"]}})
    check(st == 404, "a deleted context: 404", (st, b))
    for body in ({"language": "cobol"}, {"language": 3}):
        check(D.req("POST", execd(SID, "/code/context"), body)[0] == 400, "400 for %r" % body)
    check(D.req("POST", execd(SID, "/code"), {"context": c})[0] == 400, "code is required")
    check(D.req("DELETE", execd(SID, "/code/contexts?language=python"))[0] == 200, "delete all")
    check(D.req("GET", execd(SID, "/code/contexts"))[1] == [], "none left")


@S.case
def javascript_contexts():
    st, ctx, _ = D.req("POST", execd(SID, "/code/context"), {"language": "js"})
    check(st == 200 and ctx["language"] == "javascript", "a JavaScript context", ctx)
    c = {"id": ctx["id"]}
    evs = code(SID, {"code": "var x = 40; console.log('hi', [1]); x + 2", "context": c})
    check(out(evs) == "hi [ 1 ]\n" and [e["results"]["text"] for e in evs
                                       if e["type"] == "result"] == ["42"], "output, value", evs)
    evs = code(SID, {"code": "x * 10", "context": c})
    check([e["results"]["text"] for e in evs if e["type"] == "result"] == ["400"], "kept", evs)
    evs = code(SID, {"code": "null.y", "context": c})
    check(evs[-1]["type"] == "error" and evs[-1]["error"]["ename"] == "TypeError", "error", evs)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "evs", code(SID, {"code": "while (true) {}", "context": c})))
    t.start()
    time.sleep(1.0)
    check(D.req("DELETE", execd(SID, "/code?id=" + ctx["id"]))[0] == 200, "interrupt")
    t.join(20)
    check(box["evs"][-1]["type"] == "error" and "SIGINT" in box["evs"][-1]["error"]["evalue"],
          "a busy loop is interrupted", box)
    evs = code(SID, {"code": "x", "context": c})
    check([e["results"]["text"] for e in evs if e["type"] == "result"] == ["40"],
          "state survives the interrupt", evs)
    D.req("DELETE", execd(SID, "/code/contexts/" + ctx["id"]))


@S.case
def bash_sessions_keep_their_shell():
    st, b, _ = D.req("POST", execd(SID, "/session"), {"cwd": "/tmp"})
    check(st == 200 and b["session_id"], "a session", b)
    sid = b["session_id"]
    run_in = lambda body: code_stream(execd(SID, "/session/%s/run" % sid), body)  # noqa: E731
    evs = run_in({"command": "pwd; export A=5; cd /workspace"})
    check(out(evs) == "/tmp\n" and evs[-1]["type"] == "execution_complete", "its cwd", evs)
    evs = run_in({"command": "pwd; echo $A; echo e >&2; false"})
    check(out(evs) == "/workspace\n5\n" and out(evs, "stderr") == "e\n" and
          evs[-1]["error"]["evalue"] == "1", "state kept, exit code as evalue", evs)
    evs = run_in({"command": "pwd", "cwd": "/tmp"})
    check(out(evs) == "/tmp\n", "cwd per run", evs)
    evs = run_in({"command": "sleep 10", "timeout": 300})
    check(evs[-1]["type"] == "error", "timeout", evs)
    check(D.req("POST", execd(SID, "/session/%s/run" % sid), {"command": ""})[0] == 400, "400")
    check(D.req("DELETE", execd(SID, "/session/" + sid))[0] == 200, "deleted")
    check(D.req("POST", execd(SID, "/session/%s/run" % sid), {"command": "true"})[0] == 404,
          "a deleted session: 404")



@S.case
def metrics_of_the_sandbox():
    st, m, _ = D.req("GET", execd(SID, "/metrics"))
    check(st == 200 and m["cpu_count"] == 0.5 and m["mem_total_mib"] == 256 and
          0 < m["mem_used_mib"] < 256 and m["timestamp"] > 0, "its limits and use", m)
    run(SID, {"command": "timeout 1 sh -c 'while :; do :; done'"})
    st, m, _ = D.req("GET", execd(SID, "/metrics"))
    check(m["cpu_used_pct"] > 0, "a busy second shows", m)
    c = http.client.HTTPConnection("127.0.0.1", D.port, timeout=20)
    c.request("GET", execd(SID, "/metrics/watch"), headers={"OPEN-SANDBOX-API-KEY": TOKEN})
    r = c.getresponse()
    lines = []
    t0 = time.monotonic()
    while len(lines) < 2:
        ln = r.fp.readline().decode()
        if ln.startswith("data:"):
            lines.append(json.loads(ln[5:]))
    c.close()
    check(r.status == 200 and lines[1]["timestamp"] > lines[0]["timestamp"] and
          time.monotonic() - t0 >= 0.5, "a stream of them, about one a second", lines)


@S.case
def other_ports_reach_the_sandboxs_own_loopback():
    sid = create({"entrypoint": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]})
    run(sid, {"command": "mkdir -p d; printf hello > 'd/a b.txt'"})
    proxy = "/v1/sandboxes/%s/proxy/" % sid
    deadline = time.monotonic() + 10
    while True:
        st, data, h = D.req("GET", proxy + "8000/d/a%20b.txt?x=1", raw=True)
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(st == 200 and data == b"hello" and h["Server"].startswith("SimpleHTTP"),
          "a server started inside answers through the endpoint", (st, data, h))
    st, data, h = D.req("GET", proxy + "8000/d/a%20b.txt", raw=True,
                        headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    check(st == 200 and data == b"hello", "an upgrade a server does not take: its plain answer",
          (st, data))
    st, data, h = D.req("DELETE", proxy + "8000/d", raw=True)
    check(st == 501, "its own status comes back", (st, data))
    check(D.req("GET", proxy + "8000/d/a%20b.txt", token=None)[0] == 401, "behind the token")
    check(D.req("GET", proxy + "8000/d/a%20b.txt", token=ACME)[0] == 404, "of its tenant only")
    # a server on the host's loopback is not the sandbox's
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    try:
        st, b, _ = D.req("GET", proxy + "%d/x" % host.getsockname()[1])
        check(st == 502 and b["error"]["code"] == "bad_gateway", "nothing there: 502", (st, b))
        host.setblocking(False)
        try:
            host.accept()
            reached = True
        except BlockingIOError:
            reached = False
        check(not reached, "the host's loopback is never reached")
    finally:
        host.close()
    check(D.req("GET", proxy + "44772/nothing")[0] == 404, "an unknown execd route: 404")
    check(D.req("GET", proxy + "0/x")[0] == 400, "port 0: 400")
    D.req("DELETE", "/v1/sandboxes/" + sid)


def ws_frame(op, data):
    """A client's frame: masked, as a client's must be."""
    mask = os.urandom(4)
    n = len(data)
    size = bytes([0x80 | n]) if n < 126 else (
        bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536
        else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
    body = (int.from_bytes(data, "big") ^
            int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
    return bytes([0x80 | op]) + size + mask + body


def ws_read(sock, buf):
    """(op, data, rest of buf) of the next server frame."""
    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = sock.recv(65536)
            check(d, "the frame comes whole before the connection ends", len(buf))
            buf += d
    need(2)
    op, n, at = buf[0] & 15, buf[1] & 127, 2
    if n == 126:
        need(4)
        n, at = int.from_bytes(buf[2:4], "big"), 4
    elif n == 127:
        need(10)
        n, at = int.from_bytes(buf[2:10], "big"), 10
    need(at + n)
    return op, buf[at:at + n], buf[at + n:]


def ws_open(sid, port, token=TOKEN, path="/chat?room=1"):
    """(status, headers, socket, bytes after the head) of an upgrade through
    the sandbox's endpoint."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock = socket.create_connection(("127.0.0.1", D.port), timeout=20)
    auth = "OPEN-SANDBOX-API-KEY: %s\r\n" % token if token else ""
    sock.sendall(("GET /v1/sandboxes/%s/proxy/%d%s HTTP/1.1\r\nHost: x\r\n"
                  "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
                  % (sid, port, path, key, auth)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
    hdrs = {k.strip().lower(): v.strip() for k, v in
            (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
    want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                                         .encode()).digest()).decode()
    hdrs["_accept_ok"] = hdrs.get("sec-websocket-accept") == want
    return status, hdrs, sock, rest


@S.case
def websocket_upgrades_through_the_port_proxy():
    sid = create()
    with open(os.path.join(HERE, "ws_echo_server.py"), "rb") as f:
        check(upload(sid, "/workspace/ws.py", f.read())[0] == 200, "the server uploaded")
    run(sid, {"command": "python3 /workspace/ws.py 8765", "background": True})
    deadline = time.monotonic() + 15
    while True:
        st, hdrs, sock, rest = ws_open(sid, 8765)
        if st == 101 or time.monotonic() > deadline:
            break
        sock.close()
        time.sleep(0.1)
    try:
        check(st == 101 and hdrs.get("upgrade", "").lower() == "websocket"
              and "upgrade" in hdrs.get("connection", "").lower() and hdrs["_accept_ok"]
              and hdrs.get("x-path") == "/chat?room=1",
              "101 with the sandbox's own handshake (its accept key, the path and query)",
              (st, hdrs))
        op, data, rest = ws_read(sock, rest)
        check(op == 1 and data == b"hello from inside", "a frame sent right after its 101",
              (op, data))
        sock.sendall(ws_frame(1, b"stressed"))
        op, data, rest = ws_read(sock, rest)
        check(op == 1 and data == b"desserts", "a text frame each way", (op, data))
        big = os.urandom(600000)  # beyond the relay's 1 MiB of wait only once both ways
        sock.sendall(ws_frame(2, big))
        op, data, rest = ws_read(sock, rest)
        check(op == 2 and data == big, "600 kB each way, byte for byte", (op, len(data)))
        sock.sendall(ws_frame(8, b"\x03\xe8bye"))
        op, data, rest = ws_read(sock, rest)
        check(op == 8 and data == b"\x03\xe8bye", "close frames cross", (op, data))
        sock.settimeout(10)
        check(sock.recv(100) == b"", "then the connection ends")
    finally:
        sock.close()
    # two at once, each its own connection inside
    a, b = ws_open(sid, 8765), ws_open(sid, 8765)
    try:
        check(a[0] == b[0] == 101, "two upgrades at once", (a[0], b[0]))
        ra, rb = ws_read(a[2], a[3])[2], ws_read(b[2], b[3])[2]
        a[2].sendall(ws_frame(1, b"ab"))
        b[2].sendall(ws_frame(1, b"xy"))
        check(ws_read(b[2], rb)[1] == b"yx" and ws_read(a[2], ra)[1] == b"ba",
              "each gets its own answers")
    finally:
        a[2].close()
        b[2].close()
    # a client that leaves at once: the next one is served as well
    st, _, sock, _ = ws_open(sid, 8765)
    sock.close()
    st, _, sock, rest = ws_open(sid, 8765)
    check(st == 101 and ws_read(sock, rest)[1] == b"hello from inside", "and the next")
    sock.close()
    # behind the token, of its tenant, and nothing listening: plain answers
    st, hdrs, sock, _ = ws_open(sid, 8765, token=None)
    sock.close()
    check(st == 401, "no token: 401, no upgrade", st)
    st, hdrs, sock, _ = ws_open(sid, 8765, token=ACME)
    sock.close()
    check(st == 404, "another tenant's sandbox: 404", st)
    st, hdrs, sock, _ = ws_open(sid, 8766)
    sock.close()
    check(st == 502, "nothing listening: 502", st)
    D.req("DELETE", "/v1/sandboxes/" + sid)


@S.case
def ended_commands_are_kept_up_to_a_bound():
    sid = create()
    first = run(sid, {"command": "true"})[0]["text"]
    check(D.req("GET", execd(sid, "/command/status/" + first))[0] == 200, "kept")
    last = None
    for _ in range(257):  # checked as each new one starts
        last = run(sid, {"command": "true"})[0]["text"]
    check(D.req("GET", execd(sid, "/command/status/" + first))[0] == 404,
          "the oldest is forgotten past 256 ended ones")
    check(D.req("GET", execd(sid, "/command/status/" + last))[0] == 200, "the newest kept")
    D.req("DELETE", "/v1/sandboxes/" + sid)


@S.case
def tenancy():
    a = create(token=ACME)
    bb = create(token=BETA)
    ids = [x["id"] for x in D.req("GET", "/v1/sandboxes", token=ACME)[1]["items"]]
    check(ids == [a], "a tenant lists only its own", ids)
    check(SID not in [x["id"] for x in D.req("GET", "/v1/sandboxes", token=BETA)[1]["items"]],
          "nor the operator's default tenant's")
    for method, path, body in (
            ("GET", "/v1/sandboxes/" + bb, None),
            ("PATCH", "/v1/sandboxes/%s/metadata" % bb, {"x": "y"}),
            ("POST", "/v1/sandboxes/%s/pause" % bb, None),
            ("POST", "/v1/sandboxes/%s/renew-expiration" % bb,
             {"expiresAt": "2099-01-01T00:00:00Z"}),
            ("GET", "/v1/sandboxes/%s/endpoints/44772" % bb, None),
            ("GET", execd(bb, "/ping"), None),
            ("POST", execd(bb, "/command"), {"command": "true"}),
            ("GET", execd(bb, "/files/download?path=x"), None),
            ("GET", "/v1/sandboxes/%s/proxy/18080/policy" % bb, None),
            ("DELETE", "/v1/sandboxes/" + bb, None)):
        st, b, _ = D.req(method, path, body, token=ACME)
        check(st == 404, "acme cannot reach beta's sandbox: %s %s" % (method, path), (st, b))
    check(D.req("GET", "/v1/sandboxes/" + bb, token=BETA)[0] == 200, "beta still has it")
    # a tenant token may not widen the egress
    st, b, _ = D.req("PATCH", "/v1/sandboxes/%s/proxy/18080/policy" % a,
                     [{"action": "allow", "target": "x.test"}], token=ACME)
    check(st == 403, "a tenant may not allow a host", (st, b))
    st, b, _ = D.req("POST", "/v1/sandboxes", {"image": {"uri": "python"}, "networkPolicy": {
        "defaultAction": "allow"}}, token=ACME)
    check(st == 403, "nor create with defaultAction allow", (st, b))
    # the sandboxes' files are apart
    upload(a, "/workspace/mine", b"acme")
    st, data, _ = D.req("GET", execd(bb, "/files/download?path=/workspace/mine"), raw=True,
                        token=BETA)
    check(st == 404, "another sandbox's workspace is another", (st, data))
    for sid, tok in ((a, ACME), (bb, BETA)):
        check(D.req("DELETE", "/v1/sandboxes/" + sid, token=tok)[0] == 204, "deleted")


@S.case
def delete_ends_the_session():
    sid = create()
    cid = run(sid, {"command": "sleep 60", "background": True})[0]["text"]
    check(D.req("DELETE", "/v1/sandboxes/" + sid)[0] == 204, "204")
    check(D.req("GET", "/v1/sandboxes/" + sid)[0] == 404, "gone")
    check(D.req("GET", execd(sid, "/command/status/" + cid))[0] == 404, "its commands too")
    deadline = time.monotonic() + 10
    while True:  # the kill is asynchronous: the task ends once its tree is reaped
        st, b, _ = D.req("GET", "/runtime/tasks/" + cid)
        if b.get("status") != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(st == 200 and b["status"] == "canceled", "its task was canceled", b)


def snapshot_ready(snap, token=TOKEN):
    deadline = time.monotonic() + 60
    while True:
        st, b, _ = D.req("GET", "/v1/snapshots/" + snap, token=token)
        if st != 200 or b["status"]["state"] != "Creating" or time.monotonic() > deadline:
            return st, b
        time.sleep(0.05)


def download(sid, path, token=TOKEN):
    st, data, _ = D.req("GET", execd(sid, "/files/download?path=" + path), raw=True, token=token)
    return data if st == 200 else st


@S.case
def snapshots_of_a_live_sandbox_and_sandboxes_made_from_them():
    sid = create({"entrypoint": ["sh", "-c", "while :; do echo x >> /workspace/tick; "
                                 "sleep 0.02; done"]}, token=ACME)
    check(upload(sid, "/workspace/a.txt", b"one", token=ACME)[0] == 200, "a file written")
    deadline = time.monotonic() + 10
    while not isinstance(download(sid, "/workspace/tick", ACME), bytes):
        check(time.monotonic() < deadline, "its entrypoint writes")
        time.sleep(0.05)
    st, b, h = D.req("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "first"}, token=ACME)
    check(st == 202 and b["status"]["state"] == "Creating" and b["sandboxId"] == sid
          and b["name"] == "first" and set(b) == {"id", "sandboxId", "name", "status",
                                                  "createdAt"},
          "accepted: 202, Creating, the spec's fields only", (st, b))
    check(h.get("Location") == "/v1/snapshots/" + b["id"], "Location names it", h)
    snap = b["id"]
    st, b = snapshot_ready(snap, ACME)
    check(st == 200 and b["status"]["state"] == "Ready", "then Ready", (st, b))
    st, b, _ = D.req("GET", "/v1/sandboxes/" + sid, token=ACME)
    check(b["status"]["state"] == "Running", "the sandbox runs on", b)
    ticks = len(download(sid, "/workspace/tick", ACME))
    time.sleep(0.3)
    check(len(download(sid, "/workspace/tick", ACME)) > ticks,
          "its processes were thawed: they make progress again")
    upload(sid, "/workspace/a.txt", b"two", token=ACME)
    # an unnamed one of the same sandbox, and the listing
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/snapshots" % sid, None, token=ACME)
    check(st == 202 and "name" not in b, "a snapshot without a body or name", (st, b))
    second = b["id"]
    check(snapshot_ready(second, ACME)[1]["status"]["state"] == "Ready", "Ready too")
    st, b, _ = D.req("GET", "/v1/snapshots?sandboxId=%s&state=Ready&state=Failed" % sid,
                     token=ACME)
    check(st == 200 and {x["id"] for x in b["items"]} == {snap, second}
          and b["pagination"]["totalItems"] == 2, "listed by sandbox and states", b)
    st, b, _ = D.req("GET", "/v1/snapshots?state=Creating", token=ACME)
    check(st == 200 and b["items"] == [], "filtered by state", b)
    st, b, _ = D.req("GET", "/v1/snapshots?pageSize=1&page=2&sandboxId=" + sid, token=ACME)
    check(len(b["items"]) == 1 and not b["pagination"]["hasNextPage"], "paged", b)
    # a sandbox made from the first: its workspace as it was then
    st, b, _ = D.req("POST", "/v1/sandboxes", {"snapshotId": snap, "timeout": 600}, token=ACME)
    check(st == 202 and b["status"]["state"] == "Running" and b.get("snapshotId") == snap
          and b["entrypoint"] == ["tail", "-f", "/dev/null"] and b["image"]["uri"] == "python",
          "created from the snapshot: Running, the source's image", (st, b))
    copy = b["id"]
    check(download(copy, "/workspace/a.txt", ACME) == b"one", "its workspace is the snapshot's")
    check(download(sid, "/workspace/a.txt", ACME) == b"two", "the source keeps its own")
    upload(copy, "/workspace/a.txt", b"three", token=ACME)
    check(download(sid, "/workspace/a.txt", ACME) == b"two", "and they are apart")
    # errors and tenancy
    for method, path, body in (("GET", "/v1/snapshots/" + snap, None),
                               ("DELETE", "/v1/snapshots/" + snap, None),
                               ("POST", "/v1/sandboxes", {"snapshotId": snap}),
                               ("POST", "/v1/sandboxes/%s/snapshots" % sid, {})):
        st, b, _ = D.req(method, path, body, token=BETA)
        check(st == 404, "another tenant: 404 (%s %s)" % (method, path), (st, b))
    check(D.req("GET", "/v1/snapshots", token=BETA)[1]["items"] == [], "nor listed")
    st, b, _ = D.req("POST", "/v1/sandboxes", {"snapshotId": snap, "image": {"uri": "python"}},
                     token=ACME)
    check(st == 400 and "not both" in b["error"]["message"], "image and snapshotId: 400", b)
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": ""}, token=ACME)
    check(st == 400, "an empty name: 400", (st, b))
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/snapshots" % sid, {"x": 1}, token=ACME)
    check(st == 400, "an unknown field: 400", (st, b))
    check(D.req("POST", "/v1/sandboxes/%s/pause" % sid, token=ACME)[0] == 202, "paused")
    st, b, _ = D.req("POST", "/v1/sandboxes/%s/snapshots" % sid, {}, token=ACME)
    check(st == 409, "a paused sandbox: 409 (it must be Running)", (st, b))
    check(D.req("POST", "/v1/sandboxes/%s/resume" % sid, token=ACME)[0] == 202, "resumed")
    # deletion: the snapshot goes, what was made from it stays
    check(D.req("DELETE", "/v1/snapshots/" + snap, token=ACME)[0] == 204, "deleted: 204")
    check(D.req("GET", "/v1/snapshots/" + snap, token=ACME)[0] == 404, "then 404")
    st, b, _ = D.req("POST", "/v1/sandboxes", {"snapshotId": snap}, token=ACME)
    check(st == 404, "a deleted snapshot makes no sandbox", (st, b))
    check(download(copy, "/workspace/a.txt", ACME) == b"three", "the copy keeps its files")
    # a snapshot outlives its sandbox
    check(D.req("DELETE", "/v1/sandboxes/" + sid, token=ACME)[0] == 204, "source deleted")
    st, b, _ = D.req("POST", "/v1/sandboxes", {"snapshotId": second}, token=ACME)
    check(st == 202 and download(b["id"], "/workspace/a.txt", ACME) == b"two",
          "a sandbox from a snapshot of a deleted sandbox", (st, b))
    for x in (copy, b["id"]):
        D.req("DELETE", "/v1/sandboxes/" + x, token=ACME)
    check(D.req("DELETE", "/v1/snapshots/" + second, token=ACME)[0] == 204, "deleted")


@S.case
def sandboxes_outlive_a_restart_of_the_daemon():
    """Their records are in the store (schema v6); their sessions end with
    the daemon, so they come back Terminated, saying why."""
    kept = create({"metadata": {"keep": "yes"}, "timeout": 3600}, token=ACME)
    gone = create(token=ACME)
    check(D.req("DELETE", "/v1/sandboxes/" + gone, token=ACME)[0] == 204, "one deleted")
    _, before, _ = D.req("GET", "/v1/sandboxes/" + kept, token=ACME)
    upload(kept, "/workspace/k.txt", b"kept", token=ACME)
    snap = D.req("POST", "/v1/sandboxes/%s/snapshots" % kept, {"name": "k"}, token=ACME)[1]["id"]
    check(snapshot_ready(snap, ACME)[1]["status"]["state"] == "Ready", "a snapshot of it")
    check(D.stop() == 0, "the daemon stops cleanly", D.output())
    D.start()
    st, b, _ = D.req("GET", "/v1/sandboxes/" + kept, token=ACME)
    check(st == 200 and b["status"]["state"] == "Terminated"
          and "daemon stopped" in b["status"].get("message", "")
          and b["metadata"] == {"keep": "yes"} and b["createdAt"] == before["createdAt"]
          and b["expiresAt"] == before["expiresAt"] and b["image"] == before["image"],
          "kept: the same sandbox, Terminated with its session, saying why", (st, b, before))
    check(D.req("GET", "/v1/sandboxes/" + gone, token=ACME)[0] == 404, "a deleted one stays gone")
    check(D.req("GET", "/v1/sandboxes/" + kept, token=BETA)[0] == 404, "still of its tenant only")
    st, b, _ = D.req("GET", "/v1/sandboxes?state=Terminated&metadata=keep%3Dyes", token=ACME)
    check(st == 200 and [x["id"] for x in b["items"]] == [kept], "listed and filtered", b)
    st, b, _ = D.req("GET", execd(kept, "/ping"), token=ACME)
    check(st == 409, "its session is gone: execd says so", (st, b))
    st, b = snapshot_ready(snap, ACME)
    check(st == 200 and b["status"]["state"] == "Ready" and b["name"] == "k",
          "its snapshot is kept too", (st, b))
    st, b, _ = D.req("POST", "/v1/sandboxes", {"snapshotId": snap}, token=ACME)
    check(st == 202 and download(b["id"], "/workspace/k.txt", ACME) == b"kept",
          "and makes a sandbox with its files", (st, b))
    D.req("DELETE", "/v1/sandboxes/" + b["id"], token=ACME)
    check(D.req("DELETE", "/v1/snapshots/" + snap, token=ACME)[0] == 204, "deleted")
    # a daemon killed outright: the record says Running, and it is not
    crashed = create(token=ACME)
    D.kill9()
    D.start()
    st, b, _ = D.req("GET", "/v1/sandboxes/" + crashed, token=ACME)
    check(st == 200 and b["status"]["state"] == "Terminated"
          and "restarted" in b["status"].get("message", ""),
          "after kill -9: Terminated, as its session is gone", (st, b))
    for sid in (kept, crashed):
        check(D.req("DELETE", "/v1/sandboxes/" + sid, token=ACME)[0] == 204, "deleted")
    D.stop()
    D.start()
    check(D.req("GET", "/v1/sandboxes/" + kept, token=ACME)[0] == 404,
          "a deletion outlives the restart too")


S.finish()
