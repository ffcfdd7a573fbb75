"""Durable small-file writes: temp file, fsync, rename, fsync the directory.

Used for checkpoints and the embedded metadata store, where a crash must leave either the old
file or the new one, never a torn one. A write that fails (a full disk) removes its temp file and
leaves the old file as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from weir import diskio

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(
    path: Path, lines: Iterable[str], kind: str = diskio.CHECKPOINT, mode: int = 0o644
) -> None:
    """`mode`: the new file's permissions (0o600 for a file only its owner may read)."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    write_bytes_atomically(path, data, kind, mode)


def write_bytes_atomically(
    path: Path, data: bytes, kind: str = diskio.CHECKPOINT, mode: int = 0o644, *, sync: bool = True
) -> None:
    """`data` to `path` through a temp file renamed into place. Without `sync` neither the file
    nor its directory is fsynced here: a crash can then leave the file torn or missing."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        temp.unlink(missing_ok=True)  # a leftover would keep its old permissions
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            diskio.write_all(fd, data, kind)
            if sync:
                diskio.sync(fd, kind)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(path.parent)
