"""Replication throttles, as Kafka's ReplicationQuotaManager applies them: a byte rate bound for
each side of replication on this broker (`leader.replication.throttled.rate` for what it sends
as a leader, `follower.replication.throttled.rate` for what it fetches as a follower), applied
only to the replicas a topic lists (`leader.replication.throttled.replicas`,
`follower.replication.throttled.replicas`: `partition:broker` pairs naming this broker, or `*`)
and only while they are out of sync. A reassignment lists the replicas it adds and the ones it
copies from, so a move is held to the rate while in-sync followers, of the moving partition and
of every other, replicate at full speed.

The bound is checked before a partition is read, as Kafka does: while the measured rate is
above it, a throttled partition gets no records (the leader answers it empty; the follower
leaves it out of its request); the bytes of throttled partitions that are sent count against
it. The rate is measured as client quotas measure theirs (`quota_rate`), over
`replication.quota.window.num` samples of `replication.quota.window.size.seconds`, but taken
over at least one window rather than all but one: a move then copies at its rate from the start
and through every window's expiry, instead of in bursts of ten windows' worth followed by ten
seconds of nothing.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from weir.broker.quota_rate import QuotaWindow, SampledRate, throttle_time_ms
from weir.storage import LogConfig
from weir.storage.config import NO_LIMIT

LEADER = "leader"
FOLLOWER = "follower"
#: the longest a follower waits before asking again for partitions all held back
MAX_HOLD_MS = 1000


class ReplicationQuota:
    """One side's bound on this broker: which partitions it throttles and how fast they go."""

    def __init__(self, side: str, node_id: int, window: QuotaWindow, bound: int = NO_LIMIT):
        self.side = side
        self.node_id = node_id
        self.bound = bound
        self._rate = SampledRate(window)

    @property
    def enabled(self) -> bool:
        return self.bound < NO_LIMIT

    def listed(self, config: LogConfig, index: int) -> bool:
        """Whether the topic's throttled replicas for this side name this broker's replica of
        partition `index`."""
        replicas: Iterable[str] = (
            config.leader_replication_throttled_replicas
            if self.side == LEADER
            else config.follower_replication_throttled_replicas
        )
        return bool(replicas) and ("*" in replicas or f"{index}:{self.node_id}" in replicas)

    def applies(self, config: LogConfig, index: int, in_sync: bool) -> bool:
        """Whether a replica's replication of partition `index` counts against this bound."""
        return self.enabled and not in_sync and self.listed(config, index)

    def exceeded(self, now_ms: int) -> bool:
        return self._rate.measure(now_ms) > self.bound

    def holds(self, config: LogConfig, index: int, in_sync: bool, now_ms: int) -> bool:
        """Whether the partition is to get no records now."""
        return self.applies(config, index, in_sync) and self.exceeded(now_ms)

    def record(self, size: int, now_ms: int) -> None:
        if size:
            self._rate.record(size, now_ms)

    def hold_ms(self, now_ms: int) -> int:
        """How long until the rate is back within the bound (at most MAX_HOLD_MS)."""
        rate = self._rate.measure(now_ms)
        window = self._rate.window_size_ms(now_ms)
        return max(1, throttle_time_ms(rate, self.bound, window, MAX_HOLD_MS))

    def rate(self, now_ms: int) -> float:
        """The measured rate, bytes a second."""
        return self._rate.measure(now_ms)


class ReplicationQuotas:
    """This broker's two bounds, kept to its effective config."""

    def __init__(self, node_id: int, window: QuotaWindow) -> None:
        window = dataclasses.replace(window, min_windows=1)
        self.leader = ReplicationQuota(LEADER, node_id, window)
        self.follower = ReplicationQuota(FOLLOWER, node_id, window)

    def set_bounds(self, leader: int, follower: int) -> None:
        self.leader.bound = leader
        self.follower.bound = follower
