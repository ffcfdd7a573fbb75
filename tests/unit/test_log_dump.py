"""`weir log dump` on the transaction files: one line per `.txnindex` entry and per `.snapshot`
producer, with the fields kafka-dump-log.sh prints; a damaged file is reported, not printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.cli.main import main
from weir.storage.producer_snapshot import ProducerSnapshotEntry, ProducerSnapshots, snapshot_path
from weir.storage.txn_index import AbortedTxn, TransactionIndex


def test_a_txnindex_is_dumped_one_line_per_aborted_transaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    index.append(AbortedTxn(7, 90, 105, 106))
    index.append(AbortedTxn(8, 101, 110, 111))
    assert main(["log", "dump", str(index.path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "version: 0 producerId: 7 firstOffset: 90 lastOffset: 105 lastStableOffset: 106",
        "version: 0 producerId: 8 firstOffset: 101 lastOffset: 110 lastStableOffset: 111",
    ]


def test_a_snapshot_is_dumped_one_line_per_producer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ProducerSnapshots(tmp_path).write(200, [
        ProducerSnapshotEntry(7, 2, last_sequence=9, last_offset=199, offset_delta=4,
                              timestamp=1234, current_txn_first_offset=190),
        ProducerSnapshotEntry(8, 0),
    ], sync=False)  # fmt: skip
    path = snapshot_path(tmp_path, 200)
    assert main(["log", "dump", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: 190 "
        "lastTimestamp: 1234 firstSequence: 5 lastSequence: 9 lastOffset: 199 offsetDelta: 4 "
        "timestamp: 1234",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: -1 "
        "lastTimestamp: -1",
    ]
    path.write_bytes(path.read_bytes()[:-3])
    assert main(["log", "dump", str(path)]) == 1
    assert "CRC mismatch" in capsys.readouterr().out
