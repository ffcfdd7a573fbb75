"""The agent's local socket protocol, sans-IO: bytes in, frames or lines out.

Two modes, chosen by the first bytes a client sends:

Framed (binary) — the client first sends the 5-byte preamble `WEIR\\x01`, then frames:

    request:  length u32 | op u8 | correlation id u32 | body
              op 1 SEND:   topic length u16 | topic | key i32 (-1 none) | key | value i32 | value |
                           header count u16 | (name u16 | name | value i32 | value)*
              op 2 STATUS: empty body
    response: length u32 | correlation id u32 | status u8 (0 ok, 1 error) |
              code length u16 | code | message length u32 | message (STATUS: JSON)

  `length` counts the bytes after itself. Requests may be pipelined; responses come in order.
  A frame longer than the limit, or an unknown op, is answered with an error and the connection
  is closed (the stream cannot be resynchronised).

Lines (for shells, `nc -U`) — one event per line, `TOPIC<TAB>VALUE` or `TOPIC<TAB>KEY<TAB>VALUE`;
each line is answered `OK` or `ERR <CODE> <message>`. A line longer than the limit is an error and
closes the connection.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

from weir.agent.event import Event, check_untimed, encode_event

DEFAULT_SOCKET = "/tmp/weir-agent.sock"  # where the agent listens unless told otherwise

PREAMBLE = b"WEIR\x01"
_LENGTH = struct.Struct(">I")
_REQUEST_HEAD = struct.Struct(">BI")
_SEND_HEAD = struct.Struct(">BIH")  # op, correlation id, topic length
_U16 = struct.Struct(">H")


class Op(enum.IntEnum):
    SEND = 1
    STATUS = 2


_SEND, _STATUS = int(Op.SEND), int(Op.STATUS)


class Mode(enum.Enum):
    UNDECIDED = "undecided"
    FRAMED = "framed"
    LINES = "lines"


class WireError(Exception):
    """The peer broke the protocol; answer with `code` and close the connection."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Request(NamedTuple):
    """One framed request. For SEND: the topic, the event's key, `record` (the event in its
    stored form minus the timestamp, as `weir.agent.event` defines it: exactly the bytes after
    the topic) and `size` (its key, value and header bytes)."""

    op: Op
    correlation_id: int
    topic: str = ""
    key: bytes | None = None
    record: bytes = b""
    size: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    correlation_id: int
    ok: bool
    code: str = ""
    message: bytes = b""


def encode_send(correlation_id: int, event: Event) -> bytes:
    topic = event.topic.encode()
    body = _U16.pack(len(topic)) + topic + encode_event(event)[8:]
    return _frame(_REQUEST_HEAD.pack(Op.SEND, correlation_id) + body)


def encode_status(correlation_id: int) -> bytes:
    return _frame(_REQUEST_HEAD.pack(Op.STATUS, correlation_id))


_OK_RESPONSE = struct.Struct(">IIBHI")


def encode_ok(correlation_id: int) -> bytes:
    """The framed answer to a request that succeeded without a message (most SENDs)."""
    return _OK_RESPONSE.pack(_OK_RESPONSE.size - _LENGTH.size, correlation_id, 0, 0, 0)


def encode_response(response: Response) -> bytes:
    code = response.code.encode()
    body = struct.pack(">IBH", response.correlation_id, 0 if response.ok else 1, len(code))
    return _frame(body + code + _LENGTH.pack(len(response.message)) + response.message)


def _frame(body: bytes) -> bytes:
    return _LENGTH.pack(len(body)) + body


class ServerConnection:
    """Splits one connection's bytes into requests (framed) or events (lines)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.mode = Mode.UNDECIDED
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def receive_data(self, data: bytes) -> None:
        self._buffer += data
        if self.mode is Mode.UNDECIDED and len(self._buffer) >= len(PREAMBLE):
            framed = self._buffer.startswith(PREAMBLE)
            self.mode = Mode.FRAMED if framed else Mode.LINES
            if framed:
                del self._buffer[: len(PREAMBLE)]

    def next_requests(self) -> list[Request]:
        """All complete framed requests; raises `WireError` on a broken stream (once the
        requests before the broken one were returned)."""
        requests: list[Request] = []
        data = bytes(self._buffer)
        at, end = 0, len(data)
        try:
            while end - at >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(data, at)
                if length > self._max or length < _REQUEST_HEAD.size:
                    raise WireError("FRAME_TOO_LARGE" if length > self._max else "BAD_FRAME",
                                    f"frame of {length} bytes (limit {self._max})")  # fmt: skip
                if end - at < _LENGTH.size + length:
                    break
                start = at + _LENGTH.size
                requests.append(_decode_request(data, start, start + length))
                at = start + length
        except WireError:
            if not requests:
                raise
        del self._buffer[:at]
        return requests

    def next_lines(self) -> list[bytes]:
        """All complete lines (without the newline); raises `WireError` for an endless line."""
        *lines, rest = bytes(self._buffer).split(b"\n")
        self._buffer = bytearray(rest)
        if len(rest) > self._max:
            raise WireError("LINE_TOO_LONG", f"line longer than {self._max} bytes")
        return [line.rstrip(b"\r") for line in lines]


def _decode_request(data: bytes, start: int, end: int) -> Request:
    if data[start] == _SEND and end - start >= _SEND_HEAD.size:
        return _decode_send(data, start, end)
    op_code, correlation_id = _REQUEST_HEAD.unpack_from(data, start)
    if op_code == _STATUS:
        return Request(Op.STATUS, correlation_id)
    if op_code == _SEND:
        raise WireError("BAD_FRAME", "malformed SEND: shorter than its head")
    raise WireError("UNKNOWN_OP", f"unknown op {op_code}")


def _decode_send(data: bytes, start: int, end: int) -> Request:
    _, correlation_id, topic_length = _SEND_HEAD.unpack_from(data, start)
    at = start + _SEND_HEAD.size
    try:
        topic = data[at : at + topic_length].decode()
        at += topic_length
        key, size = check_untimed(data, at, end)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise WireError("BAD_FRAME", f"malformed SEND: {exc}") from exc
    return Request(Op.SEND, correlation_id, topic, key, data[at:end], size)


def parse_line(line: bytes) -> tuple[str, bytes | None, bytes]:
    """`TOPIC<TAB>VALUE` or `TOPIC<TAB>KEY<TAB>VALUE` → (topic, key, value)."""
    parts = line.split(b"\t", 2)
    if len(parts) < 2:
        raise ValueError("expected TOPIC<TAB>VALUE or TOPIC<TAB>KEY<TAB>VALUE")
    topic = parts[0].decode()
    if len(parts) == 2:
        return topic, None, parts[1]
    return topic, parts[1], parts[2]


class ClientConnection:
    """Splits the responses a client receives."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_responses(self) -> list[Response]:
        responses: list[Response] = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < _LENGTH.size + length:
                break
            body = bytes(self._buffer[_LENGTH.size : _LENGTH.size + length])
            del self._buffer[: _LENGTH.size + length]
            responses.append(_decode_response(body))
        return responses


def _decode_response(body: bytes) -> Response:
    correlation_id, status, code_length = struct.unpack_from(">IBH", body)
    code = body[7 : 7 + code_length].decode()
    (message_length,) = _LENGTH.unpack_from(body, 7 + code_length)
    start = 7 + code_length + _LENGTH.size
    message = body[start : start + message_length]
    return Response(correlation_id=correlation_id, ok=status == 0, code=code, message=message)
