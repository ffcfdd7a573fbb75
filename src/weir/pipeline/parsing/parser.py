"""Choosing a format for a line: by the source's name, or by detection in a fixed order.

Detection tries ``DETECTION_ORDER`` and takes the first format whose shape the line has; the
order puts the most specific shapes first (OpenSSH is a special case of syslog, so it precedes
``linux``). A line whose shape matches but whose fields are invalid (say, month 13) is
quarantined under that format rather than offered to the next one.
"""

from __future__ import annotations

from datetime import date
from typing import Protocol

from weir.pipeline.parsing.json_lines import JsonLinesFormat
from weir.pipeline.parsing.model import ParsedLine, Quarantined, QuarantineReason
from weir.pipeline.parsing.text_formats import TEXT_FORMATS


class LineFormat(Protocol):
    @property
    def name(self) -> str: ...

    def matches(self, line: str) -> bool: ...

    def parse(self, line: str, year: int) -> ParsedLine | Quarantined | None: ...


DETECTION_ORDER = (
    "json",
    "apache",
    "zookeeper",
    "hadoop",
    "hdfs",
    "spark",
    "android",
    "openssh",
    "linux",
)
FORMATS: dict[str, LineFormat] = {"json": JsonLinesFormat(), **TEXT_FORMATS}
SOURCES = frozenset(FORMATS)
ALIASES = {"syslog": "linux", "jsonl": "json", "ssh": "openssh"}
_DETECTION = tuple(FORMATS[name] for name in DETECTION_ORDER)


def canonical_source(source: str) -> str | None:
    """The format name for ``source`` (case-insensitive, aliases allowed), or None if unknown."""
    name = source.strip().lower()
    name = ALIASES.get(name, name)
    return name if name in FORMATS else None


def detect(line: str) -> str | None:
    """The name of the first format, in DETECTION_ORDER, whose shape ``line`` has."""
    stripped = line.strip()
    return next((fmt.name for fmt in _DETECTION if fmt.matches(stripped)), None)


class LineParser:
    """Parses raw lines with a fixed default year for formats that omit it. Thread-safe."""

    def __init__(self, *, year: int) -> None:
        self.year = year

    def parse(self, source: str | None, line: str) -> ParsedLine | Quarantined:
        """``line`` parsed as ``source``'s format, or as the detected one if ``source`` is None."""
        stripped = line.strip()
        if not stripped:
            return Quarantined(
                source=source, line=line, reason=QuarantineReason.EMPTY, detail="blank line"
            )
        if source is None:
            return self._detected(line, stripped)
        return self._named(source, line, stripped)

    def _named(self, source: str, line: str, stripped: str) -> ParsedLine | Quarantined:
        name = canonical_source(source)
        if name is None:
            detail = f"unknown source {source!r}; known: {', '.join(sorted(SOURCES))}"
            return Quarantined(
                source=source, line=line, reason=QuarantineReason.UNKNOWN_SOURCE, detail=detail
            )
        result = FORMATS[name].parse(stripped, self.year)
        if result is None:
            return Quarantined(
                source=name,
                line=line,
                reason=QuarantineReason.FORMAT_MISMATCH,
                detail=f"line does not have the {name} format",
            )
        return _with_original(result, line)

    def _detected(self, line: str, stripped: str) -> ParsedLine | Quarantined:
        for fmt in _DETECTION:
            result = fmt.parse(stripped, self.year)
            if result is not None:
                return _with_original(result, line)
        return Quarantined(
            source=None,
            line=line,
            reason=QuarantineReason.NO_FORMAT_MATCHED,
            detail=f"matches none of: {', '.join(DETECTION_ORDER)}",
        )


def _with_original(result: ParsedLine | Quarantined, line: str) -> ParsedLine | Quarantined:
    """Quarantine keeps the line exactly as received, not the stripped copy that was parsed."""
    if isinstance(result, Quarantined) and result.line is not line:
        return Quarantined(
            source=result.source, line=line, reason=result.reason, detail=result.detail
        )
    return result


def parse_line(
    source: str | None, line: str, *, year: int | None = None
) -> ParsedLine | Quarantined:
    """Parse one raw line. ``year`` fills in formats without one; it defaults to today's year.

    Callers that parse many lines, or need reproducible results, should hold a LineParser with
    an explicit year instead.
    """
    return LineParser(year=date.today().year if year is None else year).parse(source, line)
