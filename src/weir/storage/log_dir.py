"""One of the broker's log directories (`log.dirs`): its checkpoints, its clean-shutdown marker,
its free space and whether it is online.

A directory goes offline when a write in it fails in a way that leaves a log's state unknown (an
I/O error, a failed undo); its logs then refuse appends and reads until a restart loads them
again. Running out of space does not take it offline: appends are refused while free space is
below the broker's floor (`log.dir.min.free.bytes`) and succeed again once space returns.

Free space is read with statvfs at most every `FREE_SPACE_CHECK_MS`, less what was appended
since, so a produce costs no system call.

Thread-safety (docs/threads.md): `free_bytes` and `note_appended` may race between the loop and the
scheduler thread; a lost update only makes the estimate a little stale until the next statvfs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from weir.clock import Clock
from weir.storage.checkpoint import OffsetCheckpointFile, TopicPartition
from weir.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)

log = logging.getLogger(__name__)

FREE_SPACE_CHECK_MS = 100


class LogDirectory:
    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self._clock = clock
        self.offline_reason: str | None = None
        self.recovery_points = OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT)
        self.log_starts = OffsetCheckpointFile(path / LOG_START_OFFSET_CHECKPOINT)
        self.high_watermarks = OffsetCheckpointFile(path / HIGH_WATERMARK_CHECKPOINT)
        self.clean_shutdown_marker = path / CLEAN_SHUTDOWN_FILE
        self._free_at_check = 0
        self._appended_since_check = 0
        self._checked_ms: int | None = None

    @property
    def online(self) -> bool:
        return self.offline_reason is None

    def take_offline(self, reason: str) -> None:
        if self.offline_reason is None:
            self.offline_reason = reason
            log.error("log directory %s is offline: %s", self.path, reason)

    def free_bytes(self) -> int:
        """Bytes available to the broker in this directory's file system (an estimate)."""
        now = self._clock.monotonic_ms()
        if self._checked_ms is None or now - self._checked_ms >= FREE_SPACE_CHECK_MS:
            try:
                stats = os.statvfs(self.path)
            except OSError:
                return 0
            self._free_at_check = stats.f_bavail * stats.f_frsize
            self._appended_since_check = 0
            self._checked_ms = now
        return max(0, self._free_at_check - self._appended_since_check)

    def volume_bytes(self) -> tuple[int, int]:
        """(total, usable) bytes of the file system this directory is on, as DescribeLogDirs
        reports them; (-1, -1) if it cannot be read."""
        try:
            stats = os.statvfs(self.path)
        except OSError:
            return -1, -1
        return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize

    def note_appended(self, size: int) -> None:
        self._appended_since_check += size

    def note_freed(self) -> None:
        """Space was given back (segments deleted): read it again at the next check."""
        self._checked_ms = None

    def read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except ValueError as exc:
            log.warning("ignoring damaged checkpoint: %s", exc)
            return {}

    def write_checkpoints(
        self,
        recovery_points: dict[TopicPartition, int],
        log_starts: dict[TopicPartition, int],
        high_watermarks: dict[TopicPartition, int],
    ) -> bool:
        """Write the checkpoints; False (logged) if the disk refused. The previous files stay."""
        try:
            self.recovery_points.write(recovery_points)
            self.log_starts.write(log_starts)
            self.high_watermarks.write(high_watermarks)
        except OSError as exc:
            log.warning("checkpoints in %s not written: %s", self.path, exc)
            return False
        return True

    def __repr__(self) -> str:
        state = "online" if self.online else f"offline: {self.offline_reason}"
        return f"LogDirectory({self.path}, {state})"
