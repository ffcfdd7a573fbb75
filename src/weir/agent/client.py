"""A client of the agent's Unix socket (framed mode), used by `weir agent send|status`, the
logging handler and tests.

`send_all` pipelines events with a bounded window and returns one response per event, in order;
an event the agent refused has `ok` false and a `code` (QUEUE_FULL, EVENT_TOO_LARGE, ...). Trouble
with the agent itself is raised as an `AgentClientError`: `AgentUnavailable` when no agent
listens or it went away, `AgentTimeout` when it does not answer within `timeout_s`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from weir.agent.event import Event
from weir.agent.wire import (
    PREAMBLE,
    ClientConnection,
    Response,
    encode_send,
    encode_status,
)

WINDOW = 1024  # requests in flight: their answers (15 bytes each) fit the socket's buffer
CHUNK = 128  # requests per write
DEFAULT_TIMEOUT_S = 60.0


class AgentClientError(OSError):
    """The agent could not be reached or did not answer; nothing is known of the events sent."""


class AgentUnavailable(AgentClientError):
    """No agent listens on the socket, or it closed the connection."""


class AgentTimeout(AgentClientError):
    """The agent did not answer within the client's timeout."""


class AgentClient:
    def __init__(self, path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._path, self._timeout_s = path, timeout_s
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self._sock.close()
            raise AgentUnavailable(
                f"no agent is listening on {path} (start one with `weir agent start "
                f"--socket {path}`)"
            ) from exc
        self._connection = ClientConnection()
        self._next_id = 1
        self._send_bytes(PREAMBLE)

    def send_all(self, events: Iterable[Event]) -> list[Response]:
        """Send every event; one response per event, in order.

        Frames go out CHUNK at a time in one write, with at most WINDOW unanswered, so the agent
        reads many per call and stores them together.
        """
        responses: list[Response] = []
        in_flight = 0
        chunk: list[bytes] = []
        for event in events:
            chunk.append(encode_send(self._take_id(), event))
            if len(chunk) == CHUNK:
                in_flight += self._send_chunk(chunk)
                while in_flight > WINDOW - CHUNK:
                    in_flight -= self._receive_into(responses)
        in_flight += self._send_chunk(chunk)
        while in_flight > 0:
            in_flight -= self._receive_into(responses)
        return responses

    def _send_chunk(self, chunk: list[bytes]) -> int:
        count = len(chunk)
        if count:
            self._send_bytes(b"".join(chunk))
            chunk.clear()
        return count

    def _receive_into(self, responses: list[Response]) -> int:
        got = self._receive()
        responses += got
        return len(got)

    def status(self) -> dict[str, Any]:
        self._send_bytes(encode_status(self._take_id()))
        response = self._receive()[0]
        result: dict[str, Any] = json.loads(response.message)
        return result

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _send_bytes(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except TimeoutError as exc:
            raise self._timed_out() from exc
        except OSError as exc:
            raise AgentUnavailable(f"the agent at {self._path} went away ({exc})") from exc

    def _receive(self) -> list[Response]:
        while True:
            responses = self._connection.next_responses()
            if responses:
                _raise_if_connection_refused(responses)
                return responses
            try:
                data = self._sock.recv(256 * 1024)
            except TimeoutError as exc:
                raise self._timed_out() from exc
            except OSError as exc:
                raise AgentUnavailable(f"the agent at {self._path} went away ({exc})") from exc
            if not data:
                raise AgentUnavailable(f"the agent at {self._path} closed the connection")
            self._connection.receive_data(data)

    def _timed_out(self) -> AgentTimeout:
        return AgentTimeout(
            f"the agent at {self._path} did not answer within {self._timeout_s:g}s "
            "(the client's timeout setting)"
        )

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_if_connection_refused(responses: list[Response]) -> None:
    """Correlation id 0 answers the connection, not a request: the agent then closes it."""
    for response in responses:
        if response.correlation_id == 0 and not response.ok:
            message = response.message.decode(errors="replace")
            raise AgentUnavailable(f"the agent closed the connection: {response.code}: {message}")
