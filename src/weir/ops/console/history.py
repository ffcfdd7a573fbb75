"""What the console has seen over time, kept in memory for its charts and lag statuses: each
topic's log end offsets (summed over its partitions), each group's lag per partition, and a
Burrow window per group partition (`weir.cluster.consumer_lag`, as `weir group lag` keeps them).

Written by the sampler thread, read by the request threads: every method takes the one lock, and
what a reader gets back is a copy. Times are wall-clock milliseconds from the clock the sampler
is given, so charts can name them and tests can fake them. Only the last `limit` samples are kept;
topics and groups that are gone from the cluster are forgotten at the next sample.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from weir.cluster.consumer_lag import (
    GroupStatus,
    LagWindow,
    Observation,
    PartitionStatus,
    group_status,
)

#: (topic, partition)
TP = tuple[str, int]
#: a chart's points: (time in ms, value)
Points = list[tuple[int, float]]
#: samples kept by default: an hour at the default sampling interval of 5 s
DEFAULT_LIMIT = 720


@dataclass(slots=True)
class _GroupSamples:
    lags: deque[tuple[int, dict[TP, int]]]
    windows: dict[TP, LagWindow] = field(default_factory=dict)


class History:
    """Samples of topics' log end offsets and groups' lag; see the module docstring."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._topics: dict[str, deque[tuple[int, int]]] = {}
        self._groups: dict[str, _GroupSamples] = {}
        self._last_sample_ms: int | None = None

    def record_topics(self, time_ms: int, end_offsets: Mapping[TP, int]) -> None:
        """One sample of every topic's partitions' log end offsets."""
        totals: dict[str, int] = {}
        for (topic, _), end in end_offsets.items():
            totals[topic] = totals.get(topic, 0) + end
        with self._lock:
            for gone in self._topics.keys() - totals.keys():
                del self._topics[gone]
            for topic, total in totals.items():
                self._topics.setdefault(topic, deque(maxlen=self.limit)).append((time_ms, total))
            self._last_sample_ms = time_ms

    def record_groups(
        self, time_ms: int, offsets: Mapping[str, Mapping[TP, tuple[int, int]]]
    ) -> None:
        """One sample of every group: (committed offset, log end offset) of each partition."""
        with self._lock:
            for gone in self._groups.keys() - offsets.keys():
                del self._groups[gone]
            for group, partitions in offsets.items():
                self._record_group(time_ms, group, partitions)

    def _record_group(
        self, time_ms: int, group: str, partitions: Mapping[TP, tuple[int, int]]
    ) -> None:
        samples = self._groups.setdefault(group, _GroupSamples(deque(maxlen=self.limit)))
        lags = {tp: max(0, end - committed) for tp, (committed, end) in partitions.items()}
        samples.lags.append((time_ms, lags))
        for tp, (committed, _) in partitions.items():
            window = samples.windows.setdefault(tp, LagWindow())
            window.add(Observation(committed, lags[tp], time_ms), changes_only=True)
        for gone in samples.windows.keys() - partitions.keys():
            del samples.windows[gone]

    @property
    def last_sample_ms(self) -> int | None:
        with self._lock:
            return self._last_sample_ms

    def throughput(self, topic: str) -> Points:
        """Messages per second written to the topic between each two samples."""
        with self._lock:
            samples = list(self._topics.get(topic, ()))
        return rates(samples)

    def lag(self, group: str) -> dict[str, Points]:
        """The group's total lag at each sample, then each partition's ("TOPIC-P")."""
        with self._lock:
            samples = list(self._groups[group].lags) if group in self._groups else []
        series: dict[str, Points] = {"total": [(t, sum(lags.values())) for t, lags in samples]}
        for tp in sorted({tp for _, lags in samples for tp in lags}):
            series[f"{tp[0]}-{tp[1]}"] = [(t, lags[tp]) for t, lags in samples if tp in lags]
        return series

    def statuses(self, group: str, now_ms: int) -> dict[TP, PartitionStatus]:
        """Burrow's status of each of the group's partitions; empty before its first sample."""
        with self._lock:
            windows = self._groups[group].windows if group in self._groups else {}
            return {tp: window.status(now_ms) for tp, window in windows.items()}

    def group_status(self, group: str, now_ms: int) -> GroupStatus | None:
        """The group's status (the worst of its partitions'), or None before its first sample."""
        with self._lock:
            if group not in self._groups:
                return None
        return group_status(self.statuses(group, now_ms).values())


def rates(samples: Iterable[tuple[int, int]]) -> Points:
    """Per-second rates between consecutive (time ms, counter) samples, at the later time. A
    counter that went down (a topic deleted and made again) counts as no traffic."""
    points: Points = []
    previous: tuple[int, int] | None = None
    for time_ms, count in samples:
        if previous is not None and time_ms > previous[0]:
            delta = max(0, count - previous[1])
            points.append((time_ms, delta * 1000 / (time_ms - previous[0])))
        previous = (time_ms, count)
    return points
