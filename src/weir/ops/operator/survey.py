"""What the operator knows of a cluster: its live brokers (racks, pools), the replicas and
leaders of every partition, the moves under way, and each partition's measured load.

It asks through the Kafka protocol (Metadata, DescribeConfigs, ListPartitionReassignments,
through `weir.cli.reassign.Cluster`) and reads each broker's metrics where the broker says it
serves them (its `metrics.port`, on `metrics.host` or else the host it is known by).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from weir.cli.reassign import Cluster
from weir.ops.operator.load import (
    BrokerScrape,
    LoadError,
    LoadHistory,
    PartitionLoad,
    TopicPartition,
    rates,
    scrape,
)
from weir.ops.operator.planner import BrokerInfo, Planner

log = logging.getLogger(__name__)

METRICS_PORT, METRICS_HOST, BROKER_POOL = "metrics.port", "metrics.host", "broker.pool"


@dataclass(frozen=True, slots=True)
class ClusterState:
    brokers: list[BrokerInfo]
    assignment: dict[TopicPartition, tuple[int, ...]]
    leaders: dict[TopicPartition, int]
    topic_pools: dict[str, str]
    moving: list[TopicPartition]
    metrics: dict[int, str]
    #: topics' expected bytes a second (`replica.placement.expected.bytes.per.second`), if given
    expected: dict[str, int] = field(default_factory=dict)

    def planner(self, history: LoadHistory) -> Planner:
        return Planner(self.brokers, self.assignment, self.loads(history),
                       topic_pools=self.topic_pools, leaders=self.leaders,
                       moving=self.moving)  # fmt: skip

    def loads(self, history: LoadHistory) -> dict[TopicPartition, PartitionLoad]:
        """Each partition's measured load; a partition with no traffic measured yet, of a
        topic whose creator gave its expected rate, counts its share of that rate as its bytes
        in (so a new topic is placed by it before its traffic starts)."""
        loads = history.median(self.assignment)
        partitions: dict[str, int] = {}
        for topic, _ in self.assignment:
            partitions[topic] = partitions.get(topic, 0) + 1
        for tp, load in loads.items():
            rate = self.expected.get(tp[0], 0)
            if rate > 0 and load.bytes_in <= 0:
                loads[tp] = replace(load, bytes_in=rate / partitions[tp[0]])
        return loads


def cluster_state(cluster: Cluster, *, need_metrics: bool = True) -> ClusterState:
    """The cluster as it is now. A registered broker that does not answer counts as dead (it
    is not planned for, and its replicas are where it is dead). LoadError when a live broker
    serves no metrics, if `need_metrics`."""
    cluster.refresh()
    settings = cluster.broker_settings((METRICS_PORT, METRICS_HOST, BROKER_POOL))
    addresses = cluster.addresses()
    metrics, without = {}, []
    unreachable = {node_id for node_id, values in settings.items() if not values}
    settings = {node_id: values for node_id, values in settings.items() if values}
    for node_id, values in sorted(settings.items()):
        port = int(values.get(METRICS_PORT) or 0)
        if not port:
            without.append(node_id)
            continue
        host = values.get(METRICS_HOST) or addresses[node_id][0]
        metrics[node_id] = f"http://{host}:{port}/metrics"
    if without and need_metrics:
        raise LoadError(f"brokers {without} serve no metrics: set metrics.port on every broker "
                        "for the operator to measure their load")  # fmt: skip
    racks = cluster.racks()
    brokers = [BrokerInfo(b, racks.get(b), settings[b].get(BROKER_POOL) or "")
               for b in sorted(settings)]  # fmt: skip
    assignment = cluster.assignment()
    topics = sorted({topic for topic, _ in assignment})
    if unreachable:
        log.warning("brokers %s registered but not answering: left out", sorted(unreachable))
    expected = {t: r for t, r in cluster.expected_rates(topics).items() if r > 0}
    return ClusterState(brokers, assignment, cluster.leaders(),
                        {t: pool for t, pool in cluster.topic_pools(topics).items() if pool}
                        if topics else {}, sorted(cluster.ongoing()), metrics,
                        expected)  # fmt: skip


def measure(
    metrics: dict[int, str],
    window_s: float,
    windows: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LoadHistory:
    """`windows` windows of `window_s` seconds of every broker's load, one look at each broker
    at each window's edge."""
    if window_s <= 0 or windows < 1:
        raise LoadError(f"a window must last more than 0 s and there must be at least one, not "
                        f"{window_s:g} s and {windows}")  # fmt: skip
    history = LoadHistory(windows)
    previous = look(metrics, clock)
    for _ in range(windows):
        sleep(window_s)
        latest = look(metrics, clock)
        history.add(rates(previous, latest))
        previous = latest
    return history


def look(metrics: dict[int, str], clock: Callable[[], float]) -> dict[int, BrokerScrape]:
    return {node_id: scrape(node_id, url, clock()) for node_id, url in metrics.items()}


def idle_reader(metrics: dict[int, str]) -> Callable[[set[int]], list[float]]:
    """The handler idle ratios of the brokers asked for whose metrics answer (for the
    executor's throttle `governor`)."""

    def idle_of(brokers: set[int]) -> list[float]:
        ratios = []
        for broker in sorted(brokers):
            url = metrics.get(broker)
            if url is None:
                continue
            try:
                idle = scrape(broker, url, time.monotonic()).idle
            except LoadError:
                continue
            if idle is not None:
                ratios.append(idle)
        return ratios

    return idle_of
