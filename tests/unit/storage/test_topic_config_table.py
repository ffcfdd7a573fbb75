"""The topic-config table against Kafka's documentation (the topic-level configs page of Kafka
3.9): every default, type and broker synonym, written out here independently of the table."""

from __future__ import annotations

import pytest

from weir.storage import LogConfig
from weir.storage.config import TOPIC_CONFIG_BY_NAME, TOPIC_CONFIGS, ConfigType

L, INT, B, S, D, LIST = (ConfigType.LONG, ConfigType.INT, ConfigType.BOOLEAN, ConfigType.STRING,
                       ConfigType.DOUBLE, ConfigType.LIST)  # fmt: skip
MAX = "9223372036854775807"

#: name -> (type, default, broker setting it falls back to), as Kafka documents them
KAFKA_DOCUMENTED = {
    "cleanup.policy": (LIST, "delete", "log.cleanup.policy"),
    "compression.gzip.level": (INT, "-1", "compression.gzip.level"),
    "compression.lz4.level": (INT, "9", "compression.lz4.level"),
    "compression.type": (S, "producer", "compression.type"),
    "compression.zstd.level": (INT, "3", "compression.zstd.level"),
    "delete.retention.ms": (L, "86400000", "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": (L, "60000", "log.segment.delete.delay.ms"),
    "flush.messages": (L, MAX, "log.flush.interval.messages"),
    "flush.ms": (L, MAX, "log.flush.interval.ms"),
    "follower.replication.throttled.replicas": (LIST, "", None),
    "index.interval.bytes": (INT, "4096", "log.index.interval.bytes"),
    "leader.replication.throttled.replicas": (LIST, "", None),
    "local.retention.bytes": (L, "-2", "log.local.retention.bytes"),
    "local.retention.ms": (L, "-2", "log.local.retention.ms"),
    "max.compaction.lag.ms": (L, MAX, "log.cleaner.max.compaction.lag.ms"),
    "max.message.bytes": (INT, "1048588", "message.max.bytes"),
    "message.downconversion.enable": (B, "true", "log.message.downconversion.enable"),
    "message.format.version": (S, "3.0-IV1", "log.message.format.version"),
    "message.timestamp.after.max.ms": (L, MAX, "log.message.timestamp.after.max.ms"),
    "message.timestamp.before.max.ms": (L, MAX, "log.message.timestamp.before.max.ms"),
    "message.timestamp.difference.max.ms": (L, MAX, "log.message.timestamp.difference.max.ms"),
    "message.timestamp.type": (S, "CreateTime", "log.message.timestamp.type"),
    "min.cleanable.dirty.ratio": (D, "0.5", "log.cleaner.min.cleanable.ratio"),
    "min.compaction.lag.ms": (L, "0", "log.cleaner.min.compaction.lag.ms"),
    "min.insync.replicas": (INT, "1", "min.insync.replicas"),
    "preallocate": (B, "false", "log.preallocate"),
    "remote.log.copy.disable": (B, "false", None),
    "remote.log.delete.on.disable": (B, "false", None),
    "remote.storage.enable": (B, "false", None),
    "retention.bytes": (L, "-1", "log.retention.bytes"),
    "retention.ms": (L, "604800000", "log.retention.ms"),
    "segment.bytes": (INT, "1073741824", "log.segment.bytes"),
    "segment.index.bytes": (INT, "10485760", "log.index.size.max.bytes"),
    "segment.jitter.ms": (L, "0", "log.roll.jitter.ms"),
    "segment.ms": (L, "604800000", "log.roll.ms"),
    "unclean.leader.election.enable": (B, "false", "unclean.leader.election.enable"),
}


def test_every_kafka_topic_config_is_in_the_table_with_its_documented_default() -> None:
    ours = {d.name: (d.type, d.default, d.broker_name) for d in TOPIC_CONFIGS}
    assert ours.pop("high.watermark.policy") == (S, "log-end", "log.high.watermark.policy")
    assert ours.pop("replica.placement.strategy") == (S, "kafka", "replica.placement.strategy")
    assert ours.pop("replica.placement.pool") == (S, "", None)
    assert ours.pop("replica.placement.expected.bytes.per.second") == (L, "0", None)
    assert ours == KAFKA_DOCUMENTED


def test_the_defaults_parse_and_print_back_unchanged() -> None:
    printed = LogConfig().to_properties()
    for definition in TOPIC_CONFIGS:
        assert printed[definition.name] == definition.default, definition.name


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("compression.zstd.level", "23", "Value must be no more than 22"),
        ("compression.gzip.level", "0", "Value must be -1 or between 1 and 9"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("max.message.bytes", "2147483648", "Not a number of type INT"),
        ("message.timestamp.type", "ProducerTime", "String must be one of"),
        ("cleanup.policy", "", "Empty list"),
        ("leader.replication.throttled.replicas", "0-1", "[PartitionId]:[BrokerId]"),
        ("message.format.version", "banana", "Version banana is not a valid version"),
        ("preallocate", "1", "Expected value to be either true or false"),
    ],
)
def test_invalid_values_are_refused_in_kafkas_words(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        LogConfig.from_properties({name: value})
    assert str(refused.value).startswith(f"Invalid value {value} for configuration {name}: ")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "version",
    [
        "0.8.0",
        "0.8.2.2",
        "0.9.0.1",
        "0.10.0",
        "0.10.0.0",
        "0.10.0-IV1",
        "0.10.2.1",
        "0.11.0",
        "1.0",
        "1.0.1",
        "1.1-IV0",
        "2.8",
        "2.8-IV1",
        "2.8.2",
        "3.0",
        "3.0-IV1",
        "3.6.1",
        "3.9",
    ],
)
def test_message_format_version_takes_the_forms_kafka_takes(version: str) -> None:
    assert LogConfig.from_properties({"message.format.version": version})


@pytest.mark.parametrize(
    "version", ["", "banana", "0.10", "0.7.0", "0.10.0-IV2", "0.8.0-IV0", "2.8-IV2", "3.10", "4.0"]
)
def test_message_format_version_refuses_what_kafka_refuses(version: str) -> None:
    with pytest.raises(ValueError, match=f"Version {version} is not a valid version"):
        LogConfig.from_properties({"message.format.version": version})


def test_lists_and_booleans_are_read_as_kafka_reads_them() -> None:
    config = LogConfig.from_properties({
        "cleanup.policy": "compact, delete", "preallocate": "TRUE",
        "leader.replication.throttled.replicas": "0:1,1:2",
    })  # fmt: skip
    assert config.cleanup_policy == ("compact", "delete") and config.compact and config.delete
    assert config.preallocate is True
    assert config.to_properties()["cleanup.policy"] == "compact,delete"
    assert TOPIC_CONFIG_BY_NAME["preallocate"].text(config.preallocate) == "true"


def test_a_compacted_topic_rolls_by_max_compaction_lag() -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact",
                                        "max.compaction.lag.ms": "1000"})  # fmt: skip
    assert config.max_segment_ms == 1000
    assert LogConfig.from_properties({"max.compaction.lag.ms": "1000"}).max_segment_ms == (
        config.segment_ms
    )


def test_timestamp_bounds_apply_to_create_time_only() -> None:
    assert LogConfig().timestamp_bounds is None
    bounded = LogConfig.from_properties({"message.timestamp.before.max.ms": "10",
                                         "message.timestamp.difference.max.ms": "5"})  # fmt: skip
    assert bounded.timestamp_bounds == (5, 5)
    stamped = LogConfig.from_properties({"message.timestamp.type": "LogAppendTime",
                                         "message.timestamp.after.max.ms": "1"})  # fmt: skip
    assert stamped.timestamp_bounds is None
