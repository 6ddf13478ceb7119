"""An incremental Server-Sent Events parser (the WHATWG event-stream rules):
bytes in, complete frames out. A frame cut by a dropped connection is never
returned, and the last event id moves only when a frame is complete, so a
resume from it replays the cut frame whole."""
from __future__ import annotations

from typing import List, NamedTuple, Optional


class Frame(NamedTuple):
    id: Optional[str]  # the last event id as of this frame (None: none seen yet)
    event: str
    data: str


class Parser:
    def __init__(self, last_id: Optional[str] = None) -> None:
        self._buf = bytearray()
        self._data: List[str] = []
        self._event = ""
        self._id_buf = last_id
        self.last_id = last_id  # the id of the last complete frame
        self.retry_ms: Optional[int] = None
        self._first = True

    def feed(self, chunk: bytes) -> List[Frame]:
        self._buf += chunk
        out: List[Frame] = []
        buf = self._buf
        start = 0
        n = len(buf)
        while start < n:
            i = start
            while i < n and buf[i] not in (0x0A, 0x0D):
                i += 1
            if i == n:
                break
            if buf[i] == 0x0D:
                if i + 1 == n:
                    break  # a CR at the end: is an LF next? wait for more
                end = i + 2 if buf[i + 1] == 0x0A else i + 1
            else:
                end = i + 1
            line = bytes(buf[start:i]).decode("utf-8", "replace")
            start = end
            if self._first:
                self._first = False
                if line.startswith("\ufeff"):
                    line = line[1:]
            self._line(line, out)
        del buf[:start]
        return out

    def _line(self, line: str, out: List[Frame]) -> None:
        if line == "":
            self.last_id = self._id_buf
            if self._data:
                out.append(Frame(self._id_buf, self._event or "message", "\n".join(self._data)))
            self._data = []
            self._event = ""
            return
        if line.startswith(":"):
            return  # a comment (heartbeats)
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._id_buf = value
        elif field == "retry":
            if value.isdigit():
                self.retry_ms = int(value)
