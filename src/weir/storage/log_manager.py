"""All partition logs under one data directory, and the background work that keeps them.

Data directory layout::

    <data dir>/
        <topic>-<partition>/                 one PartitionLog each
        recovery-point-offset-checkpoint     per-partition recovery points
        log-start-offset-checkpoint          per-partition log start offsets
        .weir-clean-shutdown                 present only between a clean close and the next open

Background tasks on the injected scheduler: retention, compaction, time-based flush and the two
checkpoints. On `close()` every log is flushed, checkpoints are written and the clean-shutdown
marker is created, so the next start trusts the logs without scanning them.

Thread-safety: the registry of logs is guarded by a lock; each log guards itself.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from weir.clock import Clock, Scheduler
from weir.durable import fsync_directory
from weir.storage.checkpoint import OffsetCheckpointFile, TopicPartition
from weir.storage.cleaner import LogCleaner
from weir.storage.config import LogConfig
from weir.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    DELETE_DIR_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_partition_dir,
    partition_dir_name,
)
from weir.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogManagerConfig:
    retention_check_interval_ms: int = 300_000
    flush_check_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 60_000
    cleaner_backoff_ms: int = 15_000


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig,
        clock: Clock,
        scheduler: Scheduler,
        manager_config: LogManagerConfig | None = None,
        topic_configs: dict[str, LogConfig] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.default_config = default_config
        self._clock = clock
        self._scheduler = scheduler
        self._settings = manager_config or LogManagerConfig()
        self._topic_configs = dict(topic_configs or {})
        self._lock = threading.Lock()
        self._closed = False
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.cleaner = LogCleaner(clock)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._recovery_points = OffsetCheckpointFile(data_dir / RECOVERY_POINT_CHECKPOINT)
        self._log_starts = OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT)
        self._load_all()
        self._schedule_tasks()

    # ---- loading ------------------------------------------------------------------------------

    def _load_all(self) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint(self._recovery_points)
        log_starts = self._read_checkpoint(self._log_starts)
        for directory in sorted(p for p in self.data_dir.iterdir() if p.is_dir()):
            if directory.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(directory, ignore_errors=True)
                continue
            tp = parse_partition_dir(directory.name)
            if tp is None:
                continue
            self.logs[tp] = PartitionLog(
                directory,
                self.config_for(tp[0]),
                self._clock,
                self._scheduler,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                clean_shutdown=clean,
            )
        marker.unlink(missing_ok=True)
        self.checkpoint()

    @staticmethod
    def _read_checkpoint(checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except ValueError as exc:
            log.warning("ignoring damaged checkpoint: %s", exc)
            return {}

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
        with self._lock:
            tp = (topic, partition)
            if tp not in self.logs:
                directory = self.data_dir / partition_dir_name(topic, partition)
                self.logs[tp] = PartitionLog(
                    directory,
                    self.config_for(topic),
                    self._clock,
                    self._scheduler,
                    clean_shutdown=True,
                )
                fsync_directory(self.data_dir)
            return self.logs[tp]

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            self._topic_configs[topic] = config
            for (t, _), partition_log in self.logs.items():
                if t == topic:
                    partition_log.config = config

    def delete(self, topic: str, partition: int) -> None:
        """Remove a partition: its directory is renamed away at once and removed."""
        with self._lock:
            partition_log = self.logs.pop((topic, partition), None)
        if partition_log is None:
            return
        partition_log.delete()
        doomed = partition_log.directory.with_name(
            f"{partition_log.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        )
        partition_log.directory.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        self.checkpoint()

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        with self._lock:
            items = [] if self._closed else list(self.logs.items())
        return iter(items)

    # ---- background work ----------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        return sum(partition_log.delete_old_segments() for _, partition_log in self)

    def flush_due_logs(self) -> None:
        for _, partition_log in self:
            partition_log.flush_if_due()

    def compact_logs(self) -> int:
        return sum(
            self.cleaner.clean(partition_log)
            for _, partition_log in self
            if partition_log.config.compact
        )

    def checkpoint(self) -> None:
        logs = list(self)
        self._recovery_points.write({tp: pl.recovery_point for tp, pl in logs})
        self._log_starts.write({tp: pl.log_start_offset for tp, pl in logs})

    def close(self) -> None:
        """Clean shutdown: flush, close, checkpoint, and leave the clean-shutdown marker.
        Background tasks still scheduled afterwards find no logs and do nothing."""
        logs = list(self)
        with self._lock:
            self._closed = True
        for _, partition_log in logs:
            partition_log.close()
        self._recovery_points.write({tp: pl.recovery_point for tp, pl in logs})
        self._log_starts.write({tp: pl.log_start_offset for tp, pl in logs})
        (self.data_dir / CLEAN_SHUTDOWN_FILE).touch()
        fsync_directory(self.data_dir)
