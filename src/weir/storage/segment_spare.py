"""The next segment of one partition log, created ahead of its roll on the scheduler's thread.

Creating a segment opens three files and sizes two indexes (and, with `preallocate`, reserves
the segment's space): file creation that would otherwise run inside an append, on the event loop.
Once the active segment is halfway to rolling (`LogSegment.halfway_to_roll`, looked at each time
it has grown by a sixty-fourth of `segment.bytes`, so that an append pays one comparison), the
scheduler creates the next one in transit: `<log end offset then>.log.next`, `.index.next`,
`.timeindex.next`. The roll renames those files to its real base offset and the segment takes
appends at once. Without a spare (none prepared yet, a roll by time on a partition too quiet to
have grown much, or the log's config changed since), the roll creates the segment itself. A
crash leaves `.next` files behind, which a load removes.

Thread-safety (docs/threads.md): `_prepare` runs on the scheduler's thread and creates files without
the log's lock; everything else runs under the log's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from weir.clock import Clock, Scheduler
from weir.storage.config import LogConfig
from weir.storage.files import NEXT_SUFFIX
from weir.storage.segment import LogSegment, open_new_segment

log = logging.getLogger(__name__)

#: how often, in parts of `segment.bytes` grown, the active segment is looked at
CHECKS_PER_SEGMENT = 64
_NEVER = 2**63 - 1


class SpareSegment:
    def __init__(
        self,
        directory: Path,
        clock: Clock,
        scheduler: Scheduler,
        lock: threading.RLock,
        config: Callable[[], LogConfig],
    ) -> None:
        """`lock`: the log's; `config`: the log's config now."""
        self._directory = directory
        self._clock = clock
        self._scheduler = scheduler
        self._lock = lock
        self._config = config
        self._spare: LogSegment | None = None
        self._preparing = False
        self._closed = False
        #: the active segment's size from which `after_append` looks at it again
        self.check_from = 0

    def after_append(self, active: LogSegment, log_end_offset: int) -> None:
        """Under the log's lock, once `active` has reached `check_from` bytes: prepare a spare
        if it is halfway to rolling."""
        if self._spare is not None or self._preparing or self._closed:
            self.check_from = _NEVER
        elif active.halfway_to_roll(self._clock.milliseconds()):
            self._preparing = True
            self.check_from = _NEVER
            self._scheduler.schedule(
                f"next-segment-{self._directory.name}", lambda: self._prepare(log_end_offset), 0
            )
        else:
            step = max(1, active.config.segment_bytes // CHECKS_PER_SEGMENT)
            self.check_from = active.size + step

    def take(self, base_offset: int) -> LogSegment:
        """Under the log's lock: the segment at `base_offset` that takes over appends."""
        spare, self._spare = self._spare, None
        self.check_from = 0
        if spare is not None and spare.config is self._config():
            try:
                spare.rebase(base_offset)
                return spare
            except OSError as exc:
                log.warning("%s: spare segment unusable: %s", self._directory.name, exc)
        if spare is not None:
            spare.delete()
        return open_new_segment(self._directory, base_offset, self._config(), self._clock)

    def close(self) -> None:
        """Under the log's lock: delete the spare (the log is closing or deleted)."""
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.delete()

    def _prepare(self, placeholder: int) -> None:
        try:
            spare = self._create(placeholder)
        except OSError as exc:  # the roll creates its segment itself
            log.warning("%s: no spare segment: %s", self._directory.name, exc)
            with self._lock:
                self._preparing = False
            return
        with self._lock:
            self._preparing = False
            if self._closed or self._spare is not None:
                spare.delete()
            else:
                self._spare = spare

    def _create(self, placeholder: int) -> LogSegment:
        spare = LogSegment(
            self._directory, placeholder, self._config(), self._clock, transit=NEXT_SUFFIX
        )
        try:
            spare.reserve_space()
        except BaseException:
            spare.delete()
            raise
        return spare
