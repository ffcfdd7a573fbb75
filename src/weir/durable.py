"""Durable small-file writes: temp file, fsync, rename, fsync the directory.

Used for checkpoints and the embedded metadata store, where a crash must leave either the old
file or the new one, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    temp = path.with_name(path.name + TEMP_SUFFIX)
    with open(temp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(path.parent)
