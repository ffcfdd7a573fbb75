"""JSON lines: one JSON object per line, fields found under their common names.

timestamp: ``timestamp``, ``ts``, ``@timestamp`` or ``time`` — an ISO-8601 string, or a Unix
epoch number in seconds (milliseconds when its magnitude exceeds 1e11). Offsets are converted to
UTC and dropped, so every timestamp is naive. level: ``level`` or ``severity``; component:
``component``, ``logger`` or ``source``; pid: ``pid``; message: ``message`` or ``msg``. A line
without a timestamp or a message is quarantined; other fields are optional and extra keys are
ignored.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from weir.pipeline.parsing.levels import normalise_level
from weir.pipeline.parsing.model import ParsedLine, Quarantined, QuarantineReason
from weir.pipeline.parsing.template import template_of

NAME = "json"
TIMESTAMP_KEYS = ("timestamp", "ts", "@timestamp", "time")
LEVEL_KEYS = ("level", "severity")
COMPONENT_KEYS = ("component", "logger", "source")
MESSAGE_KEYS = ("message", "msg")
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


def _pid(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


class JsonLinesFormat:
    """The JSON lines format. Stateless and thread-safe."""

    name = NAME

    def matches(self, line: str) -> bool:
        return line.startswith("{")

    def parse(self, line: str, year: int) -> ParsedLine | Quarantined | None:
        """The parsed line, a quarantine, or None if the line is not a JSON object at all."""
        if not self.matches(line):
            return None
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as error:
            return self._quarantine(line, QuarantineReason.BAD_JSON, f"invalid JSON: {error}")
        if not isinstance(record, dict):
            return self._quarantine(line, QuarantineReason.BAD_JSON, "not a JSON object")
        return self._parsed(line, record)

    def _parsed(self, line: str, record: dict[str, Any]) -> ParsedLine | Quarantined:
        raw_timestamp, message = _first(record, TIMESTAMP_KEYS), _text(_first(record, MESSAGE_KEYS))
        if raw_timestamp is None or message is None:
            missing = "timestamp" if raw_timestamp is None else "message"
            return self._quarantine(line, QuarantineReason.MISSING_FIELD, f"no {missing} field")
        try:
            timestamp = _timestamp(raw_timestamp)
        except (ValueError, OverflowError, OSError) as error:
            return self._quarantine(line, QuarantineReason.BAD_TIMESTAMP, f"timestamp: {error}")
        raw_level = _text(_first(record, LEVEL_KEYS))
        return ParsedLine(
            source=NAME,
            timestamp=timestamp,
            level=normalise_level(raw_level) if raw_level else None,
            raw_level=raw_level,
            component=_text(_first(record, COMPONENT_KEYS)),
            pid=_pid(record.get("pid")),
            message=message,
            template=template_of(message),
        )

    def _quarantine(self, line: str, reason: QuarantineReason, detail: str) -> Quarantined:
        return Quarantined(source=NAME, line=line, reason=reason, detail=detail)
