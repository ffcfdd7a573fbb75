"""Per-log configuration: Kafka's topic-config table, declared once, and the LogConfig it yields.

`TOPIC_CONFIGS` lists every topic config Kafka 3.x knows (name, type, default, valid values, the
broker setting it falls back to, a line of documentation) plus weir's own `high.watermark.policy`
and `replica.placement.strategy`.
Everything else derives from it: parsing and validation (`LogConfig.from_properties` takes the
strings a client sends in CreateTopics/AlterConfigs and raises `ValueError` with Kafka's wording),
the LogConfig fields' defaults, the broker's `log.*` fallbacks and DescribeConfigs' types and
documentation. Entries whose `in_effect` is False are accepted, validated and reported, but
change nothing on a single node (replication, throttling and tiered storage settings).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NO_LIMIT = 2**63 - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
TIMESTAMP_CREATE_TIME = "CreateTime"
TIMESTAMP_LOG_APPEND_TIME = "LogAppendTime"
HW_LOG_END = "log-end"
HW_FLUSHED = "flushed"
PLACEMENT_KAFKA = "kafka"
PLACEMENT_CONSISTENT_HASH = "consistent-hash"
COMPRESSION_PRODUCER = "producer"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", COMPRESSION_PRODUCER)


class ConfigType(enum.IntEnum):
    """Kafka's config types, numbered as DescribeConfigs (v3+) reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[Any], str | None]  # the parsed value -> why it is invalid, or None


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str
    doc: str
    broker_name: str | None = None
    validator: Validator | None = None
    in_effect: bool = True

    @property
    def field_name(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: str) -> Any:
        """The typed value of `raw`; ValueError in Kafka's words if it is not valid."""
        return parse_config_value(self.name, self.type, raw, self.validator)

    def text(self, value: Any) -> str:
        """A value as Kafka prints it in DescribeConfigs."""
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


def parse_config_value(
    name: str, kind: ConfigType, raw: str, validator: Validator | None = None
) -> Any:
    """The typed value of the setting `name` given as `raw` (any config, topic or broker);
    ValueError in Kafka's words if it is not valid."""
    try:
        value = _PARSE[kind](raw.strip())
    except ValueError as exc:
        raise ValueError(_invalid(name, raw, str(exc))) from None
    problem = validator(value) if validator is not None else None
    if problem is not None:
        raise ValueError(_invalid(name, raw, problem))
    return value


def _invalid(name: str, raw: str, why: str) -> str:
    return f"Invalid value {raw} for configuration {name}: {why}"


def _boolean(raw: str) -> bool:
    if raw.lower() not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return raw.lower() == "true"


def _number(kind: str, low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"Not a number of type {kind}") from None
        if not low <= value <= high:
            raise ValueError(f"Not a number of type {kind}")
        return value

    return parse


def _double(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None
    if math.isnan(value):
        raise ValueError("Not a number of type DOUBLE")
    return value


def _list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


_PARSE: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.BOOLEAN: _boolean,
    ConfigType.STRING: str,
    ConfigType.INT: _number("INT", -(2**31), 2**31 - 1),
    ConfigType.SHORT: _number("SHORT", -(2**15), 2**15 - 1),
    ConfigType.LONG: _number("LONG", -(2**63), 2**63 - 1),
    ConfigType.DOUBLE: _double,
    ConfigType.LIST: _list,
}


def at_least(low: float) -> Validator:
    shown = int(low) if float(low).is_integer() else low
    return lambda value: None if value >= low else f"Value must be at least {shown}"


def between(low: float, high: float) -> Validator:
    def check(value: Any) -> str | None:
        if low <= value <= high:
            return None
        if value > high:
            return f"Value must be no more than {high}"
        return f"Value must be at least {low}"

    return check


def one_of(*allowed: str) -> Validator:
    message = f"String must be one of: {', '.join(allowed)}"
    return lambda value: None if value in allowed else message


def each_of(*allowed: str) -> Validator:
    def check(value: tuple[str, ...]) -> str | None:
        if all(v in allowed for v in value):
            return None
        return f"String must be one of: {', '.join(allowed)}"

    return check


def non_empty_each_of(*allowed: str) -> Validator:
    inner = each_of(*allowed)
    return lambda value: "Empty list" if not value else inner(value)


def gzip_level(value: int) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be -1 or between 1 and 9"


#: Kafka's releases, 0.8.0 to 3.9, and how many inter-broker protocol versions (IV0, IV1, ...)
#: each had, as Kafka's MetadataVersion lists them (the 0.8 and 0.9 releases had none)
KAFKA_RELEASES = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1,
    "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3,
    "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}  # fmt: skip


def metadata_version(value: str) -> str | None:
    """A Kafka version as message.format.version takes it (Kafka's
    `MetadataVersion.fromVersionString`): a release (`2.8`, `0.10.2`), one of its protocol
    versions (`3.0-IV1`, `0.10.0-IV1`), or a longer version whose extra parts are ignored
    (`0.10.0.0`, `2.8.1`)."""
    segments = value.split(".")
    kept = 3 if value.startswith("0.") else 2
    key = value if kept >= len(segments) else ".".join(segments[:kept])
    release, _, sub_version = key.partition("-IV")
    if release in KAFKA_RELEASES and (
        key == release
        or (sub_version.isdigit() and int(sub_version) < KAFKA_RELEASES[release]
            and str(int(sub_version)) == sub_version)
    ):  # fmt: skip
        return None
    return f"Version {value} is not a valid version"


def throttled_replicas(value: tuple[str, ...]) -> str | None:
    """`*`, or `partition:broker` pairs."""
    if value == ("*",) or not value:
        return None
    for item in value:
        parts = item.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            return (
                "Should be a comma-separated list of [PartitionId]:[BrokerId] or the wildcard '*'"
            )
    return None


T = ConfigType
TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("cleanup.policy", T.LIST, CLEANUP_DELETE,
        "What happens to old segments: delete (retention) and/or compact (keep each key's "
        "latest record).", "log.cleanup.policy",
        non_empty_each_of(CLEANUP_COMPACT, CLEANUP_DELETE)),
    TopicConfigDef("compression.type", T.STRING, COMPRESSION_PRODUCER,
        "The codec batches are stored with; producer keeps the producer's, any other value "
        "makes the broker recompress.", "compression.type", one_of(*COMPRESSION_TYPES)),
    TopicConfigDef("compression.gzip.level", T.INT, "-1",
        "Level for gzip when the broker compresses.", "compression.gzip.level", gzip_level),
    TopicConfigDef("compression.lz4.level", T.INT, "9",
        "Level for lz4 when the broker compresses.", "compression.lz4.level", between(1, 17)),
    TopicConfigDef("compression.zstd.level", T.INT, "3",
        "Level for zstd when the broker compresses.", "compression.zstd.level",
        between(-131072, 22)),
    TopicConfigDef("delete.retention.ms", T.LONG, "86400000",
        "How long tombstones stay readable on a compacted topic.",
        "log.cleaner.delete.retention.ms", at_least(0)),
    TopicConfigDef("file.delete.delay.ms", T.LONG, "60000",
        "How long a deleted segment's files wait before they are removed.",
        "log.segment.delete.delay.ms", at_least(0)),
    TopicConfigDef("flush.messages", T.LONG, str(NO_LIMIT),
        "fsync after this many records (default: leave it to the OS and replication).",
        "log.flush.interval.messages", at_least(1)),
    TopicConfigDef("flush.ms", T.LONG, str(NO_LIMIT),
        "fsync after this much time.", "log.flush.interval.ms", at_least(0)),
    TopicConfigDef("follower.replication.throttled.replicas", T.LIST, "",
        "Replicas whose follower fetches are throttled.", None, throttled_replicas),
    TopicConfigDef("index.interval.bytes", T.INT, "4096",
        "Bytes of log between two offset index entries.", "log.index.interval.bytes",
        at_least(0)),
    TopicConfigDef("leader.replication.throttled.replicas", T.LIST, "",
        "Replicas whose leader side of replication is throttled.", None, throttled_replicas),
    TopicConfigDef("local.retention.bytes", T.LONG, "-2",
        "Bytes kept on local disk when tiered storage is on (-2: retention.bytes).",
        "log.local.retention.bytes", at_least(-2), in_effect=False),
    TopicConfigDef("local.retention.ms", T.LONG, "-2",
        "Time kept on local disk when tiered storage is on (-2: retention.ms).",
        "log.local.retention.ms", at_least(-2), in_effect=False),
    TopicConfigDef("max.compaction.lag.ms", T.LONG, str(NO_LIMIT),
        "The longest a record may stay uncompacted.", "log.cleaner.max.compaction.lag.ms",
        at_least(1)),
    TopicConfigDef("max.message.bytes", T.INT, "1048588",
        "The largest batch the topic accepts.", "message.max.bytes", at_least(0)),
    TopicConfigDef("message.downconversion.enable", T.BOOLEAN, "true",
        "Whether old consumers get batches down-converted (weir serves only magic 2).",
        "log.message.downconversion.enable", in_effect=False),
    TopicConfigDef("message.format.version", T.STRING, "3.0-IV1",
        "Deprecated; ignored from 3.0 on, as in Kafka.", "log.message.format.version",
        metadata_version, in_effect=False),
    TopicConfigDef("message.timestamp.after.max.ms", T.LONG, str(NO_LIMIT),
        "How far in the future a CreateTime timestamp may be.",
        "log.message.timestamp.after.max.ms", at_least(0)),
    TopicConfigDef("message.timestamp.before.max.ms", T.LONG, str(NO_LIMIT),
        "How far in the past a CreateTime timestamp may be.",
        "log.message.timestamp.before.max.ms", at_least(0)),
    TopicConfigDef("message.timestamp.difference.max.ms", T.LONG, str(NO_LIMIT),
        "Deprecated: the most a CreateTime timestamp may differ from the broker's clock.",
        "log.message.timestamp.difference.max.ms", at_least(0)),
    TopicConfigDef("message.timestamp.type", T.STRING, TIMESTAMP_CREATE_TIME,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
        "log.message.timestamp.type", one_of(TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME)),
    TopicConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, "0.5",
        "Compact once this share of the log is not yet compacted.",
        "log.cleaner.min.cleanable.ratio", between(0, 1)),
    TopicConfigDef("min.compaction.lag.ms", T.LONG, "0",
        "The shortest a record stays uncompacted.", "log.cleaner.min.compaction.lag.ms",
        at_least(0)),
    TopicConfigDef("min.insync.replicas", T.INT, "1",
        "Replicas that must have a write before acks=all is answered.",
        "min.insync.replicas", at_least(1)),
    TopicConfigDef("preallocate", T.BOOLEAN, "false",
        "Reserve a new segment's space on disk when it is created.", "log.preallocate"),
    TopicConfigDef("remote.log.copy.disable", T.BOOLEAN, "false",
        "Stop copying segments to remote storage.", None, in_effect=False),
    TopicConfigDef("remote.log.delete.on.disable", T.BOOLEAN, "false",
        "Delete remote segments when tiered storage is turned off.", None, in_effect=False),
    TopicConfigDef("remote.storage.enable", T.BOOLEAN, "false",
        "Tier closed segments to remote storage.", None, in_effect=False),
    TopicConfigDef("retention.bytes", T.LONG, "-1",
        "The most bytes a partition keeps (-1: no limit).", "log.retention.bytes"),
    TopicConfigDef("retention.ms", T.LONG, "604800000",
        "How long records are kept (-1: forever).", "log.retention.ms", at_least(-1)),
    TopicConfigDef("segment.bytes", T.INT, "1073741824",
        "The size at which a segment rolls.", "log.segment.bytes", at_least(14)),
    TopicConfigDef("segment.index.bytes", T.INT, "10485760",
        "The size of a segment's offset and time indexes.", "log.index.size.max.bytes",
        at_least(4)),
    TopicConfigDef("segment.jitter.ms", T.LONG, "0",
        "Up to this much is taken at random off segment.ms, so segments do not all roll at "
        "once.", "log.roll.jitter.ms", at_least(0)),
    TopicConfigDef("segment.ms", T.LONG, "604800000",
        "The age at which a segment rolls.", "log.roll.ms", at_least(1)),
    TopicConfigDef("unclean.leader.election.enable", T.BOOLEAN, "false",
        "Whether a replica outside the ISR may become leader (losing data).",
        "unclean.leader.election.enable"),
    TopicConfigDef("high.watermark.policy", T.STRING, HW_LOG_END,
        "weir's own: log-end exposes records once appended; flushed once fsynced.",
        "log.high.watermark.policy", one_of(HW_LOG_END, HW_FLUSHED)),
    TopicConfigDef("replica.placement.strategy", T.STRING, PLACEMENT_KAFKA,
        "weir's own: how a cluster places the topic's replicas: kafka (rack-aware round robin) "
        "or consistent-hash (a ring of virtual nodes; adding a broker moves few replicas).",
        "replica.placement.strategy", one_of(PLACEMENT_KAFKA, PLACEMENT_CONSISTENT_HASH)),
    TopicConfigDef("replica.placement.pool", T.STRING, "",
        "weir's own: the pool of brokers (their broker.pool) the topic's replicas are placed "
        "on; empty: the brokers in no pool.", None),
    TopicConfigDef("replica.placement.expected.bytes.per.second", T.LONG, "0",
        "weir's own: the bytes a second producers are expected to write to the topic, spread "
        "over its partitions; weir operator places partitions with no traffic yet by it. "
        "0: not known.", None, at_least(0)),
)  # fmt: skip
del T

TOPIC_CONFIG_BY_NAME = {d.name: d for d in TOPIC_CONFIGS}
#: broker setting -> the topic config it provides the default for (Kafka's naming)
BROKER_SYNONYMS = {d.broker_name: d.name for d in TOPIC_CONFIGS if d.broker_name}


def _default(name: str) -> Any:
    definition = TOPIC_CONFIG_BY_NAME[name]
    return definition.parse(definition.default)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """One value per entry of TOPIC_CONFIGS (field = name with dots as underscores)."""

    cleanup_policy: tuple[str, ...] = _default("cleanup.policy")
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    follower_replication_throttled_replicas: tuple[str, ...] = _default(
        "follower.replication.throttled.replicas"
    )
    index_interval_bytes: int = _default("index.interval.bytes")
    leader_replication_throttled_replicas: tuple[str, ...] = _default(
        "leader.replication.throttled.replicas"
    )
    local_retention_bytes: int = _default("local.retention.bytes")
    local_retention_ms: int = _default("local.retention.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_downconversion_enable: bool = _default("message.downconversion.enable")
    message_format_version: str = _default("message.format.version")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    min_insync_replicas: int = _default("min.insync.replicas")
    preallocate: bool = _default("preallocate")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    remote_storage_enable: bool = _default("remote.storage.enable")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    segment_bytes: int = _default("segment.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_ms: int = _default("segment.ms")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    high_watermark_policy: str = _default("high.watermark.policy")
    replica_placement_strategy: str = _default("replica.placement.strategy")
    replica_placement_pool: str = _default("replica.placement.pool")
    replica_placement_expected_bytes_per_second: int = _default(
        "replica.placement.expected.bytes.per.second"
    )

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may grow: a compacted topic's max.compaction.lag.ms can
        only be kept if its records leave the active segment in time (as Kafka rolls)."""
        if self.compact and self.max_compaction_lag_ms < self.segment_ms:
            return self.max_compaction_lag_ms
        return self.segment_ms

    @property
    def timestamp_bounds(self) -> tuple[int, int] | None:
        """(most ms before, most ms after) the broker's clock a CreateTime timestamp may be,
        or None when both are unbounded."""
        if self.message_timestamp_type != TIMESTAMP_CREATE_TIME:
            return None
        before = min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)
        after = min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)
        if before == NO_LIMIT and after == NO_LIMIT:
            return None
        return before, after

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """`base` (default: Kafka's defaults) with `props` applied; ValueError naming the first
        unknown or invalid one, in Kafka's words."""
        changes = {}
        for name, raw in props.items():
            definition = TOPIC_CONFIG_BY_NAME.get(name)
            if definition is None:
                raise ValueError(f"Unknown topic config name: {name}")
            changes[definition.field_name] = definition.parse(str(raw))
        config = dataclasses.replace(base or cls(), **changes)
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({config.max_compaction_lag_ms})"
            )
        return config

    def to_properties(self) -> dict[str, str]:
        return {d.name: d.text(getattr(self, d.field_name)) for d in TOPIC_CONFIGS}


def _check_fields_match_table() -> None:
    fields = [f.name for f in dataclasses.fields(LogConfig)]
    declared = [d.field_name for d in TOPIC_CONFIGS]
    if sorted(fields) != sorted(declared):
        raise AssertionError(f"LogConfig fields and TOPIC_CONFIGS differ: {fields} {declared}")


_check_fields_match_table()
