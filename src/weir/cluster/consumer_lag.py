"""A consumer group's health from the trend of its lag, as Burrow evaluates it.

Each partition keeps a window of its last observations (`LagWindow`): the committed offset, the
lag behind the high watermark, and when it was seen. From the window, Burrow's rules, in their
order:

- no lag now: OK;
- STOP: the consumer stopped committing: the time since the newest observation is longer than
  the window spans (newest minus oldest);
- OK if the lag was zero anywhere in the window (the consumer caught up at some point);
- REWIND: the committed offset went backwards;
- STALL: the committed offset did not move over the window while there was lag;
- WARNING: the offset moves but the lag grew at every step;
- otherwise OK.

A group's status is the worst of its partitions': ERROR when any partition is STOP, STALL or
REWIND, WARNING when any is WARNING, OK otherwise. A window of one observation is judged by
"no lag now" and STOP only.

Pure arithmetic on the observations given (times in milliseconds): no I/O, no clock.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Burrow's default window: the last ten commits
WINDOW = 10


class PartitionStatus(enum.Enum):
    OK = "OK"
    WARNING = "WARNING"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"


class GroupStatus(enum.Enum):
    OK = "OK"
    WARNING = "WARNING"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class Observation:
    """A partition's committed offset and its lag at `time_ms`."""

    offset: int
    lag: int
    time_ms: int


@dataclass(slots=True)
class LagWindow:
    """The last `size` observations of one partition: each commit, as Burrow keeps them, or,
    for an observer that samples (`changes_only`), each sample whose offset or lag differs from
    the newest (a sampler cannot tell a commit of the same offset from none)."""

    size: int = WINDOW
    observations: deque[Observation] = field(default_factory=deque)

    def add(self, observation: Observation, *, changes_only: bool = False) -> None:
        if changes_only and self.observations:
            newest = self.observations[-1]
            if (newest.offset, newest.lag) == (observation.offset, observation.lag):
                return
        self.observations.append(observation)
        while len(self.observations) > self.size:
            self.observations.popleft()

    def status(self, now_ms: int) -> PartitionStatus:
        return partition_status(list(self.observations), now_ms)


def partition_status(window: list[Observation], now_ms: int) -> PartitionStatus:
    """Burrow's rules over a window of observations, oldest first."""
    if not window or window[-1].lag <= 0:
        return PartitionStatus.OK
    first, last = window[0], window[-1]
    if now_ms - last.time_ms > last.time_ms - first.time_ms:
        return PartitionStatus.STOP
    if len(window) < 2 or any(o.lag <= 0 for o in window):
        return PartitionStatus.OK
    pairs = list(itertools.pairwise(window))
    if any(b.offset < a.offset for a, b in pairs):
        return PartitionStatus.REWIND
    if first.offset == last.offset and last.lag >= first.lag:
        return PartitionStatus.STALL
    if all(b.lag > a.lag for a, b in pairs):
        return PartitionStatus.WARNING
    return PartitionStatus.OK


def group_status(statuses: Iterable[PartitionStatus]) -> GroupStatus:
    worst = GroupStatus.OK
    for status in statuses:
        if status in (PartitionStatus.STOP, PartitionStatus.STALL, PartitionStatus.REWIND):
            return GroupStatus.ERROR
        if status is PartitionStatus.WARNING:
            worst = GroupStatus.WARNING
    return worst
