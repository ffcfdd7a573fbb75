"""`AgentHandler`: a standard `logging.Handler` that ships each log record through the agent.

    import logging
    from weir.agent.logging import AgentHandler

    logging.getLogger().addHandler(AgentHandler("app-logs"))            # the agent's Unix socket
    logging.getLogger().addHandler(AgentHandler("app-logs", agent=a))   # an `Agent` in process

Each record is formatted by the handler's formatter and sent as one event whose value is the
UTF-8 text; `key` is a fixed key or a function of the record (None: unkeyed). `emit` returns once
the agent stored the event per the topic's durability class, so a record logged is a record kept.
A refused event or an agent that cannot be reached goes to `handleError` (logging's own way of
reporting a handler's trouble, on stderr by default) and never raises into the application.

The socket connection is opened by the first record and again after it broke. Thread-safety
(docs/threads.md): logging serialises `emit` per handler with the handler's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from weir.agent.agent import Agent, SendError
from weir.agent.client import DEFAULT_TIMEOUT_S, AgentClient, AgentClientError
from weir.agent.event import Event
from weir.agent.wire import DEFAULT_SOCKET

KeyOf = Callable[[logging.LogRecord], bytes | None]


class AgentRefused(Exception):
    """The agent answered with an error for a log record; `code` names the reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class AgentHandler(logging.Handler):
    """Sends every record to `topic`, through `agent` if given, else the agent's socket."""

    def __init__(
        self,
        topic: str,
        *,
        agent: Agent | None = None,
        socket: Path | str = DEFAULT_SOCKET,
        key: bytes | KeyOf | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        level: int = logging.NOTSET,
    ) -> None:
        super().__init__(level)
        self.topic = topic
        self._agent, self._socket, self._timeout_s = agent, Path(socket), timeout_s
        self._key_of: KeyOf = key if callable(key) else _fixed_key(key)
        self._client: AgentClient | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            value = self.format(record).encode()
            self._send(value, self._key_of(record))
        except (SendError, AgentRefused, AgentClientError, ValueError):
            self.handleError(record)

    def _send(self, value: bytes, key: bytes | None) -> None:
        if self._agent is not None:
            self._agent.send(self.topic, value, key=key)
            return
        try:
            (response,) = self._connection().send_all(
                [Event(topic=self.topic, value=value, key=key)]
            )
        except AgentClientError:
            self._drop_connection()
            raise
        if not response.ok:
            raise AgentRefused(response.code, response.message.decode(errors="replace"))

    def _connection(self) -> AgentClient:
        if self._client is None:
            self._client = AgentClient(self._socket, timeout_s=self._timeout_s)
        return self._client

    def _drop_connection(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        self.acquire()
        try:
            self._drop_connection()
        finally:
            self.release()
        super().close()


def _fixed_key(key: bytes | None) -> KeyOf:
    def key_of(_record: logging.LogRecord) -> bytes | None:
        return key

    return key_of
