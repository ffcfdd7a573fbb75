"""The broker's metric families, named as the Prometheus JMX exporter's usual rules render
Kafka's MBeans (`kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec, topic=T>` →
`kafka_server_brokertopicmetrics_bytesin_total{topic="T"}`):

    kafka_server_brokertopicmetrics_bytesin_total{topic}       produced record bytes (leader)
    kafka_server_brokertopicmetrics_messagesin_total{topic}    produced records (batch headers)
    kafka_server_brokertopicmetrics_bytesout_total{topic}      record bytes fetched by consumers
    kafka_server_brokertopicmetrics_replicationbytesout_total{topic}   ... by followers
    kafka_server_brokerpartitionmetrics_..._total{topic,partition}   the same four per partition
                                                               (weir's: Kafka counts per topic)
    kafka_network_requestmetrics_requests_total{request,version}
    kafka_network_requestmetrics_errors_total{request,error}   per error code in the response
                                                               (NONE once per request without one)
    kafka_network_requestmetrics_totaltimems{request}          histograms, milliseconds: from
    kafka_network_requestmetrics_requestqueuetimems{request}   the request read to its response
    kafka_network_requestmetrics_localtimems{request}          written, and its parts (waiting
    kafka_network_requestmetrics_remotetimems{request}         for the handler, the handler's
    kafka_network_requestmetrics_responsesendtimems{request}   work, waiting on replicas or data,
                                                               writing: weir.broker.request_times)
    kafka_server_socket_server_metrics_connection_count{listener}
    kafka_log_log_size{topic,partition}                        bytes of the log's segments
    kafka_log_log_logendoffset{topic,partition}
    kafka_log_log_logstartoffset{topic,partition}
    kafka_log_log_highwatermark{topic,partition}               (weir's: Kafka has no such MBean)
    kafka_cluster_partition_underreplicated{topic,partition}   partitions led here
    kafka_cluster_partition_insyncreplicascount{topic,partition}
    kafka_cluster_partition_replicascount{topic,partition}
    kafka_server_replicamanager_partitioncount                 replicas here, any role
    kafka_server_replicamanager_leadercount
    kafka_server_replicamanager_underreplicatedpartitions      led here with ISR < replicas
    kafka_server_replicamanager_underminisrpartitioncount      led here with ISR < min.insync
    kafka_server_replicamanager_offlinereplicacount            replicas in failed log dirs
    kafka_server_replicamanager_isrshrinks_total
    kafka_server_replicamanager_isrexpands_total
    kafka_controller_kafkacontroller_activecontrollercount     1 on the active controller
    kafka_controller_kafkacontroller_offlinepartitionscount    partitions without a live leader
    kafka_controller_kafkacontroller_globalpartitioncount      (these two and the next four on
    kafka_controller_controllerstats_leaderelections_total     the active controller only)
    kafka_controller_controllerstats_uncleanleaderelections_total
    kafka_controller_controllereventmanager_eventqueuesize
    kafka_controller_controllereventmanager_eventqueuetimems   summary: _count and _sum (ms)
    kafka_server_fetcherlagmetrics_consumerlag{topic,partition}   followers: records behind the
                                                               leader's high watermark
    kafka_log_logflushstats_logflushrateandtimems              histogram: each log flush's ms
    kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent   the event loop's idle
                                                               share (0 to 1) over the last second
    kafka_server_quota_throttle_time_ms_total{quota,user,client_id}   throttle given, per client
    kafka_server_quota_throttled_responses_total{quota,user,client_id}   (Produce, Fetch, Request)

Disk health and the slow lane (weir's; `weir.broker.disk_health`, `weir.broker.slow_lane`):

    kafka_log_diskhealth_utilization{device}          share of the last interval with I/O in flight
    kafka_log_diskhealth_await_ms{device}             mean wait per I/O over it
    kafka_log_diskhealth_page_cache_seconds{device}   how long data is estimated to stay cached
    kafka_log_diskhealth_throttled{topic,partition}   1 while the partition's cold reads are held
    kafka_network_slowlane_connections_total          connections moved to the slow lane
    kafka_network_slowlane_slices_total               file slices read through there

Consumer lag, for the groups this broker coordinates (`weir.broker.group.lag_monitor`; Kafka
has no broker MBean for it, so the names are kafka_exporter's, plus Burrow's status):

    kafka_consumergroup_current_offset{consumergroup,topic,partition}   committed offset
    kafka_consumergroup_lag{consumergroup,topic,partition}      high watermark - committed
    kafka_consumergroup_lag_sum{consumergroup}
    kafka_consumergroup_status{consumergroup,status}             1 for the group's Burrow status
                                                                (OK, WARNING, ERROR), 0 others

Counters count since the broker started. Built in the scrape thread from a `Snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from weir.broker.metrics.snapshot import PartitionSample, Snapshot
from weir.broker.metrics.stats import TOTAL_TIME_BUCKETS_MS
from weir.cluster.consumer_lag import GroupStatus
from weir.storage.flush_stats import FLUSH_BUCKETS_MS

TOPIC_METRICS = "kafka_server_brokertopicmetrics_"
PARTITION_TRAFFIC = "kafka_server_brokerpartitionmetrics_"
REQUEST_METRICS = "kafka_network_requestmetrics_"
REPLICA_MANAGER = "kafka_server_replicamanager_"
LOG = "kafka_log_log_"
PARTITION = "kafka_cluster_partition_"
CONSUMER_GROUP = "kafka_consumergroup_"
CONTROLLER = "kafka_controller_kafkacontroller_"
CONTROLLER_STATS = "kafka_controller_controllerstats_"
EVENT_MANAGER = "kafka_controller_controllereventmanager_"
_PARTITION_LABELS = ["topic", "partition"]
PHASE_DOCUMENTATION = {
    "requestqueuetimems": "milliseconds from the request read to its handler's start",
    "localtimems": "milliseconds of the handler's own work",
    "remotetimems": "milliseconds waiting for replicas or for data (acks=all, a parked fetch)",
    "responsesendtimems": "milliseconds writing the response",
    "totaltimems": "milliseconds from the request read to its response written",
}


class BrokerCollector(Collector):
    """Yields the families of one snapshot per scrape; `take` gets the snapshot."""

    def __init__(self, take: Callable[[], Snapshot]) -> None:
        self._take = take

    def collect(self) -> Iterator[Metric]:
        snapshot = self._take()
        yield from topic_families(snapshot)
        yield from request_families(snapshot)
        yield from partition_families(snapshot)
        yield from replica_manager_families(snapshot)
        yield from consumer_group_families(snapshot)
        yield from controller_families(snapshot)
        yield from throttle_families(snapshot)
        if snapshot.flushes is not None:
            yield _histogram(
                "kafka_log_logflushstats_logflushrateandtimems",
                "milliseconds each partition log's flush (fdatasync) took",
                FLUSH_BUCKETS_MS, snapshot.flushes.buckets, snapshot.flushes.sum_ns,
            )  # fmt: skip
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "connections open, per listener", labels=["listener"],
        )  # fmt: skip
        for listener, count in sorted(snapshot.connections.items()):
            connections.add_metric([listener], count)
        yield connections
        yield _gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 while this broker is the active controller",
            int(snapshot.active_controller),
        )
        yield from disk_families(snapshot)
        yield _gauge(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "share of the last second the event loop (requests and sockets) was idle",
            snapshot.loop_idle_ratio,
        )


def disk_families(snapshot: Snapshot) -> Iterator[Metric]:
    """The log directories' devices, the partitions held for them, and the slow lane."""
    if snapshot.devices or snapshot.disk_throttled:
        gauges = {
            "utilization": ("share of the last interval the device had I/O in flight", "util"),
            "await_ms": ("mean milliseconds each I/O of the device waited", "await_ms"),
            "page_cache_seconds": ("how long data is estimated to stay in the page cache",
                                   "page_cache_s"),
        }  # fmt: skip
        for name, (documentation, attribute) in gauges.items():
            family = GaugeMetricFamily("kafka_log_diskhealth_" + name, documentation,
                                       labels=["device"])  # fmt: skip
            for device in snapshot.devices:
                family.add_metric([device.name], getattr(device, attribute))
            yield family
        throttled = GaugeMetricFamily(
            "kafka_log_diskhealth_throttled", "1 while the partition's cold reads are held",
            labels=_PARTITION_LABELS,
        )  # fmt: skip
        for topic, partition in snapshot.disk_throttled:
            throttled.add_metric([topic, str(partition)], 1)
        yield throttled
    if snapshot.slow_lane is not None:
        marked, warmed = snapshot.slow_lane
        yield CounterMetricFamily("kafka_network_slowlane_connections",
                                  "connections moved to the slow lane", value=marked)
        yield CounterMetricFamily("kafka_network_slowlane_slices",
                                  "file slices read through in the slow lane", value=warmed)


def topic_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Per topic (Kafka's BrokerTopicMetrics), and per partition (weir's)."""
    fields = {
        "bytesin": ("bytes_in", "record bytes produced to partitions led here"),
        "messagesin": ("messages_in", "records produced (counted from batch headers)"),
        "bytesout": ("bytes_out", "record bytes sent to consumers"),
        "replicationbytesout": ("replication_bytes_out", "record bytes sent to followers"),
    }
    traffic = sorted(snapshot.traffic.items())
    for name, (attribute, documentation) in fields.items():
        per_topic: dict[str, int] = {}
        per_partition = CounterMetricFamily(
            PARTITION_TRAFFIC + name, documentation, labels=_PARTITION_LABELS
        )
        for (topic, partition), counters in traffic:
            value = getattr(counters, attribute)
            per_topic[topic] = per_topic.get(topic, 0) + value
            per_partition.add_metric([topic, str(partition)], value)
        family = CounterMetricFamily(TOPIC_METRICS + name, documentation, labels=["topic"])
        for topic, value in per_topic.items():
            family.add_metric([topic], value)
        yield family
        yield per_partition


def request_families(snapshot: Snapshot) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        REQUEST_METRICS + "requests", "requests answered", labels=["request", "version"]
    )
    for (name, version), count in sorted(snapshot.requests.items()):
        requests.add_metric([name, str(version)], count)
    yield requests
    errors = CounterMetricFamily(
        REQUEST_METRICS + "errors", "error codes in responses", labels=["request", "error"]
    )
    for (name, error), count in sorted(snapshot.errors.items()):
        errors.add_metric([name, error], count)
    yield errors
    for phase, documentation in PHASE_DOCUMENTATION.items():
        family = HistogramMetricFamily(REQUEST_METRICS + phase, documentation, labels=["request"])
        for (name, timed), histogram in sorted(snapshot.request_times.items()):
            if timed != phase:
                continue
            cumulative, buckets = 0, []
            for bound, count in zip(
                (*map(_bound, TOTAL_TIME_BUCKETS_MS), "+Inf"), histogram.buckets, strict=True
            ):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([name], buckets, histogram.sum_ns / 1_000_000)
        yield family


def partition_families(snapshot: Snapshot) -> Iterator[Metric]:
    gauges: dict[str, tuple[str, Callable[[PartitionSample], int], bool]] = {
        LOG + "size": ("bytes in the log's segments", lambda p: p.size, False),
        LOG + "logendoffset": ("log end offset", lambda p: p.log_end_offset, False),
        LOG + "logstartoffset": ("log start offset", lambda p: p.log_start_offset, False),
        LOG + "highwatermark": ("high watermark", lambda p: p.high_watermark, False),
        PARTITION + "underreplicated": (
            "1 while the ISR is smaller than the replicas (partitions led here)",
            lambda p: int(p.under_replicated), True,
        ),
        PARTITION + "insyncreplicascount": (
            "ISR members (partitions led here)", lambda p: p.in_sync_replicas, True,
        ),
        PARTITION + "replicascount": (
            "replicas (partitions led here)", lambda p: p.replicas, True,
        ),
    }  # fmt: skip
    lag = GaugeMetricFamily(
        "kafka_server_fetcherlagmetrics_consumerlag",
        "records this follower is behind its leader's high watermark", labels=_PARTITION_LABELS,
    )  # fmt: skip
    for sample in snapshot.partitions:
        if sample.follower_lag >= 0:
            lag.add_metric([sample.topic, str(sample.partition)], sample.follower_lag)
    yield lag
    for name, (documentation, value, leaders_only) in gauges.items():
        family = GaugeMetricFamily(name, documentation, labels=_PARTITION_LABELS)
        for sample in snapshot.partitions:
            if sample.leader or not leaders_only:
                family.add_metric([sample.topic, str(sample.partition)], value(sample))
        yield family


def replica_manager_families(snapshot: Snapshot) -> Iterator[Metric]:
    partitions = snapshot.partitions
    yield _gauge(REPLICA_MANAGER + "partitioncount", "partition replicas on this broker",
                 len(partitions) + snapshot.offline_replicas)  # fmt: skip
    yield _gauge(REPLICA_MANAGER + "leadercount", "partitions led by this broker",
                 sum(p.leader for p in partitions))  # fmt: skip
    yield _gauge(REPLICA_MANAGER + "underreplicatedpartitions",
                 "partitions led here whose ISR is smaller than their replicas",
                 sum(p.under_replicated for p in partitions))  # fmt: skip
    yield _gauge(REPLICA_MANAGER + "underminisrpartitioncount",
                 "partitions led here whose ISR is smaller than min.insync.replicas",
                 sum(p.under_min_isr for p in partitions))  # fmt: skip
    yield _gauge(REPLICA_MANAGER + "offlinereplicacount",
                 "replicas on this broker in failed log directories",
                 snapshot.offline_replicas)  # fmt: skip
    for name, value in (("isrshrinks", snapshot.isr_shrinks),
                        ("isrexpands", snapshot.isr_expands)):  # fmt: skip
        family = CounterMetricFamily(REPLICA_MANAGER + name, f"ISR {name[3:]} of leaders here")
        family.add_metric([], value)
        yield family


def consumer_group_families(snapshot: Snapshot) -> Iterator[Metric]:
    labels = ["consumergroup", "topic", "partition"]
    offsets = GaugeMetricFamily(
        CONSUMER_GROUP + "current_offset", "committed offset", labels=labels
    )
    lags = GaugeMetricFamily(
        CONSUMER_GROUP + "lag", "high watermark minus committed offset", labels=labels
    )
    sums = GaugeMetricFamily(
        CONSUMER_GROUP + "lag_sum", "the group's lag over its partitions", labels=["consumergroup"]
    )
    statuses = GaugeMetricFamily(
        CONSUMER_GROUP + "status", "1 for the group's status (Burrow's rules), 0 for the others",
        labels=["consumergroup", "status"],
    )  # fmt: skip
    for group in snapshot.groups:
        for p in group.partitions:
            offsets.add_metric([group.group, p.topic, str(p.partition)], p.committed)
            lags.add_metric([group.group, p.topic, str(p.partition)], p.lag)
        sums.add_metric([group.group], group.total_lag)
        for status in GroupStatus:
            statuses.add_metric([group.group, status.value], int(status is group.status))
    yield from (offsets, lags, sums, statuses)


def controller_families(snapshot: Snapshot) -> Iterator[Metric]:
    counts = snapshot.controller
    if counts is None:
        return
    yield _gauge(CONTROLLER + "offlinepartitionscount", "partitions without a live leader",
                 counts.offline_partitions)  # fmt: skip
    yield _gauge(CONTROLLER + "globalpartitioncount", "partitions in the cluster",
                 counts.partitions)  # fmt: skip
    for name, value, documentation in (
        ("leaderelections", counts.leader_elections, "partitions given a new leader"),
        ("uncleanleaderelections", counts.unclean_leader_elections,
         "leaders elected from outside the ISR"),
    ):  # fmt: skip
        family = CounterMetricFamily(CONTROLLER_STATS + name, documentation)
        family.add_metric([], value)
        yield family
    yield _gauge(EVENT_MANAGER + "eventqueuesize", "events waiting for the controller",
                 counts.event_queue_size)  # fmt: skip
    yield SummaryMetricFamily(
        EVENT_MANAGER + "eventqueuetimems", "milliseconds events waited in the controller's queue",
        count_value=counts.events, sum_value=counts.event_queue_ns / 1_000_000,
    )  # fmt: skip


def throttle_families(snapshot: Snapshot) -> Iterator[Metric]:
    labels = ["quota", "user", "client_id"]
    time = CounterMetricFamily(
        "kafka_server_quota_throttle_time_ms", "milliseconds of throttle given", labels=labels
    )
    responses = CounterMetricFamily(
        "kafka_server_quota_throttled_responses", "responses with a throttle", labels=labels
    )
    for (quota, user, client_id), (count, milliseconds) in sorted(snapshot.throttles.items()):
        time.add_metric([quota, user, client_id], milliseconds)
        responses.add_metric([quota, user, client_id], count)
    yield from (time, responses)


def _histogram(
    name: str, documentation: str, bounds: Sequence[float], counts: Sequence[int], sum_ns: int
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    cumulative, buckets = 0, []
    for bound, count in zip((*map(_bound, bounds), "+Inf"), counts, strict=True):
        cumulative += count
        buckets.append((bound, cumulative))
    family.add_metric([], buckets, sum_ns / 1_000_000)
    return family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _bound(milliseconds: float) -> str:
    return f"{milliseconds:g}"
