"""Parsing a whole Arrow batch of raw records at once, with the same result as LineParser.

``BatchParser.parse`` takes the ``key`` and ``value`` columns of a batch (and, optionally, the
records' timestamps, which give yearless lines their year) and returns one row per record in
the columns of ``PARSED_SCHEMA`` (parsed rows fill timestamp..fields, quarantined rows fill
source, line, reason and detail; a pid beyond int64 is stored as null; ``timestamp_inferred``
says that a line's timestamp is its record's or null, see ``declaration.UnreadableTimestamp``).
Its result equals ``parse_rows`` — LineParser applied line by line — for every input; it is
just faster.

Lines of a pattern-declared format run through Arrow compute kernels as that format's batch
plan says (``weir.logformats.batch_plan``, derived from the declared pattern): RE2 extracts the
fields, timestamps are read column-wise (``weir.logformats.batch_timestamps``), levels and
other fields are computed per distinct value. The event template is the format's masking
(``template.Masker``), once per distinct message of a batch and not again for a message the
parser templated before. A line takes this path when its format is known from its key (or,
without a key, detected by the same patterns and specificity as LineParser, one format
matching), it is printable ASCII apart from tab, CR and LF (where RE2's and Python's ``\\s``,
``\\w`` and ``str.strip`` agree), and its fields are valid. Every other line — JSON lines,
unknown keys, lines that match no format or two, invalid dates, other characters — goes through
LineParser, so quarantine reasons and details are LineParser's. The exception is a format that
keeps lines whose timestamp cannot be read (``[timestamp] on_error``): those it keeps stay on
the fast path, with their record's time or none, once the per-line timestamp reader has
confirmed, text by text, that it cannot read theirs either.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from weir.logformats.arrow_text import LineBytes, as_binary, extract, messages_after, usual
from weir.logformats.batch_plan import HEAD, TAIL, BatchPlan, plan_of
from weir.logformats.batch_timestamps import read_column
from weir.logformats.declaration import TEXT, LogFormat, UnreadableTimestamp
from weir.logformats.levels import normalise_level
from weir.logformats.model import ParsedLine
from weir.logformats.parser import LineParser
from weir.logformats.registry import FormatRegistry
from weir.logformats.template import Masker

FIELDS_TYPE = pa.map_(pa.string(), pa.string())
PARSED_SCHEMA = pa.schema(
    [
        ("parsed", pa.int32()),
        ("source", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_inferred", pa.bool_()),
        ("level", pa.string()),
        ("raw_level", pa.string()),
        ("component", pa.string()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("thread", pa.string()),
        ("message", pa.string()),
        ("template", pa.string()),
        ("fields", FIELDS_TYPE),
        ("line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)
PARSED_FIELDS = ("source", "timestamp_inferred", "level", "raw_level", "component", "host",
                 "pid", "thread", "message", "template", "fields")  # fmt: skip
QUARANTINE_FIELDS = ("source", "line", "reason", "detail")
_EPOCH = datetime(1970, 1, 1)
TEMPLATE_CACHE_SIZE = 100_000  # templates a parser keeps from batch to batch
_PID = r"\A\d{0,18}\z"  # int64 holds every 18-digit number
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_rows(
    parser: LineParser,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    references: Sequence[datetime | None] | None = None,
) -> pa.Table:
    """Each record parsed by ``parser`` line by line, as a table of ``PARSED_SCHEMA``.
    ``references`` are the records' timestamps (aware or naive UTC), if known."""
    rows: dict[str, list[object]] = {name: [] for name in PARSED_SCHEMA.names}
    refs = references if references is not None else [None] * len(values)
    for key, value, reference in zip(keys, values, refs, strict=True):
        source = key.decode("utf-8", "replace") if key is not None else None
        line = (value or b"").decode("utf-8", "replace")
        outcome = parser.parse(source, line, _naive_utc(reference))
        parsed = isinstance(outcome, ParsedLine)
        rows["parsed"].append(int(parsed))
        rows["timestamp"].append(outcome.timestamp if isinstance(outcome, ParsedLine) else None)
        fields = PARSED_FIELDS if parsed else QUARANTINE_FIELDS
        for name in PARSED_FIELDS + QUARANTINE_FIELDS[1:]:
            rows[name].append(getattr(outcome, name) if name in fields else None)
        if isinstance(outcome, ParsedLine):
            rows["fields"][-1] = list(outcome.fields.items())
        pid = rows["pid"][-1]
        if isinstance(pid, int) and not _INT64_MIN <= pid <= _INT64_MAX:
            rows["pid"][-1] = None
    columns = {
        name: pa.array(rows[name], PARSED_SCHEMA.field(name).type)
        for name in PARSED_SCHEMA.names
        if name != "timestamp"
    }
    naive: list[datetime | None] = rows["timestamp"]  # type: ignore[assignment]
    stamp_type = PARSED_SCHEMA.field("timestamp").type
    columns["timestamp"] = pa.array(naive, pa.timestamp("us")).cast(stamp_type)
    return pa.table([columns[name] for name in PARSED_SCHEMA.names], schema=PARSED_SCHEMA)


def _naive_utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


class BatchParser:
    """Parses Arrow columns of keys and values; the result equals ``parse_rows``'s."""

    def __init__(self, *, year: int, registry: FormatRegistry | None = None) -> None:
        self.year = year
        self.lines = LineParser(year=year, registry=registry)
        self.registry = self.lines.registry
        self.plans: dict[str, BatchPlan] = {}
        for declared in self.registry:
            plan = plan_of(declared) if declared.kind == TEXT else None
            if plan is not None:
                self.plans[declared.name] = plan
        self._names = tuple(sorted(self.plans))
        self._fallback = len(self._names)
        self._maskers = {name: Masker(self.registry.reader(name).format.mining)
                         for name in self._names}  # fmt: skip
        self._templates: dict[str, dict[str, str]] = {name: {} for name in self._names}

    def templates(self, name: str, messages: pa.Array) -> pa.Array:
        """The template of each message of format ``name`` (its masked message), computed once
        per distinct message of the batch (logs repeat a lot) and looked up when an earlier
        batch had the message: the parser keeps up to ``TEMPLATE_CACHE_SIZE`` templates per
        format."""
        encoded = messages.dictionary_encode()
        distinct = encoded.dictionary.to_pylist()
        known = self._templates[name]
        new = [message for message in distinct if message not in known]
        fresh = dict(zip(new, self._maskers[name].mask_all(new), strict=True))
        templates = [known[m] if m in known else fresh[m] for m in distinct]
        if len(known) + len(fresh) > TEMPLATE_CACHE_SIZE:
            known.clear()
        if len(fresh) <= TEMPLATE_CACHE_SIZE:
            known.update(fresh)
        return pc.take(pa.array(templates, pa.string()), encoded.indices)

    def parse(
        self, keys: pa.Array, values: pa.Array, references: pa.Array | None = None
    ) -> pa.Table:
        """One row per record, in input order, in the columns of ``PARSED_SCHEMA``."""
        parts = self.parse_parts(keys, values, references)
        if not parts:
            return PARSED_SCHEMA.empty_table()
        order = np.empty(len(values), dtype=np.int64)
        numbers = np.concatenate([rows.to_numpy() for rows, _ in parts])
        order[numbers] = np.arange(len(values))
        return pa.concat_tables([part for _, part in parts]).take(pa.array(order))

    def parse_parts(
        self, keys: pa.Array, values: pa.Array, references: pa.Array | None = None
    ) -> list[tuple[pa.Array, pa.Table]]:
        """The records parsed in parts, each with the row numbers (int64) of the records it holds.

        Every record is in exactly one part; parts are single-chunk tables of
        ``PARSED_SCHEMA``. Cheaper than ``parse`` when the order of rows does not matter.
        ``references``: the records' timestamps (an Arrow timestamp array), if known.
        """
        count = len(values)
        keys, values = as_binary(keys), as_binary(values)
        refs = _reference_micros(references)
        # Lines kept without their own time take their record's: only when every record has one.
        whole_refs = references is None or references.null_count == 0
        plain = usual(values)
        rows = pa.array(np.arange(count, dtype=np.int64))
        plain_keys, plain_values = keys, values
        if plain is not None:
            rows, plain_keys = rows.filter(plain), keys.filter(plain)
            plain_values = values.filter(plain)
        stripped = pc.ascii_trim_whitespace(plain_values.view(pa.string()))
        codes = self._format_codes(plain_keys, stripped).to_numpy(zero_copy_only=False)
        # The lines grouped by format with one take; each format's lines are then a slice.
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(self._names) + 1)).tolist()
        if bounds[-1] > 0:
            taken = pa.array(order[: bounds[-1]])
            rows, stripped = rows.take(taken), stripped.take(taken)
        parts: list[tuple[pa.Array, pa.Table]] = []
        for code, name in enumerate(self._names):
            start, stop = bounds[code], bounds[code + 1]
            if stop > start:
                chosen_rows = rows.slice(start, stop - start)
                chosen_refs = refs[chosen_rows.to_numpy()] if refs is not None else None
                part = self._parse_format(
                    name, chosen_rows, stripped.slice(start, stop - start), chosen_refs, whole_refs
                )
                if part is not None:
                    parts.append(part)
        done = np.zeros(count, dtype=bool)
        for part_rows, _ in parts:
            done[part_rows.to_numpy()] = True
        rest = pa.array(np.flatnonzero(~done))
        if len(rest):
            rest_refs = references.take(rest).to_pylist() if references is not None else None
            table = parse_rows(
                self.lines, keys.take(rest).to_pylist(), values.take(rest).to_pylist(), rest_refs
            )
            parts.append((rest, table))
        return parts

    def _format_codes(self, keys: pa.Array, stripped: pa.Array) -> pa.Array:
        """Per line: the index of its format in ``_names``, or ``_fallback``."""
        encoded = keys.dictionary_encode()
        code_of_key = []
        for key in encoded.dictionary.to_pylist():
            name = self.registry.canonical(key.decode("utf-8", "replace"))
            code_of_key.append(self._names.index(name) if name in self.plans else self._fallback)
        codes = pc.take(pa.array(code_of_key, pa.int64()), encoded.indices)
        detect = self._fallback + 1
        codes = pc.fill_null(codes, detect)
        unkeyed = pc.equal(codes, detect)
        if not pc.any(unkeyed).as_py():
            return codes
        return pc.if_else(unkeyed, self._detected(stripped, unkeyed), codes)

    def _detected(self, stripped: pa.Array, unkeyed: pa.Array) -> pa.Array:
        """Per line: the format detection gives it (as LineParser does), or ``_fallback``."""
        size = len(stripped)
        detected = np.full(size, self._fallback, dtype=np.int64)
        undecided = unkeyed.to_numpy(zero_copy_only=False).copy()
        for group in self.registry.detection:
            if not undecided.any():
                break
            hits = np.zeros(size, dtype=np.int64)
            code = np.full(size, self._fallback, dtype=np.int64)
            for reader in group:
                plan = self.plans.get(reader.name)
                if plan is None and reader.format.kind != TEXT:
                    hit = pc.starts_with(stripped, "{").to_numpy(zero_copy_only=False)
                elif plan is None:  # LineParser decides every line still undecided
                    hit = np.ones(size, dtype=bool)
                else:
                    found = pc.match_substring_regex(stripped, plan.detect)
                    hit = found.to_numpy(zero_copy_only=False)
                    code = np.where(hit, self._names.index(reader.name), code)
                hits += hit
            taken = undecided & (hits > 0)
            detected[taken] = np.where(hits[taken] == 1, code[taken], self._fallback)
            undecided &= ~taken
        return pa.array(detected)

    def _parse_format(
        self, name: str, rows: pa.Array, lines: pa.Array, refs: np.ndarray | None, whole_refs: bool
    ) -> tuple[pa.Array, pa.Table] | None:
        """The lines of ``name``'s format that parse cleanly, with their row numbers (and, if
        the format keeps them and ``whole_refs`` says no record lacks a time, those whose
        timestamp cannot be read)."""
        declared = self.registry.reader(name).format
        matched, group, header_bytes = _fields(self.plans[name], lines)
        if matched is not None:
            keep = pa.array(matched)
            rows, lines, header_bytes = rows.filter(keep), lines.filter(keep), header_bytes[matched]
            group = {key: column.filter(keep) for key, column in group.items()}
            refs = refs[matched] if refs is not None else None
        if len(rows) == 0:
            return None
        stamps = group[declared.timestamp_field]
        micros, timed = read_column(declared.timestamp, stamps, reference_us=refs, year=self.year)
        pid = group.get(declared.columns.get("pid", ""))
        if pid is None:
            pid_ok = np.ones(len(rows), dtype=bool)
        else:
            pid_ok = pc.match_substring_regex(pid, _PID).to_numpy(zero_copy_only=False)
        valid = timed & pid_ok
        inferred = np.zeros(len(rows), dtype=bool)
        kept = declared.timestamp_on_error != UnreadableTimestamp.QUARANTINE
        if kept and whole_refs and not timed.all():
            inferred = self._unreadable(declared, stamps, ~timed & pid_ok, refs)
            micros, timed = self._kept_times(declared, micros, timed, inferred, refs)
            valid |= inferred
        if not valid.all():
            keep = pa.array(valid)
            rows, lines, micros = rows.filter(keep), lines.filter(keep), micros[valid]
            header_bytes, inferred, timed = header_bytes[valid], inferred[valid], timed[valid]
            group = {key: column.filter(keep) for key, column in group.items()}
        if len(rows) == 0:
            return None
        stamped = pa.array(micros, pa.int64(), mask=~timed)
        return rows, self._table(declared, lines, group, stamped, header_bytes, inferred)

    def _unreadable(
        self, declared: LogFormat, stamps: pa.Array, candidates: np.ndarray, refs: np.ndarray | None
    ) -> np.ndarray:
        """Which of the ``candidates`` (texts the column reader did not read) the per-line
        reader cannot read either: the column reader leaves it a few that it can (a time a
        clock change skipped), which LineParser then parses."""
        unreadable = np.zeros(len(candidates), dtype=bool)
        reader = declared.timestamp
        places = np.flatnonzero(candidates)
        texts = stamps.take(pa.array(places)).to_pylist()
        for at, text in zip(places.tolist(), texts, strict=True):
            if not text or not reader.matches(text):
                unreadable[at] = True
                continue
            reference = _naive(int(refs[at])) if refs is not None else None
            try:
                reader.read(text, reference=reference, year=self.year)
            except (ValueError, OverflowError):
                unreadable[at] = True
        return unreadable

    @staticmethod
    def _kept_times(
        declared: LogFormat,
        micros: np.ndarray,
        timed: np.ndarray,
        inferred: np.ndarray,
        refs: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The times of the lines kept without their own: their record's, or none."""
        if declared.timestamp_on_error == UnreadableTimestamp.RECORD_TIME and refs is not None:
            return np.where(inferred, refs, micros), timed | inferred
        return micros, timed

    def _table(
        self,
        declared: LogFormat,
        lines: pa.Array,
        group: dict[str, pa.Array],
        stamps: pa.Array,
        header_bytes: np.ndarray,
        inferred: np.ndarray,
    ) -> pa.Table:
        """The rows of parsed lines: ``stamps`` their times (int64 µs, null for none),
        ``inferred`` which of them are not the lines' own."""
        size, columns = len(lines), declared.columns
        plan = self.plans[declared.name]
        if plan.message is None:
            message = pc.fill_null(pc.ascii_trim_whitespace(group[columns["message"]]), "")
        else:
            message = messages_after(lines, header_bytes + plan.message.skip)
        raw_level = _present(group.get(columns.get("level", "")), size)
        none = pa.nulls(size, pa.string())
        return pa.table(
            [
                pa.array(np.ones(size, dtype=np.int32)),
                pa.array([declared.name] * size, pa.string()),
                stamps.cast(PARSED_SCHEMA.field("timestamp").type),
                pa.array(inferred),
                _levels(raw_level),
                raw_level,
                _trimmed(group.get(columns.get("component", "")), size),
                _present(group.get(columns.get("host", "")), size),
                _pids(group.get(columns.get("pid", "")), size),
                _trimmed(group.get(columns.get("thread", "")), size),
                message,
                self.templates(declared.name, message),
                _field_map(declared.extra_fields, group, size),
                none,
                none,
                none,
            ],
            schema=PARSED_SCHEMA,
        )


def _fields(
    plan: BatchPlan, lines: pa.Array
) -> tuple[np.ndarray | None, dict[str, pa.Array], np.ndarray]:
    """The fields of each line as ``plan`` reads them, where each header ends (bytes), and which
    lines match (None: all)."""
    matched, group, head_bytes = extract(lines, plan.heads[0], HEAD)
    split = plan.split
    if split is None and len(plan.heads) == 1:
        return (None if matched.all() else matched), group, head_bytes
    line_bytes = LineBytes.of(lines)
    if line_bytes is None:  # every line is empty: none matched
        return np.zeros(len(lines), dtype=bool), group, head_bytes
    starts = line_bytes.starts + head_bytes
    for head in plan.heads[1:]:
        piece_matched, piece_group, piece_bytes = extract(line_bytes.rest(starts), head, HEAD)
        matched &= piece_matched
        group |= piece_group
        starts = starts + piece_bytes
    if split is None:
        return (None if matched.all() else matched), group, starts - line_bytes.starts
    found = pc.find_substring_regex(line_bytes.rest(starts), split.search)
    found = found.to_numpy(zero_copy_only=False).astype(np.int64)
    present = found >= 0
    field_bytes = np.maximum(found, 0)
    value = line_bytes.views(starts, field_bytes)
    if split.trim:
        value = pc.utf8_rtrim_whitespace(value)
    if not split.optional:
        matched &= present
        group[split.field] = value
        return (
            (None if matched.all() else matched),
            group,
            starts - line_bytes.starts + (field_bytes + len(split.delimiter)),
        )
    group[split.field] = pc.if_else(pa.array(present), value, pa.scalar(None, pa.string()))
    tail_starts = starts + np.where(present, found + len(split.delimiter), 0)
    assert split.tail is not None
    tail_matched, tail_group, tail_bytes = extract(line_bytes.rest(tail_starts), split.tail, TAIL)
    group |= tail_group
    matched &= tail_matched
    header = tail_starts - line_bytes.starts + tail_bytes
    return (None if matched.all() else matched), group, header


def _naive(micros: int) -> datetime:
    """Microseconds since the epoch as a naive UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)


def _reference_micros(references: pa.Array | None) -> np.ndarray | None:
    """The records' timestamps as microseconds since the epoch (int64); None if unknown."""
    if references is None:
        return None
    if isinstance(references, pa.ChunkedArray):
        references = references.combine_chunks()
    stamps = references.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return np.asarray(stamps.to_numpy(zero_copy_only=False), dtype=np.int64)


def _present(raw: pa.Array | None, size: int) -> pa.Array:
    """Values as written, null where absent or empty."""
    if raw is None:
        return pa.nulls(size, pa.string())
    return pc.if_else(pc.equal(raw, ""), pa.scalar(None, pa.string()), raw)


def _trimmed(raw: pa.Array | None, size: int) -> pa.Array:
    if raw is None:
        return pa.nulls(size, pa.string())
    return _present(pc.ascii_trim_whitespace(raw), size)


def _levels(raw: pa.Array) -> pa.Array:
    """Normalised level names (None where the line has none), computed once per distinct one."""
    encoded = raw.dictionary_encode()
    names = [normalise_level(value) if value else None for value in encoded.dictionary.to_pylist()]
    return pc.take(pa.array(names, pa.string()), encoded.indices)


def _pids(raw: pa.Array | None, size: int) -> pa.Array:
    if raw is None:
        return pa.nulls(size, pa.int64())
    return pc.cast(_present(raw, size), pa.int64())


def _field_map(names: tuple[str, ...], group: dict[str, pa.Array], size: int) -> pa.Array:
    """The ``fields`` map of each row: its other named fields that are present, in order."""
    if not names:
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(np.zeros(size + 1, np.int32)), empty, empty)
    columns = [group[name] for name in names]
    present = np.stack(
        [pc.fill_null(pc.not_equal(c, ""), False).to_numpy(zero_copy_only=False) for c in columns],
        axis=1,
    )
    offsets = np.zeros(size + 1, dtype=np.int32)
    np.cumsum(present.sum(axis=1), out=offsets[1:])
    flat = np.flatnonzero(present.ravel())
    row, column = flat // len(names), flat % len(names)
    values = pa.concat_arrays([c.cast(pa.string()) for c in columns]).take(
        pa.array(column * size + row)
    )
    keys = pa.array(list(names), pa.string()).take(pa.array(column))
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)
