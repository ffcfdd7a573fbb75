"""The agent's Unix domain socket server: one thread per connection, protocol in `wire`.

A connection that breaks the protocol gets an error answer and is closed; other connections and
the agent carry on. Events are timestamped by the agent when they arrive.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from dataclasses import replace
from pathlib import Path

from weir.agent.agent import Agent, SendError
from weir.agent.wire import (
    Mode,
    Op,
    Request,
    Response,
    ServerConnection,
    WireError,
    encode_response,
    parse_line,
)

log = logging.getLogger(__name__)
FRAME_OVERHEAD = 64 * 1024
READ_SIZE = 256 * 1024


class _Handler(socketserver.BaseRequestHandler):
    server: AgentSocketServer

    def handle(self) -> None:
        agent = self.server.agent
        connection = ServerConnection(agent.config.max_event_bytes + FRAME_OVERHEAD)
        sock: socket.socket = self.request
        try:
            while data := sock.recv(READ_SIZE):
                connection.receive_data(data)
                sock.sendall(_answer(agent, connection))
        except WireError as exc:
            sock.sendall(_error_reply(connection.mode, exc.code, str(exc)))
        except (BrokenPipeError, ConnectionResetError):
            return


def _answer(agent: Agent, connection: ServerConnection) -> bytes:
    if connection.mode is Mode.FRAMED:
        return _answer_frames(agent, connection.next_requests())
    if connection.mode is Mode.LINES:
        return _answer_lines(agent, connection.next_lines())
    return b""


def _answer_frames(agent: Agent, requests: list[Request]) -> bytes:
    sends = [r for r in requests if r.op is Op.SEND and r.event is not None]
    stamp = agent.event("-", None).timestamp_ms
    events = [replace(r.event, timestamp_ms=stamp) for r in sends if r.event is not None]
    errors = dict(zip((r.correlation_id for r in sends), agent.send_many(events), strict=True))
    replies = []
    for request in requests:
        if request.op is Op.STATUS:
            status = json.dumps(agent.status()).encode()
            replies.append(Response(correlation_id=request.correlation_id, ok=True, message=status))
        else:
            replies.append(_send_response(request.correlation_id, errors[request.correlation_id]))
    return b"".join(encode_response(r) for r in replies)


def _send_response(correlation_id: int, error: SendError | None) -> Response:
    if error is None:
        return Response(correlation_id=correlation_id, ok=True)
    return Response(
        correlation_id=correlation_id, ok=False, code=error.code, message=str(error).encode()
    )


def _answer_lines(agent: Agent, lines: list[bytes]) -> bytes:
    events, answers = [], []
    for line in lines:
        try:
            topic, key, value = parse_line(line)
        except (ValueError, UnicodeDecodeError) as exc:
            answers.append(f"ERR BAD_LINE {exc}")
            continue
        events.append(agent.event(topic, value, key))
        answers.append("")
    results = iter(agent.send_many(events))
    out = []
    for answer in answers:
        if answer:
            out.append(answer)
        else:
            error = next(results)
            out.append("OK" if error is None else f"ERR {error.code} {error}")
    return "".join(a + "\n" for a in out).encode()


def _error_reply(mode: Mode, code: str, message: str) -> bytes:
    if mode is Mode.FRAMED:
        return encode_response(Response(correlation_id=0, ok=False, code=code,
                                        message=message.encode()))  # fmt: skip
    return f"ERR {code} {message}\n".encode()


class AgentSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, agent: Agent) -> None:
        self.agent = agent
        if path.exists():
            path.unlink()
        super().__init__(str(path), _Handler)
        os.chmod(path, 0o660)

    def serve_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="weir-agent-socket", daemon=True)
        thread.start()
        return thread
