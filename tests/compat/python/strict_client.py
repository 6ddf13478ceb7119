"""A strict client of the original service's API, written for our tests:
every answer is turned into its type with Type(**json) (as the original's
Python SDK does), and every type here lists exactly the original's keys, so
a key we add, or one we leave out, makes the call fail. It never sends the
X-Sandbox-Extended switch: it sees what the original's clients see.
Standard library only (urllib, dataclasses)."""
import http.client
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


class APIError(Exception):
    def __init__(self, status, body):
        self.status = status
        self.body = body
        super().__init__("HTTP %d: %s" % (status, body))


class RouteAbsent(APIError):
    """404 from the router itself: the daemon has no such route (not a 404
    of the route, such as an unknown skill)."""


@dataclass
class HealthResponse:
    ok: bool


@dataclass
class ReadyzResponse:
    ok: bool
    status: str


@dataclass
class StatusPayload:
    runtimeId: str
    tenantCode: str
    cloneId: str
    cloneKey: str
    sessionId: str
    workspace: str
    status: str
    startedAt: Optional[str]
    lastEventAt: Optional[str]


@dataclass
class StartStopResponse:
    ok: bool
    status: StatusPayload

    def __post_init__(self):
        self.status = StatusPayload(**self.status)


@dataclass
class ExecResult:
    exitCode: int
    stdout: str
    stderr: str
    startedAt: Optional[str]
    endedAt: Optional[str]


@dataclass
class Task:
    id: str
    command: List[str]
    backend: str
    skill: str
    skillSource: str
    skillTrustLevel: str
    status: str
    createdAt: str
    startedAt: Optional[str]
    endedAt: Optional[str]
    error: str
    result: Optional[ExecResult]

    def __post_init__(self):
        if self.result is not None:
            self.result = ExecResult(**self.result)


@dataclass
class SkillInfo:
    # The original omits every key but these two when it is empty.
    name: str
    enabled: bool
    source: Optional[str] = None
    trustLevel: Optional[str] = None
    rootDir: Optional[str] = None
    activeDir: Optional[str] = None
    cliPath: Optional[str] = None
    actions: List[str] = field(default_factory=list)
    version: Optional[str] = None
    versions: List[str] = field(default_factory=list)
    scanVerdict: Optional[str] = None
    blockedReason: Optional[str] = None


@dataclass
class ReloadSkillsResponse:
    ok: bool
    skills: List[SkillInfo]

    def __post_init__(self):
        self.skills = [SkillInfo(**s) for s in (self.skills or [])]


@dataclass
class SkillActivateResponse:
    ok: bool
    skill: SkillInfo

    def __post_init__(self):
        self.skill = SkillInfo(**self.skill)


@dataclass
class Event:
    type: str
    time: str
    data: Optional[Dict[str, Any]]


class StrictClient:
    """The fourteen calls of the original's SDK (plus healthz)."""

    def __init__(self, base_url, token=None, timeout=30.0):
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _headers(self):
        return {"Authorization": "Bearer " + self.token} if self.token else {}

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        h = self._headers()
        if data is not None:
            h["Content-Type"] = "application/json"
        rq = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(rq, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                msg = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                msg = ""
            if e.code == 404 and msg.startswith("no route for"):
                raise RouteAbsent(e.code, text) from None
            raise APIError(e.code, text) from None

    def healthz(self):
        return HealthResponse(**self._call("GET", "/healthz"))

    def readyz(self):
        return ReadyzResponse(**self._call("GET", "/readyz"))

    def get_status(self):
        return StatusPayload(**self._call("GET", "/runtime/status"))

    def list_skills(self):
        return [SkillInfo(**s) for s in self._call("GET", "/runtime/skills")]

    def reload_skills(self):
        return ReloadSkillsResponse(**self._call("POST", "/runtime/skills/reload"))

    def get_skill(self, name):
        return SkillInfo(**self._call("GET", "/runtime/skills/" + name))

    def activate_skill(self, name, version):
        return SkillActivateResponse(**self._call(
            "POST", "/runtime/skills/%s/activate" % name, {"version": version}))

    def start_runtime(self):
        return StartStopResponse(**self._call("POST", "/runtime/start"))

    def stop_runtime(self):
        return StartStopResponse(**self._call("POST", "/runtime/stop"))

    @staticmethod
    def _exec_body(command, env, timeout_seconds):
        body = {"command": command}
        if env:
            body["env"] = env
        if timeout_seconds > 0:
            body["timeoutSeconds"] = timeout_seconds
        return body

    def exec(self, command, env=None, timeout_seconds=0):
        return ExecResult(**self._call("POST", "/runtime/exec",
                                       self._exec_body(command, env, timeout_seconds)))

    def list_tasks(self):
        data = self._call("GET", "/runtime/tasks")
        if not isinstance(data, list):
            raise TypeError("the task list is not an array: %r" % (data,))
        return [Task(**t) for t in data]

    def submit_task(self, command, env=None, timeout_seconds=0):
        return Task(**self._call("POST", "/runtime/tasks",
                                 self._exec_body(command, env, timeout_seconds)))

    def get_task(self, task_id):
        return Task(**self._call("GET", "/runtime/tasks/" + task_id))

    def cancel_task(self, task_id):
        return Task(**self._call("POST", "/runtime/tasks/%s/cancel" % task_id))

    def subscribe_events(self, timeout=30.0):
        """A Subscription whose events() yields Event; unlike the original's
        SDK, a body that is not exactly an Event raises instead of being
        dropped."""
        rq = urllib.request.Request(self.base + "/runtime/stream", headers=self._headers())
        return Subscription(urllib.request.urlopen(rq, timeout=timeout))


class Subscription:
    def __init__(self, resp):
        self.resp = resp
        # The socket, to end a read blocked in another thread (closing the
        # response would wait for that read's lock).
        self.sock = resp.fp.raw._sock

    def events(self):
        buf = b""
        while True:
            try:
                chunk = self.resp.read1(65536)  # what has come, not a full buffer
            except (OSError, ValueError, AttributeError, http.client.HTTPException):
                return  # closed (from another thread: http.client may trip over it)
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode().rstrip("\r")
                if line.startswith("data: "):
                    yield Event(**json.loads(line[6:]))

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.resp.close()
