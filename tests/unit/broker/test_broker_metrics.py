"""The broker's metrics (weir.broker.metrics) on a real replica manager and fake time: what a
scrape shows after produces, fetches and ISR changes, requests counted by the request log, and
the endpoint serving from its own thread while an event loop owns the counters."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from weir.broker import request_times
from weir.broker.context import make
from weir.broker.metrics.endpoint import serve_metrics
from weir.broker.metrics.families import BrokerCollector
from weir.broker.metrics.snapshot import Snapshot, Sources, take_snapshot
from weir.broker.metrics.stats import BrokerStats, request_name
from weir.broker.partition import PartitionState
from weir.broker.replica_manager import ReplicaManager
from weir.broker.request_log import RequestLog
from weir.broker.request_times import RequestTimes
from weir.broker.results import FetchRequestPartition, release
from weir.clock import FakeClock, FakeScheduler
from weir.protocol.apis import ApiKey, InterBrokerApiKey
from weir.protocol.codec import Request, response_module
from weir.records import Record, build_batch
from weir.storage import LogConfig, LogManager, LogManagerConfig

NODE = 0
TOPIC = "clicks"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class World:
    replicas: ReplicaManager
    stats: BrokerStats
    clock: FakeClock
    controller: bool = True

    def lead(self, index: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        state = PartitionState(TOPIC, index, NODE, 1, replicas, isr)
        self.replicas.become_leader(state, LogConfig(min_insync_replicas=2))

    def produce(self, index: int, count: int) -> int:
        """Append one batch of `count` records; its size in bytes."""
        records = [Record(offset=i, timestamp=self.clock.milliseconds(), key=None,
                          value=b"value-%d" % i) for i in range(count)]  # fmt: skip
        batch = build_batch(records)
        assert self.replicas.append(TOPIC, index, batch).error is ErrorCode.none
        return len(batch)

    def fetch(self, index: int, offset: int, replica_id: int = -1) -> int:
        """Fetch from `offset` without waiting; the record bytes returned."""
        request = FetchRequestPartition(TOPIC, index, offset, 1 << 20)
        results = asyncio.run(self.replicas.fetch(
            [request], max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, replica_id=replica_id
        ))  # fmt: skip
        try:
            return sum(r.data.size for r in results if r.data is not None)
        finally:
            release(results)

    def snapshot(self) -> Snapshot:
        return take_snapshot(self.stats, self.replicas, Sources(lambda: self.controller))

    def scrape(self) -> Samples:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(self.snapshot))
        return parse(generate_latest(registry).decode())


def parse(text: str) -> Samples:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def partition_labels(index: int) -> tuple[tuple[str, str], ...]:
    return (("partition", str(index)), ("topic", TOPIC))


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=NODE)
    replicas.stats = BrokerStats()
    yield World(replicas, replicas.stats, clock)
    logs.close()


def test_bytes_and_messages_in_are_counted_per_batch_from_its_header(world: World) -> None:
    world.lead(0, (NODE,), (NODE,))
    world.lead(1, (NODE,), (NODE,))
    sizes = [world.produce(0, 5), world.produce(0, 3), world.produce(1, 7)]
    samples = world.scrape()
    topic = (("topic", TOPIC),)
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == sum(sizes)
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 15
    assert samples[("kafka_log_log_logendoffset", partition_labels(0))] == 8
    assert samples[("kafka_log_log_highwatermark", partition_labels(0))] == 8
    assert samples[("kafka_log_log_logstartoffset", partition_labels(0))] == 0
    assert samples[("kafka_log_log_size", partition_labels(0))] == sum(sizes[:2])
    assert samples[("kafka_log_log_highwatermark", partition_labels(1))] == 7


def test_a_refused_batch_is_not_counted_in(world: World) -> None:
    world.lead(0, (NODE,), (NODE,))
    refused = world.replicas.append(TOPIC, 0, b"not a batch")
    assert refused.error is not ErrorCode.none
    assert world.scrape().get(("kafka_server_brokertopicmetrics_bytesin_total",
                               (("topic", TOPIC),)), 0) == 0  # fmt: skip


def test_bytes_out_separate_consumers_from_followers(world: World) -> None:
    world.lead(0, (NODE, 1), (NODE, 1))
    world.produce(0, 4)
    consumed = world.fetch(0, 0)
    assert consumed == 0  # the high watermark waits for follower 1
    replicated = world.fetch(0, 0, replica_id=1)
    world.fetch(0, 4, replica_id=1)  # follower 1 has it all: the high watermark moves
    consumed = world.fetch(0, 0)
    assert replicated > 0 and consumed == replicated
    samples = world.scrape()
    topic = (("topic", TOPIC),)
    assert samples[("kafka_server_brokertopicmetrics_bytesout_total", topic)] == consumed
    assert samples[("kafka_server_brokertopicmetrics_replicationbytesout_total", topic)] == (
        replicated
    )


def test_under_replicated_and_under_min_isr_follow_the_isr(world: World) -> None:
    world.lead(0, (NODE, 1, 2), (NODE, 1, 2))
    world.lead(1, (NODE, 1, 2), (NODE, 1, 2))
    samples = world.scrape()
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert samples[("kafka_server_replicamanager_leadercount", ())] == 2
    assert samples[("kafka_server_replicamanager_partitioncount", ())] == 2

    partition = world.replicas.get(TOPIC, 0)
    assert partition is not None
    world.replicas.isr_answered(partition, frozenset({NODE}), 1)  # followers 1 and 2 dropped
    samples = world.scrape()
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1
    assert samples[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 1
    assert samples[("kafka_server_replicamanager_isrshrinks_total", ())] == 1
    assert samples[("kafka_cluster_partition_underreplicated", partition_labels(0))] == 1
    assert samples[("kafka_cluster_partition_insyncreplicascount", partition_labels(0))] == 1
    assert samples[("kafka_cluster_partition_replicascount", partition_labels(1))] == 3

    world.replicas.isr_answered(partition, frozenset({NODE, 1, 2}), 2)
    samples = world.scrape()
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert samples[("kafka_server_replicamanager_isrexpands_total", ())] == 1


def test_a_follower_replica_has_log_metrics_but_no_leader_ones(world: World) -> None:
    asyncio.run(world.replicas.become_leader_or_follower(
        [PartitionState(TOPIC, 0, 1, 1, (1, NODE), (1, NODE))], _config_of, live_leaders={}
    ))  # fmt: skip
    world.controller = False
    samples = world.scrape()
    assert samples[("kafka_log_log_logendoffset", partition_labels(0))] == 0
    assert ("kafka_cluster_partition_underreplicated", partition_labels(0)) not in samples
    assert samples[("kafka_server_replicamanager_leadercount", ())] == 0
    assert samples[("kafka_server_replicamanager_partitioncount", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 0


async def _config_of(_topic: str) -> LogConfig:
    return LogConfig()


def test_requests_are_counted_by_api_version_and_error_with_their_time(
    world: World, clock: FakeClock
) -> None:
    log = RequestLog(clock)
    log.stats = world.stats
    m = response_module(ApiKey.PRODUCE, 9)
    refused = make(m.PartitionProduceResponse, index=0, error_code=ErrorCode.not_leader_or_follower,
                   base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=(),
                   error_message=None)  # fmt: skip
    response = make(m.ProduceResponse, responses=(
        make(m.TopicProduceResponse, name=TOPIC, partition_responses=(refused,)),
    ))  # fmt: skip
    produce = Request(ApiKey.PRODUCE, 9, 1, "client", None, None)
    log.record(produce, response, clock.monotonic_ms())
    fetch = Request(ApiKey.FETCH, 12, 2, "client", None, None)
    log.record(fetch, None, clock.monotonic_ms())
    log.record(fetch, None, clock.monotonic_ms())
    samples = world.scrape()
    assert samples[("kafka_network_requestmetrics_requests_total",
                    (("request", "Produce"), ("version", "9")))] == 1  # fmt: skip
    assert samples[("kafka_network_requestmetrics_requests_total",
                    (("request", "Fetch"), ("version", "12")))] == 2  # fmt: skip
    refused_labels = (("error", "NOT_LEADER_OR_FOLLOWER"), ("request", "Produce"))
    assert samples[("kafka_network_requestmetrics_errors_total", refused_labels)] == 1
    assert samples[("kafka_network_requestmetrics_errors_total",
                    (("error", "NONE"), ("request", "Fetch")))] == 2  # fmt: skip


def test_the_time_histogram_puts_each_request_in_its_bucket(world: World) -> None:
    for elapsed_ms in (0.1, 0.3, 3, 3, 40_000):
        world.stats.timed(ApiKey.METADATA, [0, 0, 0, 0, int(elapsed_ms * 1_000_000)])
    samples = world.scrape()

    def bucket(le: str) -> float:
        return samples[("kafka_network_requestmetrics_totaltimems_bucket",
                        (("le", le), ("request", "Metadata")))]  # fmt: skip

    assert (bucket("0.25"), bucket("0.5"), bucket("2.5"), bucket("5")) == (1, 2, 2, 4)
    assert (bucket("30000"), bucket("+Inf")) == (4, 5)
    total = samples[("kafka_network_requestmetrics_totaltimems_sum", (("request", "Metadata"),))]
    assert total == pytest.approx(40_006.4)


def test_a_requests_time_is_split_as_kafkas_request_metrics_split_it() -> None:
    ms = 1_000_000
    times = RequestTimes(received_ns=0, started_ns=2 * ms, remote_ns=5 * ms, handled_ns=10 * ms)
    queue, local, remote, send, total = times.phases(sent_ns=11 * ms)
    assert (queue, local, remote, send, total) == (2 * ms, 3 * ms, 5 * ms, 1 * ms, 11 * ms)


def test_remote_wait_counts_only_for_the_current_request() -> None:
    async def scenario() -> None:
        times = request_times.begin(time.perf_counter_ns())
        with request_times.remote_wait():
            await asyncio.sleep(0.02)
        waited = times.remote_ns
        assert waited >= 20_000_000
        request_times.end()
        with request_times.remote_wait():  # no request is timed now: nothing is counted
            await asyncio.sleep(0.001)
        assert times.remote_ns == waited

    asyncio.run(scenario())


def test_request_names_are_kafkas() -> None:
    assert request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(InterBrokerApiKey.LEADER_AND_ISR) == "LeaderAndIsr"
    assert request_name(9999) == "9999"


def test_connections_are_counted_per_listener(world: World) -> None:
    world.stats.connection_opened("PLAINTEXT")
    world.stats.connection_opened("PLAINTEXT")
    world.stats.connection_opened("SSL")
    world.stats.connection_closed("PLAINTEXT")
    samples = world.scrape()
    name = "kafka_server_socket_server_metrics_connection_count"
    assert samples[(name, (("listener", "PLAINTEXT"),))] == 1
    assert samples[(name, (("listener", "SSL"),))] == 1


def test_the_endpoint_takes_its_snapshot_on_the_loop_and_serves_from_its_own_thread(
    world: World,
) -> None:
    world.lead(0, (NODE,), (NODE,))
    world.produce(0, 2)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever)
    loop_thread.start()
    taken_on: list[threading.Thread] = []

    def take() -> Snapshot:
        taken_on.append(threading.current_thread())
        return world.snapshot()

    endpoint = serve_metrics(loop, take, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            samples = parse(response.read().decode())
    finally:
        endpoint.close()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join()
        loop.close()
    assert samples[("kafka_log_log_highwatermark", partition_labels(0))] == 2
    assert taken_on == [loop_thread]


def test_the_loop_idle_ratio_falls_while_the_loop_computes() -> None:
    stats = BrokerStats()

    async def scenario() -> tuple[float, float]:
        sampler = asyncio.ensure_future(stats.sample_loop_idle(interval_s=0.1))
        await asyncio.sleep(0.25)  # off the CPU
        quiet = stats.loop_idle_ratio
        until = time.monotonic() + 0.25
        while time.monotonic() < until:  # the loop's thread on the CPU, never yielding
            sum(range(1000))
        await asyncio.sleep(0)  # the sampler's due wake-up sees the busy stretch
        await asyncio.sleep(0.01)
        busy = stats.loop_idle_ratio
        sampler.cancel()
        return quiet, busy

    quiet, busy = asyncio.run(scenario())
    assert 0.0 <= busy < quiet <= 1.0
