"""Choosing a format for a line and parsing it: by the record's key, or by detection.

A key names a registered format (its name or an alias, in any case); an unknown key quarantines
the line with a reason that names the key. Without a key the line is offered to the registered
formats by specificity (see ``weir.logformats.registry``); a line whose shape matches but whose
fields are invalid (say, month 13) is quarantined under that format rather than offered to the
next one, and a line that two equally specific formats both read is quarantined as ambiguous.
"""

from __future__ import annotations

from datetime import date, datetime

from weir.logformats.model import ParsedLine, Quarantined, QuarantineReason
from weir.logformats.registry import FormatRegistry, LineReader


class LineParser:
    """Parses raw lines with the formats of ``registry`` (the shipped ones by default).

    ``year`` is the year of yearless timestamps when the caller gives no reference time (the
    record's timestamp). Thread-safe.
    """

    def __init__(self, *, year: int, registry: FormatRegistry | None = None) -> None:
        self.year = year
        self.registry = registry if registry is not None else FormatRegistry.builtin()

    def parse(
        self, source: str | None, line: str, reference: datetime | None = None
    ) -> ParsedLine | Quarantined:
        """``line`` parsed as ``source``'s format, or as the detected one if ``source`` is None.
        ``reference`` (naive UTC, the record's timestamp) gives yearless timestamps a year."""
        stripped = line.strip()
        if not stripped:
            return Quarantined(
                source=source, line=line, reason=QuarantineReason.EMPTY, detail="blank line"
            )
        if source is None:
            return self._detected(line, stripped, reference)
        return self._named(source, line, stripped, reference)

    def detect(self, line: str) -> str | None:
        """The name of the format detection reads ``line`` with, or None (also if ambiguous)."""
        matching = self.candidates(line)
        return matching[0] if len(matching) == 1 else None

    def candidates(self, line: str) -> tuple[str, ...]:
        """The most specific detecting formats whose pattern matches ``line``: one name when
        detection reads it, several when it is ambiguous, none when no format matches."""
        stripped = line.strip()
        for group in self.registry.detection:
            matching = tuple(reader.name for reader in group if reader.matches(stripped))
            if matching:
                return matching
        return ()

    def _named(
        self, source: str, line: str, stripped: str, reference: datetime | None
    ) -> ParsedLine | Quarantined:
        name = self.registry.canonical(source)
        if name is None:
            known = ", ".join(self.registry.names)
            return Quarantined(
                source=source,
                line=line,
                reason=QuarantineReason.UNKNOWN_SOURCE,
                detail=f"the key {source!r} names no registered format; registered: {known}",
            )
        result = self.registry.reader(name).parse(stripped, self.year, reference)
        if result is None:
            return Quarantined(
                source=name,
                line=line,
                reason=QuarantineReason.FORMAT_MISMATCH,
                detail=f"line does not have the {name} format",
            )
        return _with_original(result, line)

    def _detected(
        self, line: str, stripped: str, reference: datetime | None
    ) -> ParsedLine | Quarantined:
        for group in self.registry.detection:
            for reader in group:
                result = reader.parse(stripped, self.year, reference)
                if result is not None:
                    return _unless_ambiguous(reader, group, result, line, stripped)
        names = ", ".join(r.name for group in self.registry.detection for r in group)
        return Quarantined(
            source=None,
            line=line,
            reason=QuarantineReason.NO_FORMAT_MATCHED,
            detail=f"matches none of: {names}",
        )


def _unless_ambiguous(
    reader: LineReader,
    group: tuple[LineReader, ...],
    result: ParsedLine | Quarantined,
    line: str,
    stripped: str,
) -> ParsedLine | Quarantined:
    others = [other.name for other in group if other is not reader and other.matches(stripped)]
    if not others:
        return _with_original(result, line)
    names = ", ".join([reader.name, *others])
    return Quarantined(
        source=None,
        line=line,
        reason=QuarantineReason.AMBIGUOUS_FORMAT,
        detail=f"equally specific formats match: {names}; give these lines a key",
    )


def _with_original(result: ParsedLine | Quarantined, line: str) -> ParsedLine | Quarantined:
    """Quarantine keeps the line exactly as received, not the stripped copy that was parsed."""
    if isinstance(result, Quarantined) and result.line is not line:
        return Quarantined(
            source=result.source, line=line, reason=result.reason, detail=result.detail
        )
    return result


def parse_line(
    source: str | None,
    line: str,
    *,
    year: int | None = None,
    registry: FormatRegistry | None = None,
) -> ParsedLine | Quarantined:
    """Parse one raw line. ``year`` fills in formats without one; it defaults to today's year.

    Callers that parse many lines, or need reproducible results, should hold a LineParser with
    an explicit year instead.
    """
    default = date.today().year if year is None else year
    return LineParser(year=default, registry=registry).parse(source, line)
