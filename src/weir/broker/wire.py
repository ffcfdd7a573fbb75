"""Responses that carry record bytes from segment files, sent without copying them.

A fetch response is encoded by kio with a unique 16-byte marker in place of each partition's
records. The encoded bytes are then cut at each marker: the marker's length prefix (int32, or
a compact uvarint in flexible versions) is replaced by the real length, and the marker by the
file slice, which the connection sends with sendfile. Array counts are not byte sizes, so
nothing else in the message changes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from weir.protocol.codec import Request, encode_response
from weir.protocol.framing import size_prefix
from weir.protocol.uvarint import encode_uvarint
from weir.storage import FileSlice

Chunk = bytes | FileSlice
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ChunkedResponse:
    """A framed response as bytes and file slices, in send order."""

    chunks: list[Chunk]

    def close(self) -> None:
        """Give back the file slices' descriptors (after sending, or when it cannot be sent)."""
        for chunk in self.chunks:
            if not isinstance(chunk, bytes):
                chunk.close()

    @property
    def size(self) -> int:
        return sum(len(c) if isinstance(c, bytes) else c.size for c in self.chunks)

    @classmethod
    def with_slices(
        cls, request: Request, response: Any, slices: Mapping[bytes, FileSlice]
    ) -> ChunkedResponse:
        encoded = encode_response(
            request.api_key, request.api_version, request.correlation_id, response
        )[4:]
        flexible = bool(getattr(type(response), "__flexible__", False))
        chunks: list[Chunk] = []
        position = 0
        for marker, data in sorted(slices.items(), key=lambda item: encoded.find(item[0])):
            at = encoded.find(marker, position)
            if at < 0:
                raise ValueError("records marker missing from the encoded response")
            prefix_len = 1 if flexible else 4
            chunks.append(encoded[position : at - prefix_len])
            chunks.append(encode_uvarint(data.size + 1) if flexible else _INT32.pack(data.size))
            chunks.append(data)
            position = at + len(marker)
        chunks.append(encoded[position:])
        body = cls(chunks)
        return cls([size_prefix(body.size), *chunks])
