"""Server-Sent Events, parsed line by line as the HTML standard says
(https://html.spec.whatwg.org/multipage/server-sent-events.html): no I/O here,
so the sync and the async client feed it the same way."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseMessage:
    event: str  # "message" when the server names none
    data: str
    id: str | None  # the last `id:` seen, as Last-Event-ID would send it


class SseParser:
    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseMessage | None:
        """One line without its end; a blank line dispatches the message read so far."""
        if not line:
            if not self._data:
                self._event = ""
                return None
            message = SseMessage(self._event or "message", "\n".join(self._data), self.last_id)
            self._event, self._data = "", []
            return message
        if line.startswith(":"):
            return None  # a comment: a keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self.last_id = value
        return None
