"""Record batch v2: building, reading back, in-place rewrites and walking a log of batches."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.records import (
    HEADER_SIZE,
    MAGIC_V2,
    BatchHeader,
    BatchSpec,
    Compression,
    CorruptRecordError,
    Record,
    build_batch,
    iter_batches,
    iter_records,
    peek_offset_and_size,
    peek_transactional,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    simple_batch,
    validate_batch,
)

MODEST = settings(max_examples=150, deadline=None)

OFFSETS = st.integers(min_value=0, max_value=2**62)
TIMESTAMPS = st.integers(min_value=0, max_value=2**50)  # milliseconds; -1 handled separately
MAYBE_BYTES = st.none() | st.binary(max_size=64)
HEADERS = st.lists(st.tuples(st.text(max_size=10), MAYBE_BYTES), max_size=3).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 12) -> list[Record]:
    """Records at consecutive offsets, as a producer sends them."""
    base = draw(OFFSETS)
    n = draw(st.integers(min_value=1, max_value=max_size))
    return [
        Record(
            offset=base + i,
            timestamp=draw(TIMESTAMPS),
            key=draw(MAYBE_BYTES),
            value=draw(st.none() | st.binary(max_size=256)),
            headers=draw(HEADERS),
        )
        for i in range(n)
    ]


SPECS = st.builds(
    BatchSpec,
    compression=st.sampled_from(Compression),
    producer_id=st.integers(min_value=-1, max_value=2**63 - 1),
    producer_epoch=st.integers(min_value=-1, max_value=2**15 - 1),
    base_sequence=st.integers(min_value=-1, max_value=2**31 - 1),
    partition_leader_epoch=st.integers(min_value=-1, max_value=2**31 - 1),
    log_append_time=st.booleans(),
    transactional=st.booleans(),
)


def single(buf: bytes | bytearray) -> BatchHeader:
    return validate_batch(buf, max_message_bytes=len(buf))


# --- build, validate, read back -------------------------------------------------------------


@MODEST
@given(records=record_lists(), spec=SPECS)
def test_build_validate_iterate_round_trip(records: list[Record], spec: BatchSpec) -> None:
    buf = build_batch(records, spec=spec)
    header = single(buf)
    decoded = list(iter_records(header))
    if spec.log_append_time:
        max_ts = max(r.timestamp for r in records)
        records = [
            Record(offset=r.offset, timestamp=max_ts, key=r.key, value=r.value, headers=r.headers)
            for r in records
        ]
    assert decoded == records


@MODEST
@given(records=record_lists(), spec=SPECS)
def test_header_fields_of_a_built_batch(records: list[Record], spec: BatchSpec) -> None:
    buf = build_batch(records, spec=spec)
    header = BatchHeader(buf)
    assert header.magic == MAGIC_V2
    assert header.size == len(buf)
    assert header.crc_ok()
    assert header.base_offset == records[0].offset
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.last_offset == records[-1].offset
    assert header.next_offset == records[-1].offset + 1
    assert header.base_timestamp == min(r.timestamp for r in records)
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.compression is spec.compression
    assert header.producer_id == spec.producer_id
    assert header.producer_epoch == spec.producer_epoch
    assert header.base_sequence == spec.base_sequence
    assert header.partition_leader_epoch == spec.partition_leader_epoch
    assert header.is_transactional == spec.transactional
    assert peek_transactional(buf) == spec.transactional
    assert header.is_log_append_time == spec.log_append_time
    assert not header.is_control
    assert peek_offset_and_size(buf) == (records[0].offset, len(buf))


def test_default_spec_is_a_plain_non_idempotent_batch() -> None:
    header = BatchHeader(build_batch([Record(offset=5, timestamp=1, key=b"k", value=b"v")]))
    assert header.producer_id == -1
    assert header.producer_epoch == -1
    assert header.base_sequence == -1
    assert header.partition_leader_epoch == -1
    assert header.compression is Compression.NONE
    assert header.attributes == 0


def test_no_timestamp_survives_the_round_trip() -> None:
    # Old producers send timestamp -1 (NO_TIMESTAMP); it is a legal value, not an error.
    records = [Record(offset=0, timestamp=-1, key=None, value=b"v")]
    assert list(iter_records(single(build_batch(records)))) == records


def test_simple_batch() -> None:
    buf = simple_batch(
        [b"a", None, b"c"], keys=[b"1", b"2", None], timestamp=42, compression=Compression.GZIP
    )
    header = single(buf)
    assert header.compression is Compression.GZIP
    assert list(iter_records(header)) == [
        Record(offset=0, timestamp=42, key=b"1", value=b"a"),
        Record(offset=1, timestamp=42, key=b"2", value=None),
        Record(offset=2, timestamp=42, key=None, value=b"c"),
    ]


def test_simple_batch_rejects_mismatched_keys() -> None:
    with pytest.raises(ValueError):
        simple_batch([b"a", b"b"], keys=[b"1"])


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_control_and_transactional_bits() -> None:
    buf = build_batch(
        [Record(offset=0, timestamp=0, key=b"\x00\x00\x00\x00", value=b"\x00\x00")],
        spec=BatchSpec(producer_id=7, producer_epoch=0, transactional=True, control=True),
    )
    header = BatchHeader(buf)
    assert header.is_control
    assert header.is_transactional
    assert header.attributes == 0x30
    assert not peek_transactional(buf)  # a transaction's marker, not its data


def test_peek_transactional_refuses_what_is_too_short_to_have_attributes() -> None:
    spec = BatchSpec(producer_id=7, producer_epoch=0, transactional=True)
    buf = build_batch([Record(offset=0, timestamp=0, key=None, value=b"v")], spec=spec)
    assert peek_transactional(buf) and peek_transactional(buf[:23])
    assert not peek_transactional(buf[:22]) and not peek_transactional(b"")


@MODEST
@given(records=record_lists(), extra=st.integers(min_value=1, max_value=1000))
def test_compacted_batch_keeps_its_offset_range(records: list[Record], extra: int) -> None:
    # Compaction drops records but keeps the batch's original last offset.
    kept = records[::2]
    base = records[0].offset
    last_delta = records[-1].offset - base + extra
    header = BatchHeader(build_batch(kept, base_offset=base, last_offset_delta=last_delta))
    assert header.base_offset == base
    assert header.last_offset_delta == last_delta
    assert header.records_count == len(kept)
    assert list(iter_records(header)) == kept


# --- in-place rewrites ----------------------------------------------------------------------


def concatenated(batches: list[bytes]) -> tuple[bytearray, list[int]]:
    positions, total = [], 0
    for b in batches:
        positions.append(total)
        total += len(b)
    return bytearray(b"".join(batches)), positions


@MODEST
@given(
    batches=st.lists(record_lists(max_size=4).map(build_batch), min_size=1, max_size=4),
    data=st.data(),
    new_base=OFFSETS,
    new_epoch=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_set_base_offset_and_leader_epoch_in_place(
    batches: list[bytes], data: st.DataObject, new_base: int, new_epoch: int
) -> None:
    buf, positions = concatenated(batches)
    i = data.draw(st.integers(min_value=0, max_value=len(batches) - 1), label="batch")
    set_base_offset(buf, new_base, positions[i])
    set_partition_leader_epoch(buf, new_epoch, positions[i])

    header = BatchHeader(buf, positions[i])
    assert header.base_offset == new_base
    assert header.partition_leader_epoch == new_epoch
    assert header.crc_ok()  # both fields sit before the CRC-covered region
    batch = bytes(buf[positions[i] : positions[i] + header.size])
    records = list(iter_records(single(batch)))
    assert [r.offset for r in records] == [new_base + k for k in range(len(records))]
    # The neighbours are untouched.
    for j, original in enumerate(batches):
        if j != i:
            assert buf[positions[j] : positions[j] + len(original)] == original


@MODEST
@given(
    batches=st.lists(record_lists(max_size=4).map(build_batch), min_size=1, max_size=4),
    data=st.data(),
    append_time=TIMESTAMPS,
)
def test_set_log_append_time(batches: list[bytes], data: st.DataObject, append_time: int) -> None:
    buf, positions = concatenated(batches)
    i = data.draw(st.integers(min_value=0, max_value=len(batches) - 1), label="batch")
    set_log_append_time(buf, append_time, positions[i])

    header = BatchHeader(buf, positions[i])
    assert header.is_log_append_time
    assert header.max_timestamp == append_time
    assert header.crc_ok()
    assert header.compression is Compression.NONE  # the codec bits are preserved
    records = list(iter_records(header))
    assert len(records) == header.records_count
    assert all(r.timestamp == append_time for r in records)
    assert [h.crc_ok() for h in iter_batches(buf, verify_crc=True)] == [True] * len(batches)
    for j, original in enumerate(batches):
        if j != i:
            assert buf[positions[j] : positions[j] + len(original)] == original


@pytest.mark.parametrize("codec", list(Compression))
def test_set_log_append_time_keeps_the_codec(codec: Compression) -> None:
    buf = bytearray(simple_batch([b"a", b"b"], timestamp=5, compression=codec))
    set_log_append_time(buf, 1_700_000_000_000)
    header = single(buf)
    assert header.compression is codec
    assert [r.timestamp for r in iter_records(header)] == [1_700_000_000_000] * 2


def test_rewrites_work_through_a_memoryview() -> None:
    buf = bytearray(b"\xee" * 7 + simple_batch([b"v"]))
    view = memoryview(buf)[7:]
    set_base_offset(view, 99)
    set_partition_leader_epoch(view, 3)
    set_log_append_time(view, 1234)
    header = BatchHeader(buf, 7)
    assert header.base_offset == 99
    assert header.partition_leader_epoch == 3
    assert header.max_timestamp == 1234
    assert header.crc_ok()
    assert buf[:7] == b"\xee" * 7


# --- zero-copy header view -------------------------------------------------------------------


def test_batch_header_on_a_memoryview_slice_does_not_copy() -> None:
    batch = simple_batch([b"hello"])
    backing = bytearray(b"\x00" * 5 + batch + b"\x00" * 3)
    view = memoryview(backing)[5 : 5 + len(batch)]
    header = BatchHeader(view)
    assert header.base_offset == 0

    struct.pack_into(">q", backing, 5, 424242)
    struct.pack_into(">i", backing, 5 + 12, 17)
    assert header.base_offset == 424242
    assert header.partition_leader_epoch == 17

    body = header.body()
    assert isinstance(body, memoryview)
    backing[5 + HEADER_SIZE] ^= 0xFF
    assert body[0] == backing[5 + HEADER_SIZE]
    assert not header.crc_ok()


def test_batch_header_needs_61_bytes() -> None:
    batch = simple_batch([b"v"])
    with pytest.raises(CorruptRecordError):
        BatchHeader(batch[: HEADER_SIZE - 1])
    with pytest.raises(CorruptRecordError):
        BatchHeader(batch, position=len(batch) - HEADER_SIZE + 1)


# --- walking a log of batches ----------------------------------------------------------------

BATCH_LISTS = st.lists(
    st.tuples(record_lists(max_size=3), st.sampled_from(Compression)).map(
        lambda rc: build_batch(rc[0], spec=BatchSpec(compression=rc[1]))
    ),
    min_size=1,
    max_size=5,
)


@MODEST
@given(batches=BATCH_LISTS)
def test_iter_batches_yields_every_batch(batches: list[bytes]) -> None:
    buf, positions = concatenated(batches)
    headers = list(iter_batches(bytes(buf), verify_crc=True))
    assert [h.position for h in headers] == positions
    assert [h.size for h in headers] == [len(b) for b in batches]
    assert [h.base_offset for h in headers] == [BatchHeader(b).base_offset for b in batches]
    assert [list(iter_records(h)) for h in headers] == [
        list(iter_records(BatchHeader(b))) for b in batches
    ]


def test_iter_batches_of_nothing() -> None:
    assert list(iter_batches(b"")) == []


@MODEST
@given(batches=BATCH_LISTS, data=st.data())
def test_torn_log_raises_after_the_whole_batches(batches: list[bytes], data: st.DataObject) -> None:
    buf, positions = concatenated(batches)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="cut")
    torn = bytes(buf[:cut])
    whole = [p for p, b in zip(positions, batches, strict=True) if p + len(b) <= cut]

    seen = []
    walk = iter_batches(torn)
    if cut in positions:  # cut on a boundary: a valid, shorter log
        seen = [h.position for h in walk]
    else:
        with pytest.raises(CorruptRecordError):
            for h in walk:
                seen.append(h.position)
    assert seen == whole


@MODEST
@given(batches=BATCH_LISTS, data=st.data())
def test_verify_crc_catches_a_flipped_byte(batches: list[bytes], data: st.DataObject) -> None:
    buf, positions = concatenated(batches)
    i = data.draw(st.integers(min_value=0, max_value=len(batches) - 1), label="batch")
    # 17..end: the CRC itself and everything it covers.
    at = positions[i] + data.draw(st.integers(17, len(batches[i]) - 1), label="offset in batch")
    buf[at] ^= data.draw(st.integers(1, 255), label="mask")

    assert len(list(iter_batches(buf))) == len(batches)  # framing alone cannot tell
    seen = []
    with pytest.raises(CorruptRecordError, match="CRC"):
        for h in iter_batches(buf, verify_crc=True):
            seen.append(h.position)
    assert seen == positions[:i]


@pytest.mark.parametrize("length", [-(2**31), -12, -1, 0, 48])
def test_iter_batches_rejects_a_length_shorter_than_a_header(length: int) -> None:
    # Such a batch would not even hold its own header; stepping by it could loop or go backwards.
    buf = bytearray(simple_batch([b"v"]))
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordError):
        next(iter_batches(buf))


def test_iter_batches_does_not_verify_crc_by_default() -> None:
    buf = bytearray(simple_batch([b"value"]))
    buf[-1] ^= 1
    assert [h.crc_ok() for h in iter_batches(buf)] == [False]


def test_crc_is_crc32c_of_bytes_21_to_end() -> None:
    buf = simple_batch([b"x", b"y"], compression=Compression.ZSTD)
    header = BatchHeader(buf)
    assert header.crc == crc32c.crc32c(buf[21:])
    assert header.crc == int.from_bytes(buf[17:21], "big")


@MODEST
@given(records=record_lists(max_size=4), spec=SPECS, data=st.data())
def test_iter_records_on_a_damaged_section_raises_corrupt_record(
    records: list[Record], spec: BatchSpec, data: st.DataObject
) -> None:
    # Damage the records section but keep the CRC consistent, as a buggy client would.
    buf = bytearray(build_batch(records, spec=spec))
    cut = data.draw(st.integers(HEADER_SIZE, len(buf) - 1), label="cut")
    damaged = buf[:cut]
    struct.pack_into(">i", damaged, 8, len(damaged) - 12)
    struct.pack_into(">I", damaged, 17, crc32c.crc32c(bytes(damaged[21:])))
    with pytest.raises(CorruptRecordError):
        list(iter_records(BatchHeader(damaged)))
