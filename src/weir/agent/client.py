"""A client of the agent's Unix socket (framed mode), used by `weir agent send|status` and tests.

`send_all` pipelines events with a bounded window and returns the errors by position.
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

WINDOW = 128  # requests in flight: small enough that requests and replies fit socket buffers


class AgentClient:
    def __init__(self, path: Path, timeout_s: float = 60.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        self._sock.connect(str(path))
        self._sock.sendall(PREAMBLE)
        self._connection = ClientConnection()
        self._next_id = 1

    def send_all(self, events: Iterable[Event]) -> list[Response]:
        """Send every event; one response per event, in order."""
        responses: list[Response] = []
        in_flight = 0
        for event in events:
            self._sock.sendall(encode_send(self._take_id(), event))
            in_flight += 1
            if in_flight >= WINDOW:
                got = self._receive()
                responses += got
                in_flight -= len(got)
        while in_flight > 0:
            got = self._receive()
            responses += got
            in_flight -= len(got)
        return responses

    def status(self) -> dict[str, Any]:
        self._sock.sendall(encode_status(self._take_id()))
        response = self._receive()[0]
        result: dict[str, Any] = json.loads(response.message)
        return result

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _receive(self) -> list[Response]:
        while True:
            responses = self._connection.next_responses()
            if responses:
                return responses
            data = self._sock.recv(256 * 1024)
            if not data:
                raise ConnectionError("the agent closed the connection")
            self._connection.receive_data(data)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
