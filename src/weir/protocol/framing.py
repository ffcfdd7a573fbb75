"""Size-prefixed Kafka frames, sans-IO: bytes in, whole frames out.

Every Kafka request and response is `size:int32 | payload`. `FrameDecoder` buffers what the
transport hands it and yields complete payloads; it enforces its limit (`socket.request.max.bytes`,
or `sasl.server.max.receive.size` before authentication) from the size prefix alone, before
buffering the payload, so an oversized frame costs nothing.
Nothing here touches sockets: the caller moves the bytes.

A frame larger than `in_place_bytes` is received in place: `receive_buffer()` hands out room at
the end of the frame's own buffer, so the transport writes straight into it (no copy out of a
receive buffer). That buffer grows with what has arrived, doubling (by at least
`in_place_bytes`) up to the frame's size, never beyond: a peer that announces a large frame and
sends little of it costs what it sent, not what it announced.
"""

from __future__ import annotations

import struct
from typing import Final

from weir.protocol.errors import FrameTooLargeError, InvalidFrameError


class NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()
_SIZE = struct.Struct(">i")
SIZE_PREFIX = _SIZE.size


Frame = bytes | memoryview


class FrameDecoder:
    def __init__(
        self,
        max_frame_bytes: int,
        in_place_bytes: int = 64 * 1024,
        limit_name: str = "socket.request.max.bytes",
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        #: the setting max_frame_bytes comes from, named when a frame exceeds it
        self.limit_name = limit_name
        self.in_place_bytes = in_place_bytes
        self._buffer = bytearray()
        self._position = 0
        self._large: bytearray | None = None  # a large frame being received in place
        self._large_filled = 0
        self._large_size = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer) - self._position

    def receive_buffer(self) -> memoryview | None:
        """Where the transport should put the next bytes of a large frame (room at the end of
        what it has received), or None to hand them to `receive_data` instead. Release the view
        before asking for the next one: the buffer may grow."""
        if self._large is None:
            size = self.next_frame_size
            if size is None or not self.in_place_bytes < size <= self.max_frame_bytes:
                return None
            start = self._position + SIZE_PREFIX
            self._large = bytearray(memoryview(self._buffer)[start:])  # less than size
            self._large_filled = len(self._large)
            self._large_size = size
            self._buffer.clear()
            self._position = 0
        if self._large_filled == len(self._large):
            room = max(len(self._large), self.in_place_bytes)
            self._large += bytes(min(room, self._large_size - len(self._large)))
        return memoryview(self._large)[self._large_filled :]

    def received(self, count: int) -> None:
        """`count` bytes were written into the last `receive_buffer()`."""
        self._large_filled += count

    @property
    def next_frame_size(self) -> int | None:
        """The size of the frame being received, once its size prefix is in (else None)."""
        if self._large is not None:
            return self._large_size
        if self.buffered < SIZE_PREFIX:
            return None
        size: int = _SIZE.unpack_from(self._buffer, self._position)[0]
        return size

    def next_frame(self) -> Frame | NeedData:
        """The next whole payload (read-only), or NEED_DATA. Raises on a negative or oversized
        size."""
        if self._large is not None:
            if self._large_filled < self._large_size:
                return NEED_DATA
            frame, self._large = self._large, None
            return memoryview(frame).toreadonly()
        if self.buffered < SIZE_PREFIX:
            self._compact()
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, self._position)
        if size < 0:
            raise InvalidFrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds {self.limit_name}={self.max_frame_bytes}"
            )
        start = self._position + SIZE_PREFIX
        if len(self._buffer) - start < size:
            self._compact()
            return NEED_DATA
        self._position = start + size
        with memoryview(self._buffer) as view:
            return bytes(view[start : self._position])

    def _compact(self) -> None:
        if self._position:
            del self._buffer[: self._position]
            self._position = 0


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix `payload` with its size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
