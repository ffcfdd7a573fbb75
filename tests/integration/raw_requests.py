"""Kafka requests written by hand (kio's classes over a plain socket), for tests that need
requests or timings no real client produces."""

from __future__ import annotations

import io
import socket
import statistics
import struct
import threading
import time
from typing import Any

from kio.serial import entity_writer

from weir.protocol.apis import ApiKey
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


class RoundTripProbe:
    """Another client of a broker: a thread that sends ApiVersions on its own connection, one
    request at a time, and records each round trip in seconds (`times`). Used as a context
    manager around something that must not stop the broker answering others."""

    def __init__(self, port: int, pause: float = 0.01, timeout: float = 60.0) -> None:
        self.port = port
        self.pause = pause
        self.timeout = timeout
        self.times: list[float] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RoundTripProbe:
        self._thread.start()
        while not self.times and self.failure is None:  # connected and answered once
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout)

    def _run(self) -> None:
        body = codec_for(ApiKey.API_VERSIONS, 3).request_type(
            client_software_name="probe", client_software_version="1"
        )
        try:
            with socket.create_connection(("127.0.0.1", self.port), self.timeout) as sock:
                correlation_id = 0
                while not self._stop.is_set():
                    correlation_id += 1
                    started = time.monotonic()
                    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, body, correlation_id))
                    (size,) = struct.unpack(">i", recv_exact(sock, 4))
                    recv_exact(sock, size)
                    self.times.append(time.monotonic() - started)
                    time.sleep(self.pause)
        except BaseException as exc:  # reported by the test through `failure`
            self.failure = exc

    @property
    def longest(self) -> float:
        return max(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)
