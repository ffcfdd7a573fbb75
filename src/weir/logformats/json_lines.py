"""JSON lines: one JSON object per line, each column's value found under the keys its format
declares (``[json]`` in the format file; the first key present wins).

The timestamp is an ISO-8601 string, or a Unix epoch number in seconds (milliseconds when its
magnitude exceeds 1e11). Offsets are converted to UTC and dropped, so every timestamp is naive.
A line without a message is quarantined, and so is one whose timestamp is missing or cannot be
read unless its format keeps such lines (``[timestamp] on_error``, see
``declaration.UnreadableTimestamp``); other columns are optional, and the object's other scalar
keys go to ``ParsedLine.fields`` (as JSON text unless they are strings).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from weir.logformats.declaration import LogFormat, UnreadableTimestamp
from weir.logformats.levels import normalise_level
from weir.logformats.model import ParsedLine, Quarantined, QuarantineReason
from weir.logformats.template import Masker

_MILLISECONDS_ABOVE = 1e11


def _first(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((record[key] for key in keys if record.get(key) is not None), None)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def _timestamp(value: Any) -> datetime:
    """Naive UTC (or naive as written) datetime; raises ValueError/OverflowError/OSError."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value / 1000 if abs(value) > _MILLISECONDS_ABOVE else value
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    raise ValueError(f"expected a string or a number, got {type(value).__name__}")


def _scalar(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _pid(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


class JsonLines:
    """Reads lines of one JSON-lines format. Stateless and thread-safe."""

    def __init__(self, declared: LogFormat) -> None:
        self.format = declared
        self.name = declared.name
        self._masker = Masker(declared.mining)
        keys = declared.json_keys
        self._keys = {
            column: keys.get(column, ())
            for column in ("timestamp", "level", "component", "host", "pid", "thread", "message")
        }
        self._taken = frozenset(key for names in keys.values() for key in names)

    def matches(self, line: str) -> bool:
        return line.startswith("{")

    def parse(
        self, line: str, year: int, reference: datetime | None = None
    ) -> ParsedLine | Quarantined | None:
        """The parsed line, a quarantine, or None if the line is not a JSON object at all."""
        if not self.matches(line):
            return None
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as error:
            return self._quarantine(line, QuarantineReason.BAD_JSON, f"invalid JSON: {error}")
        if not isinstance(record, dict):
            return self._quarantine(line, QuarantineReason.BAD_JSON, "not a JSON object")
        return self._parsed(line, record, reference)

    def _parsed(
        self, line: str, record: dict[str, Any], reference: datetime | None
    ) -> ParsedLine | Quarantined:
        keys = self._keys
        raw_timestamp, message = (
            _first(record, keys["timestamp"]),
            _text(_first(record, keys["message"])),
        )
        quarantines = self.format.timestamp_on_error == UnreadableTimestamp.QUARANTINE
        if message is None or (raw_timestamp is None and quarantines):
            missing = "timestamp" if raw_timestamp is None and quarantines else "message"
            return self._quarantine(line, QuarantineReason.MISSING_FIELD, f"no {missing} field")
        timestamp: datetime | None
        try:
            timestamp, inferred = _timestamp(raw_timestamp), False
        except (ValueError, OverflowError, OSError) as error:
            if quarantines:
                detail = f"timestamp: {error}"
                return self._quarantine(line, QuarantineReason.BAD_TIMESTAMP, detail)
            timestamp, inferred = self._kept_time(reference), True
        raw_level = _text(_first(record, keys["level"]))
        pid = _first(record, keys["pid"])
        return ParsedLine(
            source=self.name,
            timestamp=timestamp,
            level=normalise_level(raw_level) if raw_level else None,
            raw_level=raw_level,
            component=_text(_first(record, keys["component"])),
            pid=_pid(pid),
            message=message,
            template=self._masker.mask(message),
            host=_text(_first(record, keys["host"])),
            thread=_text(_first(record, keys["thread"])),
            fields={
                key: text
                for key, value in record.items()
                if key not in self._taken and (text := _scalar(value)) is not None
            },
            timestamp_inferred=inferred,
        )

    def _kept_time(self, reference: datetime | None) -> datetime | None:
        """The time of a kept line whose own cannot be read: its record's, or none."""
        if self.format.timestamp_on_error == UnreadableTimestamp.RECORD_TIME:
            return reference
        return None

    def _quarantine(self, line: str, reason: QuarantineReason, detail: str) -> Quarantined:
        return Quarantined(source=self.name, line=line, reason=reason, detail=detail)
