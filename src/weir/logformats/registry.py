"""The registered formats: the shipped ones and the users' own, by name and for detection.

``FormatRegistry.builtin()`` holds the formats shipped in ``weir/logformats/formats/``;
``with_files`` adds format files (a file, or every ``*.toml`` in a directory). A key names a
format by its name or an alias, in any case. Loading checks every sample line of every format
against the fields it declares, so a registry that loaded is one whose formats parse their own
samples.

Detection (a line without a key) offers the line to the formats that take part in it
(``detect = true``), most specific pattern first (``regex_items.specificity``): the first that
matches reads it, unless another format of the same specificity matches it too, which makes the
line ambiguous (it is quarantined naming both; give such lines a key).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Protocol

from weir.logformats.declaration import JSON, FormatFileError, LogFormat, load_file, load_text
from weir.logformats.json_lines import JsonLines
from weir.logformats.model import ParsedLine, Quarantined
from weir.logformats.text_lines import TextLines

FORMAT_SUFFIX = ".toml"


class LineReader(Protocol):
    name: str
    format: LogFormat

    def matches(self, line: str) -> bool: ...

    def parse(
        self, line: str, year: int, reference: datetime | None = None
    ) -> ParsedLine | Quarantined | None: ...


def reader_of(declared: LogFormat) -> LineReader:
    return JsonLines(declared) if declared.kind == JSON else TextLines(declared)


@dataclass(frozen=True, eq=False)
class FormatRegistry:
    """Formats by name; immutable (``with_files`` returns a new registry) and thread-safe."""

    readers: Mapping[str, LineReader]
    aliases: Mapping[str, str]

    @classmethod
    def of(cls, formats: Iterable[LogFormat]) -> FormatRegistry:
        """A registry of ``formats``; raises FormatFileError when two share a name or alias,
        or a sample does not parse as it says."""
        readers: dict[str, LineReader] = {}
        aliases: dict[str, str] = {}
        for declared in formats:
            for key in (declared.name, *declared.aliases):
                if key in readers or key in aliases:
                    owner = aliases.get(key, key)
                    where = readers[owner].format.origin
                    raise FormatFileError(
                        declared.origin, 1, f"{key!r} already names the format {owner} ({where})"
                    )
            readers[declared.name] = reader_of(declared)
            aliases.update({alias: declared.name for alias in declared.aliases})
        registry = cls(readers, aliases)
        for reader in readers.values():
            registry.check_samples(reader)
        return registry

    @classmethod
    def builtin(cls) -> FormatRegistry:
        return _builtin()

    def with_files(self, paths: Iterable[Path]) -> FormatRegistry:
        """This registry plus the formats in ``paths`` (files, or directories of ``*.toml``)."""
        added = [load_file(path) for path in format_files(paths)]
        return FormatRegistry.of([r.format for r in self.readers.values()] + added)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.readers))

    def __iter__(self) -> Iterator[LogFormat]:
        return (self.readers[name].format for name in self.names)

    def canonical(self, key: str) -> str | None:
        """The format ``key`` names (case-insensitive, aliases allowed), or None."""
        name = key.strip().lower()
        name = self.aliases.get(name, name)
        return name if name in self.readers else None

    def reader(self, name: str) -> LineReader:
        return self.readers[name]

    @property
    def detection(self) -> tuple[tuple[LineReader, ...], ...]:
        """The formats taking part in detection, grouped by specificity, most specific first."""
        return _detection_groups(self)

    def check_samples(self, reader: LineReader) -> None:
        """Raises FormatFileError at the first sample that does not parse as it says."""
        for sample in reader.format.samples:
            problem = sample_problem(reader, sample.line, sample.expected)
            if problem is not None:
                raise FormatFileError(reader.format.origin, sample.at_line, problem)


@cache
def _detection_groups(registry: FormatRegistry) -> tuple[tuple[LineReader, ...], ...]:
    taking_part = [r for r in registry.readers.values() if r.format.detect]
    ordered = sorted(taking_part, key=lambda r: (-r.format.specificity, r.name))
    return tuple(
        tuple(group) for _, group in itertools.groupby(ordered, key=lambda r: r.format.specificity)
    )


def format_files(paths: Iterable[Path]) -> list[Path]:
    """Every format file ``paths`` name: files as given, directories' ``*.toml`` sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob(f"*{FORMAT_SUFFIX}")))
        elif path.exists():
            found.append(path)
        else:
            raise FormatFileError(str(path), 1, "no such file or directory")
    return found


@cache
def _builtin() -> FormatRegistry:
    shipped = files("weir.logformats").joinpath("formats")
    declared = [
        load_text(entry.read_text(encoding="utf-8"), f"weir/logformats/formats/{entry.name}")
        for entry in sorted(shipped.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(FORMAT_SUFFIX)
    ]
    return FormatRegistry.of(declared)


def sample_problem(reader: LineReader, line: str, expected: Mapping[str, object]) -> str | None:
    """What is wrong with ``reader``'s result for a sample line, or None if it is as expected.

    A yearless timestamp takes its year from the expected one (it is the sample's reference).
    ``quarantined = "reason"`` expects the line to be quarantined with that reason.
    """
    stamp = expected.get("timestamp")
    reference = stamp if isinstance(stamp, datetime) else None
    result = reader.parse(line, reference.year if reference else 2000, reference)
    wanted_reason = expected.get("quarantined")
    if wanted_reason is not None:
        outcome = result.reason.value if isinstance(result, Quarantined) else "parsed"
        if outcome == wanted_reason:
            return None
        return f"sample: expected {wanted_reason}, got {outcome}"
    if result is None:
        return f"sample line does not match the {reader.name} pattern"
    if isinstance(result, Quarantined):
        return f"sample line is quarantined ({result.reason.value}): {result.detail}"
    for key, value in expected.items():
        got: object = result.fields if key == "fields" else getattr(result, key)
        if key == "timestamp" and isinstance(value, str) and isinstance(got, datetime):
            got = got.isoformat()
        if got != value:
            return f"sample: {key} is {got!r}, expected {value!r}"
    return None
