"""Kafka's topic configs as admin tools use them, through confluent-kafka's, kafka-python's and
aiokafka's admin clients and kcat: every config of the table accepted at create time, synonyms
and sources in DescribeConfigs, incremental and legacy alters, explicit replica assignments, the
configs weir honours (keys on compacted topics, timestamp bounds, broker-side compression,
min.insync.replicas), and a broker log line for each refusal."""

from __future__ import annotations

import asyncio
import glob
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType
from broker_process import BrokerProcess, require_tool
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from group_raw import RawMember
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.static.primitive import i8

from weir.protocol.apis import ApiKey
from weir.records import BatchHeader, Compression, iter_batches
from weir.storage.config import TOPIC_CONFIGS, ConfigType

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.admin import ConfigResource as KafkaPythonConfigResource
    from kafka.admin import ConfigResourceType as KafkaPythonResourceType
    from kafka.admin import KafkaAdminClient

TIMEOUT = 30
INVALID_CONFIG, INVALID_REPLICA_ASSIGNMENT, INVALID_RECORD = 40, 39, 87

#: a valid value other than the default for every entry of the table
SAMPLES = {
    "cleanup.policy": "compact,delete",
    "compression.type": "zstd",
    "compression.gzip.level": "5",
    "compression.lz4.level": "10",
    "compression.zstd.level": "7",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000",
    "flush.messages": "100000",
    "flush.ms": "100000",
    "follower.replication.throttled.replicas": "0:0,1:0",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "1000000",
    "local.retention.ms": "100000",
    "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000",
    "message.downconversion.enable": "false",
    "message.format.version": "2.8-IV1",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.3",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "1",
    "preallocate": "true",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "100000000",
    "retention.ms": "86400000",
    "segment.bytes": "1048576",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "1000",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
    "high.watermark.policy": "flushed",
    "replica.placement.strategy": "consistent-hash",
    "replica.placement.pool": "tenant-a",
    "replica.placement.expected.bytes.per.second": "1000000",
}
BROKER_CONFIG = {"log.retention.ms": 3_600_000, "log.segment.bytes": 65536, "num.partitions": 1}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("configs") / "broker", config=BROKER_CONFIG)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin: AdminClient, name: str, partitions: int = 1, **configs: str) -> None:
    topic = ConfluentNewTopic(name, partitions, 1, config=configs)
    admin.create_topics([topic])[name].result(TIMEOUT)


def refusal(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as failure:
        future.result(TIMEOUT)
    error: KafkaError = failure.value.args[0]
    return error


def describe(admin: AdminClient, name: str, kind: ResourceType = ResourceType.TOPIC) -> Any:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)  # librdkafka asks synonyms


def produce(broker: BrokerProcess, topic: str, records: list[dict[str, Any]], **conf: Any) -> list:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **conf})
    reports: list = []
    for record in records:
        producer.produce(topic, **record, on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(TIMEOUT) == 0
    return reports


def raw_describe(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    """DescribeConfigs v4 by hand, with synonyms and documentation (confluent-kafka shows
    neither types nor documentation, and keeps one synonym per name)."""
    client = RawMember(broker, "unused")
    try:
        request = describe_v4.DescribeConfigsRequest(
            resources=(describe_v4.DescribeConfigsResource(
                resource_type=i8(2), resource_name=topic, configuration_keys=None),),
            include_synonyms=True, include_documentation=True)  # fmt: skip
        response = client.call(ApiKey.DESCRIBE_CONFIGS, 4, request)
    finally:
        client.close()
    [result] = response.results
    return {c.name: c for c in result.configs}


def test_the_table_covers_every_config_the_samples_name() -> None:
    assert sorted(SAMPLES) == sorted(d.name for d in TOPIC_CONFIGS)


def test_every_config_of_the_table_is_accepted_and_described(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "all-configs", **SAMPLES)
    described = describe(admin, "all-configs")
    assert {name: described[name].value for name in SAMPLES} == SAMPLES
    raw = raw_describe(broker, "all-configs")
    for name in SAMPLES:
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
        first, *_, last = raw[name].synonyms
        assert (first.name, first.value, first.source) == (name, SAMPLES[name], 1), name
        assert last.source == ConfigSource.DEFAULT_CONFIG.value, name


def test_synonyms_tell_a_topic_override_from_a_broker_setting_and_a_default(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "synonyms", **{"segment.bytes": "32768"})
    described = describe(admin, "synonyms")
    segment = described["segment.bytes"]
    assert segment.value == "32768" and segment.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Kafka lists a broker setting twice, set and default: confluent-kafka keeps one per name
    assert [(s.name, s.value, s.source) for s in raw_describe(broker, "synonyms")
            ["segment.bytes"].synonyms] == [
        ("segment.bytes", "32768", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.segment.bytes", "65536", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value),
    ]  # fmt: skip
    retention = described["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
    flush = described["flush.ms"]
    assert flush.source == ConfigSource.DEFAULT_CONFIG.value and flush.is_default
    broker_side = describe(admin, "0", ResourceType.BROKER)
    assert broker_side["log.segment.bytes"].value == "65536"
    assert broker_side["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker_side["log.dir.min.free.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert {"listeners", "log.dirs", "queued.max.request.bytes", "min.insync.replicas",
            "unclean.leader.election.enable", "log.cleaner.min.cleanable.ratio"} <= set(
        broker_side
    )  # fmt: skip


def test_invalid_values_get_kafkas_messages_and_change_nothing(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    bad = {
        "min.insync.replicas": ("0", "Value must be at least 1"),
        "compression.type": ("brotli", "String must be one of"),
        "unclean.leader.election.enable": ("maybe", "Expected value to be either true or false"),
        "min.cleanable.dirty.ratio": ("2", "Value must be no more than 1"),
        "no.such.config": ("1", "Unknown topic config name: no.such.config"),
    }
    for name, (value, message) in bad.items():
        error = refusal(admin.create_topics([ConfluentNewTopic("bad", 1, 1, config={name: value})])
                        ["bad"])  # fmt: skip
        assert error.code() == KafkaError.INVALID_CONFIG and message in error.str(), name
    create(admin, "bad-alter", **{"retention.ms": "60000"})
    change = ConfigResource(ResourceType.TOPIC, "bad-alter", incremental_configs=[
        ConfigEntry("segment.jitter.ms", "-1", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    assert refusal(admin.incremental_alter_configs([change])[change]).code() == (
        KafkaError.INVALID_CONFIG
    )
    assert describe(admin, "bad-alter")["segment.jitter.ms"].value == "0"
    assert "refused INCREMENTAL_ALTER_CONFIGS" in broker.logs()
    assert "Value must be at least 0" in broker.logs()


def test_kafka_python_creates_describes_and_alters(broker: BrokerProcess) -> None:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    resource = KafkaPythonConfigResource(KafkaPythonResourceType.TOPIC, "kp-configs")
    try:
        configs = {"min.insync.replicas": "1", "compression.type": "lz4",
                   "unclean.leader.election.enable": "false", "preallocate": "true"}  # fmt: skip
        client.create_topics(
            {"kp-configs": {"num_partitions": 1, "replication_factor": 1, "configs": configs}}
        )
        entries = client.describe_configs([resource], config_filter="all")["topic"]["kp-configs"]
        assert _value(entries["compression.type"]) == "lz4"
        assert _value(entries["preallocate"]) == "true"
        change = {"segment.jitter.ms": "500"}
        client.alter_configs(
            [KafkaPythonConfigResource(KafkaPythonResourceType.TOPIC, "kp-configs", change)]
        )
        entries = client.describe_configs([resource], config_filter="all")["topic"]["kp-configs"]
        assert _value(entries["segment.jitter.ms"]) == "500"
    finally:
        client.close()


def _value(entry: Any) -> Any:
    return entry["value"] if isinstance(entry, dict) else entry


def test_aiokafka_creates_and_alters_with_safety_configs(broker: BrokerProcess) -> None:
    async def scenario() -> dict[str, Any]:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            topic = NewTopic("aio-configs", 1, 1, topic_configs={
                "min.insync.replicas": "1", "unclean.leader.election.enable": "true",
                "message.timestamp.before.max.ms": "86400000"})  # fmt: skip
            response = await client.create_topics([topic])
            assert [t[1] for t in response.topic_errors] == [0]
            change = {"max.compaction.lag.ms": "600000"}
            await client.alter_configs(
                [AioConfigResource(ConfigResourceType.TOPIC, "aio-configs", change)]
            )
            [described] = await client.describe_configs(
                [AioConfigResource(ConfigResourceType.TOPIC, "aio-configs")]
            )
            [resource] = described.to_object()["resources"]
            return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
        finally:
            await client.close()

    values = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    assert values["max.compaction.lag.ms"] == "600000"
    assert values["unclean.leader.election.enable"] == "false"  # legacy alter replaces all


def test_explicit_replica_assignments_must_name_live_brokers(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    """aiokafka creates (confluent-kafka 2.16 refuses an assignment locally), confluent-kafka
    grows."""

    async def create_assigned(name: str, assignment: dict[int, list[int]]) -> int:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            topic = NewTopic(name, -1, -1, replica_assignments=assignment)
            response = await client.create_topics([topic])
            [(_, error, *_)] = response.topic_errors
            return int(error)
        finally:
            await client.close()

    def created(name: str, assignment: dict[int, list[int]]) -> int:
        return int(asyncio.run(asyncio.wait_for(create_assigned(name, assignment), TIMEOUT)))

    assert created("assigned", {0: [0], 1: [0], 2: [0]}) == 0
    assert len(admin.list_topics(timeout=TIMEOUT).topics["assigned"].partitions) == 3
    assert created("to-nobody", {0: [7]}) == INVALID_REPLICA_ASSIGNMENT
    assert created("twice", {0: [0, 0]}) == INVALID_REPLICA_ASSIGNMENT
    assert created("gap", {0: [0], 2: [0]}) == INVALID_REPLICA_ASSIGNMENT
    assert "to-nobody" not in admin.list_topics(timeout=TIMEOUT).topics
    grow = NewPartitions("assigned", 4, replica_assignment=[[0]])
    admin.create_partitions([grow])["assigned"].result(TIMEOUT)
    wrong = NewPartitions("assigned", 5, replica_assignment=[[3]])
    assert refusal(admin.create_partitions([wrong])["assigned"]).code() == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT
    )
    assert len(admin.list_topics(timeout=TIMEOUT).topics["assigned"].partitions) == 4
    assert "Unknown broker(s) in replica assignment: 7" in broker.logs()


def test_a_compacted_topic_refuses_records_without_a_key_from_kcat(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    kcat = require_tool("kcat")
    create(admin, "compacted", **{"cleanup.policy": "compact"})
    producer = [kcat, "-b", broker.bootstrap, "-P", "-t", "compacted"]
    keyed = subprocess.run([*producer, "-K", ":"], input=b"k1:v1\nk2:v2\n",
                           capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert keyed.returncode == 0, keyed.stderr
    keyless = subprocess.run(producer, input=b"no key\n", capture_output=True, timeout=TIMEOUT)
    assert keyless.returncode != 0
    assert b"Broker failed to validate record" in keyless.stderr  # librdkafka's INVALID_RECORD
    reports = produce(broker, "compacted", [{"value": b"none"}, {"key": b"k", "value": b"ok"}])
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD
    assert "without key" in broker.logs() and "refused PRODUCE" in broker.logs()


def test_timestamps_outside_the_bounds_are_refused(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "bounded", **{"message.timestamp.before.max.ms": "3600000",
                                "message.timestamp.after.max.ms": "60000"})  # fmt: skip
    now = int(time.time() * 1000)
    reports = produce(broker, "bounded", [
        {"value": b"now", "timestamp": now},
        {"value": b"two hours ago", "timestamp": now - 7_200_000},
        {"value": b"tomorrow", "timestamp": now + 86_400_000},
    ], **{"batch.size": 1})  # fmt: skip
    assert reports[0] is None
    assert [r.code() for r in reports[1:]] == [KafkaError.INVALID_TIMESTAMP] * 2


def test_min_insync_replicas_above_one_refuses_acks_all(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "safe", **{"min.insync.replicas": "2"})
    [refused] = produce(broker, "safe", [{"value": b"x"}], acks="all", retries=0)
    assert refused is not None and refused.code() == KafkaError.NOT_ENOUGH_REPLICAS
    [accepted] = produce(broker, "safe", [{"value": b"y"}], acks=1)
    assert accepted is None


def test_compression_type_makes_the_broker_store_that_codec(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "stored-zstd", **{"compression.type": "zstd"})
    reports = produce(broker, "stored-zstd", [{"value": b"v%d" % i * 50} for i in range(100)],
                      **{"compression.type": "gzip", "linger.ms": 50})  # fmt: skip
    assert reports == [None] * 100
    [segment] = glob.glob(str(broker.data_dir / "stored-zstd-0" / "*.log"))
    batches = list(iter_batches(Path(segment).read_bytes(), verify_crc=True))
    assert batches and all(b.compression is Compression.ZSTD for b in batches)
    assert sum(b.records_count for b in batches) == 100
    assert isinstance(batches[0], BatchHeader)


def test_described_types_and_documentation_come_from_the_table(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "typed")
    described = raw_describe(broker, "typed")
    table = {d.name: d for d in TOPIC_CONFIGS}
    assert sorted(described) == sorted(table)
    for name, entry in described.items():
        assert entry.config_type == int(table[name].type), name
        assert entry.documentation and entry.documentation.startswith(table[name].doc), name
    assert described["min.cleanable.dirty.ratio"].config_type == int(ConfigType.DOUBLE)
    assert "not in effect" in (described["remote.storage.enable"].documentation or "")
