"""Python client of the sandbox daemon's HTTP API (`sandboxd serve`).

    from sandbox_sdk import Sandbox
    sbx = Sandbox("http://127.0.0.1:8080", token="...")
    print(sbx.exec(["python3", "-c", "print(6*7)"]).stdout)
"""
from .client import (EXTENDED_HEADER, Files, Sandbox, Session, Sessions, Skills, Tasks, __version__,
                     tool_call)
from .errors import (BadRequest, Conflict, ConnectionFailed, Forbidden, NotFound, SandboxError,
                     ServerError, TaskTimeout, TooLarge, TooManyRequests, Unauthorized)
from .models import (FINAL_STATUSES, Event, ExecResult, FileEntry, Limits, Listing, Report,
                     RuntimeStatus, SessionState, SkillInfo, Task, TaskPage, TaskResult,
                     ToolCallResult, ToolSpec, TurnResult, Upload)

__all__ = [
    "Sandbox", "Session", "Tasks", "Files", "Sessions", "Skills", "EXTENDED_HEADER", "__version__",
    "tool_call",
    "SandboxError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "TooLarge",
    "TooManyRequests", "ServerError", "ConnectionFailed", "TaskTimeout",
    "Event", "ExecResult", "FileEntry", "Limits", "Listing", "Report", "RuntimeStatus",
    "SessionState", "SkillInfo", "Task", "TaskPage", "TaskResult", "ToolCallResult", "ToolSpec",
    "TurnResult", "Upload", "FINAL_STATUSES",
]
