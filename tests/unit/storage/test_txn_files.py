"""The two transaction files on bytes: `.txnindex` entries and `.snapshot` files round-trip in
Kafka's layouts, damaged ones are refused rather than trusted, and the index answers a fetch's
question (which aborted transactions touch [fetch offset, upper bound)) as Kafka's does."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.storage.errors import CorruptIndexError
from weir.storage.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    ProducerSnapshots,
    decode_snapshot,
    encode_snapshot,
)
from weir.storage.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    decode_entries,
    encode_entries,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
FAST = settings(max_examples=40, deadline=None)

aborted_txns = st.builds(AbortedTxn, INT64, INT64, INT64, INT64)
snapshot_entries = st.builds(
    ProducerSnapshotEntry, INT64, INT16, INT32, INT64, INT32, INT64, INT32, INT64
)


# ---- .txnindex ---------------------------------------------------------------------------------


@FAST
@given(st.lists(aborted_txns, max_size=20))
def test_index_entries_round_trip(entries: list[AbortedTxn]) -> None:
    data = encode_entries(entries)
    assert len(data) == ENTRY_SIZE * len(entries)
    assert decode_entries(data) == entries


def test_an_index_entry_is_kafkas_34_bytes() -> None:
    data = encode_entries([AbortedTxn(producer_id=7, first_offset=10, last_offset=15,
                                      last_stable_offset=16)])  # fmt: skip
    assert data == struct.pack(">hqqqq", 0, 7, 10, 15, 16)


@FAST
@given(st.lists(aborted_txns, min_size=1, max_size=5), st.integers(1, ENTRY_SIZE - 1))
def test_a_torn_index_is_refused(entries: list[AbortedTxn], cut: int) -> None:
    with pytest.raises(CorruptIndexError):
        decode_entries(encode_entries(entries)[:-cut])


def test_an_unknown_index_version_is_refused() -> None:
    with pytest.raises(CorruptIndexError, match="version"):
        decode_entries(struct.pack(">hqqqq", 1, 7, 10, 15, 16))


def _index(tmp_path: Path, *entries: AbortedTxn, base: int = 0) -> TransactionIndex:
    index = TransactionIndex(tmp_path / f"{base:020d}.txnindex", base)
    for entry in entries:
        index.append(entry)
    return index


def test_an_index_file_exists_only_once_something_aborted(tmp_path: Path) -> None:
    index = _index(tmp_path)
    assert not index.path.exists() and index.entries() == []
    index.append(AbortedTxn(7, 10, 15, 16))
    assert index.path.read_bytes() == encode_entries([AbortedTxn(7, 10, 15, 16)])
    index.truncate_to(15)
    assert not index.path.exists() and index.is_empty


def test_entries_must_come_in_marker_order(tmp_path: Path) -> None:
    index = _index(tmp_path, AbortedTxn(7, 10, 15, 16))
    with pytest.raises(ValueError, match="does not follow"):
        index.append(AbortedTxn(8, 11, 15, 16))
    reopened = TransactionIndex(index.path, 0)
    with pytest.raises(ValueError):
        reopened.append(AbortedTxn(8, 11, 14, 16))


def test_collect_names_the_transactions_that_touch_the_range(tmp_path: Path) -> None:
    index = _index(
        tmp_path,
        AbortedTxn(1, 0, 5, 3),  # 2 was open from 3 when 1 aborted
        AbortedTxn(2, 3, 9, 10),
        AbortedTxn(3, 12, 14, 15),
    )
    assert index.collect(6, 8) == ([AbortedTxn(2, 3, 9, 10)], True)
    assert index.collect(0, 4) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10)], True)
    assert index.collect(10, 12) == ([], True)  # nothing open by 14: no later segment can add
    assert index.collect(15, 20) == ([], False)


def test_truncation_keeps_markers_before_the_point(tmp_path: Path) -> None:
    index = _index(tmp_path, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10))
    index.truncate_to(9)
    assert TransactionIndex(index.path, 0).entries() == [AbortedTxn(1, 0, 5, 6)]
    index.append(AbortedTxn(3, 7, 8, 9))  # the order check follows the truncation


def test_validate_refuses_entries_outside_the_segment_or_out_of_order(tmp_path: Path) -> None:
    index = _index(tmp_path, AbortedTxn(1, 90, 105, 106), base=100)
    index.validate(200)
    with pytest.raises(CorruptIndexError):
        index.validate(105)  # the marker lies past the segment's end
    index.path.write_bytes(encode_entries([AbortedTxn(1, 0, 50, 51)]))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(index.path, 100).validate(200)  # before its base offset
    index.path.write_bytes(encode_entries([AbortedTxn(1, 0, 150, 151), AbortedTxn(2, 0, 120, 1)]))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(index.path, 100).validate(200)


# ---- .snapshot ---------------------------------------------------------------------------------


@FAST
@given(st.lists(snapshot_entries, max_size=20))
def test_snapshots_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == tuple(entries)


def test_a_snapshot_is_kafkas_layout() -> None:
    entry = ProducerSnapshotEntry(producer_id=7, epoch=2, last_sequence=9, last_offset=109,
                                  offset_delta=9, timestamp=1234, coordinator_epoch=-1,
                                  current_txn_first_offset=100)  # fmt: skip
    data = encode_snapshot([entry])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 7, 2, 9, 109, 9, 1234, -1, 100)
    assert data[:2] == struct.pack(">h", 1)  # version
    assert data[6:] == body
    import crc32c

    assert struct.unpack(">I", data[2:6])[0] == crc32c.crc32c(body)


@FAST
@given(st.lists(snapshot_entries, min_size=1, max_size=5), st.data())
def test_a_damaged_snapshot_is_refused(
    entries: list[ProducerSnapshotEntry], data: st.DataObject
) -> None:
    good = encode_snapshot(entries)
    position = data.draw(st.integers(0, len(good) - 1))
    flipped = bytearray(good)
    flipped[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(flipped))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(good[: data.draw(st.integers(0, len(good) - 1))])


def test_snapshot_files_are_named_by_offset_and_pruned(tmp_path: Path) -> None:
    snapshots = ProducerSnapshots(tmp_path)
    for offset in (0, 100, 200, 300):
        snapshots.write(offset, [ProducerSnapshotEntry(7, 0)], sync=offset == 300)
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "00000000000000000000.snapshot"
    snapshots.delete_above(200)
    snapshots.delete_below(100)
    assert ProducerSnapshots(tmp_path).offsets == [100, 200]
    assert snapshots.read(200).entries == (ProducerSnapshotEntry(7, 0),)
    assert not list(tmp_path.glob("*.tmp"))
