"""Per-log configuration under Kafka's topic-config names, with Kafka's defaults.

`LogConfig.from_properties({"segment.bytes": "1048576", ...})` accepts the strings a client sends
in CreateTopics/AlterConfigs and rejects unknown names or bad values with `ValueError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NO_LIMIT = 2**63 - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
TIMESTAMP_CREATE_TIME = "CreateTime"
TIMESTAMP_LOG_APPEND_TIME = "LogAppendTime"
HW_LOG_END = "log-end"
HW_FLUSHED = "flushed"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = NO_LIMIT
    flush_ms: int = NO_LIMIT
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = (CLEANUP_DELETE,)
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = TIMESTAMP_CREATE_TIME
    high_watermark_policy: str = HW_LOG_END

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        changes = {}
        for name, raw in props.items():
            field_name = name.replace(".", "_")
            if field_name not in _PARSERS:
                raise ValueError(f"unknown topic config {name!r}")
            try:
                changes[field_name] = _PARSERS[field_name](raw)
            except ValueError as exc:
                raise ValueError(f"invalid value {raw!r} for {name}: {exc}") from None
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        out = {}
        for field in dataclasses.fields(self):
            value: Any = getattr(self, field.name)
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            out[field.name.replace("_", ".")] = text
        return out


def _positive(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _non_negative(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _limit(raw: str) -> int:
    """-1 means unlimited, as in Kafka's retention settings."""
    value = int(raw)
    if value < -1:
        raise ValueError("must be -1 (no limit) or more")
    return value


def _policy(raw: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not parts or any(p not in (CLEANUP_DELETE, CLEANUP_COMPACT) for p in parts):
        raise ValueError("must be delete, compact or both")
    return parts


def _choice(*allowed: str) -> Any:
    def parse(raw: str) -> str:
        if raw not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return raw

    return parse


def _segment_bytes(raw: str) -> int:
    value = int(raw)
    if value < 14:
        raise ValueError("must be at least 14")
    return value


_PARSERS: dict[str, Any] = {
    "segment_bytes": _segment_bytes,
    "segment_ms": _positive,
    "segment_index_bytes": _positive,
    "index_interval_bytes": _non_negative,
    "flush_messages": _positive,
    "flush_ms": _non_negative,
    "retention_ms": _limit,
    "retention_bytes": _limit,
    "cleanup_policy": _policy,
    "delete_retention_ms": _non_negative,
    "min_compaction_lag_ms": _non_negative,
    "file_delete_delay_ms": _non_negative,
    "max_message_bytes": _non_negative,
    "message_timestamp_type": _choice(TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME),
    "high_watermark_policy": _choice(HW_LOG_END, HW_FLUSHED),
}
