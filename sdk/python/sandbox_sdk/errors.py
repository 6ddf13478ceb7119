"""Exceptions: every failed call raises a SandboxError carrying the API's
error code (its `{"error": {"code", "message"}}` answer), the HTTP status and
the message; the subclass says which status it was."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class SandboxError(Exception):
    """A call the daemon refused or that could not be made.

    status  -- the HTTP status (0 when no answer came: see ConnectionFailed)
    code    -- the API's error code ("bad_request", "not_found", ...), or ""
    message -- the API's message (or what went wrong on the way)
    body    -- the answer's parsed JSON (or text), when there was one
    """

    def __init__(self, message: str, status: int = 0, code: str = "", body: Any = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.body = body

    def __str__(self) -> str:
        if self.status:
            return "%d %s: %s" % (self.status, self.code or "error", self.message)
        return self.message


class BadRequest(SandboxError):
    """400: the request named something wrong (the message says what)."""


class Unauthorized(SandboxError):
    """401: no token, or not one the daemon knows."""


class Forbidden(SandboxError):
    """403: the token may not do this (another tenant, a widening rule...)."""


class NotFound(SandboxError):
    """404: no such task, file, session, skill or route."""


class Conflict(SandboxError):
    """409: the object's state forbids it (a task already ended...)."""


class TooLarge(SandboxError):
    """413: larger than the daemon takes (an upload over the quota...)."""


class TooManyRequests(SandboxError):
    """429: the tenant's share of the queue is full."""


class ServerError(SandboxError):
    """5xx: the daemon could not do it (not ready, out of storage...)."""


class ConnectionFailed(SandboxError):
    """No answer: the daemon could not be reached or the connection broke."""


class TaskTimeout(SandboxError):
    """Tasks.wait gave up before the task ended (the task goes on)."""


_BY_STATUS: Dict[int, Type[SandboxError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: TooManyRequests,
}


def error_from_answer(status: int, data: bytes, reason: str = "") -> SandboxError:
    """The exception for an answer of status >= 400."""
    body: Any = None
    code, message = "", ""
    text = data.decode("utf-8", "replace") if data else ""
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = text
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
    elif isinstance(err, str):
        message = err
    if not message:
        message = text.strip()[:500] or reason or "HTTP %d" % status
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else SandboxError)
    return cls(message, status=status, code=code, body=body)

