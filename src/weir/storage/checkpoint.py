"""Small text checkpoint files, written atomically (temp file, fsync, rename, fsync directory).

Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`) use
Kafka's format: a version line `0`, a count line, then `topic partition offset` per line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from weir.durable import write_atomically

VERSION = 0
TopicPartition = tuple[str, int]


def read_lines(path: Path) -> list[str] | None:
    """The file's lines, or None if it does not exist."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None


def parse_versioned(path: Path, fields: int) -> list[list[str]]:
    """Entries of a `version / count / entry...` file; ValueError if malformed."""
    lines = read_lines(path)
    if lines is None:
        return []
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError(f"{path}: unknown checkpoint format")
    count = int(lines[1])
    entries = [line.split() for line in lines[2 : 2 + count]]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise ValueError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_versioned(path: Path, entries: list[tuple[object, ...]]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines += [" ".join(str(field) for field in entry) for entry in entries]
    write_atomically(path, lines)


class OffsetCheckpointFile:
    """Offsets per topic-partition for a whole data directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        return {(t, int(p)): int(o) for t, p, o in parse_versioned(self.path, 3)}

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        write_versioned(self.path, [(t, p, o) for (t, p), o in sorted(offsets.items())])
