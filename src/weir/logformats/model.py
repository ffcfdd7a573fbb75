"""The two outcomes of parsing one raw log line: a ParsedLine or a Quarantined line.

Both are frozen value objects with no behaviour, so they can cross process boundaries and be
written straight to the warehouse (ParsedLine) or the quarantine table (Quarantined).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedLine:
    """One log line split into the warehouse's columns.

    ``timestamp`` is always naive: the log's own wall-clock time when the line carries no offset
    (every loghub format), or UTC when it does (JSON lines with ``Z``/``+hh:mm`` or epoch numbers).
    ``level`` is the normalised name (see ``levels.CANONICAL_LEVELS``) and ``raw_level`` the text
    as written; both are None for formats without a level (syslog, OpenSSH). ``fields`` holds
    the format's other named fields that matched (name -> text as written).
    ``timestamp_inferred`` is set when the line's own timestamp could not be read and its
    format keeps such lines (``[timestamp] on_error``): ``timestamp`` is then the record's
    timestamp, or None.
    """

    source: str
    timestamp: datetime | None
    level: str | None
    raw_level: str | None
    component: str | None
    pid: int | None
    message: str
    template: str
    host: str | None = None
    thread: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    timestamp_inferred: bool = False


class QuarantineReason(StrEnum):
    """Why a line could not be parsed; the quarantine table's ``reason`` column."""

    EMPTY = "empty"
    UNKNOWN_SOURCE = "unknown-source"
    NO_FORMAT_MATCHED = "no-format-matched"
    FORMAT_MISMATCH = "format-mismatch"
    BAD_TIMESTAMP = "bad-timestamp"
    BAD_JSON = "bad-json"
    MISSING_FIELD = "missing-field"
    AMBIGUOUS_FORMAT = "ambiguous-format"


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantined:
    """A line that did not parse, kept verbatim with the reason; never silently dropped.

    ``source`` is the format the record's key named, or the detected format when detection
    matched a format but its fields were invalid, or None when nothing (or more than one format
    equally) matched.
    """

    source: str | None
    line: str
    reason: QuarantineReason
    detail: str
