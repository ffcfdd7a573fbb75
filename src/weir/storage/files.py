"""Every file name and suffix the log engine writes, in one place.

A partition lives in `<data dir>/<topic>-<partition>/`; a segment is three files named by its
base offset, zero-padded to 20 digits: `00000000000000000000.log`, `.index`, `.timeindex`, and a
fourth, `.txnindex`, once an aborted transaction ended in it. `<20-digit offset>.snapshot` files
hold producer state as of that offset (see `producer_snapshot.py`).
A suffix after those marks a file in transit: `.cleaned` (compaction output, not yet committed),
`.swap` (committed compaction output replacing older segments), `.deleted` (waiting for removal),
`.next` (an empty segment created ahead of a roll, named after the log end offset when it was
made; the roll renames it to its real base offset).

A partition directory in transit: `<topic>-<partition>.<unique id>-delete` (waiting for removal)
and `<topic>-<partition>.<unique id>-future` (the copy a move between log directories fills,
AlterReplicaLogDirs; see `log_mover.py`).
"""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
NEXT_SUFFIX = ".next"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: present in a partition directory once a transactional batch was appended there; without
#: `.snapshot` files beside it (a log an older weir wrote) producer state is rebuilt from the
#: whole log once
TRANSACTIONS_MARKER = "has-transactions"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".weir-clean-shutdown"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def segment_path(directory: Path, base_offset: int, suffix: str, transit: str = "") -> Path:
    return directory / f"{segment_name(base_offset)}{suffix}{transit}"


def parse_base_offset(path: Path) -> int:
    return int(path.name.split(".", 1)[0])


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) from a directory name, or None if it is not a partition directory."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def future_dir_name(topic: str, partition: int, unique_id: str) -> str:
    return f"{partition_dir_name(topic, partition)}.{unique_id}{FUTURE_DIR_SUFFIX}"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a future log's directory name, or None if it is not one."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, _ = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    return parse_partition_dir(stem) if dot else None
