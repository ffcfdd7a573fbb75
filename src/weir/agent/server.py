"""The agent's Unix domain socket server: one thread per connection, protocol in `wire`.

A connection that breaks the protocol gets an error answer and is closed; other connections and
the agent carry on. Events are timestamped by the agent when they arrive. Everything one read
brings (many pipelined frames, or many lines) is stored together, one append per queue, and
answered with one write.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from collections import defaultdict
from pathlib import Path

from weir.agent.agent import Agent, SendError
from weir.agent.event import encode_untimed
from weir.agent.wire import (
    Mode,
    Op,
    Request,
    Response,
    ServerConnection,
    WireError,
    encode_ok,
    encode_response,
    parse_line,
)

log = logging.getLogger(__name__)
_STATUS = Op.STATUS
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
    """Stores every SEND of one read (one append per queue, so one group commit for `events`)
    and answers all the requests in order."""
    if not requests:
        return b""
    ops, correlation_ids, topics, keys, records, sizes = zip(*requests, strict=True)
    if _STATUS not in ops and topics.count(topics[0]) == len(topics):
        results = agent.send_records(topics[0], keys, records, sizes)
        if results.count(None) == len(results):
            return b"".join(map(encode_ok, correlation_ids))
        errors = {i: e for i, e in enumerate(results) if e is not None}
    else:
        errors = _store_sends(agent, requests)
    return b"".join(_reply(agent, i, r, errors.get(i)) for i, r in enumerate(requests))


def _reply(agent: Agent, index: int, request: Request, error: SendError | None) -> bytes:
    if request.op is Op.STATUS:
        status = json.dumps(agent.status()).encode()
        return encode_response(
            Response(correlation_id=request.correlation_id, ok=True, message=status)
        )
    if error is None:
        return encode_ok(request.correlation_id)
    return encode_response(Response(correlation_id=request.correlation_id, ok=False,
                                    code=error.code, message=str(error).encode()))  # fmt: skip


def _store_sends(agent: Agent, requests: list[Request]) -> dict[int, SendError]:
    """Stores the SENDs per topic, in order; the errors by request index."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        if request.op is Op.SEND:
            by_topic[request.topic].append(index)
    errors: dict[int, SendError] = {}
    for topic, indexes in by_topic.items():
        sends = [requests[i] for i in indexes]
        results = agent.send_records(
            topic, [r.key for r in sends], [r.record for r in sends], [r.size for r in sends]
        )
        for index, error in zip(indexes, results, strict=True):
            if error is not None:
                errors[index] = error
    return errors


def _answer_lines(agent: Agent, lines: list[bytes]) -> bytes:
    answers: list[str] = []
    requests: list[Request] = []
    for line in lines:
        try:
            topic, key, value = parse_line(line)
        except (ValueError, UnicodeDecodeError) as exc:
            answers.append(f"ERR BAD_LINE {exc}")
            continue
        record, size = encode_untimed(key, value), len(key or b"") + len(value)
        requests.append(Request(Op.SEND, len(answers), topic, key, record, size))
        answers.append("OK")
    for index, error in _store_sends(agent, requests).items():
        answers[requests[index].correlation_id] = f"ERR {error.code} {error}"
    return "".join(a + "\n" for a in answers).encode()


def _error_reply(mode: Mode, code: str, message: str) -> bytes:
    if mode is Mode.FRAMED:
        return encode_response(Response(correlation_id=0, ok=False, code=code,
                                        message=message.encode()))  # fmt: skip
    return f"ERR {code} {message}\n".encode()


class AgentSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # connections waiting to be accepted (many callers start at once)

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
