"""The cluster, topic list and topic pages: pure renderers from what `reader` and `history`
gave to the body of a page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from weir.ops.console.charts import Series, line_chart, sparkline
from weir.ops.console.history import Points
from weir.ops.console.html import (
    MISSING,
    Cell,
    Html,
    esc,
    facts,
    human_bytes,
    join,
    link,
    messages_href,
    num,
    section,
    table,
    tag,
    topic_href,
)
from weir.ops.console.reader import (
    TP,
    BrokerLogDirs,
    ClusterView,
    LogOffsets,
    PartitionView,
    TopicView,
)

#: replica sizes by partition, then by broker
Sizes = Mapping[TP, Mapping[int, int]]


def replica_sizes(log_dirs: Sequence[BrokerLogDirs]) -> dict[TP, dict[int, int]]:
    sizes: dict[TP, dict[int, int]] = {}
    for broker in log_dirs:
        for tp, size in broker.sizes.items():
            sizes.setdefault(tp, {})[broker.node_id] = size
    return sizes


def partition_size(topic: str, partition: PartitionView, sizes: Sizes) -> int | None:
    """The leader's replica size; the largest replica's while there is no leader."""
    by_broker = sizes.get((topic, partition.index), {})
    if partition.leader in by_broker:
        return by_broker[partition.leader]
    return max(by_broker.values(), default=None)


def topic_size(topic: TopicView, sizes: Sizes) -> int | None:
    known = [partition_size(topic.name, p, sizes) for p in topic.partitions]
    return sum(s for s in known if s is not None) if any(s is not None for s in known) else None


# ---- the cluster -------------------------------------------------------------------------------


def cluster_page(
    cluster: ClusterView, topics: Sequence[TopicView], log_dirs: Sequence[BrokerLogDirs]
) -> Html:
    partitions = [p for t in topics for p in t.partitions]
    summary = facts([
        ("cluster id", cluster.cluster_id),
        ("controller", f"broker {cluster.controller_id}" if cluster.controller_id is not None
         else "none"),
        ("brokers", len(cluster.brokers)),
        ("topics", len(topics)),
        ("partitions", len(partitions)),
        ("under-replicated", _count_cell(sum(p.under_replicated for p in partitions))),
        ("offline", _count_cell(sum(p.offline for p in partitions))),
    ])  # fmt: skip
    return join([summary, section("Brokers", _brokers_table(cluster, partitions, log_dirs))])


def _count_cell(count: int) -> Html:
    return tag("span", count, class_="bad" if count else "good")


def _brokers_table(
    cluster: ClusterView, partitions: Sequence[PartitionView], log_dirs: Sequence[BrokerLogDirs]
) -> Html:
    disks = {d.node_id: d for d in log_dirs}
    rows = []
    for broker in cluster.brokers:
        role = "controller" if broker.node_id == cluster.controller_id else ""
        dirs = disks.get(broker.node_id)
        rows.append((
            num(broker.node_id), broker.host, num(broker.port), broker.rack or MISSING, role,
            num(sum(p.leader == broker.node_id for p in partitions)),
            num(sum(broker.node_id in p.replicas for p in partitions)),
            num(human_bytes(sum(dirs.sizes.values()) if dirs else None)),
            _disk(dirs),
        ))  # fmt: skip
    return table(("ID", "HOST", "PORT", "RACK", "ROLE", "LEADERS", "REPLICAS", "DATA",
                  "LOG DIRECTORIES"), rows, id_="brokers")  # fmt: skip


def _disk(dirs: BrokerLogDirs | None) -> Html:
    if dirs is None:
        return tag("span", "not reachable", class_="bad")
    return join(tag("div", f"{d.path}: " + (d.error or f"{human_bytes(d.usable_bytes)} free of "
                                              f"{human_bytes(d.total_bytes)}"),
                     class_="bad" if d.error else None)
                 for d in dirs.dirs)  # fmt: skip


# ---- topics ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicRow:
    topic: TopicView
    size: int | None
    throughput: Points


def topics_page(rows: Sequence[TopicRow]) -> Html:
    ordered = sorted(rows, key=lambda r: (r.topic.internal, r.topic.name))
    return table(
        ("TOPIC", "PARTITIONS", "RF", "UNDER-REPLICATED", "OFFLINE", "SIZE", "MESSAGES/S", "TREND"),
        [_topic_row(r) for r in ordered],
        empty="no topics yet",
        id_="topics",
    )


def _topic_row(row: TopicRow) -> list[object]:
    topic = row.topic
    name = link(topic_href(topic.name), topic.name)
    if topic.internal:
        name = join([name, tag("span", "internal", class_="tag")])
    rate = f"{row.throughput[-1][1]:.1f}" if row.throughput else MISSING
    return [
        name, num(len(topic.partitions)), num(topic.replication_factor),
        num(topic.under_replicated, "bad" if topic.under_replicated else ""),
        num(topic.offline, "bad" if topic.offline else ""),
        num(human_bytes(row.size)), num(rate), Cell(sparkline(row.throughput)),
    ]  # fmt: skip


def topic_page(
    topic: TopicView,
    offsets: Mapping[TP, LogOffsets],
    sizes: Sizes,
    overrides: Mapping[str, str],
    throughput: Points,
) -> Html:
    messages = [_count(offsets.get((topic.name, p.index))) for p in topic.partitions]
    summary = facts([
        ("partitions", len(topic.partitions)), ("replication factor", topic.replication_factor),
        ("under-replicated", _count_cell(topic.under_replicated)),
        ("offline", _count_cell(topic.offline)),
        ("size", human_bytes(topic_size(topic, sizes))),
        ("messages", sum(m for m in messages if m is not None)),
        ("configs", ", ".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"),
    ])  # fmt: skip
    chart = line_chart([Series("messages/s", throughput)], title="Messages written", unit="per s")
    rows = [_partition_row(topic.name, p, offsets, sizes) for p in topic.partitions]
    partitions = table(("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG START", "LOG END",
                        "MESSAGES", "SIZE", ""), rows, id_="partitions")  # fmt: skip
    return join([summary, section("Throughput", chart), section("Partitions", partitions)])


def _count(offsets: LogOffsets | None) -> int | None:
    if offsets is None or offsets.start is None or offsets.end is None:
        return None
    return offsets.end - offsets.start


def _partition_row(
    topic: str, p: PartitionView, offsets: Mapping[TP, LogOffsets], sizes: Sizes
) -> list[object]:
    log = offsets.get((topic, p.index), LogOffsets(None, None))
    isr = esc(",".join(map(str, p.isr)) or MISSING)
    missing = [b for b in p.replicas if b not in p.isr]
    if missing:
        isr = join([isr, tag("span", f" (out: {','.join(map(str, missing))})", class_="bad")])
    leader = num("none", "bad") if p.offline else num(p.leader)
    return [
        num(p.index), leader, ",".join(map(str, p.replicas)), isr,
        num(log.start), num(log.end), num(_count(log)),
        num(human_bytes(partition_size(topic, p, sizes))),
        link(messages_href(topic, p.index), "browse"),
    ]  # fmt: skip
