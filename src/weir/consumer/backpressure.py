"""Back-pressure: which partitions to pause and resume, and how many records to ask for.

Owns `BackPressure`, pure decisions over buffered-record counts (the fetcher applies them to
its Consumer). The bound on buffered records is shared among the owned partitions. Under
pressure (the buffer at least half full and not draining), a partition is paused once its
buffered records reach its share of the bound: librdkafka then drops what it prefetched for
that partition, so the next records come from other partitions and the buffer holds many
partitions' records. That matters because under per-partition order only as many workers can
be busy as partitions have records buffered. A paused partition resumes at half its share.
When the bound itself is reached every partition is paused (saturated) until one share of
it is free, and then the partitions that drained are resumed: waiting for half the bound would
leave workers idle while the remaining records sit in a few partitions. While any partition
is paused, a fetch asks for one share at most, so one partition cannot take another's room.

A pause costs librdkafka's prefetch for the partition and a resume a fetch round, so nothing is
paused while the handler keeps up: the buffer never stays half full.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Decision(Generic[K]):
    pause: list[K]
    resume: list[K]
    saturated: bool


class BackPressure(Generic[K]):
    """Thread-safety (docs/threads.md): the owning fetcher's thread only."""

    def __init__(self, max_buffered: int, fetch_batch: int) -> None:
        self.max_buffered = max_buffered
        self.fetch_batch = fetch_batch
        self.paused: set[K] = set()
        self.saturated = False

    @property
    def resume_mark(self) -> int:
        return self.max_buffered // 2

    def share(self, partitions: int) -> int:
        return max(1, self.max_buffered // max(1, partitions))

    def fetch_count(self, total: int, partitions: int) -> int:
        """How many records the next fetch may return (0: none). Beyond half the bound a
        fetch brings one share at most: librdkafka hands out one partition's records at a
        time, and the rest of the bound is kept for the others."""
        room = self.max_buffered - total
        if self.saturated or room < 1:
            return 0
        share = self.share(partitions)
        if self.paused:
            return min(self.fetch_batch, room, share)
        return min(self.fetch_batch, room, max(share, self.resume_mark - total))

    def decide(self, buffered: Mapping[K, int], total: int) -> Decision[K]:
        """What to change, given each owned partition's buffered records and the total (which
        may include more than the partitions' records, such as results awaiting a commit)."""
        paused = self.paused & buffered.keys()
        share = self.share(len(buffered))
        if self.saturated:
            saturated = total > self.max_buffered - share
        else:
            saturated = total >= self.max_buffered
        if saturated:
            return Decision([k for k in buffered if k not in paused], [], True)
        pressed = total >= self.resume_mark
        pause = [k for k, n in buffered.items() if pressed and n >= share and k not in paused]
        resume = [k for k, n in buffered.items() if k in paused and n <= share // 2]
        return Decision(pause, resume, False)

    def record(self, decision: Decision[K], owned: Mapping[K, object]) -> None:
        """The fetcher applied `decision`; forget partitions no longer owned."""
        self.paused = (self.paused & owned.keys()) | set(decision.pause)
        self.paused -= set(decision.resume)
        self.saturated = decision.saturated

    def assigned(self, keys: list[K]) -> list[K]:
        """Newly assigned partitions that must start paused (the bound is reached)."""
        if not self.saturated:
            return []
        self.paused |= set(keys)
        return keys
