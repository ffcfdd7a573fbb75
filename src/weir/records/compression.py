"""Compression codecs of record batch v2: gzip, snappy, lz4 and zstd, all through cramjam.

Snappy comes in two framings and clients differ: librdkafka and kafka-python read both, Java
writes xerial's block framing. We decompress either and write xerial framing, which every client
reads. LZ4 is the standard LZ4 frame format (KIP-57).
"""

from __future__ import annotations

import enum
import struct

import cramjam

from weir.records.errors import CorruptRecordError, UnsupportedCompressionError

Buffer = bytes | bytearray | memoryview


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_attributes(cls, attributes: int) -> Compression:
        code = attributes & 0x07
        try:
            return cls(code)
        except ValueError:
            raise UnsupportedCompressionError(f"unknown compression codec {code}") from None

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_BLOCK_LEN = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024


def snappy_xerial_compress(data: Buffer) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        out += _BLOCK_LEN.pack(len(block))
        out += block
    return bytes(out)


def snappy_decompress(data: Buffer) -> bytes:
    """Decompress raw snappy or xerial-framed snappy, whichever `data` is."""
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = _XERIAL_HEADER.size
    if len(view) < pos:
        raise CorruptRecordError("truncated xerial snappy header")
    parts = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block header")
        (length,) = _BLOCK_LEN.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError("truncated xerial snappy block")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)


def compress(codec: Compression, data: Buffer, level: int | None = None) -> bytes:
    """Compress a records section; `level` (gzip, lz4, zstd) None for the codec's default."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec is Compression.SNAPPY:
        return snappy_xerial_compress(data)
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    return bytes(cramjam.zstd.compress(data, level=level))


def decompress(codec: Compression, data: Buffer) -> bytes:
    """Decompress a batch's records section; damage becomes CORRUPT_MESSAGE."""
    if codec is Compression.NONE:
        return bytes(data)
    try:
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is Compression.SNAPPY:
            return snappy_decompress(data)
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueError
        raise CorruptRecordError(f"{codec.name.lower()} decompression failed: {exc}") from None
