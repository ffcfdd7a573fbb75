"""Dynamic broker configs as librdkafka's test 0081 and kafka-configs.sh use them: per broker
(resource name = node id) through confluent-kafka's AdminClient, and the cluster default (empty
name) through `weir broker alter --entity-default`; validated, in effect at once, shown with
their source, kept across a restart; and
message.format.version in the forms Kafka takes (librdkafka's test 0092)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

TIMEOUT = 30
NODE = "1"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {"node.id": 1, "log.retention.ms": 3_600_000, "num.partitions": 1}
    process = BrokerProcess(tmp_path_factory.mktemp("dynamic") / "broker", config=config)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def incremental(admin: AdminClient, name: str, **changes: str | None) -> Any:
    """SET each name to its value (DELETE where it is None) on BROKER `name`; the future."""
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=(
            AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET))
        for k, v in changes.items()
    ]  # fmt: skip
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    return admin.incremental_alter_configs([resource])[resource]


def legacy_alter(admin: AdminClient, resource: ConfigResource) -> None:
    """AlterConfigs (not incremental): the resource's whole set replaced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "alter_configs has been deprecated", DeprecationWarning)
        admin.alter_configs([resource])[resource].result(TIMEOUT)


def describe(admin: AdminClient, name: str, kind: ResourceType = ResourceType.BROKER) -> Any:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def weir(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`weir broker ARGS` against `broker`: the client for the cluster default (BROKER ""),
    which confluent-kafka and kafka-python refuse to name."""
    command = [sys.executable, "-m", "weir.cli.main", "broker", *args,
               "--bootstrap-server", broker.bootstrap]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def alter_default(broker: BrokerProcess, **changes: str | None) -> subprocess.CompletedProcess[str]:
    args = ["alter", "--entity-default"]
    for key, value in changes.items():
        name = key.replace("_", ".")
        args += ["--delete-config", name] if value is None else ["--add-config", f"{name}={value}"]
    done = weir(broker, *args)
    assert done.returncode == 0, done.stderr
    return done


def describe_default(broker: BrokerProcess) -> list[str]:
    """`weir broker describe --entity-default`: its `name=value (SOURCE)` lines."""
    done = weir(broker, "describe", "--entity-default")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def refusal(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as failure:
        future.result(TIMEOUT)
    error: KafkaError = failure.value.args[0]
    return error


def produce(broker: BrokerProcess, topic: str, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: reports.append(err))
    assert producer.flush(TIMEOUT) == 0
    return reports[0]


def create_topic(admin: AdminClient, name: str, **configs: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def test_message_max_bytes_set_for_the_cluster_and_per_broker_is_in_effect_at_once(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create_topic(admin, "sized")
    assert produce(broker, "sized", b"x" * 5000) is None
    alter_default(broker, message_max_bytes="2000")
    error = produce(broker, "sized", b"x" * 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert describe_default(broker) == ["message.max.bytes=2000 (DYNAMIC_DEFAULT_BROKER_CONFIG)"]
    entry = describe(admin, NODE)["message.max.bytes"]
    assert (entry.value, entry.source) == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # fmt: skip
    assert not entry.is_read_only
    topic_side = describe(admin, "sized", ResourceType.TOPIC)["max.message.bytes"]
    assert (topic_side.value, topic_side.source) == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # fmt: skip

    incremental(admin, NODE, message_max_bytes="8000").result(TIMEOUT)  # this broker wins
    assert produce(broker, "sized", b"x" * 5000) is None
    entry = describe(admin, NODE)["message.max.bytes"]
    assert (entry.value, entry.source) == ("8000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    incremental(admin, NODE, message_max_bytes=None).result(TIMEOUT)
    alter_default(broker, message_max_bytes=None)
    entry = describe(admin, NODE)["message.max.bytes"]
    assert (entry.value, entry.source) == ("1048588", ConfigSource.DEFAULT_CONFIG.value)
    assert produce(broker, "sized", b"x" * 5000) is None


def test_legacy_alter_configs_replaces_a_brokers_set_and_retention_follows(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create_topic(admin, "retained")
    before = describe(admin, "retained", ResourceType.TOPIC)["retention.ms"]
    assert (before.value, before.source) == ("3600000", ConfigSource.STATIC_BROKER_CONFIG.value)
    resource = ConfigResource(ResourceType.BROKER, NODE, set_config={
        "log.retention.ms": "60000", "leader.replication.throttled.rate": "1048576",
        "follower.replication.throttled.rate": "2097152",
        "replica.alter.log.dirs.io.max.bytes.per.second": "524288",
    })  # fmt: skip
    legacy_alter(admin, resource)
    after = describe(admin, "retained", ResourceType.TOPIC)["retention.ms"]
    assert (after.value, after.source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    described = describe(admin, NODE)
    for name, value in [("leader.replication.throttled.rate", "1048576"),
                        ("follower.replication.throttled.rate", "2097152"),
                        ("replica.alter.log.dirs.io.max.bytes.per.second", "524288")]:  # fmt: skip
        assert described[name].value == value, name
        assert described[name].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, name
    replaced = ConfigResource(ResourceType.BROKER, NODE, set_config={"log.retention.ms": "120000"})
    legacy_alter(admin, replaced)
    described = describe(admin, NODE)
    assert described["log.retention.ms"].value == "120000"
    assert described["leader.replication.throttled.rate"].value == str(2**63 - 1)
    assert described["leader.replication.throttled.rate"].source == (
        ConfigSource.DEFAULT_CONFIG.value
    )
    legacy_alter(admin, ConfigResource(ResourceType.BROKER, NODE, set_config={}))
    assert describe(admin, "retained", ResourceType.TOPIC)["retention.ms"].value == "3600000"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("log.dirs", "/tmp/elsewhere", "Cannot update these configs dynamically: Set(log.dirs)"),
        ("num.partitions", "3", "Cannot update these configs dynamically: Set(num.partitions)"),
        ("log.retention.ms", "soon", "Invalid value soon for configuration log.retention.ms: "
         "Not a number of type LONG"),
        ("leader.replication.throttled.rate", "-1", "Value must be at least 0"),
        ("num.io.threads", "17", "Dynamic thread count update validation failed for "
         "num.io.threads=17, value should not be greater than double the current value 8"),
        ("num.io.threads", "3", "value should be at least half the current value 8"),
    ],
)
def test_read_only_and_invalid_settings_are_refused_in_kafkas_words(
    admin: AdminClient, name: str, value: str, message: str
) -> None:
    error = refusal(incremental(admin, NODE, **{name.replace(".", "_"): value}))
    assert error.code() == KafkaError.INVALID_REQUEST
    assert error.str().startswith(
        f"Invalid config value for resource ConfigResource(type=BROKER, name='{NODE}'): "
    )
    assert message in error.str()
    entry = describe(admin, NODE)[name] if name != "num.partitions" else None
    assert entry is None or entry.source != ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_thread_counts_are_accepted_within_kafkas_bounds_and_read_only_ones_say_so(
    admin: AdminClient,
) -> None:
    incremental(admin, NODE, num_io_threads="16").result(TIMEOUT)
    described = describe(admin, NODE)
    assert described["num.io.threads"].value == "16"
    assert described["num.partitions"].is_read_only and described["log.dirs"].is_read_only
    assert not described["log.segment.bytes"].is_read_only
    incremental(admin, NODE, num_io_threads=None).result(TIMEOUT)


def test_dynamic_configs_survive_a_restart(broker: BrokerProcess, admin: AdminClient) -> None:
    create_topic(admin, "kept")
    alter_default(broker, message_max_bytes="3000")
    incremental(admin, NODE, leader_replication_throttled_rate="4096").result(TIMEOUT)
    broker.restart()
    after = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = describe(after, NODE)
    assert (described["message.max.bytes"].value, described["message.max.bytes"].source) == (
        "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # fmt: skip
    assert described["leader.replication.throttled.rate"].value == "4096"
    error = produce(broker, "kept", b"x" * 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    alter_default(broker, message_max_bytes=None)
    incremental(after, NODE, leader_replication_throttled_rate=None).result(TIMEOUT)
    assert produce(broker, "kept", b"x" * 5000) is None


def test_weir_broker_alter_sets_and_deletes_as_kafka_configs_does(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    done = weir(broker, "alter", "--entity-name", NODE, "--add-config",
                "log.segment.bytes=1048576,log.cleaner.backoff.ms=30000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    described = describe(admin, NODE)
    assert described["log.segment.bytes"].value == "1048576"
    assert described["log.cleaner.backoff.ms"].value == "30000"
    refused = weir(broker, "alter", "--entity-default", "--add-config", "log.dirs=/x")
    assert refused.returncode != 0
    assert "Cannot update these configs dynamically: Set(log.dirs)" in refused.stderr
    shown = weir(broker, "describe", "--entity-name", NODE)
    assert "log.segment.bytes=1048576 (DYNAMIC_BROKER_CONFIG)" in shown.stdout, shown.stderr
    done = weir(broker, "alter", "--entity-name", NODE, "--delete-config",
                "log.segment.bytes,log.cleaner.backoff.ms")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert describe(admin, NODE)["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize("version", ["0.10.0.0", "0.10.0-IV1", "2.8.1", "3.0-IV1", "0.8.2"])
def test_message_format_version_takes_kafkas_forms_and_is_reported_as_set(
    admin: AdminClient, version: str
) -> None:
    topic = f"format-{version.replace('.', '-')}"
    create_topic(admin, topic, **{"message.format.version": version})
    entry = describe(admin, topic, ResourceType.TOPIC)["message.format.version"]
    assert (entry.value, entry.source) == (version, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_message_format_version_nonsense_is_refused_with_kafkas_message(
    admin: AdminClient,
) -> None:
    future = admin.create_topics([NewTopic("format-bad", 1, 1,
                                           config={"message.format.version": "0.10"})])  # fmt: skip
    error = refusal(future["format-bad"])
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Invalid value 0.10 for configuration message.format.version: " in error.str()
    assert "Version 0.10 is not a valid version" in error.str()
