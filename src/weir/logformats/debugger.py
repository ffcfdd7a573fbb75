"""What ``weir logs formats test`` reports: per line, the fields it gives or where it stops.

For a line that the pattern does not match, the report names the longest leading part of the
pattern (cut at its top-level items, see ``regex_items``) that still matches the start of the
line, how far into the line that part reaches, and the piece of pattern that fails there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from weir.logformats.declaration import FLAGS, JSON, LogFormat
from weir.logformats.model import ParsedLine, Quarantined
from weir.logformats.parser import LineParser
from weir.logformats.regex_items import items


@dataclass(frozen=True, slots=True)
class LineReport:
    """One line's outcome: ``fields`` when it parsed, else ``reason`` and, for a line the
    pattern does not match, ``matched_chars`` and ``failing_part``."""

    number: int
    line: str
    parsed: bool
    fields: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    detail: str | None = None
    matched_chars: int | None = None
    failing_part: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {key: value for key, value in _jsonable(self).items() if value is not None}


def try_lines(
    parser: LineParser, name: str, lines: list[str], *, reference: datetime | None = None
) -> list[LineReport]:
    """The report of each line parsed as format ``name`` (which must be registered)."""
    declared = parser.registry.reader(name).format
    reports = []
    for number, line in enumerate(lines, 1):
        result = parser.parse(name, line, reference)
        if isinstance(result, ParsedLine):
            reports.append(LineReport(number, line, True, _fields_of(result)))
            continue
        assert isinstance(result, Quarantined)
        matched, failing = stopping_point(declared, line.strip())
        reports.append(
            LineReport(
                number, line, False, {}, result.reason.value, result.detail, matched, failing
            )
        )
    return reports


def stopping_point(declared: LogFormat, line: str) -> tuple[int | None, str | None]:
    """How many characters of ``line`` the longest matching leading part of the pattern
    covers, and the pattern item after that part; (None, None) when the whole pattern matches
    or the format has no pattern."""
    if declared.kind == JSON or not declared.regex:
        return None, None
    found = items(declared.regex)
    if declared.compiled is not None and declared.compiled.match(line):
        return None, None
    reach, failing = 0, found[0].text if found else None
    for count in range(1, len(found) + 1):
        leading = "".join(item.text for item in found[:count])
        try:
            match = re.compile(leading, FLAGS).match(line)
        except re.error:
            continue
        if match is None:
            failing = found[count - 1].text
            break
        reach = match.end()
        failing = found[count].text if count < len(found) else r"\Z (the end of the line)"
    return reach, failing


def _fields_of(parsed: ParsedLine) -> dict[str, Any]:
    names = ("timestamp", "level", "raw_level", "component", "host", "pid", "thread", "message",
             "template")  # fmt: skip
    found = {name: getattr(parsed, name) for name in names if getattr(parsed, name) is not None}
    found["timestamp"] = parsed.timestamp.isoformat() if parsed.timestamp else None
    if parsed.timestamp_inferred:
        found["timestamp_inferred"] = True
    if parsed.fields:
        found["fields"] = dict(parsed.fields)
    return found


def _jsonable(report: LineReport) -> dict[str, Any]:
    return {
        "line_number": report.number,
        "line": report.line,
        "parsed": report.parsed,
        "fields": report.fields or None,
        "reason": report.reason,
        "detail": report.detail,
        "matched_chars": report.matched_chars,
        "fails_at": report.failing_part,
    }
