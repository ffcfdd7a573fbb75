"""Log formats declared in TOML files: loading, checking, and the errors that name file and line.

A format file declares one format::

    name = "myapp"                       # lower-case letters, digits, "-" and "_"
    aliases = ["my-app"]                 # other keys that name it (optional)
    description = "what writes these lines"
    pattern = '%{TIMESTAMP_ISO8601:timestamp} %{LOGLEVEL:level} %{GREEDYDATA:message}'
    # or: regex = '(?P<timestamp>...) ...'   (a plain Python regex with named groups)
    detect = true                        # offered to lines that have no key (default true)

    [patterns]                           # extra building blocks for this file's pattern
    MYID = 'id-\\d+'

    [timestamp]
    field = "timestamp"                  # the field holding it (default "timestamp")
    format = "ISO8601"                   # or a strptime format, "UNIX", "UNIX_MS", or a list
    timezone = "Europe/Paris"            # the zone of times written without an offset
    on_error = "quarantine"              # a line whose timestamp cannot be read: quarantined;
                                         # "record_time": kept, timed by its record; "null":
                                         # kept without a time (see UnreadableTimestamp)

    [fields]                             # which field fills which column, when not named alike
    level = "severity"                   # columns: level component host message pid thread

    [mining]                             # template mining (see weir.logformats.mining)
    masking = [{ regex = 'id-\\d+', mask = "ID" }]   # "id-17" becomes "<ID>"; mask "*": "<*>"
    similarity = 0.8                     # Drain's similarity threshold, in (0, 1]
    depth = 5                            # Drain's tree depth, at least 3
    extra_delimiters = ["="]             # split tokens there too, besides whitespace
    default_masking = true               # then mask numbers, addresses, ids and paths

    [[samples]]                          # lines and the fields they must give
    line = '2024-03-01T12:00:00Z INFO started'
    timestamp = 2024-03-01T12:00:00
    level = "INFO"
    message = "started"

``kind = "json"`` declares a JSON-lines format instead of a pattern: its ``[json]`` table
lists, per column, the keys to look for (see ``weir.logformats.json_lines``); its
``[timestamp]`` table may set ``on_error`` only (the timestamp is read as JSON lines write it).

Everything is checked when the file is loaded, before any line is parsed: the TOML itself, the
pattern (unknown ``%{NAME}``, a field named twice, a regex that does not compile), the timestamp
format, the columns' fields, and every sample. A problem raises FormatFileError, whose message
starts with ``file:line:``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from weir.logformats.grok import GrokError, expand
from weir.logformats.regex_items import specificity
from weir.logformats.timestamps import TimestampFormatError, TimestampReader


class UnreadableTimestamp(StrEnum):
    """What becomes of a line whose timestamp field is missing or cannot be read
    (``[timestamp] on_error``). Kept lines have ``timestamp_inferred`` set."""

    QUARANTINE = "quarantine"  # quarantined as bad-timestamp
    RECORD_TIME = "record_time"  # kept, with its record's timestamp (none without a record)
    NULL = "null"  # kept, with no timestamp


COLUMNS = ("level", "component", "host", "message", "pid", "thread")
TEXT, JSON = "text", "json"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
_TOP_KEYS = {"name", "aliases", "description", "kind", "pattern", "regex", "detect",
             "patterns", "timestamp", "fields", "mining", "samples", "json"}  # fmt: skip
_SAMPLE_KEYS = {"line", "timestamp", "level", "raw_level", "component", "host", "message",
                "template", "pid", "thread", "fields", "quarantined",
                "timestamp_inferred"}  # fmt: skip
_MINING_KEYS = {"masking", "similarity", "depth", "extra_delimiters", "default_masking"}
FLAGS = re.ASCII | re.DOTALL


def anchored(regex: str) -> str:
    """``regex`` as a format applies it: from the line's start to its end."""
    return f"(?:{regex})\\Z"


class FormatFileError(ValueError):
    """A format file that cannot be used; the message starts with ``path:line:``."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True)
class MaskRule:
    """A masking instruction for template mining: what ``regex`` matches becomes ``<mask>``."""

    regex: str
    mask: str


@dataclass(frozen=True, slots=True)
class Mining:
    """How a format's messages are mined into templates."""

    masking: tuple[MaskRule, ...] = ()  # the format's rules, applied before the default ones
    similarity: float = 0.8
    depth: int = 5
    extra_delimiters: tuple[str, ...] = ()
    default_masking: bool = True


_DEFAULT_MINING = Mining()


@dataclass(frozen=True, slots=True)
class Sample:
    """A sample line and the fields it must give (``expected``), from the format file."""

    line: str
    expected: Mapping[str, Any]
    at_line: int


@dataclass(frozen=True)
class LogFormat:
    """One declared format, checked and compiled. Immutable and thread-safe.

    ``columns`` maps each warehouse column to the field that fills it; fields not in it go to
    the ``fields`` map. ``specificity`` orders detection (see ``regex_items.specificity``).
    """

    name: str
    kind: str
    origin: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    pattern: str = ""
    regex: str = ""
    fields: tuple[str, ...] = ()
    timestamp_field: str = "timestamp"
    timestamp: TimestampReader = field(default_factory=lambda: TimestampReader(()))
    timestamp_on_error: UnreadableTimestamp = UnreadableTimestamp.QUARANTINE
    columns: Mapping[str, str] = field(default_factory=dict)
    json_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    detect: bool = True
    specificity: int = 0
    mining: Mining = Mining()
    samples: tuple[Sample, ...] = ()
    compiled: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @property
    def extra_fields(self) -> tuple[str, ...]:
        """Named fields that go to the ``fields`` map (not a column, not the timestamp)."""
        taken = {*self.columns.values(), self.timestamp_field}
        return tuple(name for name in self.fields if name not in taken)


class _Source:
    """A format file's text, for finding the line of a key."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, message: str, key: str | None = None, table: str | None = None,
              nth: int = 1) -> FormatFileError:  # fmt: skip
        return FormatFileError(self.path, self.line_of(key, table, nth), message)

    def line_of(self, key: str | None, table: str | None = None, nth: int = 1) -> int:
        """The line where ``key`` is set (in ``[table]``, or the ``nth`` ``[[table]]``)."""
        if key is None:
            return 1
        inside, seen = table is None, 0
        for number, text in enumerate(self.lines, 1):
            stripped = text.strip()
            if stripped.startswith("["):
                header = stripped.strip("[]").strip()
                if table is not None and header == table:
                    seen += 1
                    inside = seen == nth
                elif not header.startswith(f"{table}."):
                    inside = False
                continue
            if inside and re.match(rf"{re.escape(key)}\s*=", stripped):
                return number
        return 1


def load_file(path: Path) -> LogFormat:
    """The format declared in ``path``; raises FormatFileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise FormatFileError(str(path), 1, f"cannot read the file: {error}") from error
    return load_text(text, str(path))


def load_text(text: str, origin: str) -> LogFormat:
    """The format declared by the TOML ``text`` (``origin`` names it in errors)."""
    source = _Source(origin, text)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        raise FormatFileError(origin, int(line.group(1)) if line else 1, str(error)) from error
    unknown = set(document) - _TOP_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise source.error(f"unknown setting {key!r}", key)
    name = _name(document, source)
    kind = document.get("kind", TEXT)
    if kind not in (TEXT, JSON):
        raise source.error(f"kind must be {TEXT!r} or {JSON!r}, not {kind!r}", "kind")
    common: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "origin": origin,
        "aliases": _aliases(document, source),
        "description": str(document.get("description", "")),
        "detect": _flag(document, "detect", source),
        "mining": _mining(document.get("mining", {}), source),
    }
    if kind == JSON:
        built = _json_format(document, source, common)
    else:
        built = _text_format(document, source, common)
    return _with_samples(built, document, source)


def _name(document: Mapping[str, Any], source: _Source) -> str:
    name = document.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise source.error(
            "name must be lower-case letters, digits, '-' and '_' (e.g. name = \"myapp\")", "name"
        )
    return name


def _aliases(document: Mapping[str, Any], source: _Source) -> tuple[str, ...]:
    aliases = document.get("aliases", [])
    if not isinstance(aliases, list) or not all(
        isinstance(a, str) and _NAME.match(a.lower()) for a in aliases
    ):
        raise source.error("aliases must be a list of names", "aliases")
    return tuple(a.lower() for a in aliases)


def _flag(document: Mapping[str, Any], key: str, source: _Source) -> bool:
    value = document.get(key, True)
    if not isinstance(value, bool):
        raise source.error(f"{key} must be true or false", key)
    return value


def _text_format(document: Mapping[str, Any], source: _Source, common: dict[str, Any]) -> LogFormat:
    regex, fields, key = _regex(document, source)
    try:
        compiled = re.compile(anchored(regex), FLAGS)
    except re.error as error:
        raise source.error(f"{key} does not compile: {error}", key) from error
    settings = document.get("timestamp", {})
    if not isinstance(settings, dict):
        raise source.error("[timestamp] must be a table", "timestamp")
    stamp_field = settings.get("field", "timestamp")
    if stamp_field not in fields:
        raise source.error(
            f"the timestamp field {stamp_field!r} is not a field of the pattern "
            f"(fields: {', '.join(fields) or 'none'})",
            "field" if "field" in settings else key,
            "timestamp" if "field" in settings else None,
        )
    columns = _columns(document.get("fields", {}), fields, source)
    return LogFormat(
        **common,
        pattern=str(document.get(key, "")),
        regex=regex,
        fields=fields,
        timestamp_field=stamp_field,
        timestamp=_timestamp_reader(settings, source),
        timestamp_on_error=_on_error(settings, source),
        columns=columns,
        specificity=specificity(regex),
        compiled=compiled,
    )


def _regex(document: Mapping[str, Any], source: _Source) -> tuple[str, tuple[str, ...], str]:
    if ("pattern" in document) == ("regex" in document):
        raise source.error("set exactly one of pattern (Grok) and regex (plain regex)", "name")
    key = "pattern" if "pattern" in document else "regex"
    text = document[key]
    if not isinstance(text, str) or not text:
        raise source.error(f"{key} must be a non-empty string", key)
    extra = document.get("patterns", {})
    if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
        raise source.error("[patterns] must map names to regex strings", "patterns")
    try:
        expanded = expand(text, extra) if key == "pattern" else expand(text, {})
    except GrokError as error:
        raise source.error(f"{key}, column {error.column}: {error}", key) from error
    return expanded.regex, expanded.fields, key


def _columns(table: Any, fields: tuple[str, ...], source: _Source) -> dict[str, str]:
    if not isinstance(table, dict):
        raise source.error("[fields] must be a table", "fields")
    columns = {column: column for column in COLUMNS if column in fields}
    for column, name in table.items():
        if column not in COLUMNS:
            raise source.error(
                f"unknown column {column!r} (columns: {', '.join(COLUMNS)})", column, "fields"
            )
        if name not in fields:
            raise source.error(
                f"{column} = {name!r}: no such field in the pattern (fields: {', '.join(fields)})",
                column,
                "fields",
            )
        columns[column] = name
    if "message" not in columns:
        raise source.error("the pattern has no message field (name one in [fields])", "name")
    return columns


def _timestamp_reader(settings: Mapping[str, Any], source: _Source) -> TimestampReader:
    formats = settings.get("format", settings.get("formats"))
    key = "format" if "format" in settings else "formats"
    if isinstance(formats, str):
        formats = [formats]
    if not isinstance(formats, list) or not formats or not all(isinstance(f, str) for f in formats):
        raise source.error(
            "[timestamp] needs format = a strptime format, ISO8601, UNIX or UNIX_MS (or a list)",
            key if key in settings else "timestamp",
            "timestamp" if key in settings else None,
        )
    try:
        return TimestampReader.of(formats, settings.get("timezone"))
    except TimestampFormatError as error:
        bad_key = "timezone" if "zone" in str(error) else key
        raise source.error(f"[timestamp] {error}", bad_key, "timestamp") from error


def _on_error(settings: Mapping[str, Any], source: _Source) -> UnreadableTimestamp:
    value = settings.get("on_error", UnreadableTimestamp.QUARANTINE.value)
    try:
        return UnreadableTimestamp(value)
    except ValueError:
        choices = ", ".join(repr(choice.value) for choice in UnreadableTimestamp)
        raise source.error(
            f"[timestamp] on_error must be one of {choices}, not {value!r}", "on_error", "timestamp"
        ) from None


def _json_format(document: Mapping[str, Any], source: _Source, common: dict[str, Any]) -> LogFormat:
    table = document.get("json", {})
    if not isinstance(table, dict):
        raise source.error("[json] must be a table", "json")
    keys: dict[str, tuple[str, ...]] = {}
    for column, names in table.items():
        if column not in (*COLUMNS, "timestamp"):
            raise source.error(f"unknown column {column!r}", column, "json")
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise source.error(f"{column} must be a key or a list of keys", column, "json")
        keys[column] = tuple(names)
    for needed in ("timestamp", "message"):
        if needed not in keys:
            raise source.error(f"[json] must name the keys of the {needed}", "json")
    settings = document.get("timestamp", {})
    if not isinstance(settings, dict):
        raise source.error("[timestamp] must be a table", "timestamp")
    for key in sorted(set(settings) - {"on_error"}):
        raise source.error(
            f"[timestamp] {key} is not a setting of a JSON-lines format (only on_error is; "
            "[json] timestamp names its keys)",
            key,
            "timestamp",
        )
    on_error = _on_error(settings, source)
    return LogFormat(**common, json_keys=keys, timestamp_on_error=on_error, specificity=1 << 20)


def _mining(table: Any, source: _Source) -> Mining:
    if not isinstance(table, dict):
        raise source.error("[mining] must be a table", "mining")
    unknown = set(table) - _MINING_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise source.error(f"unknown [mining] setting {key!r}", key, "mining")
    masking = table.get("masking", [])
    if not isinstance(masking, list):
        raise source.error("masking must be a list of {regex, mask}", "masking", "mining")
    rules = tuple(_mask_rule(rule, source) for rule in masking)
    similarity = table.get("similarity", _DEFAULT_MINING.similarity)
    depth = table.get("depth", _DEFAULT_MINING.depth)
    delimiters = table.get("extra_delimiters", [])
    defaults = table.get("default_masking", True)
    if not isinstance(similarity, int | float) or not 0 < similarity <= 1:
        raise source.error("similarity must be a number in (0, 1]", "similarity", "mining")
    if not isinstance(depth, int) or depth < 3:
        raise source.error("depth must be an integer of at least 3", "depth", "mining")
    if not isinstance(delimiters, list) or not all(isinstance(d, str) and d for d in delimiters):
        raise source.error("extra_delimiters must be a list of strings", "extra_delimiters",
                           "mining")  # fmt: skip
    if not isinstance(defaults, bool):
        raise source.error("default_masking must be true or false", "default_masking", "mining")
    return Mining(rules, float(similarity), depth, tuple(delimiters), defaults)


def _mask_rule(rule: Any, source: _Source) -> MaskRule:
    if not isinstance(rule, dict) or set(rule) != {"regex", "mask"}:
        raise source.error("each masking rule is {regex = '...', mask = 'NAME'}", "masking",
                           "mining")  # fmt: skip
    try:
        re.compile(rule["regex"])
    except re.error as error:
        problem = f"masking regex does not compile: {error}"
        raise source.error(problem, "masking", "mining") from error
    return MaskRule(str(rule["regex"]), str(rule["mask"]))


def _with_samples(built: LogFormat, document: Mapping[str, Any], source: _Source) -> LogFormat:
    raw = document.get("samples", [])
    if not isinstance(raw, list):
        raise source.error("samples must be [[samples]] tables", "samples")
    samples = []
    for number, sample in enumerate(raw, 1):
        if not isinstance(sample, dict) or not isinstance(sample.get("line"), str):
            raise source.error("every [[samples]] needs a line", "line", "samples", number)
        unknown = set(sample) - _SAMPLE_KEYS
        if unknown:
            key = sorted(unknown)[0]
            raise source.error(f"unknown sample setting {key!r}", key, "samples", number)
        at_line = source.line_of("line", "samples", number)
        expected = {k: v for k, v in sample.items() if k != "line"}
        if isinstance(expected.get("timestamp"), datetime) and expected["timestamp"].tzinfo:
            raise source.error(
                "write sample timestamps without an offset (as naive UTC or wall-clock)",
                "timestamp", "samples", number,
            )  # fmt: skip
        samples.append(Sample(sample["line"], expected, at_line))
    return replace(built, samples=tuple(samples))
