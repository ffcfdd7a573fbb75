"""A scrape's view of the broker: the counters of `BrokerStats` copied, and each partition's log
and ISR read at that moment (nothing about partitions is kept per append).

`take_snapshot` runs on the event loop (the owner of partitions and counters); what it returns
is plain data the scrape thread formats. `on_loop` is how the scrape thread gets one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from weir.broker.client_quotas import ClientQuotas
from weir.broker.disk_health import DeviceHealth, DiskHealth
from weir.broker.group.lag_monitor import GroupLag
from weir.broker.metrics.stats import BrokerStats, TimeHistogram, TopicCounters
from weir.broker.partition import FOLLOWER, LEADER, OFFLINE, Partition
from weir.broker.replica_manager import ReplicaManager
from weir.broker.slow_lane import SlowLane
from weir.storage.flush_stats import FLUSHES, FlushTimes

#: how long a scrape waits for the loop to take its snapshot
SNAPSHOT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PartitionSample:
    """One partition's replica on this broker, as a scrape saw it."""

    topic: str
    partition: int
    size: int
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    leader: bool
    #: replicas and ISR members; while this broker leads the partition (0 otherwise)
    replicas: int
    in_sync_replicas: int
    min_insync_replicas: int
    #: while this broker follows the partition: records it is behind the leader's high
    #: watermark as its last fetch saw it (-1 otherwise)
    follower_lag: int = -1

    @property
    def under_replicated(self) -> bool:
        return self.leader and self.in_sync_replicas < self.replicas

    @property
    def under_min_isr(self) -> bool:
        return self.leader and self.in_sync_replicas < self.min_insync_replicas


@dataclass(frozen=True, slots=True)
class ControllerSample:
    """The controller's counts, while this broker is the active controller."""

    leader_elections: int
    unclean_leader_elections: int
    offline_partitions: int
    partitions: int
    events: int
    event_queue_ns: int
    event_queue_size: int


@dataclass(frozen=True, slots=True)
class Sources:
    """Where a snapshot looks besides the broker's counters."""

    #: whether this broker is the active controller (a single node is its own)
    active_controller: Callable[[], bool]
    #: the controller's counts (None: not the active controller, or a single node)
    controller: Callable[[], ControllerSample | None] = lambda: None
    #: the consumer lag of the groups coordinated here, as last sampled
    groups: Callable[[], tuple[GroupLag, ...]] = tuple
    quotas: ClientQuotas | None = None
    #: the log directories' devices and throttled partitions (None: no throttling by disk health)
    disk_health: Callable[[], DiskHealth | None] = lambda: None
    slow_lane: SlowLane | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    #: (topic, partition) -> its traffic
    traffic: dict[tuple[str, int], TopicCounters]
    requests: dict[tuple[str, int], int]
    errors: dict[tuple[str, str], int]
    #: (request name, phase) -> its times
    request_times: dict[tuple[str, str], TimeHistogram]
    isr_shrinks: int
    isr_expands: int
    connections: dict[str, int]
    partitions: tuple[PartitionSample, ...]
    #: replicas here whose log directory failed
    offline_replicas: int
    #: whether this broker is the active controller (a single node is its own)
    active_controller: bool
    #: the consumer lag of the groups coordinated here, as last sampled
    groups: tuple[GroupLag, ...] = ()
    controller: ControllerSample | None = None
    loop_idle_ratio: float = 1.0
    flushes: FlushTimes | None = None
    #: (quota type, user, client id) -> (responses throttled, milliseconds of throttle)
    throttles: dict[tuple[str, str, str], tuple[int, int]] = field(default_factory=dict)
    #: each log directory device's health over the last interval, and the partitions whose
    #: cold reads are held for it
    devices: tuple[DeviceHealth, ...] = ()
    disk_throttled: tuple[tuple[str, int], ...] = ()
    #: (connections moved to the slow lane, file slices read through there); None: no lane
    slow_lane: tuple[int, int] | None = None


def take_snapshot(stats: BrokerStats, replicas: ReplicaManager, sources: Sources) -> Snapshot:
    """Copy the counters and sample every partition. On the event loop."""
    samples = []
    offline = 0
    for partition in replicas.partitions.values():
        if partition.role is OFFLINE:
            offline += 1
        else:
            samples.append(_sample(partition))
    offline += len(replicas.log_manager.offline_partitions - replicas.partitions.keys())
    health, lane = sources.disk_health(), sources.slow_lane
    return Snapshot(
        traffic={key: replace(counters) for key, counters in stats.partitions.items()},
        requests=dict(stats.requests),
        errors=dict(stats.errors),
        request_times={key: h.copy() for key, h in stats.request_times.items()},
        isr_shrinks=stats.isr_shrinks,
        isr_expands=stats.isr_expands,
        connections=dict(stats.connections),
        partitions=tuple(samples),
        offline_replicas=offline,
        active_controller=sources.active_controller(),
        groups=sources.groups(),
        controller=sources.controller(),
        throttles=_throttles(sources.quotas),
        loop_idle_ratio=stats.loop_idle_ratio,
        flushes=FLUSHES.copy(),
        devices=tuple(health.devices().values()) if health is not None else (),
        disk_throttled=tuple(sorted(health.throttled)) if health is not None else (),
        slow_lane=(lane.marked, lane.warmed) if lane is not None else None,
    )


def _throttles(quotas: ClientQuotas | None) -> dict[tuple[str, str, str], tuple[int, int]]:
    if quotas is None:
        return {}
    return {
        (name, user, client_id): (counts[0], counts[1])
        for name, manager in (("Produce", quotas.produce), ("Fetch", quotas.fetch),
                              ("Request", quotas.request))
        for (user, client_id), counts in manager.throttled.items()
    }  # fmt: skip


def _sample(partition: Partition) -> PartitionSample:
    log = partition.log
    state = partition.leader_state
    return PartitionSample(
        topic=partition.topic,
        partition=partition.index,
        size=log.size,
        log_end_offset=log.log_end_offset,
        high_watermark=log.high_watermark,
        log_start_offset=log.log_start_offset,
        leader=partition.role is LEADER,
        replicas=len(state.replicas) if state is not None else 0,
        in_sync_replicas=len(state.isr) if state is not None else 0,
        min_insync_replicas=log.config.min_insync_replicas,
        follower_lag=_follower_lag(partition),
    )


def _follower_lag(partition: Partition) -> int:
    if partition.role is not FOLLOWER or partition.leader_high_watermark < 0:
        return -1
    return max(partition.leader_high_watermark - partition.log.log_end_offset, 0)


def on_loop(
    loop: asyncio.AbstractEventLoop, take: Callable[[], Snapshot]
) -> Callable[[], Snapshot]:
    """`take`, called from another thread: run on `loop` and waited for (at most
    SNAPSHOT_TIMEOUT_S; a loop that does not answer fails the scrape, not the broker)."""

    def taken_on_loop() -> Snapshot:
        result: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(take())
            except Exception as exc:
                result.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return result.result(SNAPSHOT_TIMEOUT_S)

    return taken_on_loop
