"""A partition's future log: the copy of its log that a move to another log directory of this
broker fills (AlterReplicaLogDirs, KIP-113), until it replaces the current log.

On disk the future log is an ordinary partition directory named
`<topic>-<partition>.<unique id>-future` in the target log directory. It is filled batch by
batch from the current log, in offset order (the closed segments first, then the active
tail), with the batches' offsets and leader epochs as they are, and the aborted transactions
of the copied range indexed again: a copy reads back exactly as the original. A truncation or a
retention of the current log during the copy is followed: the future log is cut back (or
started again) to agree with it.

`finish` copies the last bytes while the current log's lock is held (appends wait for it) and
gives the future log the current one's high watermark, log start offset and latest leader epoch;
`LogManager.replace_current_with_future` then swaps the directories (see its crash rules).

Thread-safety (docs/threads.md): one copier at a time calls `copy_step` (the broker's log-dir
mover thread); `finish` runs with the copier stopped. The future log is touched by nobody else
until it replaces the current one; the current log guards itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from weir.durable import fsync_directory
from weir.records import iter_batches
from weir.storage.checkpoint import TopicPartition
from weir.storage.errors import StorageError
from weir.storage.files import parse_future_dir, parse_partition_dir, partition_dir_name
from weir.storage.log_dir import LogDirectory
from weir.storage.partition_log import PartitionLog
from weir.storage.segment import FileSlice
from weir.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

#: the most `finish` copies in one read while appends wait
FINAL_STEP_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class CopyStep:
    """What one `copy_step` did: the bytes copied, and whether it reached the current log's
    end (nothing more was there to copy when it read)."""

    copied: int
    caught_up: bool


@dataclass(frozen=True, slots=True)
class _Chunk:
    data: FileSlice
    aborted: list[AbortedTxn]
    restart: bool
    caught_up: bool


class FutureLog:
    """The future log of `tp`, filled from `source` (its current log) into `log_dir`."""

    def __init__(
        self, tp: TopicPartition, source: PartitionLog, log: PartitionLog, log_dir: LogDirectory
    ) -> None:
        self.tp = tp
        self.source = source
        self.log = log
        self.log_dir = log_dir
        if source.has_transactions:
            log.note_transactions()

    @property
    def offset_lag(self) -> int:
        """How far the copy's log end is behind the current log's (DescribeLogDirs)."""
        return max(0, self.source.log_end_offset - self.log.log_end_offset)

    def copy_step(self, max_bytes: int) -> CopyStep:
        """Copy the next batches (about `max_bytes`, at least one batch) from the current log.
        The current log's lock is held only to read where they are."""
        chunk = self._next_chunk(max_bytes)
        if chunk is None:
            return CopyStep(0, True)
        try:
            data = chunk.data.read_bytes()
        finally:
            chunk.data.close()
        self._append(data, chunk)
        return CopyStep(len(data), chunk.caught_up)

    def finish(self) -> None:
        """With the current log's lock held (appends wait): copy what is left, then take its
        high watermark, log start offset and latest leader epoch. The future log then holds
        exactly what the current one does."""
        source = self.source
        with source.lock():
            while self.log.log_end_offset < source.log_end_offset or self._diverged():
                if self.copy_step(FINAL_STEP_BYTES).copied == 0 and self._diverged():
                    raise StorageError(f"{self.log.directory.name}: the copy cannot catch up")
            self.log.update_high_watermark(source.high_watermark)
            if source.log_start_offset > self.log.log_start_offset:
                self.log.increment_log_start_offset(source.log_start_offset)
            if source.latest_epoch > self.log.latest_epoch:
                self.log.assign_leader_epoch(source.latest_epoch)

    # ---- steps --------------------------------------------------------------------------------

    def _next_chunk(self, max_bytes: int) -> _Chunk | None:
        source = self.source
        with source.lock():
            self._follow_truncation()
            start = self.log.log_end_offset
            restart = start < source.log_start_offset
            if restart:
                start = source.log_start_offset
            end = source.log_end_offset
            if start >= end:
                if restart:  # nothing left below the end: the copy starts there too
                    self.log.truncate_fully_and_start_at(end)
                return None
            info = source.read(start, max_bytes, max_offset=end, retain=True)
            if info.data is None:
                return None
            aborted = source.collect_aborted_txns(start, info.data.next_offset)
            caught_up = info.data.next_offset >= end
            return _Chunk(info.data, aborted, restart, caught_up)

    def _append(self, data: bytes, chunk: _Chunk) -> None:
        first = next(iter_batches(data)).base_offset
        future = self.log
        if chunk.restart or (future.size == 0 and first != future.log_end_offset):
            future.truncate_fully_and_start_at(first)
        future.append_as_follower(data)
        for txn in chunk.aborted:
            if first <= txn.last_offset < chunk.data.next_offset:
                future.index_aborted_txn(txn)

    def _follow_truncation(self) -> None:
        """Under the current log's lock: cut the copy back where the current log was truncated
        (a follower whose log diverged from its leader's) or where its epochs disagree."""
        source, future = self.source, self.log
        if future.log_end_offset > source.log_end_offset:
            future.truncate_to(source.log_end_offset)
        if self._diverged():
            _, end = source.epoch_cache.end_offset_for(future.latest_epoch, source.log_end_offset)
            if end < 0:
                future.truncate_fully_and_start_at(0)
            else:
                future.truncate_to(end)

    def _diverged(self) -> bool:
        future = self.log
        if future.latest_epoch < 0:
            return False
        _, end = self.source.epoch_cache.end_offset_for(
            future.latest_epoch, self.source.log_end_offset
        )
        return end < future.log_end_offset

    def discard(self) -> None:
        """Close the copy for good (its directory is then deleted by its owner)."""
        self.log.close_for_deletion()


def settle_interrupted_moves(log_dirs: list[LogDirectory]) -> list[Path]:
    """At start-up, before any log is loaded: what a move cut short by a crash or a stop left
    behind. Returns the future logs to resume.

    A future log whose partition is still in a directory of its own (the move had not reached
    its swap) is returned: the current log is intact, and the copy goes on from where it
    stands (its owner loads it, recovering a torn tail). A future log whose partition is in no
    directory any more was cut short between the swap's two renames (the current log renamed
    to be deleted, the future one not yet renamed into place): the copy was complete, so it
    becomes the partition's log. If a directory cannot be read, the future logs are left as
    they are (the partition may be in that directory) and none is resumed."""
    found: dict[Path, list[Path]] = {}
    resumable: list[Path] = []
    for log_dir in log_dirs:
        try:
            found[log_dir.path] = [p for p in log_dir.path.iterdir() if p.is_dir()]
        except OSError:
            return resumable
    live = {tp for entries in found.values() for p in entries
            if (tp := parse_partition_dir(p.name)) is not None}  # fmt: skip
    for entries in found.values():
        for path in entries:
            tp = parse_future_dir(path.name)
            if tp is None:
                continue
            if tp in live:
                resumable.append(path)
            else:
                log.warning("%s-%d: completing its move into %s", *tp, path.parent)
                path.rename(path.with_name(partition_dir_name(*tp)))
                live.add(tp)
                fsync_directory(path.parent)
    return resumable
