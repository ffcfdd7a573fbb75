"""All partition logs under the broker's log directories, and the background work that keeps them.

Each log directory (`log.dirs`; one is the usual case) is laid out as::

    <log dir>/
        <topic>-<partition>/                 one PartitionLog each
        recovery-point-offset-checkpoint     per-partition recovery points
        log-start-offset-checkpoint          per-partition log start offsets
        replication-offset-checkpoint        per-partition high watermarks (replication)
        .weir-clean-shutdown                 present only between a clean close and the next open

A new partition goes to the online directory holding the fewest (or the one AlterReplicaLogDirs
named for it before it existed). A directory whose load or
writes fail goes offline alone (see `log_dir.py`): its partitions refuse appends and reads, the
others carry on. A partition found in two directories stops the start.

A replica moves to another directory (AlterReplicaLogDirs) through a future log,
`<topic>-<partition>.<unique id>-future` in the target directory (`log_mover.py`), which
`replace_current_with_future` swaps in: the current directory is renamed to be deleted, then the
future one is renamed to `<topic>-<partition>`. A stop or crash before the first rename leaves
the current log in place and the copy is resumed at the next start; a crash between the two
completes the move then (`settle_interrupted_moves`).

Background tasks on the injected scheduler: retention, compaction, time-based flush and the two
checkpoints. On `close()` every log is flushed, checkpoints are written and the clean-shutdown
marker is created, so the next start trusts the logs without scanning them. None of this needs
free space to go on working: a checkpoint the disk refuses keeps the previous file and is written
at the next interval, and a close on a full disk still closes cleanly.

Thread-safety (docs/threads.md): the registry of logs is guarded by a lock; each log guards
itself, and hands the flushes `flush.messages` makes due to the scheduler's thread. Checkpoints
have one writer at a time (the scheduler's periodic write, a deletion's, the close's): each writer
takes the logs' state and writes it under the checkpoint lock, so no writer's temporary file is
renamed away by another and no older state overwrites a newer one.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from weir import diskio
from weir.clock import Clock, Scheduler
from weir.durable import fsync_directory
from weir.storage.checkpoint import TopicPartition
from weir.storage.cleaner import LogCleaner
from weir.storage.config import NO_LIMIT, LogConfig
from weir.storage.errors import LogDirectoryError, LogWriteError, StorageError
from weir.storage.files import (
    DELETE_DIR_SUFFIX,
    future_dir_name,
    parse_future_dir,
    parse_partition_dir,
    partition_dir_name,
)
from weir.storage.log_dir import LogDirectory
from weir.storage.log_mover import FutureLog, settle_interrupted_moves
from weir.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

T = TypeVar("T")


#: a partition directory renamed to be deleted, and the log directory it is in
Detached = tuple[Path, LogDirectory | None]


def _rename_for_deletion(directory: Path) -> Path:
    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
    directory.rename(doomed)
    return doomed


@dataclass(frozen=True, slots=True, kw_only=True)
class LogManagerConfig:
    retention_check_interval_ms: int = 300_000
    flush_check_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 60_000
    cleaner_backoff_ms: int = 15_000


class LogManager:
    def __init__(
        self,
        data_dirs: Path | Sequence[Path],
        default_config: LogConfig,
        clock: Clock,
        scheduler: Scheduler,
        manager_config: LogManagerConfig | None = None,
        topic_configs: dict[str, LogConfig] | None = None,
    ) -> None:
        paths = [data_dirs] if isinstance(data_dirs, Path) else list(data_dirs)
        if not paths or len(set(paths)) != len(paths):
            raise ValueError(f"log directories must be distinct and at least one: {paths}")
        self.data_dir = paths[0]
        self.default_config = default_config
        self._clock = clock
        self._scheduler = scheduler
        self._settings = manager_config or LogManagerConfig()
        self._topic_configs = dict(topic_configs or {})
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._closed = False
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.dirs = [LogDirectory(path, clock) for path in paths]
        self._dir_of: dict[TopicPartition, LogDirectory] = {}
        self.offline_partitions: set[TopicPartition] = set()
        #: the future logs of replicas moving to another directory (AlterReplicaLogDirs)
        self._futures: dict[TopicPartition, FutureLog] = {}
        #: the directory AlterReplicaLogDirs named for a partition not here yet
        self._preferred: dict[TopicPartition, LogDirectory] = {}
        self.cleaner = LogCleaner(clock)
        self._load_all()
        self._schedule_tasks()

    # ---- loading ------------------------------------------------------------------------------

    def _load_all(self) -> None:
        for log_dir in self.dirs:
            with contextlib.suppress(OSError):
                log_dir.path.mkdir(parents=True, exist_ok=True)
        resumable = settle_interrupted_moves(self.dirs)
        for log_dir in self.dirs:
            try:
                log_dir.path.mkdir(parents=True, exist_ok=True)
                self._load_dir(log_dir)
            except (OSError, LogDirectoryError) as exc:
                self._fail_load(log_dir, exc)
        for path in resumable:
            self._resume_future(path)
        if not any(log_dir.online for log_dir in self.dirs):
            raise LogDirectoryError(f"no log directory could be loaded: {self.dirs}")
        self.checkpoint()

    def _load_dir(self, log_dir: LogDirectory) -> None:
        clean = log_dir.clean_shutdown_marker.exists()
        recovery_points = log_dir.read_checkpoint(log_dir.recovery_points)
        log_starts = log_dir.read_checkpoint(log_dir.log_starts)
        high_watermarks = log_dir.read_checkpoint(log_dir.high_watermarks)
        for directory in sorted(p for p in log_dir.path.iterdir() if p.is_dir()):
            if directory.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(directory, ignore_errors=True)
                continue
            tp = parse_partition_dir(directory.name)
            if tp is None:
                continue
            if tp in self._dir_of:
                raise StorageError(
                    f"partition {tp[0]}-{tp[1]} is in both {self._dir_of[tp].path} and "
                    f"{log_dir.path}: remove one copy"
                )
            self._dir_of[tp] = log_dir
            self.logs[tp] = self._owned(tp, PartitionLog(
                directory,
                self.config_for(tp[0]),
                self._clock,
                self._scheduler,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                high_watermark=high_watermarks.get(tp),
                clean_shutdown=clean,
            ))  # fmt: skip
        log_dir.clean_shutdown_marker.unlink(missing_ok=True)

    def _resume_future(self, path: Path) -> None:
        """Load a future log a stop or crash interrupted, to be filled on (`futures`); one
        that cannot be (its partition or directory gone, a second one) is deleted."""
        tp = parse_future_dir(path.name)
        log_dir = next((d for d in self.dirs if d.path == path.parent), None)
        source = self.logs.get(tp) if tp is not None else None
        if tp is None or source is None or log_dir is None or not log_dir.online or (
            tp in self._futures or self._dir_of.get(tp) is log_dir
        ):
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            future = PartitionLog(path, self._future_config(tp[0]), self._clock, self._scheduler)
        except (OSError, StorageError) as exc:
            log.warning("%s: not resumed, deleted: %s", path, exc)
            shutil.rmtree(path, ignore_errors=True)
            return
        log.info("%s-%d: resuming its move to %s from offset %d", *tp, log_dir.path,
                 future.log_end_offset)  # fmt: skip
        self._futures[tp] = FutureLog(tp, source, future, log_dir)

    def _future_config(self, topic: str) -> LogConfig:
        """No `flush.messages` syncs while a future log is filled: its copier flushes it once,
        at the end."""
        return replace(self.config_for(topic), flush_messages=NO_LIMIT)

    def _fail_load(self, log_dir: LogDirectory, exc: Exception) -> None:
        log_dir.take_offline(f"loading failed: {exc}")
        for tp in [tp for tp, d in self._dir_of.items() if d is log_dir]:
            partition_log = self.logs.pop(tp, None)
            if partition_log is not None:
                partition_log.take_offline(str(exc))
                partition_log.close()
            self.offline_partitions.add(tp)
        try:
            names = [p.name for p in log_dir.path.iterdir()]
        except OSError:
            names = []
        for name in names:
            found = parse_partition_dir(name)
            if found is not None:
                self.offline_partitions.add(found)
                self._dir_of.setdefault(found, log_dir)

    def _schedule_tasks(self) -> None:
        s = self._settings
        self._scheduler.schedule(
            "log-retention",
            self.cleanup_logs,
            s.retention_check_interval_ms,
            s.retention_check_interval_ms,
        )
        self._scheduler.schedule(
            "log-flush", self.flush_due_logs, s.flush_check_interval_ms, s.flush_check_interval_ms
        )
        self._scheduler.schedule(
            "log-checkpoint", self.checkpoint, s.checkpoint_interval_ms, s.checkpoint_interval_ms
        )
        self._scheduler.schedule(
            "log-cleaner", self.compact_logs, s.cleaner_backoff_ms, s.cleaner_backoff_ms
        )

    # ---- registry -----------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, created in the online directory that holds the fewest.
        LogDirectoryError if it lives in an offline directory or none is online."""
        with self._lock:
            tp = (topic, partition)
            if self._closed:
                raise LogDirectoryError(f"cannot create {topic}-{partition}: the logs are closed")
            if tp in self.offline_partitions:
                raise LogDirectoryError(f"{topic}-{partition} is in an offline log directory")
            if tp in self.logs:
                return self.logs[tp]
            preferred = self._preferred.pop(tp, None)
            log_dir = preferred if preferred and preferred.online else self._least_loaded_dir()
            directory = log_dir.path / partition_dir_name(topic, partition)
            try:
                self.logs[tp] = self._owned(tp, PartitionLog(
                    directory, self.config_for(topic), self._clock, self._scheduler,
                    clean_shutdown=True,
                ))  # fmt: skip
                fsync_directory(log_dir.path)
            except OSError as exc:
                self.logs.pop(tp, None)
                shutil.rmtree(directory, ignore_errors=True)
                if diskio.is_out_of_space(exc):
                    raise LogWriteError(f"cannot create {topic}-{partition}: {exc}") from exc
                self._take_dir_offline(log_dir, f"creating {topic}-{partition} failed: {exc}")
                raise LogDirectoryError(f"cannot create {topic}-{partition}: {exc}") from exc
            self._dir_of[tp] = log_dir
            return self.logs[tp]

    def _least_loaded_dir(self) -> LogDirectory:
        online = [d for d in self.dirs if d.online]
        if not online:
            raise LogDirectoryError("every log directory is offline")
        if len(online) == 1:
            return online[0]
        counts = {id(d): 0 for d in online}
        for d in self._dir_of.values():
            if id(d) in counts:
                counts[id(d)] += 1
        return min(online, key=lambda d: counts[id(d)])

    def log_dir_of(self, topic: str, partition: int) -> LogDirectory | None:
        return self._dir_of.get((topic, partition))

    def dir_named(self, path: str) -> LogDirectory | None:
        """The log directory whose absolute path is `path` (as DescribeLogDirs names it)."""
        return next((d for d in self.dirs if str(d.path.absolute()) == path), None)

    # ---- moves between log directories (AlterReplicaLogDirs) ----------------------------------

    def prefer_dir(self, topic: str, partition: int, log_dir: LogDirectory) -> None:
        """Create the partition in `log_dir` if it is created here later."""
        with self._lock:
            self._preferred[(topic, partition)] = log_dir

    def future_of(self, topic: str, partition: int) -> FutureLog | None:
        return self._futures.get((topic, partition))

    def futures(self) -> list[FutureLog]:
        with self._lock:
            return [] if self._closed else list(self._futures.values())

    def create_future_log(self, topic: str, partition: int, log_dir: LogDirectory) -> FutureLog:
        """An empty future log of the partition in `log_dir`, to be filled from its current
        log (file creation: call it off the loop). StorageError if the partition has no log
        here; LogDirectoryError if the directory fails."""
        tp = (topic, partition)
        source = self.logs.get(tp)
        if source is None or self._closed:
            raise StorageError(f"{topic}-{partition} has no log here")
        name = future_dir_name(topic, partition, uuid.uuid4().hex)
        try:
            future = PartitionLog(log_dir.path / name, self._future_config(topic), self._clock,
                                  self._scheduler, clean_shutdown=True)  # fmt: skip
            fsync_directory(log_dir.path)
        except OSError as exc:
            shutil.rmtree(log_dir.path / name, ignore_errors=True)
            raise LogDirectoryError(f"cannot create the future log {name}: {exc}") from exc
        moving = FutureLog(tp, source, future, log_dir)
        with self._lock:
            self._futures[tp] = moving
        return moving

    def abort_future(self, topic: str, partition: int) -> list[Detached]:
        """Stop a move: the future log closed and its directory renamed to be deleted (cheap
        steps; `remove_detached` deletes the files)."""
        with self._lock:
            moving = self._futures.pop((topic, partition), None)
        if moving is None:
            return []
        moving.discard()
        try:
            return [(_rename_for_deletion(moving.log.directory), moving.log_dir)]
        except OSError as exc:
            log.warning("%s: the future log's files stay: %s", moving.log.directory, exc)
            return []

    def replace_current_with_future(
        self, topic: str, partition: int
    ) -> tuple[PartitionLog, Detached]:
        """The move's swap, with the current log's lock held (its appends wait): the last
        bytes copied, the current directory renamed to be deleted (the commit), the future one
        renamed into place, and the registry pointed at the future log, which is returned with
        the old directory (`complete_move` deletes it off the loop). Cheap steps only: the
        future log was flushed up to a recent offset by its copier."""
        tp = (topic, partition)
        moving = self._futures[tp]
        source, future = moving.source, moving.log
        with source.lock():
            moving.finish()
            current = source.directory
            doomed = _rename_for_deletion(current)
            try:
                future.rename_dir(moving.log_dir.path / partition_dir_name(topic, partition))
            except OSError:
                doomed.rename(current)
                raise
            source.hand_over_flushes(future)
            future.config = source.config
            source.close_for_deletion()
            future.on_flushed = source.on_flushed
            future.producer_state_source = source.producer_state_source
            with self._lock:
                old_dir = self._dir_of.get(tp)
                del self._futures[tp]
                self.logs[tp] = self._owned(tp, future)
                self._dir_of[tp] = moving.log_dir
        return future, (doomed, old_dir)

    def complete_move(self, partition_log: PartitionLog, old: Detached) -> None:
        """After `replace_current_with_future`, off the loop: the log flushed (those waiting
        for a sync of the old one are answered), the renames made durable, a producer snapshot
        written in the new directory, the old files deleted and the checkpoints written with
        the partition in its new directory."""
        partition_log.flush()
        fsync_directory(partition_log.directory.parent)
        if old[1] is not None:
            fsync_directory(old[1].path)
        try:
            partition_log.take_producer_snapshot()
        except OSError as exc:  # the next start replays producer state from the log instead
            log.warning("%s: no producer snapshot after the move: %s", partition_log.directory, exc)
        self.remove_detached([old])

    def by_directory(self) -> list[tuple[LogDirectory, list[tuple[TopicPartition, PartitionLog]]]]:
        """Each log directory with the logs it holds, in `log.dirs` order (DescribeLogDirs)."""
        with self._lock:
            held: dict[int, list[tuple[TopicPartition, PartitionLog]]] = {
                id(d): [] for d in self.dirs
            }
            if not self._closed:
                for tp, partition_log in self.logs.items():
                    log_dir = self._dir_of.get(tp)
                    if log_dir is not None:
                        held[id(log_dir)].append((tp, partition_log))
        return [(d, sorted(held[id(d)], key=lambda item: item[0])) for d in self.dirs]

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            self._topic_configs[topic] = config
            for (t, _), partition_log in self.logs.items():
                if t == topic:
                    partition_log.config = config

    def delete(self, topic: str, partition: int) -> None:
        """Remove a partition: its files go at once (so deleting frees space on a full disk),
        then its directory."""
        self.delete_many([(topic, partition)])

    def delete_many(self, partitions: Sequence[TopicPartition]) -> None:
        """Remove partitions as `delete` does, with one checkpoint write for them all."""
        self.remove_detached(self.detach_many(partitions))

    def detach_many(self, partitions: Sequence[TopicPartition]) -> list[Detached]:
        """Take partitions out at once, with only cheap steps: each log closed without a flush
        and its directory renamed to be deleted, so a partition of the same name can be made
        again straight away. `remove_detached` deletes their files (the slow part)."""
        detached: list[Detached] = []
        for topic, partition in partitions:
            detached.extend(self._detach(topic, partition))
        return detached

    def remove_detached(self, detached: Sequence[Detached]) -> None:
        """Delete what `detach_many` took out, then write the checkpoints without it (unless
        the manager closed meanwhile: its close wrote them). Callable from any thread."""
        for path, log_dir in detached:
            shutil.rmtree(path, ignore_errors=True)
            if log_dir is not None:
                log_dir.note_freed()
        if not self._closed:
            self.checkpoint()

    def _detach(self, topic: str, partition: int) -> list[Detached]:
        future = self.abort_future(topic, partition)
        with self._lock:
            partition_log = self.logs.pop((topic, partition), None)
            log_dir = self._dir_of.pop((topic, partition), None)
            self.offline_partitions.discard((topic, partition))
        if partition_log is None:
            return future + self._stray_dirs(topic, partition)
        try:
            partition_log.close_for_deletion()
            return [*future, (_rename_for_deletion(partition_log.directory), log_dir)]
        except OSError as exc:
            log.warning("deleting %s-%d left files behind: %s", topic, partition, exc)
            return future

    def _stray_dirs(self, topic: str, partition: int) -> list[Detached]:
        """The directories a creation that failed midway could not remove (it had no
        descriptor left for it then), renamed to be deleted."""
        detached: list[Detached] = []
        for log_dir in self.dirs:
            stray = log_dir.path / partition_dir_name(topic, partition)
            if log_dir.online and stray.is_dir():
                with contextlib.suppress(OSError):
                    detached.append((_rename_for_deletion(stray), log_dir))
        return detached

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        with self._lock:
            items = [] if self._closed else list(self.logs.items())
        return iter(items)

    # ---- failures and free space --------------------------------------------------------------

    def take_offline(self, topic: str, partition: int, reason: str) -> None:
        """The partition's directory failed: every log in it goes offline."""
        log_dir = self._dir_of.get((topic, partition))
        if log_dir is not None:
            self._take_dir_offline(log_dir, reason)

    def _take_dir_offline(self, log_dir: LogDirectory, reason: str) -> None:
        log_dir.take_offline(reason)
        for tp, d in list(self._dir_of.items()):
            if d is log_dir:
                self.offline_partitions.add(tp)
                partition_log = self.logs.get(tp)
                if partition_log is not None:
                    partition_log.take_offline(reason)

    def free_space_shortfall(self, topic: str, partition: int, floor: int) -> str | None:
        """Why an append to the partition must wait for space, or None if there is room."""
        log_dir = self._dir_of.get((topic, partition))
        if log_dir is None or floor <= 0:
            return None
        free = log_dir.free_bytes()
        if free >= floor:
            return None
        return (
            f"log directory {log_dir.path} has {free} bytes free, "
            f"below log.dir.min.free.bytes={floor}"
        )

    def note_appended(self, topic: str, partition: int, size: int) -> None:
        log_dir = self._dir_of.get((topic, partition))
        if log_dir is not None:
            log_dir.note_appended(size)

    # ---- background work ----------------------------------------------------------------------

    def _owned(self, tp: TopicPartition, partition_log: PartitionLog) -> PartitionLog:
        """The log, with its due flushes (`flush.messages`) handed to the scheduler's thread."""

        def flush() -> None:
            self._guarded(tp, partition_log, PartitionLog.flush)

        def request() -> None:
            self._scheduler.schedule(f"flush-{tp[0]}-{tp[1]}", flush, 0)

        partition_log.flush_requester = request
        return partition_log

    def _each_online(self, action: Callable[[PartitionLog], T]) -> list[T]:
        """`action` on every online log; a log whose directory fails takes it offline."""
        results = []
        for tp, partition_log in self:
            if partition_log.offline_reason is None:
                results.extend(self._guarded(tp, partition_log, action))
        return results

    def _guarded(
        self, tp: TopicPartition, partition_log: PartitionLog, action: Callable[[PartitionLog], T]
    ) -> list[T]:
        """[`action`'s result], or [] if it failed: a failing directory goes offline. A log
        no longer the partition's (deleted, or moved to another directory) is left alone: its
        failures say nothing of the directory the partition is in now."""
        if self.logs.get(tp) is not partition_log:
            return []
        try:
            return [action(partition_log)]
        except LogDirectoryError as exc:
            self.take_offline(*tp, str(exc))
        except OSError as exc:
            if diskio.is_out_of_space(exc):
                log.warning("%s-%d: background work deferred: %s", *tp, exc)
            else:
                self.take_offline(*tp, str(exc))
        return []

    def cleanup_logs(self) -> int:
        deleted = sum(self._each_online(lambda pl: pl.delete_old_segments()))
        if deleted:
            for log_dir in self.dirs:
                log_dir.note_freed()
        return deleted

    def flush_due_logs(self) -> None:
        self._each_online(lambda pl: pl.flush_if_due())

    def compact_logs(self) -> int:
        return sum(self._each_online(lambda pl: self.cleaner.clean(pl) if pl.config.compact else 0))

    def checkpoint(self) -> None:
        with self._checkpoint_lock:
            logs = list(self)
            for _, partition_log in logs:
                partition_log.epoch_cache.flush_if_dirty()
            for log_dir in self.dirs:
                if log_dir.online:
                    self._write_checkpoints(log_dir, logs)

    def _write_checkpoints(
        self, log_dir: LogDirectory, logs: list[tuple[TopicPartition, PartitionLog]]
    ) -> bool:
        mine = [(tp, pl) for tp, pl in logs if self._dir_of.get(tp) is log_dir]
        return log_dir.write_checkpoints(
            {tp: pl.recovery_point for tp, pl in mine},
            {tp: pl.log_start_offset for tp, pl in mine},
            {tp: pl.high_watermark for tp, pl in mine},
        )

    def close(self) -> None:
        """Clean shutdown: flush, close, checkpoint, and leave the clean-shutdown marker in each
        directory whose logs all closed cleanly. Background tasks still scheduled afterwards
        find no logs and do nothing."""
        logs = list(self)
        with self._lock:
            self._closed = True
            futures, self._futures = list(self._futures.values()), {}
        for moving in futures:  # the next start resumes them (`settle_interrupted_moves`)
            try:
                moving.log.close()
            except (LogDirectoryError, OSError) as exc:  # the next start recovers it
                log.warning("%s did not close cleanly: %s", moving.log.directory, exc)
        unclean: set[int] = set()
        for tp, partition_log in logs:
            try:
                partition_log.close()
            except (LogDirectoryError, OSError) as exc:
                log.error("%s-%d did not close cleanly: %s", tp[0], tp[1], exc)
                unclean.add(id(self._dir_of.get(tp)))
        with self._checkpoint_lock:
            for log_dir in self.dirs:
                if log_dir.online:
                    self._write_checkpoints(log_dir, logs)
                    if id(log_dir) not in unclean:
                        self._mark_clean(log_dir)

    @staticmethod
    def _mark_clean(log_dir: LogDirectory) -> None:
        try:
            log_dir.clean_shutdown_marker.touch()
            fsync_directory(log_dir.path)
        except OSError as exc:
            log.warning("%s: clean shutdown not recorded (the next start recovers): %s",
                        log_dir.path, exc)  # fmt: skip
