"""Parsing a whole Arrow batch of raw records at once, with the same result as LineParser.

``BatchParser.parse`` takes the ``key`` and ``value`` columns of a batch and returns one row per
record in the columns of ``PARSED_SCHEMA`` (parsed rows fill timestamp..template, quarantined
rows fill source, line, reason and detail; a pid beyond int64 is stored as null). Its result
equals ``parse_rows`` — LineParser applied line by line — for every input; it is just faster.

Lines of a plain-text format run through Arrow compute kernels: each format's regex (translated
to RE2, which ``pyarrow.compute.extract_regex`` runs in C++; for formats ending in loghub's
``<component>: <message>`` only the part before the component, see ``prefix_pattern``; headers
ending in a syslog tag or Zookeeper's origin are read as a prefix and a tail, see
``split_patterns``) splits the lines of that format into fields, and timestamps, levels,
components and pids are computed column-wise. The event template
is still ``template_of``, once per distinct message of a batch and not again for a message the
parser templated before (see ``BatchParser.templates``): its regex needs look-behind and
look-ahead, which RE2 lacks. A line takes this path when its format is known from its key (or,
without a key, detected by the same regexes in ``DETECTION_ORDER``), it is printable ASCII apart
from tab, CR and LF (where RE2's and Python's ``\\s``, ``\\w`` and ``str.strip`` agree), and its
fields make a valid timestamp. Every other line — JSON lines, unknown sources, lines that match
no format, invalid dates, other characters — goes through LineParser, so quarantine reasons and
details are LineParser's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from weir.pipeline.parsing.json_lines import NAME as JSON_NAME
from weir.pipeline.parsing.levels import normalise_level
from weir.pipeline.parsing.model import ParsedLine
from weir.pipeline.parsing.parser import DETECTION_ORDER, LineParser, canonical_source
from weir.pipeline.parsing.template import templates_of
from weir.pipeline.parsing.text_formats import (
    COMPONENT_MESSAGE,
    MESSAGE,
    MONTHS,
    PATTERNS,
    SYSLOG_TAG,
    ZOOKEEPER_ORIGIN,
)

PARSED_SCHEMA = pa.schema(
    [
        ("parsed", pa.int32()),
        ("source", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("level", pa.string()),
        ("component", pa.string()),
        ("pid", pa.int64()),
        ("message", pa.string()),
        ("template", pa.string()),
        ("line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)
PARSED_FIELDS = ("source", "level", "component", "pid", "message", "template")
QUARANTINE_FIELDS = ("source", "line", "reason", "detail")

# Lines with bytes outside printable ASCII other than tab, LF and CR take the per-line path.
_CONTROL_ALLOWED = np.isin(np.arange(256), [9, 10, 13])
_SCAN_BLOCK = 1 << 18
HEADER = "header"
_MONTH_NAMES = pa.array(list(MONTHS), pa.string())
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
TEMPLATE_CACHE_SIZE = 100_000  # templates a parser keeps from batch to batch
_MAX_PID_DIGITS = 18  # int64 holds every 18-digit number.
_US_PER_S = 1_000_000
# What Arrow's ascii_trim_whitespace strips.
_ASCII_WHITESPACE = np.isin(np.arange(256), [9, 10, 11, 12, 13, 32])
_VIEW_INLINE = np.arange(12)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# Runs of fixed-width digit groups captured as one group and sliced apart afterwards (RE2 pays
# per group); and groups nothing here reads, left uncaptured. Neither changes what matches.
_JOINED_GROUPS: tuple[tuple[str, str, dict[str, tuple[int, int]]], ...] = (
    (
        r"(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d) "
        r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d),(?P<frac>\d{3})",
        "ymdhmsf",
        {
            "year": (0, 4),
            "month": (5, 7),
            "day": (8, 10),
            "hour": (11, 13),
            "minute": (14, 16),
            "second": (17, 19),
            "millis": (20, 23),
        },
    ),
    (
        r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)\.(?P<frac>\d{3})",
        "hmsf",
        {"hour": (0, 2), "minute": (3, 5), "second": (6, 8), "millis": (9, 12)},
    ),
    (
        r"(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)",
        "ymd",
        {"year": (0, 4), "month": (5, 7), "day": (8, 10)},
    ),
    (
        r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)",
        "hms",
        {"hour": (0, 2), "minute": (3, 5), "second": (6, 8)},
    ),
    (
        r"(?P<yy>\d\d)(?P<month>\d\d)(?P<day>\d\d)",
        "yymmdd",
        {"yy": (0, 2), "month": (2, 4), "day": (4, 6)},
    ),
    (
        r"(?P<hour>\d\d)(?P<minute>\d\d)(?P<second>\d\d)",
        "hhmmss",
        {"hour": (0, 2), "minute": (2, 4), "second": (4, 6)},
    ),
    (
        r"(?P<yy>\d\d)/(?P<month>\d\d)/(?P<day>\d\d)",
        "yymd",
        {"yy": (0, 2), "month": (3, 5), "day": (6, 8)},
    ),
    (r"(?P<month>\d\d)-(?P<day>\d\d)", "md", {"month": (0, 2), "day": (3, 5)}),
)
_UNREAD_GROUPS = ("thread", "host", "lineno")
# Groups of a fixed width that can open a pattern: a line's such group is its first characters,
# sliced off the line instead of captured.
_FIXED_WIDTHS = {joined: max(stop for _, stop in spans.values()) for _, joined, spans in
                 _JOINED_GROUPS} | {"mname": 3}  # fmt: skip
_LITERAL_GROUP = re.compile(r"\(\?P<(\w+)>(\w+)\)")


def re2_pattern(python_pattern: str) -> str:
    """A text format's Python regex as an RE2 regex with the same matches on the lines above.

    The Python patterns use ``re.match`` (anchored at the start), ``\\Z``, ``re.DOTALL`` and
    ``re.ASCII``; RE2 spells the end anchor ``\\z`` and its classes are ASCII already. A pattern
    ending in ``MESSAGE`` (optional whitespace and the message up to the end) becomes its
    header, captured as ``header``, followed by whitespace or the end: the same lines match with
    the same groups, and the message is the rest of the line after the header, stripped. Cutting
    it off is cheaper than having RE2 track a group across the whole line. Fixed-width digit
    groups in a row become one group (see ``_JOINED_GROUPS``).
    """
    pattern = _re2_groups(python_pattern)
    if pattern.endswith(MESSAGE):
        head = pattern[: -len(MESSAGE)]
        return r"(?s)\A(?P<" + HEADER + ">" + head + r")(?:\s|\z)"
    return r"(?s)\A(?:" + pattern.replace(r"\Z", r"\z") + ")"


def prefix_pattern(python_pattern: str) -> str | None:
    """For a text format whose pattern is a prefix followed by loghub's ``<component>: <message>``
    (``COMPONENT_MESSAGE``), the prefix as an RE2 pattern that also captures the whole prefix
    (as ``PREFIX``); None for other formats.

    Such a line is read in two cheap steps instead of one costly extraction of its whole
    header: RE2 reads the prefix's fields, and the component runs from the prefix's end to the
    first colon after it that is followed by whitespace or ends the line (``COMPONENT_COLON``);
    the message follows. This gives the same fields as the whole pattern whenever such a colon
    exists, because the whole pattern, leftmost-first like RE2 and Python, takes the first way
    of matching the prefix that the rest can follow, its greedy and lazy parts alike, and the
    rest (a lazy component up to that colon) follows any prefix it comes after. A line without
    such a colon after the prefix is left to the per-line parser.
    """
    if not python_pattern.endswith(COMPONENT_MESSAGE):
        return None
    head = _re2_groups(python_pattern[: -len(COMPONENT_MESSAGE)])
    return r"(?s)\A(?P<" + PREFIX + ">" + head + ")"


@dataclass(frozen=True)
class HeaderTail:
    """How the end of a header is read after its prefix: it starts at the prefix's end or, where
    ``start`` (RE2) matches in the rest of the line, ``skip`` bytes after that match's start;
    from there ``pattern`` (RE2 that it reads in one pass) gives the tail and its fields."""

    start: str | None
    skip: int
    pattern: str


# Ends of headers that make a whole pattern ambiguous for RE2 (a lazy part before a component),
# which then extracts with a slower engine; read after their prefix instead, they give the same
# fields as the whole pattern:
# - a syslog tag's component holds no "[", "]" or ":" and one of them follows it, so it runs to
#   the first of them whether it is read lazily or greedily;
# - Zookeeper's optional, lazy thread ends at the first colon followed by a component (no ":",
#   "@" or "]") and "@<line>] -", which is where a search for such a colon finds it; with no such
#   colon there is no thread, and the component opens the brackets.
_TAILS = {
    SYSLOG_TAG: HeaderTail(None, 0, r"(?P<component>[^\[\]:]*)(?:\[(?P<pid>\d+)\])?:"),
    ZOOKEEPER_ORIGIN: HeaderTail(
        r":[^:@\]]*@\d+\]\s+-(?:\s|\z)", 1, r"(?P<component>[^:@\]]*)@\d+\]\s+-"
    ),
}


def split_patterns(python_pattern: str) -> tuple[str, str, HeaderTail] | None:
    """For a text format whose header ends in one of ``_TAILS``, RE2 patterns of the header's
    prefix (also capturing the whole prefix, as ``PREFIX``) and of its tail (also capturing the
    whole tail, as ``TAIL``), and where the tail starts; None for other formats."""
    for fragment, tail in _TAILS.items():
        if python_pattern.endswith(fragment + MESSAGE):
            head = _re2_groups(python_pattern[: -len(fragment + MESSAGE)])
            prefix = r"(?s)\A(?P<" + PREFIX + ">" + head + ")"
            return prefix, r"(?s)\A(?P<" + TAIL + ">" + tail.pattern + r")(?:\s|\z)", tail
    return None


def _re2_groups(python_pattern: str) -> str:
    """``python_pattern`` with its joined groups joined, and its unread groups, its fixed-width
    opening group and its literal groups (see ``uncaptured_fields``) uncaptured."""
    pattern = _joined(python_pattern)
    for name in _UNREAD_GROUPS:
        pattern = pattern.replace(f"(?P<{name}>", "(?:")
    leading, literals = _fields_outside(pattern)
    if leading is not None:
        pattern = pattern.replace(f"(?P<{leading[0]}>", "(?:", 1)
    return _LITERAL_GROUP.sub(r"(?:\2)", pattern) if literals else pattern


def uncaptured_fields(python_pattern: str) -> tuple[tuple[str, int] | None, dict[str, str]]:
    """What a text format's RE2 pattern leaves uncaptured although the fields are read: the group
    opening the pattern when it has a fixed width (its name and width: the line's first
    characters), and groups that match one literal word (by name). RE2 extracts with a fast
    engine (one-pass) only when a pattern has at most four groups and no ambiguity, and every
    group costs it time either way."""
    return _fields_outside(_joined(python_pattern))


def _joined(pattern: str) -> str:
    """``pattern`` with each run of fixed-width groups in ``_JOINED_GROUPS`` captured as one."""
    for fragment, joined, _ in _JOINED_GROUPS:
        pattern = pattern.replace(fragment, f"(?P<{joined}>" + _uncaptured(fragment) + ")")
    return pattern


def _fields_outside(pattern: str) -> tuple[tuple[str, int] | None, dict[str, str]]:
    opening = re.match(r"\(\?P<(\w+)>", pattern)
    leading = None
    if opening is not None and opening.group(1) in _FIXED_WIDTHS:
        leading = (opening.group(1), _FIXED_WIDTHS[opening.group(1)])
    return leading, dict(_LITERAL_GROUP.findall(pattern))


def _uncaptured(fragment: str) -> str:
    """``fragment`` with its named groups made non-capturing."""
    return re.sub(r"\(\?P<\w+>", "(?:", fragment)


def _split_joined(group: dict[str, pa.Array]) -> dict[str, pa.Array | np.ndarray]:
    """The extracted groups with every joined group split back into its fields: their numbers
    (int64) read straight from the digits' bytes when every value has the group's width, as
    strings otherwise."""
    fields: dict[str, pa.Array | np.ndarray] = dict(group)
    for _, joined, spans in _JOINED_GROUPS:
        column = fields.pop(joined, None)
        if column is None:
            continue
        characters = _fixed_width_bytes(column, _FIXED_WIDTHS[joined])
        for name, (start, stop) in spans.items():
            if characters is None:
                fields[name] = pc.utf8_slice_codeunits(column, start, stop)
            else:
                fields[name] = _decimal(characters[:, start:stop])
    return fields


def _decimal(characters: np.ndarray) -> np.ndarray:
    """The numbers (int64) whose ASCII decimal digits are the rows of ``characters`` (uint8)."""
    width = characters.shape[1]
    number: np.ndarray = characters[:, 0].astype(np.int64)
    for column in range(1, width):
        number *= 10
        number += characters[:, column]
    number -= ord("0") * int("1" * width)  # each character's "0", at its place
    return number


def _fixed_width_bytes(column: pa.Array, width: int) -> np.ndarray | None:
    """The bytes of the string array ``column``, one row of ``width`` per value (a view, not a
    copy: values of one width lie back to back), when every value is ``width`` bytes long;
    None otherwise."""
    size = len(column)
    if size == 0 or column.null_count:
        return None
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(
        offsets_buffer, dtype=np.int32, count=size + 1, offset=column.offset * 4
    )
    if data_buffer is None or not np.all(np.diff(offsets) == width):
        return None
    first = int(offsets[0])
    data = np.frombuffer(data_buffer, dtype=np.uint8, count=size * width, offset=first)
    return data.reshape(size, width)


RE2_PATTERNS = {name: re2_pattern(pattern) for name, pattern in PATTERNS.items()}
PREFIX, TAIL = "prefix", "tail"
COMPONENT_COLON = r":(?:\s|\z)"
PREFIX_PATTERNS = {
    name: prefix
    for name, pattern in PATTERNS.items()
    if (prefix := prefix_pattern(pattern)) is not None
}
SPLIT_PATTERNS = {
    name: split
    for name, pattern in PATTERNS.items()
    if (split := split_patterns(pattern)) is not None
}
UNCAPTURED_FIELDS = {name: uncaptured_fields(pattern) for name, pattern in PATTERNS.items()}
_TEXT_NAMES = tuple(PATTERNS)
_FALLBACK = len(_TEXT_NAMES)
_DETECT = _FALLBACK + 1


def parse_rows(
    parser: LineParser, keys: Sequence[bytes | None], values: Sequence[bytes | None]
) -> pa.Table:
    """Each record parsed by ``parser`` line by line, as a table of ``PARSED_SCHEMA``."""
    rows: dict[str, list[object]] = {name: [] for name in PARSED_SCHEMA.names}
    for key, value in zip(keys, values, strict=True):
        source = key.decode("utf-8", "replace") if key is not None else None
        line = (value or b"").decode("utf-8", "replace")
        outcome = parser.parse(source, line)
        if isinstance(outcome, ParsedLine):
            rows["parsed"].append(1)
            rows["timestamp"].append(outcome.timestamp)
            fields: tuple[str, ...] = PARSED_FIELDS
        else:
            rows["parsed"].append(0)
            rows["timestamp"].append(None)
            fields = QUARANTINE_FIELDS
        for name in PARSED_FIELDS + QUARANTINE_FIELDS[1:]:
            rows[name].append(getattr(outcome, name) if name in fields else None)
        pid = rows["pid"][-1]
        if isinstance(pid, int) and not _INT64_MIN <= pid <= _INT64_MAX:
            rows["pid"][-1] = None
    columns = {
        name: pa.array(rows[name], PARSED_SCHEMA.field(name).type)
        for name in PARSED_SCHEMA.names
        if name != "timestamp"
    }
    naive: list[datetime | None] = rows["timestamp"]  # type: ignore[assignment]
    stamps = pa.array(naive, pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
    columns["timestamp"] = stamps
    return pa.table([columns[name] for name in PARSED_SCHEMA.names], schema=PARSED_SCHEMA)


class BatchParser:
    """Parses Arrow columns of keys and values; the result equals ``parse_rows``'s."""

    def __init__(self, *, year: int) -> None:
        self.year = year
        self.lines = LineParser(year=year)
        self._templates: dict[str, str] = {}

    def templates(self, messages: pa.Array) -> pa.Array:
        """The template of each message, computed once per distinct message of the batch (logs
        repeat a lot) and looked up when an earlier batch had the message: the parser keeps
        up to ``TEMPLATE_CACHE_SIZE`` templates."""
        encoded = messages.dictionary_encode()
        distinct = encoded.dictionary.to_pylist()
        known = self._templates
        new = [message for message in distinct if message not in known]
        fresh = dict(zip(new, templates_of(new), strict=True))
        templates = [known[m] if m in known else fresh[m] for m in distinct]
        if len(known) + len(fresh) > TEMPLATE_CACHE_SIZE:
            known.clear()
        if len(fresh) <= TEMPLATE_CACHE_SIZE:
            known.update(fresh)
        return pc.take(pa.array(templates, pa.string()), encoded.indices)

    def parse(self, keys: pa.Array, values: pa.Array) -> pa.Table:
        """One row per record, in input order, in the columns of ``PARSED_SCHEMA``."""
        parts = self.parse_parts(keys, values)
        if not parts:
            return PARSED_SCHEMA.empty_table()
        order = np.empty(len(values), dtype=np.int64)
        numbers = np.concatenate([rows.to_numpy() for rows, _ in parts])
        order[numbers] = np.arange(len(values))
        return pa.concat_tables([part for _, part in parts]).take(pa.array(order))

    def parse_parts(self, keys: pa.Array, values: pa.Array) -> list[tuple[pa.Array, pa.Table]]:
        """The records parsed in parts, each with the row numbers (int64) of the records it holds.

        Every record is in exactly one part; parts are single-chunk tables of
        ``PARSED_SCHEMA``. Cheaper than ``parse`` when the order of rows does not matter.
        """
        count = len(values)
        keys, values = _as_binary(keys), _as_binary(values)
        usual = _usual(values)
        rows = pa.array(np.arange(count, dtype=np.int64))
        usual_keys, usual_values = keys, values
        if usual is not None:
            rows, usual_keys, usual_values = (
                rows.filter(usual),
                keys.filter(usual),
                values.filter(usual),
            )
        stripped = pc.ascii_trim_whitespace(usual_values.view(pa.string()))
        codes = self._format_codes(usual_keys, stripped).to_numpy(zero_copy_only=False)
        # The lines grouped by format with one take; each format's lines are then a slice.
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(_TEXT_NAMES) + 1)).tolist()
        if bounds[-1] > 0:
            taken = pa.array(order[: bounds[-1]])
            rows, stripped = rows.take(taken), stripped.take(taken)
        parts: list[tuple[pa.Array, pa.Table]] = []
        for code, name in enumerate(_TEXT_NAMES):
            start, stop = bounds[code], bounds[code + 1]
            if stop > start:
                chosen_rows, chosen = (
                    rows.slice(start, stop - start),
                    stripped.slice(start, stop - start),
                )
                part = self._parse_format(name, chosen_rows, chosen)
                if part is not None:
                    parts.append(part)
        done = np.zeros(count, dtype=bool)
        for part_rows, _ in parts:
            done[part_rows.to_numpy()] = True
        rest = pa.array(np.flatnonzero(~done))
        if len(rest):
            keys_rest, values_rest = keys.take(rest).to_pylist(), values.take(rest).to_pylist()
            parts.append((rest, parse_rows(self.lines, keys_rest, values_rest)))
        return parts

    def _format_codes(self, keys: pa.Array, stripped: pa.Array) -> pa.Array:
        """Per line: the index of its text format in ``_TEXT_NAMES``, or ``_FALLBACK``."""
        encoded = keys.dictionary_encode()
        code_of_key = []
        for key in encoded.dictionary.to_pylist():
            name = canonical_source(key.decode("utf-8", "replace"))
            code_of_key.append(_TEXT_NAMES.index(name) if name in _TEXT_NAMES else _FALLBACK)
        codes = pc.take(pa.array(code_of_key, pa.int64()), encoded.indices)
        codes = pc.fill_null(codes, _DETECT)
        unkeyed = pc.equal(codes, _DETECT)
        if not pc.any(unkeyed).as_py():
            return codes
        undecided = unkeyed
        detected = pa.nulls(len(codes), pa.int64())
        for name in DETECTION_ORDER:
            if name in _TEXT_NAMES:
                hit = pc.match_substring_regex(stripped, RE2_PATTERNS[name])
                code = _TEXT_NAMES.index(name)
            elif name == JSON_NAME:
                hit, code = pc.starts_with(stripped, "{"), _FALLBACK
            else:
                # A format without a regex here: LineParser decides every line still undecided.
                hit, code = pa.array(np.ones(len(stripped), dtype=bool)), _FALLBACK
            taken = pc.and_(undecided, hit)
            detected = pc.if_else(taken, code, detected)
            undecided = pc.and_(undecided, pc.invert(hit))
        detected = pc.fill_null(detected, _FALLBACK)
        return pc.if_else(unkeyed, detected, codes)

    def _parse_format(
        self, name: str, rows: pa.Array, lines: pa.Array
    ) -> tuple[pa.Array, pa.Table] | None:
        """The lines of ``name``'s format that parse cleanly, with their row numbers."""
        if name in PREFIX_PATTERNS:
            matched, group, header_bytes = _prefix_fields(PREFIX_PATTERNS[name], lines)
        elif name in SPLIT_PATTERNS:
            matched, group, header_bytes = _split_fields(*SPLIT_PATTERNS[name], lines)
        else:
            matched, group, header_bytes = _header_fields(RE2_PATTERNS[name], lines)
        leading, literals = UNCAPTURED_FIELDS[name]
        if leading is not None:
            group[leading[0]] = pc.utf8_slice_codeunits(lines, 0, leading[1])
        for field, word in literals.items():
            group[field] = pa.repeat(pa.scalar(word, pa.string()), len(lines))
        if matched is not None:
            keep = pa.array(matched)
            rows, lines, header_bytes = rows.filter(keep), lines.filter(keep), header_bytes[matched]
            group = {key: column.filter(keep) for key, column in group.items()}
        if len(rows) == 0:
            return None
        micros, valid = self._micros(_split_joined(group))
        pid = group.get("pid")
        if pid is not None:
            valid &= pc.utf8_length(pid).to_numpy(zero_copy_only=False) <= _MAX_PID_DIGITS
        if not valid.all():
            keep = pa.array(valid)
            rows, lines, micros = rows.filter(keep), lines.filter(keep), micros[valid]
            header_bytes = header_bytes[valid]
            group = {key: column.filter(keep) for key, column in group.items()}
        size = len(rows)
        if size == 0:
            return None
        message = _messages(lines, header_bytes)
        none = pa.nulls(size, pa.string())
        table = pa.table(
            [
                pa.array(np.ones(size, dtype=np.int32)),
                pa.array([name] * size, pa.string()),
                pa.array(micros, pa.int64()).cast(PARSED_SCHEMA.field("timestamp").type),
                _levels(group.get("level"), size),
                _components(group.get("component"), size),
                _pids(group.get("pid"), size),
                message,
                self.templates(message),
                none,
                none,
                none,
            ],
            schema=PARSED_SCHEMA,
        )
        return rows, table

    def _micros(self, group: dict[str, pa.Array | np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Microseconds since the epoch of each line's wall-clock time, and which are real."""
        size = len(group["day"])
        if "year" in group:
            year = _digits(group["year"])
        elif "yy" in group:
            year = 2000 + _digits(group["yy"])
        else:
            year = np.full(size, self.year, dtype=np.int64)
        if "month" in group:
            month = _digits(group["month"])
        else:
            found = pc.index_in(group["mname"], value_set=_MONTH_NAMES)
            month = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        day, hour = _digits(group["day"]), _digits(group["hour"])
        minute, second = _digits(group["minute"]), _digits(group["second"])
        if "millis" in group:
            frac = _digits(group["millis"]) * 1_000
        elif "frac" in group:
            six = pc.utf8_rpad(pc.utf8_slice_codeunits(group["frac"], 0, 6), width=6, padding="0")
            frac = _digits(six)
        else:
            frac = np.zeros(size, dtype=np.int64)
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        valid_month = (month >= 1) & (month <= 12)
        days_in_month = _DAYS_IN_MONTH[np.clip(month, 1, 12) - 1] + (leap & (month == 2))
        valid = (
            (year >= 1) & (year <= 9999) & valid_month & (day >= 1) & (day <= days_in_month)
            & (hour < 24) & (minute < 60) & (second < 60)
        )  # fmt: skip
        days = _days_from_civil(year, np.clip(month, 1, 12), day)
        seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
        return seconds * _US_PER_S + frac, valid


def _header_fields(
    pattern: str, lines: pa.Array
) -> tuple[np.ndarray | None, dict[str, pa.Array], np.ndarray]:
    """The fields of ``pattern`` (the ``re2_pattern`` of a pattern ending in ``MESSAGE``,
    as every text format's does) in each line and where each line's header ends (bytes); and
    which lines match (None: all)."""
    matched, group, header_bytes = _extract(lines, pattern, HEADER)
    return (None if matched.all() else matched), group, header_bytes


def _prefix_fields(
    pattern: str, lines: pa.Array
) -> tuple[np.ndarray | None, dict[str, pa.Array], np.ndarray]:
    """``_header_fields`` for a ``prefix_pattern``: the prefix's fields and the component up
    to the first ``COMPONENT_COLON`` after the prefix, the header ending with that colon."""
    matched, group, prefix_end = _extract(lines, pattern, PREFIX)
    line_bytes = _LineBytes.of(lines)
    if line_bytes is None:  # every line is empty: none matched
        return np.zeros(len(lines), dtype=bool), group, prefix_end
    starts = line_bytes.starts + prefix_end
    colon = pc.find_substring_regex(line_bytes.rest(starts), COMPONENT_COLON)
    colon = colon.to_numpy(zero_copy_only=False)
    matched &= colon >= 0
    colon = np.maximum(colon, 0).astype(np.int64)
    group["component"] = line_bytes.views(starts, colon)
    return (None if matched.all() else matched), group, prefix_end + colon + 1


def _split_fields(
    prefix: str, tail_pattern: str, tail: HeaderTail, lines: pa.Array
) -> tuple[np.ndarray | None, dict[str, pa.Array], np.ndarray]:
    """``_header_fields`` for a header read as a prefix and a tail (see ``split_patterns``)."""
    matched, group, prefix_end = _extract(lines, prefix, PREFIX)
    line_bytes = _LineBytes.of(lines)
    if line_bytes is None:  # every line is empty: none matched
        return np.zeros(len(lines), dtype=bool), group, prefix_end
    starts = line_bytes.starts + prefix_end
    if tail.start is not None:
        found = pc.find_substring_regex(line_bytes.rest(starts), tail.start)
        found = found.to_numpy(zero_copy_only=False)
        starts += np.where(found >= 0, found + tail.skip, 0)
    tail_matched, tail_group, tail_bytes = _extract(line_bytes.rest(starts), tail_pattern, TAIL)
    group |= tail_group
    matched &= tail_matched
    return (None if matched.all() else matched), group, starts - line_bytes.starts + tail_bytes


def _extract(
    values: pa.Array, pattern: str, whole: str
) -> tuple[np.ndarray, dict[str, pa.Array], np.ndarray]:
    """Which values match ``pattern``, its groups other than ``whole``, and how many bytes
    ``whole`` spans in each value (0 where it does not match)."""
    fields = pc.extract_regex(values, pattern)
    group = {f.name: fields.field(f.name) for f in fields.type}
    length = pc.fill_null(pc.binary_length(group.pop(whole)), 0)
    return (
        fields.is_valid().to_numpy(zero_copy_only=False),
        group,
        length.to_numpy(zero_copy_only=False).astype(np.int64),
    )


@dataclass(frozen=True)
class _LineBytes:
    """The bytes of a string array's lines, for views of parts of them."""

    buffer: pa.Buffer
    data: np.ndarray
    starts: np.ndarray  # where each line starts in ``data`` (int64)
    ends: np.ndarray

    @classmethod
    def of(cls, lines: pa.Array) -> _LineBytes | None:
        """None when the lines hold no bytes at all."""
        _, offsets_buffer, data_buffer = lines.buffers()
        if data_buffer is None:
            return None
        offsets = np.frombuffer(
            offsets_buffer, dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4
        ).astype(np.int64)
        data = np.frombuffer(data_buffer, dtype=np.uint8)
        return cls(data_buffer, data, offsets[:-1], offsets[1:])

    def views(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        return _string_views(self.buffer, self.data, starts, lengths).cast(pa.string())

    def rest(self, starts: np.ndarray) -> pa.Array:
        """Each line from ``starts`` to its end."""
        return self.views(starts, self.ends - starts)


def _usual(values: pa.Array) -> pa.Array | None:
    """Which values (a binary array) are not null and hold only printable ASCII, tab, LF and CR
    bytes; None when all do. The bytes are scanned in blocks small enough to stay in the CPU's
    cache, and only the few unusual ones are traced back to their values."""
    size = len(values)
    _, offsets_buffer, data_buffer = values.buffers()
    usual = np.ones(size, dtype=bool)
    if values.null_count:
        usual &= values.is_valid().to_numpy(zero_copy_only=False)
    if data_buffer is not None and size:
        offsets = np.frombuffer(
            offsets_buffer, dtype=np.int32, count=size + 1, offset=values.offset * 4
        )
        data = np.frombuffer(data_buffer, dtype=np.uint8)
        shifted = np.empty(_SCAN_BLOCK, dtype=np.uint8)
        outside = np.empty(_SCAN_BLOCK, dtype=bool)
        for begin in range(int(offsets[0]), int(offsets[-1]), _SCAN_BLOCK):
            block = data[begin : min(begin + _SCAN_BLOCK, int(offsets[-1]))]
            length = len(block)
            # Bytes 0x20..0x7e become 0..0x5e; every other byte ends up above 0x5e.
            np.subtract(block, np.uint8(0x20), out=shifted[:length])
            np.greater(shifted[:length], np.uint8(0x5E), out=outside[:length])
            if outside[:length].any():
                at = np.flatnonzero(outside[:length])
                at = at[~_CONTROL_ALLOWED[block[at]]] + begin
                usual[np.searchsorted(offsets, at, side="right") - 1] = False
    return None if usual.all() else pa.array(usual)


def _as_binary(column: pa.Array) -> pa.Array:
    return column if pa.types.is_binary(column.type) else column.cast(pa.binary())


def _messages(lines: pa.Array, header_bytes: np.ndarray) -> pa.Array:
    """Each line without its first ``header_bytes[i]`` bytes and the whitespace after them.

    The lines (a string array without nulls) are stripped already, so nothing trails. The
    messages are first views into the lines' data (``string_view``), which one cast then copies
    into a new string array; no per-byte index is built.
    """
    size = len(lines)
    _, offsets_buffer, data_buffer = lines.buffers()
    if data_buffer is None or size == 0:
        return pa.array([""] * size, pa.string())
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=size + 1, offset=lines.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    ends = offsets[1:]
    starts = offsets[:-1] + header_bytes.astype(np.int32)
    moving = np.flatnonzero(starts < ends)
    while len(moving):
        moving = moving[_ASCII_WHITESPACE[data[starts[moving]]]]
        starts[moving] += 1
        moving = moving[starts[moving] < ends[moving]]
    return _string_views(data_buffer, data, starts, ends - starts).cast(pa.string())


def _string_views(
    buffer: pa.Buffer, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> pa.Array:
    """A ``string_view`` array of the byte ranges ``[starts[i], starts[i] + lengths[i])`` of
    ``buffer`` (whose bytes ``data`` holds). A view is 16 bytes: the length, then either the
    string itself (up to 12 bytes, zero-padded) or its first 4 bytes, the buffer's number and
    the offset. Every view first gets the 12 bytes at its start (one gather from a sliding
    window over the data); long ones then get their buffer and offset over the last 8."""
    size = len(starts)
    if len(data) == 0:
        return pa.array([""] * size, pa.string_view())
    width = len(_VIEW_INLINE)
    source = data if len(data) >= width else np.pad(data, (0, width - len(data)))
    views = np.empty((size, 4), dtype=np.int32)
    views[:, 0] = lengths
    inline = views.view(np.uint8)[:, 4:16]
    last = len(source) - width
    inline[...] = np.lib.stride_tricks.sliding_window_view(source, width)[np.minimum(starts, last)]
    for row in np.flatnonzero(starts > last).tolist():  # the few views within the data's end
        piece = data[starts[row] : starts[row] + width]
        inline[row, : len(piece)] = piece
        inline[row, len(piece) :] = 0
    inline[lengths[:, None] <= _VIEW_INLINE] = 0
    long = np.flatnonzero(lengths > width)
    views[long, 2] = 0
    views[long, 3] = starts[long]
    return pa.Array.from_buffers(pa.string_view(), size, [None, pa.py_buffer(views), buffer])


def _digits(column: pa.Array | np.ndarray) -> np.ndarray:
    """A column of ASCII digit strings (an empty one counts as 0) as int64; numbers already
    read stay as they are."""
    if isinstance(column, np.ndarray):
        return column
    filled = pc.if_else(pc.equal(column, ""), "0", column)
    return np.asarray(pc.cast(filled, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (year >= 1)."""
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    result: np.ndarray = era * 146_097 + day_of_era - 719_468
    return result


def _blank_as_null(column: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)


def _levels(raw: pa.Array | None, size: int) -> pa.Array:
    """Normalised level names (None where the line has none), computed once per distinct one."""
    if raw is None:
        return pa.nulls(size, pa.string())
    encoded = raw.dictionary_encode()
    names = [normalise_level(value) if value else None for value in encoded.dictionary.to_pylist()]
    return pc.take(pa.array(names, pa.string()), encoded.indices)


def _components(raw: pa.Array | None, size: int) -> pa.Array:
    if raw is None:
        return pa.nulls(size, pa.string())
    return _blank_as_null(pc.ascii_trim_whitespace(raw))


def _pids(raw: pa.Array | None, size: int) -> pa.Array:
    if raw is None:
        return pa.nulls(size, pa.int64())
    return pc.cast(_blank_as_null(raw), pa.int64())
