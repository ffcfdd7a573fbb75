"""Grok-style patterns: ``%{NAME}`` and ``%{NAME:field}`` expanded into one Python regex.

``NAME`` is an entry of the pattern library (``grok_patterns.toml``, shipped with weir, plus any
``[patterns]`` a format file declares); ``%{NAME:field}`` captures what it matches as the named
field. Oniguruma's ``(?<field>...)`` is accepted for ``(?P<field>...)``. Expansion is pure text
substitution; compiling and checking the result is the caller's (see ``declaration``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

_REFERENCE = re.compile(r"%\{(?P<name>[^}:]*)(?::(?P<field>[^}]*))?\}")
_ONIGURUMA_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z_])")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GROUP_NAME = re.compile(r"(?<!\\)\(\?P<([^>]*)>")
MAX_DEPTH = 20  # library entries that use entries that use ...


class GrokError(ValueError):
    """A pattern that cannot be expanded; ``column`` is where in the pattern (1-based)."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True, slots=True)
class Expanded:
    """A pattern's regex and its fields, in order of appearance."""

    regex: str
    fields: tuple[str, ...]


@cache
def library() -> Mapping[str, str]:
    """The shipped pattern library: name -> regex (which may use other names)."""
    text = files("weir.logformats").joinpath("grok_patterns.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def expand(pattern: str, extra: Mapping[str, str] | None = None) -> Expanded:
    """``pattern`` with every ``%{...}`` replaced; raises GrokError for an unknown name, a bad
    field name, or a field named twice."""
    patterns = {**library(), **(extra or {})}
    regex = _expand(pattern, patterns, depth=0, column=None)
    regex = _ONIGURUMA_GROUP.sub("(?P<", regex)
    fields = tuple(_GROUP_NAME.findall(regex))
    seen: set[str] = set()
    for name in fields:
        if not _FIELD_NAME.match(name):
            raise GrokError(f"invalid field name {name!r}", _column_of(pattern, name))
        if name in seen:
            raise GrokError(f"field {name!r} is named twice", _column_of(pattern, name, nth=2))
        seen.add(name)
    return Expanded(regex, fields)


def _expand(text: str, patterns: Mapping[str, str], *, depth: int, column: int | None) -> str:
    if depth > MAX_DEPTH:
        raise GrokError(f"patterns nest deeper than {MAX_DEPTH} levels", column or 1)
    out, at = [], 0
    for reference in _REFERENCE.finditer(text):
        where = column if column is not None else reference.start() + 1
        name, field = reference.group("name"), reference.group("field")
        if name not in patterns:
            raise GrokError(f"unknown pattern %{{{name}}}", where)
        body = _expand(patterns[name], patterns, depth=depth + 1, column=where)
        if field is not None and not _FIELD_NAME.match(field):
            raise GrokError(f"invalid field name {field!r} in %{{{name}:{field}}}", where)
        out.append(text[at : reference.start()])
        out.append(f"(?P<{field}>{body})" if field else f"(?:{body})")
        at = reference.end()
    out.append(text[at:])
    return "".join(out)


def _column_of(pattern: str, field: str, *, nth: int = 1) -> int:
    """Where the ``nth`` mention of ``field`` is in ``pattern`` (1-based; 1 if not found)."""
    at = -1
    for _ in range(nth):
        found = [
            i
            for i in (pattern.find(f":{field}}}", at + 1), pattern.find(f"<{field}>", at + 1))
            if i >= 0
        ]
        if not found:
            return max(at, 0) + 1
        at = min(found)
    return at + 1
