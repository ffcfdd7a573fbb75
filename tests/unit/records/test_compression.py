"""Compression codecs: round trips, and interoperability with what other Kafka clients use."""

from __future__ import annotations

import gzip
import random
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.records.compression import Compression, compress, decompress
from weir.records.errors import CorruptRecordError, UnsupportedCompressionError

MODEST = settings(max_examples=150, deadline=None)
FEW = settings(max_examples=25, deadline=None)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
LZ4_FRAME_MAGIC = struct.pack("<I", 0x184D2204)
ZSTD_FRAME_MAGIC = struct.pack("<I", 0xFD2FB528)
GZIP_MAGIC = b"\x1f\x8b"

COMPRESSED = [c for c in Compression if c is not Compression.NONE]


@st.composite
def large_payloads(draw: st.DrawFn) -> bytes:
    """More than 64 KiB: several xerial blocks, several LZ4 blocks. Random, repetitive or mixed."""
    size = draw(st.integers(min_value=64 * 1024 + 1, max_value=200 * 1024))
    # Drawing 200 KiB byte by byte from Hypothesis is slow; a drawn seed is as reproducible.
    noise = random.Random(draw(st.integers(0, 2**32))).randbytes(size)
    kind = draw(st.sampled_from(["random", "repetitive", "mixed"]))
    if kind == "random":
        return noise
    pattern = draw(st.binary(min_size=1, max_size=64))
    repeated = (pattern * (size // len(pattern) + 1))[:size]
    if kind == "repetitive":
        return repeated
    return noise[: size // 2] + repeated[size // 2 :]


PAYLOADS = st.one_of(st.binary(max_size=2048), large_payloads())


# --- round trips ---------------------------------------------------------------------------


@MODEST
@given(codec=st.sampled_from(Compression), data=st.binary(max_size=2048))
def test_round_trip_small(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@FEW
@given(codec=st.sampled_from(Compression), data=large_payloads())
def test_round_trip_larger_than_64_kib(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_empty(codec: Compression) -> None:
    assert decompress(codec, compress(codec, b"")) == b""


@pytest.mark.parametrize("codec", list(Compression))
def test_accepts_bytearray_and_memoryview(codec: Compression) -> None:
    # Batches hand the records section over as a memoryview into the receive buffer.
    data = b"records section " * 100
    compressed = compress(codec, bytearray(data))
    assert decompress(codec, memoryview(compressed)) == data
    framed = b"\x00" * 61 + compressed
    assert decompress(codec, memoryview(framed)[61:]) == data


def test_none_is_identity() -> None:
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, memoryview(b"abc")) == b"abc"


# --- codec selection -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression))
def test_from_attributes_reads_the_low_three_bits(codec: Compression) -> None:
    # timestamp type, transactional and control bits must not disturb the codec.
    assert Compression.from_attributes(int(codec)) is codec
    assert Compression.from_attributes(0x38 | int(codec)) is codec


@pytest.mark.parametrize("code", [5, 6, 7])
def test_from_attributes_unknown_codec(code: int) -> None:
    with pytest.raises(UnsupportedCompressionError) as excinfo:
        Compression.from_attributes(0x10 | code)
    assert excinfo.value.error_code == 76
    assert excinfo.value.error_name == "UNSUPPORTED_COMPRESSION_TYPE"


def test_from_name_is_case_insensitive() -> None:
    assert Compression.from_name("gzip") is Compression.GZIP
    assert Compression.from_name("Snappy") is Compression.SNAPPY
    assert Compression.from_name("LZ4") is Compression.LZ4
    assert Compression.from_name("zstd") is Compression.ZSTD
    assert Compression.from_name("none") is Compression.NONE
    with pytest.raises(ValueError, match="brotli"):
        Compression.from_name("brotli")


# --- snappy: read raw and xerial, write xerial ----------------------------------------------


def xerial_frame(data: bytes, block_sizes: list[int]) -> bytes:
    """Xerial framing as Java's SnappyOutputStream writes it, with the given block sizes."""
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    pos = 0
    sizes = iter(block_sizes)
    while pos < len(data):
        size = next(sizes, len(data) - pos)
        block = bytes(cramjam.snappy.compress_raw(data[pos : pos + size]))
        out += struct.pack(">i", len(block)) + block
        pos += size
    return bytes(out)


def read_xerial_blocks(framed: bytes) -> list[bytes]:
    """An independent reader: the raw snappy blocks after the 16-byte xerial header."""
    assert framed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    blocks, pos = [], 16
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        blocks.append(framed[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert pos == len(framed)
    return blocks


@MODEST
@given(data=PAYLOADS)
def test_snappy_reads_raw_snappy(data: bytes) -> None:
    # librdkafka (and kafka-python without xerial) write a single raw snappy block.
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


@MODEST
@given(data=PAYLOADS, block_sizes=st.lists(st.integers(1, 40_000), max_size=8))
def test_snappy_reads_xerial_framing_of_any_block_size(data: bytes, block_sizes: list[int]) -> None:
    assert decompress(Compression.SNAPPY, xerial_frame(data, block_sizes)) == data


@MODEST
@given(data=PAYLOADS)
def test_snappy_writes_xerial_framing_java_can_read(data: bytes) -> None:
    out = compress(Compression.SNAPPY, data)
    assert out.startswith(XERIAL_MAGIC)
    blocks = read_xerial_blocks(out)
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data
    # Java's SnappyInputStream sizes its buffer from the block; keep blocks at 32 KiB of input.
    assert all(len(bytes(cramjam.snappy.decompress_raw(b))) <= 32 * 1024 for b in blocks)


def test_snappy_truncated_inside_a_xerial_block_is_corrupt() -> None:
    out = compress(Compression.SNAPPY, random.Random(7).randbytes(1000))
    for cut in (17, 19, 20, len(out) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(Compression.SNAPPY, out[:cut])


@pytest.mark.parametrize("cut", [8, 12, 15])
def test_snappy_truncated_inside_the_xerial_header_is_corrupt(cut: int) -> None:
    out = compress(Compression.SNAPPY, b"some records")
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, out[:cut])


# --- lz4: the standard frame format (KIP-57) ------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 for inputs under 16 bytes: enough for an LZ4 frame descriptor."""
    assert len(data) < 16
    h = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl((h + byte * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def test_xxh32_helper_matches_reference_vectors() -> None:
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456
    assert xxh32_short(b"abc") == 0x32D153FF


def lz4_descriptor(frame: bytes) -> tuple[int, bytes, int]:
    """(FLG, descriptor bytes covered by HC, HC) of an LZ4 frame."""
    flg = frame[4]
    length = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    return flg, frame[4 : 4 + length], frame[4 + length]


@MODEST
@given(data=PAYLOADS)
def test_lz4_writes_a_standard_frame(data: bytes) -> None:
    out = compress(Compression.LZ4, data)
    assert out[:4] == LZ4_FRAME_MAGIC
    flg, descriptor, hc = lz4_descriptor(out)
    assert flg >> 6 == 0b01  # frame format version 1
    # KIP-57: Kafka's old clients hashed the magic too; the standard hashes the descriptor only.
    assert hc == (xxh32_short(descriptor) >> 8) & 0xFF
    assert bytes(cramjam.lz4.decompress(out)) == data


def lz4_frame_of_stored_blocks(data: bytes, block_size: int) -> bytes:
    """A valid LZ4 frame written without an LZ4 compressor: every block stored uncompressed."""
    descriptor = bytes([0x60, 0x40])  # version 1, independent blocks; 64 KiB max block size
    out = bytearray(LZ4_FRAME_MAGIC + descriptor)
    out.append((xxh32_short(descriptor) >> 8) & 0xFF)
    for start in range(0, len(data), block_size):
        block = data[start : start + block_size]
        out += struct.pack("<I", 0x80000000 | len(block)) + block
    out += b"\x00\x00\x00\x00"  # end mark
    return bytes(out)


@MODEST
@given(data=st.binary(max_size=4096), block_size=st.integers(1, 64 * 1024))
def test_lz4_reads_frames_from_another_writer(data: bytes, block_size: int) -> None:
    assert decompress(Compression.LZ4, lz4_frame_of_stored_blocks(data, block_size)) == data
    assert decompress(Compression.LZ4, bytes(cramjam.lz4.compress(data, level=9))) == data


# --- gzip and zstd --------------------------------------------------------------------------


@MODEST
@given(data=PAYLOADS, level=st.integers(1, 9))
def test_gzip_interoperates_with_the_standard_library(data: bytes, level: int) -> None:
    ours = compress(Compression.GZIP, data)
    assert ours[:2] == GZIP_MAGIC
    assert gzip.decompress(ours) == data
    assert decompress(Compression.GZIP, gzip.compress(data, compresslevel=level)) == data


def test_gzip_reads_concatenated_members() -> None:
    # Java's GZIPInputStream and Python's gzip both accept multi-member streams.
    members = gzip.compress(b"first half, ") + gzip.compress(b"second half")
    assert decompress(Compression.GZIP, members) == b"first half, second half"


@MODEST
@given(data=PAYLOADS, level=st.integers(1, 19))
def test_zstd_interoperates_with_cramjam(data: bytes, level: int) -> None:
    ours = compress(Compression.ZSTD, data)
    assert ours[:4] == ZSTD_FRAME_MAGIC
    assert bytes(cramjam.zstd.decompress(ours)) == data
    assert decompress(Compression.ZSTD, bytes(cramjam.zstd.compress(data, level=level))) == data


def test_zstd_reads_a_streamed_frame_without_content_size() -> None:
    # zstd-jni's ZstdOutputStream (the Java client) streams; its frames omit the content size.
    compressor = cramjam.zstd.Compressor()
    for _ in range(50):
        compressor.compress(b"streamed record batch body ")
    frame = bytes(compressor.finish())
    assert decompress(Compression.ZSTD, frame) == b"streamed record batch body " * 50


# --- damage ---------------------------------------------------------------------------------

GARBAGE = [
    b"",
    b"x",
    b"\x00" * 16,
    b"not compressed at all, just text",
    b"\xff\xff\xff\xff\x0f",
    LZ4_FRAME_MAGIC + b"garbage",
    ZSTD_FRAME_MAGIC + b"garbage",
    GZIP_MAGIC + b"\x08\x00garbage",
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, 1000) + b"short",
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5),
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff",
]


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_is_corrupt_message(codec: Compression, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError) as excinfo:
        decompress(codec, garbage)
    assert excinfo.value.error_code == 2


@MODEST
@given(codec=st.sampled_from(COMPRESSED), garbage=st.binary(max_size=512))
def test_arbitrary_input_decompresses_or_is_corrupt_message(
    codec: Compression, garbage: bytes
) -> None:
    # A few byte strings are valid streams (b"\x00" is an empty raw snappy block); everything
    # else must surface as CORRUPT_MESSAGE, never as a cramjam or struct exception.
    try:
        result = decompress(codec, garbage)
    except CorruptRecordError:
        return
    assert isinstance(result, bytes)


@MODEST
@given(
    codec=st.sampled_from([Compression.GZIP, Compression.LZ4, Compression.ZSTD]),
    data=st.binary(min_size=1, max_size=4096),
    cut=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_truncated_stream_is_corrupt_message(codec: Compression, data: bytes, cut: float) -> None:
    # These formats end with a trailer, so any truncation is detectable. (Xerial snappy is not:
    # cutting exactly at a block boundary yields a valid shorter stream.)
    out = compress(codec, data)
    with pytest.raises(CorruptRecordError):
        decompress(codec, out[: int(cut * len(out))])


@MODEST
@given(data=st.binary(min_size=1, max_size=4096), cut=st.data())
def test_snappy_truncated_mid_block_is_corrupt_message(data: bytes, cut: st.DataObject) -> None:
    out = compress(Compression.SNAPPY, data)
    at = cut.draw(st.integers(min_value=17, max_value=len(out) - 1), label="cut")
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, out[:at])
