"""The client: one Sandbox per daemon and clone, with tasks, files, sessions
and skills as attributes, and agent turns as methods. Standard library only (http.client)."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import stat
import time
import urllib.parse
from typing import (Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from . import _sse
from .errors import ConnectionFailed, SandboxError, TaskTimeout, error_from_answer
from .models import (Event, ExecResult, Listing, RuntimeStatus, SessionState, SkillInfo, Task,
                     TaskPage, ToolSpec, TurnResult, Upload)

__version__ = "0.1.0"

Command = Union[str, Sequence[str]]
CHUNK = 64 * 1024

# Every request asks for the daemon's extended answers (task ids in exec
# answers, reports, tenancy, session ids, cursors): without it the routes
# answer exactly the original service's keys.
EXTENDED_HEADER = ("X-Sandbox-Extended", "1")


def _command(cmd: Command) -> List[str]:
    """A shell string runs through /bin/sh -c; a sequence is the argv."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("command must be a shell string or a non-empty list of strings")
    return argv


def _task_body(command: Optional[Command] = None, language: Optional[str] = None,
               code: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               stdin: Optional[Union[str, bytes]] = None,
               timeout_seconds: Optional[float] = None, memory_mb: Optional[float] = None,
               pids: Optional[int] = None, cpu: Optional[float] = None,
               session: Optional[str] = None, network: Optional[Mapping[str, Any]] = None,
               skill: Optional[str] = None, action: Optional[str] = None,
               args: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if command is not None:
        body["command"] = _command(command)
    if language is not None or code is not None:
        body["language"] = language
        body["code"] = code
    if skill is not None:
        body["skill"] = skill
        body["action"] = action
        body["args"] = list(args or [])
    opt = {"env": dict(env) if env is not None else None,
           "stdin": stdin.decode() if isinstance(stdin, bytes) else stdin,
           "timeoutSeconds": timeout_seconds, "memoryMB": memory_mb, "pids": pids, "cpu": cpu,
           "sessionID": session, "network": dict(network) if network is not None else None}
    body.update({k: v for k, v in opt.items() if v is not None})
    return body


def _net_body(default: Optional[str], allow: Optional[Sequence[str]],
              deny: Optional[Sequence[str]]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if default is not None:
        body["default"] = default
    if allow is not None:
        body["allow"] = list(allow)
    if deny is not None:
        body["deny"] = list(deny)
    return body


class Sandbox:
    """A client of one daemon, acting for one clone.

    base_url  -- e.g. "http://127.0.0.1:8080" (default: $SANDBOX_URL)
    token     -- the API token (default: $SANDBOX_TOKEN)
    tenant, clone_key, clone_id -- the clone the calls act for (sent as
                 X-Tenant-Code / X-Clone-Key / X-Clone-Id; the daemon's
                 defaults when None)
    timeout   -- seconds to wait for an answer (exec waits longer: its
                 task's own timeout plus a margin)
    """

    def __init__(self, base_url: Optional[str] = None, token: Optional[str] = None, *,
                 tenant: Optional[str] = None, clone_key: Optional[str] = None,
                 clone_id: Optional[str] = None, timeout: float = 30.0,
                 headers: Optional[Mapping[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        base_url = base_url or os.environ.get("SANDBOX_URL") or "http://127.0.0.1:8080"
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("base_url must be an http:// or https:// URL, not %r" % base_url)
        self.base_url = base_url
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._ssl = ssl_context
        self.token = token if token is not None else os.environ.get("SANDBOX_TOKEN")
        self.tenant, self.clone_key, self.clone_id = tenant, clone_key, clone_id
        self.timeout = timeout
        self._extra = dict(headers or {})
        self.tasks = Tasks(self)
        self.files = Files(self)
        self.sessions = Sessions(self)
        self.skills = Skills(self)

    def __repr__(self) -> str:
        return "Sandbox(%r, tenant=%r, clone_key=%r, clone_id=%r)" % (
            self.base_url, self.tenant, self.clone_key, self.clone_id)

    def for_clone(self, tenant: Optional[str] = None, clone_key: Optional[str] = None,
                  clone_id: Optional[str] = None) -> "Sandbox":
        """The same daemon and token, acting for another clone."""
        return Sandbox(self.base_url, self.token, tenant=tenant, clone_key=clone_key,
                       clone_id=clone_id, timeout=self.timeout, headers=self._extra,
                       ssl_context=self._ssl)

    # ---- HTTP ----

    def _headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": "sandbox-sdk-python/" + __version__,
             EXTENDED_HEADER[0]: EXTENDED_HEADER[1]}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        for name, value in (("X-Tenant-Code", self.tenant), ("X-Clone-Key", self.clone_key),
                            ("X-Clone-Id", self.clone_id)):
            if value is not None:
                h[name] = value
        h.update(self._extra)
        h.update(extra or {})
        return h

    def _url(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return self._prefix + path + ("?" + urllib.parse.urlencode(q) if q else "")

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl, blocksize=CHUNK)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout,
                                          blocksize=CHUNK)

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
              body: Any = None, headers: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = -1.0
              ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request; returns its connection and the (unread) answer of
        a status below 400, else raises the answer's error."""
        conn = self._connection(self.timeout if timeout == -1.0 else timeout)
        try:
            try:
                conn.request(method, self._url(path, query), body=body,
                             headers=self._headers(headers))
            except (BrokenPipeError, ConnectionResetError):
                # The daemon answered before the whole body was sent (an
                # upload over the quota): its answer says why.
                if body is None:
                    raise
            resp = conn.getresponse()
            if resp.status >= 400:
                raise error_from_answer(resp.status, resp.read(), resp.reason)
            return conn, resp
        except SandboxError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionFailed("%s %s: %s" % (method, path, e or type(e).__name__)) from e

    def _call(self, method: str, path: str, body: Any = None,
              query: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = -1.0) -> Any:
        """A JSON request and its JSON answer."""
        if body is None:
            return self._send(method, path, query, None, {}, timeout)
        return self._send(method, path, query, json.dumps(body).encode(),
                          {"Content-Type": "application/json"}, timeout)

    def _send(self, method: str, path: str, query: Optional[Mapping[str, Any]], data: Any,
              headers: Mapping[str, str], timeout: Optional[float] = -1.0) -> Any:
        """A request with a body as it is; its JSON answer."""
        conn, resp = self._open(method, path, query, data, headers, timeout)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("%s %s: %s" % (method, path, e)) from e
        finally:
            conn.close()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise SandboxError("%s %s: the answer is not JSON" % (method, path),
                               status=resp.status, body=raw[:500]) from e

    # ---- the daemon ----

    def health(self) -> Dict[str, Any]:
        return self._call("GET", "/healthz")

    def ready(self) -> Dict[str, Any]:
        return self._call("GET", "/readyz")

    def status(self, session: Optional[str] = None) -> RuntimeStatus:
        return RuntimeStatus.from_dict(
            self._call("GET", "/runtime/status", query={"sessionID": session}))

    # ---- run and wait ----

    def exec(self, command: Command, *, env: Optional[Mapping[str, str]] = None,
             stdin: Optional[Union[str, bytes]] = None, timeout_seconds: Optional[float] = None,
             memory_mb: Optional[float] = None, pids: Optional[int] = None,
             cpu: Optional[float] = None, session: Optional[str] = None,
             network: Optional[Mapping[str, Any]] = None,
             request_timeout: Optional[float] = None) -> ExecResult:
        """Runs a command (argv list, or a shell string for /bin/sh -c) and
        waits for its end. A non-zero exit is a result, not an exception."""
        body = _task_body(command=command, env=env, stdin=stdin, timeout_seconds=timeout_seconds,
                          memory_mb=memory_mb, pids=pids, cpu=cpu, session=session,
                          network=network)
        return self._exec(body, timeout_seconds, request_timeout)

    def run_code(self, code: str, language: str = "python", *,
                 env: Optional[Mapping[str, str]] = None,
                 stdin: Optional[Union[str, bytes]] = None,
                 timeout_seconds: Optional[float] = None, memory_mb: Optional[float] = None,
                 pids: Optional[int] = None, cpu: Optional[float] = None,
                 session: Optional[str] = None, network: Optional[Mapping[str, Any]] = None,
                 request_timeout: Optional[float] = None) -> ExecResult:
        """Runs code in a language the daemon knows ("python", "node",
        "shell") and waits for its end."""
        body = _task_body(language=language, code=code, env=env, stdin=stdin,
                          timeout_seconds=timeout_seconds, memory_mb=memory_mb, pids=pids,
                          cpu=cpu, session=session, network=network)
        return self._exec(body, timeout_seconds, request_timeout)

    def _exec(self, body: Dict[str, Any], timeout_seconds: Optional[float],
              request_timeout: Optional[float]) -> ExecResult:
        # The answer comes when the task ends: wait for its timeout (the
        # daemon's default, 300 s, when none is given) plus a margin for the
        # queue.
        wait = request_timeout or max(self.timeout, (timeout_seconds or 300.0) + 60.0)
        return ExecResult.from_dict(self._call("POST", "/runtime/exec", body, timeout=wait))

    # ---- the event stream ----

    def stream(self, session: Optional[str] = None, *, last_event_id: Optional[int] = None,
               reconnect: bool = True, max_retries: Optional[int] = None,
               retry_delay: float = 0.5, idle_timeout: float = 45.0) -> Iterator[Event]:
        """The session's events as a generator, in order, each once.

        A dropped connection (or one silent for idle_timeout seconds: the
        daemon sends a heartbeat every 15) is reopened with Last-Event-ID, so
        the daemon replays what followed the last event received; none is
        lost or repeated. last_event_id=N begins after event N; None sends no
        Last-Event-ID at first, and the daemon then sends live events only
        (0: every stored event first). max_retries bounds
        the consecutive failed reopenings (None: no bound). Errors the daemon
        answers (401, 404...) are raised at once. Closing the generator (or
        leaving a for loop) closes the connection."""
        last: Optional[str] = None if last_event_id is None else str(last_event_id)
        failures = 0
        delay = retry_delay
        while True:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
            if last is not None:
                headers["Last-Event-ID"] = last
            conn = None
            try:
                conn, resp = self._open("GET", "/runtime/stream", {"sessionID": session},
                                        headers=headers, timeout=idle_timeout)
                parser = _sse.Parser(last)
                while True:
                    chunk = resp.read1(CHUNK)
                    if not chunk:
                        break  # the daemon closed the stream: reopen
                    for frame in parser.feed(chunk):
                        event = _event(frame)
                        if (event.id is not None and last is not None and last.isdigit() and
                                event.id <= int(last)):
                            continue  # already delivered (a replay overlapping)
                        if frame.id is not None:
                            last = frame.id
                        failures = 0
                        yield event
                    if parser.retry_ms is not None:
                        delay = parser.retry_ms / 1000.0
            except ConnectionFailed:
                if not reconnect:
                    raise
            except (OSError, http.client.HTTPException) as e:
                if not reconnect:
                    raise ConnectionFailed("event stream: %s" % (e or type(e).__name__)) from e
            finally:
                if conn is not None:
                    conn.close()
            if not reconnect:
                return
            failures += 1
            if max_retries is not None and failures > max_retries:
                raise ConnectionFailed("event stream: %d reconnections failed" % max_retries)
            time.sleep(min(delay * failures, 10.0))

    # ---- agent turns ----

    def tools(self) -> List[ToolSpec]:
        """The built-in tools a turn may call, with their JSON schemas."""
        data = self._call("GET", "/runtime/tools") or {}
        return [ToolSpec.from_dict(t) for t in data.get("tools", [])]

    def turn(self, session: str, input: Mapping[str, Any]) -> str:
        """Starts a turn on a live session; returns its id at once (the turn
        runs on: follow it with follow_turn / wait_turn). input is the API's:
        {"type": "tool_calls", ...}, {"type": "user_message", "text"} or
        {"type": "tool_result", "callId", "output"}. A session with a turn
        going on raises Conflict, an unknown session NotFound."""
        data = self._call("POST", "/runtime/turn", {"sessionID": session, "input": dict(input)})
        return (data or {}).get("turnId", "")

    def tool_calls(self, session: str, calls: Sequence[Mapping[str, Any]],
                   parallel: bool = False) -> str:
        """A turn of tool calls run in the session's sandbox, no model
        needed: calls are {"id", "name", "arguments"} (see tool_call());
        in order, or all at once with parallel=True. Returns the turn id."""
        inp: Dict[str, Any] = {"type": "tool_calls", "calls": [dict(c) for c in calls]}
        if parallel:
            inp["parallel"] = True
        return self.turn(session, inp)

    def user_message(self, session: str, text: str) -> str:
        """A turn answered by the daemon's model (Conflict when none is
        configured). Returns the turn id."""
        return self.turn(session, {"type": "user_message", "text": text})

    def tool_result(self, session: str, call_id: str, output: Any) -> str:
        """The answer to an external tool the running turn waits for (a
        string, or any JSON, sent as its text)."""
        return self.turn(session, {"type": "tool_result", "callId": call_id, "output": output})

    def cancel_turn(self, turn_id: str) -> Dict[str, Any]:
        """Stops a turn: its tool processes are killed, `done` with
        stopReason "canceled" follows on the stream. An ended or unknown
        turn raises NotFound."""
        return self._call("POST", "/runtime/turn/%s/cancel" % _seg(turn_id))

    def follow_turn(self, session: str, turn_id: str, **stream_kw: Any) -> Iterator[Event]:
        """The turn's events, from its turn_started to its done (included),
        read from the session's resumable stream (stream()'s keyword
        arguments; last_event_id defaults to 0: the stored events are
        replayed from the start, so a turn started before the call is
        followed from its beginning; give a later id to skip older turns)."""
        stream_kw.setdefault("last_event_id", 0)
        on = False
        it = self.stream(session, **stream_kw)
        try:
            for ev in it:
                tid = ev.data.get("turnId") if isinstance(ev.data, dict) else None
                if ev.type == "turn_started" and tid == turn_id:
                    on = True
                if not on:
                    continue
                yield ev
                if ev.type == "done" and tid == turn_id:
                    return
        finally:
            it.close()

    def wait_turn(self, session: str, turn_id: str, **stream_kw: Any) -> TurnResult:
        """Follows the turn until its done; its calls, text, error and stop
        reason typed (TurnResult)."""
        return TurnResult.from_events(turn_id, list(self.follow_turn(session, turn_id,
                                                                     **stream_kw)))

    def run_tool_calls(self, session: str, calls: Sequence[Mapping[str, Any]],
                       parallel: bool = False, **stream_kw: Any) -> TurnResult:
        """tool_calls() then wait_turn()."""
        return self.wait_turn(session, self.tool_calls(session, calls, parallel), **stream_kw)

    # ---- sessions as context managers ----

    @contextlib.contextmanager
    def session(self, session_id: Optional[str] = None,
                tools: Optional[Sequence[Mapping[str, Any]]] = None) -> Iterator["Session"]:
        """with sbx.session("s1") as s: s.exec(...): started on entry,
        stopped on exit."""
        st = self.sessions.start(session_id, tools=tools)
        try:
            yield Session(self, st.session_id or session_id or "")
        finally:
            self.sessions.stop(st.session_id or session_id)


def tool_call(name: str, arguments: Any = None, id: Optional[str] = None) -> Dict[str, Any]:
    """One call of a tool_calls turn: {"id", "name", "arguments"} (an id made
    up when none is given; arguments an object or a JSON string)."""
    return {"id": id or "call-" + os.urandom(6).hex(), "name": name,
            "arguments": {} if arguments is None else arguments}


def _event(frame: _sse.Frame) -> Event:
    try:
        body = json.loads(frame.data)
    except ValueError:
        body = {"type": frame.event, "data": frame.data}
    if not isinstance(body, dict):
        body = {"type": frame.event, "data": body}
    ev = Event.from_dict(body)
    if not ev.type:
        ev.type = frame.event
    if frame.id is not None and frame.id.isdigit():
        ev.id = int(frame.id)
    return ev


class Session:
    """A started session: the client's calls with its session filled in."""

    def __init__(self, client: Sandbox, session_id: str) -> None:
        self.client = client
        self.id = session_id

    def __repr__(self) -> str:
        return "Session(%r)" % self.id

    def exec(self, command: Command, **kw: Any) -> ExecResult:
        return self.client.exec(command, session=self.id, **kw)

    def run_code(self, code: str, language: str = "python", **kw: Any) -> ExecResult:
        return self.client.run_code(code, language, session=self.id, **kw)

    def submit(self, command: Optional[Command] = None, **kw: Any) -> Task:
        return self.client.tasks.submit(command, session=self.id, **kw)

    def network(self, default: Optional[str] = None, allow: Optional[Sequence[str]] = None,
                deny: Optional[Sequence[str]] = None) -> SessionState:
        return self.client.sessions.network(self.id, default=default, allow=allow, deny=deny)

    def stream(self, **kw: Any) -> Iterator[Event]:
        return self.client.stream(self.id, **kw)

    def turn(self, input: Mapping[str, Any]) -> str:
        return self.client.turn(self.id, input)

    def tool_calls(self, calls: Sequence[Mapping[str, Any]], parallel: bool = False) -> str:
        return self.client.tool_calls(self.id, calls, parallel)

    def run_tool_calls(self, calls: Sequence[Mapping[str, Any]], parallel: bool = False,
                       **stream_kw: Any) -> TurnResult:
        return self.client.run_tool_calls(self.id, calls, parallel, **stream_kw)

    def tool_result(self, call_id: str, output: Any) -> str:
        return self.client.tool_result(self.id, call_id, output)

    def follow_turn(self, turn_id: str, **stream_kw: Any) -> Iterator[Event]:
        return self.client.follow_turn(self.id, turn_id, **stream_kw)

    def wait_turn(self, turn_id: str, **stream_kw: Any) -> TurnResult:
        return self.client.wait_turn(self.id, turn_id, **stream_kw)

    def stop(self) -> SessionState:
        return self.client.sessions.stop(self.id)


class Tasks:
    """Tasks: submitted at once, run by the daemon's queue."""

    def __init__(self, client: Sandbox) -> None:
        self._c = client

    def submit(self, command: Optional[Command] = None, *, language: Optional[str] = None,
               code: Optional[str] = None, **kw: Any) -> Task:
        """Submits a command (or language and code); answered at once with
        the pending task. Takes exec's keyword arguments."""
        body = _task_body(command=command, language=language, code=code, **kw)
        return Task.from_dict(self._c._call("POST", "/runtime/tasks", body))

    def get(self, task_id: str) -> Task:
        """The task with its result (outputs included) once it has ended."""
        return Task.from_dict(self._c._call("GET", "/runtime/tasks/" + _seg(task_id)))

    def list(self, status: Optional[str] = None, limit: Optional[int] = None,
             cursor: Optional[str] = None, session: Optional[str] = None) -> TaskPage:
        """One page, newest first; next_cursor ("" at the end) asks for the
        next one."""
        data = self._c._call("GET", "/runtime/tasks", query={
            "status": status, "limit": limit, "cursor": cursor, "sessionID": session})
        if isinstance(data, list):  # a daemon answering the original's bare array
            return TaskPage.from_dict({"tasks": data, "nextCursor": ""})
        return TaskPage.from_dict(data)

    def iter(self, status: Optional[str] = None, session: Optional[str] = None,
             page_size: int = 50) -> Iterator[Task]:
        """Every task, newest first, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(status=status, limit=page_size, cursor=cursor, session=session)
            yield from page.tasks
            if not page.next_cursor or not page.tasks:
                return
            cursor = page.next_cursor

    def cancel(self, task_id: str) -> Task:
        """Cancels a pending or running task (its whole process tree); a task
        already ended raises Conflict."""
        return Task.from_dict(self._c._call("POST", "/runtime/tasks/%s/cancel" % _seg(task_id)))

    def wait(self, task_id: str, timeout: Optional[float] = None,
             poll_interval: float = 0.1) -> Task:
        """Waits for the task's end and returns it with its result; raises
        TaskTimeout after timeout seconds (None: no bound)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll_interval
        while True:
            t = self.get(task_id)
            if t.done:
                return t
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskTimeout("task %s still %s after %ss" % (task_id, t.status, timeout))
            pause = interval if deadline is None else min(interval,
                                                          max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            interval = min(interval * 1.5, 1.0)

    def set_network(self, task_id: str, default: Optional[str] = None,
                    allow: Optional[Sequence[str]] = None,
                    deny: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Replaces a running task's egress rules (new connections follow at
        once)."""
        return self._c._call("POST", "/runtime/tasks/%s/network" % _seg(task_id),
                             _net_body(default, allow, deny))


class Files:
    """The clone's workspace files (paths relative to the workspace)."""

    def __init__(self, client: Sandbox) -> None:
        self._c = client

    def get(self, path: str) -> bytes:
        """A file's content."""
        conn, resp = self._c._open("GET", "/runtime/files", {"path": path})
        try:
            if _is_json(resp):
                resp.read()
                raise SandboxError("%s is a directory (use files.list)" % path,
                                   status=resp.status)
            return resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("GET %s: %s" % (path, e)) from e
        finally:
            conn.close()

    def get_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.get(path).decode(encoding)

    def download(self, path: str, dest: Union[str, "os.PathLike[str]", BinaryIO]) -> int:
        """Streams a file into dest (a local path or a binary file object);
        returns the bytes written."""
        conn, resp = self._c._open("GET", "/runtime/files", {"path": path})
        try:
            if _is_json(resp):
                raise SandboxError("%s is a directory (use files.list)" % path,
                                   status=resp.status)
            with contextlib.ExitStack() as stack:
                out = dest if hasattr(dest, "write") else stack.enter_context(
                    open(dest, "wb"))  # type: ignore[arg-type]
                n = 0
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)  # type: ignore[union-attr]
                    n += len(chunk)
            length = resp.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) != n:
                raise ConnectionFailed("GET %s: %d of %s bytes came" % (path, n, length))
            return n
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("GET %s: %s" % (path, e)) from e
        finally:
            conn.close()

    def put(self, path: str, data: Union[bytes, bytearray, memoryview, str, BinaryIO]) -> Upload:
        """Writes a file: bytes, text (UTF-8) or a binary file object, which is
        streamed (never read whole into memory). Parent directories must
        exist in the workspace."""
        headers = {"Content-Type": "application/octet-stream"}
        body: Any = data
        if isinstance(data, str):
            body = data.encode("utf-8")
        elif isinstance(data, (bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            size = _remaining(data)
            if size is not None:
                headers["Content-Length"] = str(size)
            # else http.client sends it chunked
        elif not isinstance(data, bytes):
            raise TypeError("data must be bytes, str or a binary file object")
        return Upload.from_dict(self._c._send("PUT", "/runtime/files", {"path": path}, body,
                                              headers))

    def put_file(self, path: str, local_path: Union[str, "os.PathLike[str]"]) -> Upload:
        """Uploads a local file, streamed."""
        with open(local_path, "rb") as f:
            return self.put(path, f)

    def delete(self, path: str) -> None:
        self._c._call("DELETE", "/runtime/files", query={"path": path})

    def list(self, path: str = ".") -> Listing:
        """A directory's entries (at most the daemon's listing cap: see
        Listing.truncated)."""
        data = self._c._call("GET", "/runtime/files", query={"path": path})
        if not isinstance(data, dict) or "entries" not in data:
            raise SandboxError("%s is not a directory" % path, body=data)
        return Listing.from_dict(data)


def _is_json(resp: http.client.HTTPResponse) -> bool:
    return (resp.getheader("Content-Type") or "").startswith("application/json")


def _remaining(f: Any) -> Optional[int]:
    """The bytes left in a regular file object, or None when unknown."""
    try:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        return max(0, st.st_size - f.tell())
    except (AttributeError, OSError, ValueError):
        return None


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Sessions:
    """Sessions: a live sandbox its tasks share (files in /tmp, background
    processes, the egress) until stop or the idle timeout."""

    def __init__(self, client: Sandbox) -> None:
        self._c = client

    def start(self, session_id: Optional[str] = None,
              tools: Optional[Sequence[Mapping[str, Any]]] = None) -> SessionState:
        """Starts it (a new id when None); answered once it is set up. tools:
        external tools its turns may call, [{name, description, parameters,
        "external": True}] (the caller answers them with tool_result)."""
        body: Dict[str, Any] = {"sessionID": session_id} if session_id is not None else {}
        if tools is not None:
            body["tools"] = [dict(t) for t in tools]
        return SessionState.from_dict(self._c._call("POST", "/runtime/start", body))

    def stop(self, session_id: Optional[str] = None) -> SessionState:
        body = {"sessionID": session_id} if session_id is not None else {}
        return SessionState.from_dict(self._c._call("POST", "/runtime/stop", body))

    def network(self, session_id: str, default: Optional[str] = None,
                allow: Optional[Sequence[str]] = None,
                deny: Optional[Sequence[str]] = None) -> SessionState:
        """Replaces a live session's egress rules, at once (a tenant token may
        only narrow)."""
        body = _net_body(default, allow, deny)
        body["sessionID"] = session_id
        return SessionState.from_dict(self._c._call("POST", "/runtime/network", body))


class Skills:
    """Skills (the original's /runtime/skills routes): the requesting clone's
    catalog, activation of a version, and skill tasks."""

    def __init__(self, client: Sandbox) -> None:
        self._c = client

    def list(self) -> List[SkillInfo]:
        data = self._c._call("GET", "/runtime/skills")
        if isinstance(data, dict):  # an extended answer wrapping the list
            data = data.get("skills", [])
        return [SkillInfo.from_dict(s) for s in data or []]

    def get(self, name: str) -> SkillInfo:
        return SkillInfo.from_dict(self._c._call("GET", "/runtime/skills/" + _seg(name)))

    def reload(self) -> List[SkillInfo]:
        data = self._c._call("POST", "/runtime/skills/reload")
        return [SkillInfo.from_dict(s) for s in (data or {}).get("skills", [])]

    def activate(self, name: str, version: str) -> SkillInfo:
        data = self._c._call("POST", "/runtime/skills/%s/activate" % _seg(name),
                             {"version": version})
        return SkillInfo.from_dict((data or {}).get("skill"))

    def run(self, name: str, action: str, *args: str, **kw: Any) -> Task:
        """Submits a task running a skill's action ({"skill", "action",
        "args"}, as claw-skill NAME ACTION ARGS...); answered at once with the
        pending task. Takes exec's keyword arguments (env, stdin, session...)."""
        body = _task_body(skill=name, action=action, args=args, **kw)
        return Task.from_dict(self._c._call("POST", "/runtime/tasks", body))

    def exec(self, name: str, action: str, *args: str,
             request_timeout: Optional[float] = None, **kw: Any) -> ExecResult:
        """Runs a skill's action and waits for its end (POST /runtime/exec)."""
        body = _task_body(skill=name, action=action, args=args, **kw)
        return self._c._exec(body, kw.get("timeout_seconds"), request_timeout)
