"""Three brokers' metrics endpoints scraped by a real Prometheus server: what it reports of a
real client's produce, and under-replicated partitions rising when a broker is killed and falling
back once it has restarted and caught up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_brokers import (
    CHROOT,
    BrokerSet,
    ClusterBroker,
    create_topics,
    start_together,
    wait_same_everywhere,
    wait_settled,
)
from cluster_processes import free_port
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_server import PrometheusServer, wait_for

TOPIC = "watched"
PARTITIONS = 3
RECORDS = 600
VALUE_BYTES = 200
#: the most a record adds to its value in a v2 batch without key or headers, and a batch header
RECORD_OVERHEAD, BATCH_HEADER = 13, 61
CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "replica.lag.time.max.ms": 5000,
    "consumer.lag.sample.interval.ms": 300,
    # the test counts every partition a broker holds; a minute in, the audit would add its
    # topic's (test_cluster_audit.py tests audit in a cluster)
    "audit.enable": False,
}
GROUP = "watchers"
UNDER_REPLICATED = "sum(kafka_server_replicamanager_underreplicatedpartitions)"
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "weir-brokers.json"
#: dashboard panels that must show data once a client produced and a group committed
PANELS_WITH_DATA = ("Messages in per topic", "p99 total time", "Lag per group",
                    "Produce: where the time goes (mean ms)", "Log size per topic")  # fmt: skip


@pytest.fixture
def metrics_ports() -> dict[int, int]:
    """Node id -> the port its metrics are served on."""
    return {node_id: free_port() for node_id in (1, 2, 3)}


@pytest.fixture
def cluster(
    zookeeper, cluster_brokers: BrokerSet, metrics_ports: dict[int, int]
) -> dict[int, ClusterBroker]:
    brokers = {
        node_id: cluster_brokers.add(node_id, f"{zookeeper.connect}{CHROOT}",
                                     config={**CONFIG, "metrics.port": port})
        for node_id, port in metrics_ports.items()
    }  # fmt: skip
    start_together(brokers.values())
    wait_settled(brokers.values())
    return brokers


@pytest.fixture
def prometheus(
    tmp_path: Path, cluster: dict[int, ClusterBroker], metrics_ports: dict[int, int]
) -> Iterator[PrometheusServer]:
    targets = {str(node_id): port for node_id, port in metrics_ports.items()}
    server = PrometheusServer(tmp_path / "prometheus", targets)
    server.start()
    yield server
    server.stop()


def produce(brokers: list[ClusterBroker]) -> int:
    """RECORDS records of VALUE_BYTES each, spread over the partitions, acks=all; the value
    bytes sent."""
    producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                         "acks": "all", "linger.ms": 20, "log_level": 0})  # fmt: skip
    for i in range(RECORDS):
        producer.produce(TOPIC, b"%0*d" % (VALUE_BYTES, i), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return RECORDS * VALUE_BYTES


def consumer_lag_falls_to_zero(brokers: list[ClusterBroker], prometheus: PrometheusServer) -> None:
    """A group that committed a third of each partition lags by the rest; once it has consumed
    and committed everything, by nothing, and its status is OK."""
    per_partition = RECORDS // PARTITIONS
    consumer = Consumer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                         "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    try:
        third = [TopicPartition(TOPIC, p, per_partition // 3) for p in range(PARTITIONS)]
        consumer.commit(offsets=third, asynchronous=False)
        lag = f'sum(kafka_consumergroup_lag_sum{{consumergroup="{GROUP}"}})'
        left = RECORDS - PARTITIONS * (per_partition // 3)
        wait_for(prometheus, lag, left)
        consumer.subscribe([TOPIC])  # from the committed offsets
        seen = 0
        for _ in range(600):
            if seen == left:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        assert seen == left
        consumer.commit(asynchronous=False)
        wait_for(prometheus, lag, 0)
        status = f'sum(kafka_consumergroup_status{{consumergroup="{GROUP}",status="OK"}})'
        wait_for(prometheus, status, 1)
    finally:
        consumer.close()


def dashboard_queries() -> dict[str, list[str]]:
    """Panel title -> its queries, with the dashboard's variables given their "All" values."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m")
            expr = expr.replace("$topic", ".*").replace("$group", ".*")
            queries.setdefault(panel["title"], []).append(expr)
    return queries


def dashboard_evaluates(prometheus: PrometheusServer) -> None:
    """Every query of the Grafana dashboard is valid PromQL over the brokers' metric names, and
    the panels that must have data have it."""
    queries = dashboard_queries()
    assert set(PANELS_WITH_DATA) <= queries.keys()
    empty = []
    for title, exprs in queries.items():
        for expr in exprs:
            if not prometheus.query(expr) and title in PANELS_WITH_DATA:
                empty.append(f"{title}: {expr}")
    assert not empty, empty


def test_prometheus_sees_produced_bytes_and_under_replication_of_a_killed_broker(
    cluster: dict[int, ClusterBroker], prometheus: PrometheusServer, zk_view, figure
) -> None:
    brokers = list(cluster.values())
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers)})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3))
    wait_same_everywhere(brokers, TOPIC, PARTITIONS)
    values = produce(brokers)

    topic = f'topic="{TOPIC}"'
    wait_for(prometheus, f"sum(kafka_server_brokertopicmetrics_messagesin_total{{{topic}}})",
             RECORDS)  # fmt: skip
    wait_for(prometheus, f"sum(max by (partition) (kafka_log_log_highwatermark{{{topic}}}))",
             RECORDS)  # fmt: skip
    bytes_in = prometheus.value(f"sum(kafka_server_brokertopicmetrics_bytesin_total{{{topic}}})")
    requests = prometheus.value(
        'sum(kafka_network_requestmetrics_requests_total{request="Produce"})'
    )
    assert bytes_in is not None and requests is not None
    assert 0 < bytes_in - values <= RECORD_OVERHEAD * RECORDS + BATCH_HEADER * requests * PARTITIONS
    assert prometheus.value("sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1
    assert prometheus.value(UNDER_REPLICATED) == 0
    consumer_lag_falls_to_zero(brokers, prometheus)
    dashboard_evaluates(prometheus)

    controller = zk_view.controller()
    victim = cluster[next(n for n in (3, 2, 1) if n != controller)]
    victim.kill()
    # every partition has a replica on it, __consumer_offsets' too (the group's commits made it)
    everywhere = PARTITIONS + CONFIG["offsets.topic.num.partitions"]
    rose = wait_for(prometheus, UNDER_REPLICATED, everywhere)
    figure("kill -9 -> under-replicated partitions seen by prometheus", rose)
    wait_for(prometheus, f'up{{broker="{victim.node_id}"}}', 0)

    victim.start()
    fell = wait_for(prometheus, UNDER_REPLICATED, 0)
    figure("restart -> no under-replicated partitions seen by prometheus", fell)
    expands = prometheus.value("sum(kafka_server_replicamanager_isrexpands_total)")
    assert expands is not None and expands >= everywhere  # the leaders took it back in
    wait_for(prometheus, f'up{{broker="{victim.node_id}"}}', 1)
    replicas = f'kafka_server_replicamanager_partitioncount{{broker="{victim.node_id}"}}'
    wait_for(prometheus, replicas, everywhere)  # its own endpoint, back with its replicas
