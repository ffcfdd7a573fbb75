"""The broker's Prometheus endpoint (`metrics.port`), scraped over HTTP from a real broker process
that confluent-kafka produced to and consumed from."""

from __future__ import annotations

import socket
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from metrics_scrape import Samples, scrape, total
from waiting import poll

TOPIC = "measured"
RECORDS = {0: 300, 1: 200}
VALUE_BYTES = 100
#: the most a record adds to its value in a v2 batch without key or headers: length,
#: attributes, timestamp delta, offset delta, key length, value length, header count
RECORD_OVERHEAD = 13
BATCH_HEADER = 61


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def produce(bootstrap: str) -> int:
    """RECORDS[p] records of VALUE_BYTES each to partition p; the value bytes sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "compression.type": "none"})  # fmt: skip
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(TOPIC, b"%0*d" % (VALUE_BYTES, i), partition=partition)
    assert producer.flush(30) == 0
    return sum(RECORDS.values()) * VALUE_BYTES


def consume(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metrics",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([TOPIC])
    seen = 0
    try:
        while seen < sum(RECORDS.values()):
            message = consumer.poll(30)
            assert message is not None and message.error() is None
            seen += 1
        assert consumer.poll(1.5) is None  # a fetch or more waited for records, in vain
    finally:
        consumer.close()
    return seen


def test_a_scrape_counts_what_a_real_client_produced_and_consumed(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path / "broker", config={
        "metrics.port": port, "consumer.lag.sample.interval.ms": 200})  # fmt: skip
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=2)])[TOPIC].result(30)
        values = produce(broker.bootstrap)
        assert consume(broker.bootstrap) == sum(RECORDS.values())
        url = f"http://127.0.0.1:{port}/metrics"
        samples = poll(lambda: _consumed(scrape(url)), 30, "bytes out reported")
        lag = poll(lambda: _group_lag(scrape(url)), 30, "the group's lag sampled")
    finally:
        broker.stop()

    topic = {"topic": TOPIC}
    bytes_in = total(samples, "kafka_server_brokertopicmetrics_bytesin_total", **topic)
    produce_requests = total(samples, "kafka_network_requestmetrics_requests_total",
                             request="Produce")  # fmt: skip
    batches_at_most = produce_requests * len(RECORDS)
    overhead = bytes_in - values
    assert 0 < overhead <= RECORD_OVERHEAD * sum(RECORDS.values()) + BATCH_HEADER * batches_at_most
    assert bytes_in == total(samples, "kafka_log_log_size", **topic)  # stored as they came
    assert bytes_in == total(samples, "kafka_server_brokerpartitionmetrics_bytesin_total", **topic)
    assert total(samples, "kafka_server_brokertopicmetrics_messagesin_total", **topic) == 500
    for partition, count in RECORDS.items():
        where = {**topic, "partition": str(partition)}
        assert total(samples, "kafka_server_brokerpartitionmetrics_messagesin_total",
                     **where) == count  # fmt: skip
        assert total(samples, "kafka_log_log_highwatermark", **where) == count
        assert total(samples, "kafka_log_log_logendoffset", **where) == count
        assert total(samples, "kafka_log_log_logstartoffset", **where) == 0
    assert total(samples, "kafka_server_brokertopicmetrics_bytesout_total", **topic) >= bytes_in
    assert total(samples, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") == produce_requests  # fmt: skip
    assert total(samples, "kafka_network_requestmetrics_errors_total", request="Produce",
                 error="NONE") == produce_requests  # fmt: skip
    assert total(samples, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0
    assert total(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert total(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    for phase in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems"):
        assert total(samples, f"kafka_network_requestmetrics_{phase}_count",
                     request="Produce") == produce_requests  # fmt: skip
    fetch_total = total(samples, "kafka_network_requestmetrics_totaltimems_sum", request="Fetch")
    fetch_remote = total(samples, "kafka_network_requestmetrics_remotetimems_sum", request="Fetch")
    assert 0 < fetch_remote <= fetch_total  # the consumer's fetches waited for records
    assert lag == {"lag": 0, "offset": sum(RECORDS.values()), "OK": 1}
    assert ("kafka_log_logflushstats_logflushrateandtimems_count", ()) in samples
    assert ("kafka_server_socket_server_metrics_connection_count",
            (("listener", "PLAINTEXT"),)) in samples  # fmt: skip


def _group_lag(samples: Samples) -> dict[str, float] | None:
    """The consumer group's lag, committed offsets and OK status, once sampled."""
    group = {"consumergroup": "metrics"}
    if total(samples, "kafka_consumergroup_current_offset", **group) < sum(RECORDS.values()):
        return None
    return {
        "lag": total(samples, "kafka_consumergroup_lag_sum", **group),
        "offset": total(samples, "kafka_consumergroup_current_offset", **group),
        "OK": total(samples, "kafka_consumergroup_status", status="OK", **group),
    }


def _consumed(samples: Samples) -> Samples | None:
    """The scrape once it shows the consumer's fetches (counted as each is answered)."""
    out = total(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC)
    stored = total(samples, "kafka_log_log_size", topic=TOPIC)
    return samples if stored and out >= stored else None
