"""The controller's connections to brokers: one sender thread per broker, requests in order.

Each request is sent and its response awaited before the next; a broker that cannot be reached
or drops the connection gets the same request again after a back-off, until it answers or the
controller removes it (it died, or this broker stopped being the controller). This is how
Kafka's controller channel behaves, and it is what keeps a broker's view in the order the
controller decided it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from weir.protocol.codec import decode_response, encode_request

log = logging.getLogger(__name__)

CLIENT_ID = "weir-controller"
RETRY_BACKOFF_S = 0.2
_SIZE = struct.Struct(">i")

ResponseCallback = Callable[[Any], None]
#: opens a connection to a broker, ready for requests: (address, timeout) -> socket. The
#: broker passes one that speaks its inter-broker listener's security (TLS, SASL).
Connector = Callable[[tuple[str, int], float], socket.socket]


def plaintext_connection(address: tuple[str, int], timeout: float) -> socket.socket:
    return socket.create_connection(address, timeout=timeout)


@dataclass(frozen=True, slots=True)
class _Send:
    api_key: int
    api_version: int
    body: Any
    on_response: ResponseCallback | None


class BrokerChannel:
    """Requests to one broker, sent by a thread of their own."""

    def __init__(
        self, node_id: int, host: str, port: int, *, request_timeout_s: float,
        is_current: Callable[[], bool], connect: Connector = plaintext_connection,
    ) -> None:  # fmt: skip
        self.node_id = node_id
        self._connect = connect
        self.address = (host, port)
        self._timeout = request_timeout_s
        self._is_current = is_current
        self._queue: queue.Queue[_Send | None] = queue.Queue()
        self._stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._correlation = itertools.count(1)
        self._thread = threading.Thread(
            target=self._run, name=f"weir-controller-to-{node_id}", daemon=True
        )
        self._thread.start()

    def send(
        self, api_key: int, api_version: int, body: Any, on_response: ResponseCallback | None = None
    ) -> None:
        self._queue.put(_Send(api_key, api_version, body, on_response))

    def stop(self) -> None:
        self._stopped.set()
        self._queue.put(None)

    def _run(self) -> None:
        while not self._stopped.is_set():
            item = self._queue.get()
            if item is None:
                break
            while not self._stopped.is_set():
                if not self._is_current():
                    self._stopped.set()  # no longer the controller: send nothing more
                    break
                try:
                    response = self._exchange(item)
                except (OSError, ValueError) as exc:
                    log.info(
                        "request %d to broker %d at %s:%d failed (%s); retrying",
                        item.api_key, self.node_id, *self.address, exc,
                    )  # fmt: skip
                    self._close()
                    self._stopped.wait(RETRY_BACKOFF_S)
                    continue
                if item.on_response is not None:
                    try:
                        item.on_response(response)
                    except Exception:
                        log.exception("handling broker %d's response failed", self.node_id)
                break
        self._close()

    def _exchange(self, item: _Send) -> Any:
        if self._sock is None:
            self._sock = self._connect(self.address, self._timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        correlation_id = next(self._correlation)
        frame = encode_request(item.api_key, item.api_version, correlation_id, CLIENT_ID,
                               item.body)  # fmt: skip
        self._sock.sendall(frame)
        (size,) = _SIZE.unpack(self._read(_SIZE.size))
        payload = self._read(size)
        answered, body = decode_response(item.api_key, item.api_version, payload)
        if answered != correlation_id:
            raise ValueError(f"response for request {answered}, expected {correlation_id}")
        return body

    def _read(self, count: int) -> bytes:
        assert self._sock is not None
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self._sock.recv(count - len(chunks))
            if not chunk:
                raise ConnectionResetError("the broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
