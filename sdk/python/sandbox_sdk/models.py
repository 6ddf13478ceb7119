"""Typed results. Each is a dataclass built from the API's JSON: fields in
snake_case for the API's camelCase keys; keys this version does not know are
kept, with everything else, in `raw` (the answer as it came), so a newer
daemon never breaks an older SDK."""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

T = TypeVar("T", bound="Model")

FINAL_STATUSES = frozenset(
    ("succeeded", "failed", "canceled", "timeout", "interrupted"))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _list_of(cls: Type[T]) -> Callable[[Any], List[T]]:
    def conv(v: Any) -> List[T]:
        return [cls.from_dict(x) for x in v] if isinstance(v, list) else []
    return conv


def _one(cls: Type[T]) -> Callable[[Any], Optional[T]]:
    def conv(v: Any) -> Optional[T]:
        return cls.from_dict(v) if isinstance(v, dict) else None
    return conv


@dataclasses.dataclass
class Model:
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls: Type[T], d: Any) -> T:
        if not isinstance(d, dict):
            d = {}
        nested = cls._converters()
        kw: Dict[str, Any] = {"raw": d}
        for f in dataclasses.fields(cls):
            if not f.init or f.name == "raw":
                continue
            key = f.metadata.get("key", _camel(f.name))
            if key not in d:
                continue
            v = d[key]
            conv = nested.get(f.name)
            kw[f.name] = conv(v) if conv else v
        return cls(**kw)

    @classmethod
    def _converters(cls) -> Dict[str, Callable[[Any], Any]]:
        """field name -> converter of its JSON value (nested models)."""
        return {}


@dataclasses.dataclass
class Limits(Model):
    memory_bytes: Optional[int] = None
    memory_enforced: Optional[str] = None
    pids: Optional[int] = None
    cpu: Optional[float] = None
    cpu_enforced: Optional[bool] = None
    timeout_seconds: Optional[float] = None
    file_size_bytes: Optional[int] = None
    output_limit_bytes: Optional[int] = None
    enforced_by: Optional[str] = None


@dataclasses.dataclass
class Report(Model):
    """How a run ended (the daemon's report)."""
    outcome: str = ""
    exit_code: Optional[int] = None
    signal: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0
    oom_killed: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limits: Optional[Limits] = None
    cgroup_mode: str = ""
    message: str = ""
    network: Any = None

    @classmethod
    def _converters(cls):
        return {"limits": _one(Limits)}


@dataclasses.dataclass
class ExecResult(Model):
    """The answer of exec / run_code (the task ran to its end)."""
    task_id: str = ""
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    status: str = ""
    error: str = ""
    report: Optional[Report] = None

    @classmethod
    def _converters(cls):
        return {"report": _one(Report)}

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.status in ("", "succeeded")


@dataclasses.dataclass
class TaskResult(Model):
    exit_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    report: Optional[Report] = None

    @classmethod
    def _converters(cls):
        return {"report": _one(Report)}


@dataclasses.dataclass
class Task(Model):
    id: str = ""
    command: List[str] = dataclasses.field(default_factory=list)
    backend: str = ""
    skill: str = ""
    skill_source: str = ""
    skill_trust_level: str = ""
    status: str = ""
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    error: str = ""
    tenant_code: str = ""
    clone_key: str = ""
    clone_id: str = ""
    session_id: str = ""
    language: Optional[str] = None
    result: Optional[TaskResult] = None

    @classmethod
    def _converters(cls):
        return {"result": _one(TaskResult)}

    @property
    def done(self) -> bool:
        """The task has ended (its status is final)."""
        return self.status in FINAL_STATUSES


@dataclasses.dataclass
class TaskPage(Model):
    tasks: List[Task] = dataclasses.field(default_factory=list)
    next_cursor: str = ""

    @classmethod
    def _converters(cls):
        return {"tasks": _list_of(Task)}


@dataclasses.dataclass
class FileEntry(Model):
    name: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    mtime: Optional[str] = None


@dataclasses.dataclass
class Listing(Model):
    path: str = ""
    entries: List[FileEntry] = dataclasses.field(default_factory=list)
    truncated: bool = False

    @classmethod
    def _converters(cls):
        return {"entries": _list_of(FileEntry)}


@dataclasses.dataclass
class Upload(Model):
    ok: bool = False
    size: int = 0


@dataclasses.dataclass
class SessionState(Model):
    """The answer of sessions.start / stop / network. status is the clone
    runtime's state; runtime the whole status object start and stop give."""
    ok: bool = False
    status: str = ""
    session_id: str = ""
    runtime: Optional["RuntimeStatus"] = None

    @classmethod
    def from_dict(cls, d: Any) -> "SessionState":
        st = d.get("status") if isinstance(d, dict) else None
        if not isinstance(st, dict):
            return super().from_dict(d)
        # start/stop answer {ok, status: StatusPayload, sessionId}
        flat = dict(d, status=st.get("status", ""))
        s = super().from_dict(flat)
        s.raw = d
        s.runtime = RuntimeStatus.from_dict(st)
        if not s.session_id:
            s.session_id = st.get("sessionId", "")
        return s


@dataclasses.dataclass
class RuntimeStatus(Model):
    runtime_id: str = ""
    tenant_code: str = ""
    clone_id: str = ""
    clone_key: str = ""
    session_id: str = ""
    workspace: str = ""
    status: str = ""
    started_at: Optional[str] = None
    last_event_at: Optional[str] = None
    running: Optional[int] = None
    queued: Optional[int] = None


@dataclasses.dataclass
class SkillInfo(Model):
    name: str = ""
    source: str = ""
    trust_level: str = ""
    root_dir: str = ""
    active_dir: str = ""
    cli_path: str = ""
    actions: List[str] = dataclasses.field(default_factory=list)
    version: str = ""
    versions: List[str] = dataclasses.field(default_factory=list)
    enabled: bool = True
    scan_verdict: str = ""
    blocked_reason: str = ""
    # what SKILL.md says (the extended answer, which the SDK asks for)
    description: str = ""
    homepage: str = ""
    caution: Any = None
    shadows: List[Dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Event(Model):
    """One event of a session's stream. `id` orders the stream (it is what a
    resume sends as Last-Event-ID); `data` is the event's own payload."""
    id: Optional[int] = None
    type: str = ""
    time: Optional[str] = None
    session_id: str = ""
    data: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ToolSpec(Model):
    """A tool turns may call (GET /runtime/tools): its JSON schema."""
    name: str = ""
    description: str = ""
    parameters: Dict[str, Any] = dataclasses.field(default_factory=dict)
    external: bool = False


@dataclasses.dataclass
class ToolCallResult(Model):
    """One tool call of a turn, from its tool_call_start, tool_call_output and
    tool_call_end events. `result` is what is fed back to the model (capped);
    `output` the whole output the stream carried, stdout and stderr in order."""
    call_id: str = ""
    name: str = ""
    arguments: Any = None
    external: bool = False
    exit_code: Optional[int] = None
    outcome: str = ""
    result: str = ""
    truncated: bool = False
    usage: Dict[str, Any] = dataclasses.field(default_factory=dict)
    output: str = ""

    @property
    def ended(self) -> bool:
        return bool(self.outcome)


@dataclasses.dataclass
class TurnResult(Model):
    """A turn followed to its `done`: stop_reason (completed, canceled, the
    model's finish reason, error...), its tool calls in the order they
    started, the model's text, the runtime_error's data when there was one,
    the token usage of a model turn, and every event of the turn."""
    turn_id: str = ""
    stop_reason: str = ""
    calls: List[ToolCallResult] = dataclasses.field(default_factory=list)
    text: str = ""
    error: Optional[Dict[str, Any]] = None
    usage: Optional[Dict[str, Any]] = None
    events: List[Event] = dataclasses.field(default_factory=list, repr=False)

    def call(self, call_id: str) -> Optional[ToolCallResult]:
        return next((c for c in self.calls if c.call_id == call_id), None)

    @classmethod
    def from_events(cls, turn_id: str, events: List[Event]) -> "TurnResult":
        t = cls(turn_id=turn_id, events=list(events))
        calls: Dict[str, ToolCallResult] = {}
        for ev in events:
            d = ev.data
            if ev.type == "tool_call_start":
                c = ToolCallResult(raw=d, call_id=d.get("callId", ""), name=d.get("name", ""),
                                   arguments=d.get("arguments"),
                                   external=bool(d.get("external")))
                calls[c.call_id] = c
                t.calls.append(c)
            elif ev.type == "tool_call_output":
                c = calls.get(d.get("callId", ""))
                if c is not None:
                    c.output += d.get("text", "")
            elif ev.type == "tool_call_end":
                c = calls.get(d.get("callId", ""))
                if c is None:
                    c = ToolCallResult(call_id=d.get("callId", ""), name=d.get("name", ""))
                    calls[c.call_id] = c
                    t.calls.append(c)
                c.raw = dict(c.raw, end=d)
                c.exit_code = d.get("exitCode")
                c.outcome = d.get("outcome", "")
                c.result = d.get("result", "")
                c.truncated = bool(d.get("truncated"))
                c.usage = d.get("usage") or {}
            elif ev.type == "text_delta":
                t.text += d.get("text", "")
            elif ev.type == "runtime_error":
                t.error = d
            elif ev.type == "done":
                t.stop_reason = d.get("stopReason", "")
                t.usage = d.get("usage")
                t.raw = d
        return t
