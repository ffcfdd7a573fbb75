"""The console's sampler: every interval, on a thread of its own, one look at the cluster (every
topic's log end offsets, every group's committed offsets) recorded in the `History` the pages
chart. A look costs one Metadata, one ListOffsets per leader, one ListGroups and one OffsetFetch
per group, whatever the number of partitions.

The sampler thread is the only writer of the history. A look that fails (the cluster is down) is
logged and skipped; the thread goes on until `stop`.
"""

from __future__ import annotations

import logging
import threading

from weir.clock import Clock, SystemClock
from weir.ops.console.errors import ConsoleError
from weir.ops.console.history import History
from weir.ops.console.reader import ClusterReader

log = logging.getLogger(__name__)

#: seconds between two looks by default
DEFAULT_INTERVAL_S = 5.0


class Sampler:
    """Looks at the cluster every `interval_s` seconds (`start`, `stop`), or once (`sample`)."""

    def __init__(
        self,
        reader: ClusterReader,
        history: History,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Clock | None = None,
    ) -> None:
        self.reader = reader
        self.history = history
        self.interval_s = interval_s
        self._clock = clock or SystemClock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def sample(self) -> None:
        """One look at every topic and group, recorded at the time it began."""
        now = self._clock.milliseconds()
        topics = self.reader.topics()
        ends = self.reader.end_offsets((t.name, p.index) for t in topics for p in t.partitions)
        self.history.record_topics(now, ends)
        groups = [g.group_id for g in self.reader.group_listings()]
        self.history.record_groups(now, self.reader.group_offsets(groups, ends))

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.sample()
            except ConsoleError as exc:
                log.info("sample skipped: %s", exc)
            except Exception:  # the sampler outlives a defect in one look; the log tells it
                log.exception("sample failed")
            self._stopped.wait(self.interval_s)
