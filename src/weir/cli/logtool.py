"""`weir log dump|check`: inspect partition directories and segment files, like
kafka-dump-log.sh. Read-only unless `check --repair` is given.

`dump` prints a `.log` segment as JSON lines (one per batch), and a `.txnindex` or `.snapshot`
file one line per entry with the fields kafka-dump-log.sh prints for them."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weir.clock import SystemClock, ThreadScheduler
from weir.records import CorruptRecordError, iter_batches, iter_records
from weir.storage import LogConfig, PartitionLog
from weir.storage.errors import StorageError
from weir.storage.files import PRODUCER_SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX
from weir.storage.producer_snapshot import ProducerSnapshotEntry, decode_snapshot
from weir.storage.txn_index import VERSION as TXN_INDEX_VERSION
from weir.storage.txn_index import decode_entries


def register(commands: Any) -> None:
    parser = commands.add_parser("log", help="inspect log segments on disk")
    sub = parser.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    dump = sub.add_parser("dump", help="print a .log segment's batches, a .txnindex or a .snapshot")
    dump.add_argument("segment", type=Path)
    dump.add_argument("--records", action="store_true", help="print every record too")
    dump.set_defaults(run=run_dump)
    check = sub.add_parser("check", help="load a partition directory as the broker would")
    check.add_argument("directory", type=Path)
    check.add_argument(
        "--repair",
        action="store_true",
        help="keep the truncation and rebuilt indexes (default: check a copy)",
    )
    check.set_defaults(run=run_check)


def run_dump(args: argparse.Namespace) -> int:
    path: Path = args.segment
    if path.name.endswith(TXN_INDEX_SUFFIX):
        return _dump_entries(path, _txn_index_lines)
    if path.name.endswith(PRODUCER_SNAPSHOT_SUFFIX):
        return _dump_entries(path, _snapshot_lines)
    return _dump_segment(args)


def _dump_entries(path: Path, lines: Callable[[bytes, str], list[str]]) -> int:
    try:
        for line in lines(path.read_bytes(), path.name):
            print(line)
    except StorageError as exc:
        print(f"error: {exc}")
        return 1
    return 0


def _txn_index_lines(data: bytes, name: str) -> list[str]:
    return [
        f"version: {TXN_INDEX_VERSION} producerId: {txn.producer_id} "
        f"firstOffset: {txn.first_offset} lastOffset: {txn.last_offset} "
        f"lastStableOffset: {txn.last_stable_offset}"
        for txn in decode_entries(data, name)
    ]


def _snapshot_lines(data: bytes, name: str) -> list[str]:
    return [_snapshot_line(entry) for entry in decode_snapshot(data, name)]


def _snapshot_line(e: ProducerSnapshotEntry) -> str:
    line = (
        f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
        f"coordinatorEpoch: {e.coordinator_epoch} "
        f"currentTxnFirstOffset: {e.current_txn_first_offset} lastTimestamp: {e.timestamp}"
    )
    if e.last_offset >= 0:
        first_sequence = (e.last_sequence - e.offset_delta) % 2**31  # sequences wrap
        line += (
            f" firstSequence: {first_sequence} lastSequence: {e.last_sequence} "
            f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} timestamp: {e.timestamp}"
        )
    return line


def _dump_segment(args: argparse.Namespace) -> int:
    data = args.segment.read_bytes()
    position = 0
    try:
        for header in iter_batches(data):
            line = {
                "position": position,
                "base_offset": header.base_offset,
                "last_offset": header.last_offset,
                "count": header.records_count,
                "size": header.size,
                "crc_ok": header.crc_ok(),
                "compression": header.compression.name.lower(),
                "max_timestamp": header.max_timestamp,
                "leader_epoch": header.partition_leader_epoch,
                "producer_id": header.producer_id,
            }
            print(json.dumps(line))
            if args.records:
                for record in iter_records(header):
                    print(
                        "  "
                        + json.dumps(
                            {
                                "offset": record.offset,
                                "timestamp": record.timestamp,
                                "key": _text(record.key),
                                "value": _text(record.value),
                            }
                        )
                    )
            position += header.size
    except CorruptRecordError as exc:
        print(json.dumps({"position": position, "error": str(exc)}))
        return 1
    return 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def run_check(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="weir-check-") as scratch:
        directory: Path = args.directory
        if not args.repair:
            directory = Path(scratch) / directory.name
            shutil.copytree(args.directory, directory)
        scheduler = ThreadScheduler()
        try:
            log = PartitionLog(directory, LogConfig(), SystemClock(), scheduler)
            report = log.load_report
            print(
                json.dumps(
                    {
                        "segments": len(log.segments),
                        "log_start_offset": log.log_start_offset,
                        "log_end_offset": log.log_end_offset,
                        "recovered_segments": report.recovered_segments,
                        "truncated_bytes": report.truncated_bytes,
                        "problems": report.problems,
                    },
                    indent=2,
                )
            )
            log.close()
        finally:
            scheduler.shutdown()
    return 1 if report.problems else 0
