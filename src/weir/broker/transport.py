"""How a connection's bytes cross its socket: as they are (PLAINTEXT, SASL_PLAINTEXT), or
through TLS (SSL, SASL_SSL).

Both transports read into the frame decoder and send responses, record bytes included. A
plaintext transport sends file slices with `sendfile`, so record bytes never enter user space.
TLS runs in user space (`ssl.SSLObject` over memory buffers, the socket driven by the event
loop), so a TLS transport must read each file slice and encrypt it: zero copy is lost, as it is
for Kafka under TLS.

`ssl` errors are turned into `TlsError` here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from typing import Protocol, cast

from weir.broker.slow_lane import SlowLane
from weir.storage import FileSlice

RECV_BYTES = 256 * 1024
#: how much of a file slice a TLS transport reads and encrypts at a time, and how much
#: ciphertext it gathers before writing to the socket
TLS_CHUNK_BYTES = 256 * 1024


class TlsError(ConnectionError):
    """The TLS session failed (a handshake refused, a peer that does not speak TLS)."""


class Transport(Protocol):
    async def handshake(self) -> None: ...

    async def recv(self, size: int) -> bytes: ...

    async def recv_into(self, buffer: memoryview) -> int: ...

    async def send(self, data: bytes | bytearray | memoryview) -> None: ...

    async def send_file(self, data: FileSlice) -> None: ...

    def peer_certificate(self) -> dict[str, object] | None: ...

    def close(self) -> None: ...


class PlaintextTransport:
    """`lane`: where file reads of this connection go once its sends stall the loop
    (`slow_lane`); None: always on the loop."""

    def __init__(
        self, sock: socket.socket, lane: SlowLane | None = None, peer: str = ""
    ) -> None:
        self.sock = sock
        self.lane = lane
        self.peer = peer

    async def handshake(self) -> None:
        return None

    async def recv(self, size: int) -> bytes:
        return await asyncio.get_running_loop().sock_recv(self.sock, size)

    async def recv_into(self, buffer: memoryview) -> int:
        return await asyncio.get_running_loop().sock_recv_into(self.sock, buffer)

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def send_file(self, data: FileSlice) -> None:
        lane = self.lane
        if lane is None:
            await sendfile(self.sock, data)
            return
        if lane.is_slow(id(self)):
            await lane.warm(data)
        lane.note_send(id(self), await sendfile(self.sock, data), self.peer)

    def peer_certificate(self) -> dict[str, object] | None:
        return None

    def close(self) -> None:
        if self.lane is not None:
            self.lane.forget(id(self))
        self.sock.close()


class TlsTransport:
    """TLS over a non-blocking socket: ciphertext moves between the socket and two memory
    buffers, plaintext between the buffers and the broker."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                await self._flush_quietly()  # the alert tells the client why
                raise TlsError(f"TLS handshake failed: {exc.reason or exc}") from None
            if not await self._fill():
                raise TlsError("the peer closed the connection during the TLS handshake")
        await self._flush()

    async def recv(self, size: int) -> bytes:
        while True:
            try:
                return self._tls.read(size)
            except ssl.SSLWantReadError:
                if not await self._fill():
                    return b""
            except ssl.SSLZeroReturnError:
                return b""
            except ssl.SSLError as exc:
                raise TlsError(f"TLS read failed: {exc.reason or exc}") from None

    async def recv_into(self, buffer: memoryview) -> int:
        while True:
            try:
                # with a buffer, read() fills it and returns a count (typeshed says bytes)
                return cast(int, self._tls.read(len(buffer), buffer))
            except ssl.SSLWantReadError:
                if not await self._fill():
                    return 0
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise TlsError(f"TLS read failed: {exc.reason or exc}") from None

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        self._write(data)
        await self._flush()

    async def send_file(self, data: FileSlice) -> None:
        """Read the slice and send it encrypted, a chunk at a time."""
        offset, remaining = data.position, data.size
        while remaining:
            chunk = os.pread(data.fd, min(remaining, TLS_CHUNK_BYTES), offset)
            if not chunk:
                raise ConnectionError(f"{data.path} ended before the slice did")
            self._write(chunk)
            await self._flush()
            offset += len(chunk)
            remaining -= len(chunk)

    def peer_certificate(self) -> dict[str, object] | None:
        certificate = self._tls.getpeercert()
        return dict(certificate) if certificate else None

    def close(self) -> None:
        """Send close_notify if the socket takes it at once, then close."""
        with contextlib.suppress(ssl.SSLError):
            self._tls.unwrap()
        try:
            pending = self._outgoing.read()
            if pending:
                self.sock.send(pending)
        except OSError:
            pass
        self.sock.close()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        try:
            while view:
                written = self._tls.write(view)
                view = view[written:]
        except ssl.SSLError as exc:
            raise TlsError(f"TLS write failed: {exc.reason or exc}") from None

    async def _fill(self) -> bool:
        """Read ciphertext from the socket; False once the peer has closed."""
        await self._flush()  # what the TLS layer owes the peer first (a handshake answer)
        data = await asyncio.get_running_loop().sock_recv(self.sock, RECV_BYTES)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await asyncio.get_running_loop().sock_sendall(self.sock, self._outgoing.read())

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(OSError):
            await self._flush()


async def sendfile(sock: socket.socket, data: FileSlice) -> int:
    """os.sendfile the slice into a non-blocking socket, waiting for room when it is full; the
    longest a single call kept this thread (ns: its reads of the file)."""
    offset, remaining = data.position, data.size
    longest = 0
    while remaining:
        started = time.perf_counter_ns()
        try:
            sent = os.sendfile(sock.fileno(), data.fd, offset, remaining)
        except BlockingIOError:
            await _writable(sock)
            continue
        finally:
            longest = max(longest, time.perf_counter_ns() - started)
        if sent == 0:
            raise ConnectionError(f"{data.path} ended before the slice did")
        offset += sent
        remaining -= sent
    return longest


async def _writable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)
