"""One line of a pattern-declared format into a ParsedLine: the per-line reader.

The pattern is anchored at the line's start and must match to its end; the message may span
embedded newlines (multi-line records such as stack traces stay one record). Fields fill the
columns the format names; the others go to ``ParsedLine.fields``. An empty field counts as
absent. A pid is a number when its
field holds only digits; otherwise it is kept, as written, among the other fields.
"""

from __future__ import annotations

from datetime import datetime

from weir.logformats.declaration import LogFormat, UnreadableTimestamp
from weir.logformats.levels import normalise_level
from weir.logformats.model import ParsedLine, Quarantined, QuarantineReason
from weir.logformats.template import Masker


def _optional(value: str | None) -> str | None:
    value = value.strip() if value else value
    return value or None


class TextLines:
    """Reads lines of one pattern-declared format. Stateless and thread-safe."""

    def __init__(self, declared: LogFormat) -> None:
        assert declared.compiled is not None
        self.format = declared
        self.name = declared.name
        self._masker = Masker(declared.mining)
        self._match = declared.compiled.match
        columns = declared.columns
        self._level = columns.get("level")
        self._component = columns.get("component")
        self._host = columns.get("host")
        self._pid = columns.get("pid")
        self._thread = columns.get("thread")
        self._message = columns["message"]
        self._extra = declared.extra_fields
        self._stamp = declared.timestamp_field
        self._read_time = declared.timestamp.read

    def matches(self, line: str) -> bool:
        return self._match(line) is not None

    def parse(
        self, line: str, year: int, reference: datetime | None = None
    ) -> ParsedLine | Quarantined | None:
        """The parsed line, a quarantine for invalid fields, or None if the shape differs."""
        match = self._match(line)
        if match is None:
            return None
        fields = match.groupdict()
        stamp = fields[self._stamp]
        try:
            if stamp is None:
                raise ValueError("the line has no timestamp")
            timestamp = self._read_time(stamp, reference=reference, year=year)
        except (ValueError, OverflowError) as error:
            return self._unreadable_time(line, fields, reference, error)
        return self._parsed(fields, timestamp)

    def _unreadable_time(
        self,
        line: str,
        fields: dict[str, str | None],
        reference: datetime | None,
        error: Exception,
    ) -> ParsedLine | Quarantined:
        """The line whose timestamp cannot be read, as its format's ``on_error`` says."""
        policy = self.format.timestamp_on_error
        if policy == UnreadableTimestamp.QUARANTINE:
            return Quarantined(
                source=self.name,
                line=line,
                reason=QuarantineReason.BAD_TIMESTAMP,
                detail=f"invalid {self.name} timestamp: {error}",
            )
        stamp = reference if policy == UnreadableTimestamp.RECORD_TIME else None
        return self._parsed(fields, stamp, inferred=True)

    def _parsed(
        self, fields: dict[str, str | None], timestamp: datetime | None, inferred: bool = False
    ) -> ParsedLine:
        raw_level = fields[self._level] if self._level else None
        message = (fields[self._message] or "").strip()
        extra = {name: value for name in self._extra if (value := fields[name])}
        pid = None
        if self._pid is not None and (text := fields[self._pid]):
            if text.isascii() and text.isdigit():
                pid = int(text)
            else:
                extra[self._pid] = text
        return ParsedLine(
            source=self.name,
            timestamp=timestamp,
            level=normalise_level(raw_level) if raw_level else None,
            raw_level=raw_level,
            component=_optional(fields[self._component]) if self._component else None,
            pid=pid,
            message=message,
            template=self._masker.mask(message),
            host=(fields[self._host] or None) if self._host else None,
            thread=_optional(fields[self._thread]) if self._thread else None,
            fields=extra,
            timestamp_inferred=inferred,
        )
