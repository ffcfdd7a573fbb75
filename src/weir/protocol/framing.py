"""Size-prefixed Kafka frames, sans-IO: bytes in, whole frames out.

Every Kafka request and response is `size:int32 | payload`. `FrameDecoder` buffers what the
transport hands it and yields complete payloads; it enforces `socket.request.max.bytes` from the
size prefix alone, before buffering the payload, so an oversized frame costs nothing.
Nothing here touches sockets: the caller moves the bytes.
"""

from __future__ import annotations

import struct
from typing import Final

from weir.protocol.errors import FrameTooLargeError, InvalidFrameError


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()
_SIZE = struct.Struct(">i")
SIZE_PREFIX = _SIZE.size


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._position = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer) - self._position

    @property
    def next_frame_size(self) -> int | None:
        """The size of the frame being received, once its size prefix is in (else None)."""
        if self.buffered < SIZE_PREFIX:
            return None
        size: int = _SIZE.unpack_from(self._buffer, self._position)[0]
        return size

    def next_frame(self) -> bytes | _NeedData:
        """The next whole payload, or NEED_DATA. Raises on a negative or oversized size."""
        if self.buffered < SIZE_PREFIX:
            self._compact()
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, self._position)
        if size < 0:
            raise InvalidFrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}"
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
