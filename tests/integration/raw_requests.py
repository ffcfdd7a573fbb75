"""Kafka requests written by hand (kio's classes over a plain socket), for tests that need
requests or timings no real client produces."""

from __future__ import annotations

import io
import socket
from typing import Any

from kio.serial import entity_writer

from weir.protocol.codec import codec_for
from weir.protocol.framing import frame


def encode_request(
    api_key: int, version: int, body: Any, correlation_id: int, client_id: str = "raw-test"
) -> bytes:
    """A framed request written by kio, header then body, as a client sends it."""
    cls = codec_for(api_key, version).request_type
    header_cls = cls.__header_schema__  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    header = header_cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buffer, header)
    entity_writer(cls)(buffer, body)
    return frame(buffer.getvalue())


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"broker closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)
