"""File tailing: follow files and globs line by line into a topic, across rotation and truncation.

Inputs are configured like Filebeat's, as arrays of tables in the agent's TOML file::

    [[inputs]]
    paths = ["/var/log/app/*.log", "/var/log/syslog"]   # globs; `**` matches subdirectories
    topic = "app-logs"
    key = "apache"          # optional: one key for all lines, in order in one partition

or on the command line, repeatable: `weir agent start --tail '/var/log/app/*.log:app-logs'`.
Each line (without its `\\n` and a trailing `\\r`) becomes one event. Lines go to the topic with its
durability class, `logs` unless `[topics.<topic>]` says otherwise. A line longer than the agent's
`max_event_bytes` is split into events of that size. A last line without its newline waits until
the newline arrives (or, for a rotated file, until the file is closed).

Files are identified by device and inode, not by name, and polled every `tail_poll_ms`:

- rename + create (logrotate's default): the renamed file stays open and is read to its end before
  the new file at the old name, then closed once it has been idle for `tail_close_renamed_ms`;
- copytruncate: a file shorter than the position read, or whose first bytes changed, is read again
  from the start (lines written between the last poll and the truncation are lost, as with every
  tailer; the copy should not match the globs, or it is shipped as a new file);
- new files matching a glob are followed from their first byte.

Positions are kept in `<spool>/tail-positions.json`: per file its path, device, inode, the offset
after the last line stored, and a CRC32C fingerprint of its first bytes (up to 1 KiB), which tells
a reused inode from the file that had it. A position moves only after its lines were stored in the
durable queues, and the file is written only after those queues were flushed, so a restart resumes
exactly where a clean stop left off; after kill -9 it may send again the lines of the last poll,
never skip any. A file rotated while the agent was down is found again by inode in its directory
and read to its end.

Thread-safety (docs/threads.md): one tailer thread owns every followed file; `stop` joins it.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import crc32c

from weir.agent.event import Event
from weir.clock import Clock
from weir.durable import write_atomically

log = logging.getLogger(__name__)

POSITIONS_FILE = "tail-positions.json"
FINGERPRINT_BYTES = 1024
READ_BYTES = 1 << 20

FileId = tuple[int, int]
StoreLines = Callable[[list[Event]], Sequence[Exception | None]]
"""Stores events in the durable queues; one result per event (None when stored)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TailInput:
    """Files to follow (globs) and the topic their lines go to."""

    paths: tuple[str, ...]
    topic: str
    key: bytes | None = None


def parse_tail_flag(text: str) -> TailInput:
    """`GLOB:TOPIC` from the command line (the last colon separates the topic)."""
    pattern, separator, topic = text.rpartition(":")
    if not separator or not pattern or not topic:
        raise ValueError(f"--tail expects GLOB:TOPIC, got {text!r}")
    return TailInput(paths=(pattern,), topic=topic)


def parse_inputs(raw: list[dict[str, object]]) -> tuple[TailInput, ...]:
    """The `[[inputs]]` tables of the config file."""
    inputs = []
    for table in raw:
        unknown = set(table) - {"paths", "topic", "key"}
        if unknown:
            raise ValueError(f"unknown input settings: {', '.join(sorted(unknown))}")
        paths, topic, key = table.get("paths"), table.get("topic"), table.get("key")
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not paths or not isinstance(topic, str) or not topic:
            raise ValueError("every [[inputs]] needs paths (a list of globs) and a topic")
        encoded_key = key.encode() if isinstance(key, str) else None
        inputs.append(TailInput(paths=tuple(map(str, paths)), topic=topic, key=encoded_key))
    return tuple(inputs)


@dataclass(slots=True, kw_only=True)
class Position:
    """Where reading of one file stands; what `tail-positions.json` holds per file."""

    path: str
    device: int
    inode: int
    offset: int = 0
    fingerprint: int = 0
    fingerprint_length: int = 0

    @property
    def file_id(self) -> FileId:
        return (self.device, self.inode)


@dataclass(slots=True, kw_only=True)
class _Followed:
    source: TailInput
    position: Position
    fd: int
    order: int
    rotated: bool = False
    idle_since_ms: int | None = None
    refused: str | None = field(default=None)


def split_lines(data: bytes, max_line: int, *, final: bool) -> Iterator[tuple[bytes, int]]:
    """Complete lines of `data` with the offset just past each; long lines come in pieces.

    A trailing piece without a newline is a line only if `final` (or it reached `max_line`).
    """
    start = 0
    while start < len(data):
        newline = data.find(b"\n", start, start + max_line + 1)
        if newline < 0:
            rest = len(data) - start
            if rest < max_line and not final:
                return
            end = start + min(rest, max_line)
            yield data[start:end], end
            start = end
            continue
        line = data[start:newline]
        yield (line[:-1] if line.endswith(b"\r") else line), newline + 1
        start = newline + 1


class FileTailer:
    """Follows every file matching the inputs' globs; see the module docstring."""

    def __init__(
        self,
        inputs: tuple[TailInput, ...],
        *,
        spool: Path,
        store: StoreLines,
        make_event: Callable[[str, bytes, bytes | None], Event],
        flush: Callable[[], None],
        clock: Clock,
        max_event_bytes: int,
        poll_ms: int = 200,
        close_renamed_ms: int = 5000,
    ) -> None:
        self._inputs = inputs
        self._positions_path = spool / POSITIONS_FILE
        self._store, self._make_event, self._flush = store, make_event, flush
        self._clock = clock
        self._max_event_bytes = max_event_bytes
        self._poll_s = poll_ms / 1000
        self._close_renamed_ms = close_renamed_ms
        self._files: dict[FileId, _Followed] = {}
        self._saved = self._load()
        self._opened = 0
        self._dirty = False
        self.lines_read = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weir-agent-tail", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------

    def open_files(self) -> None:
        """Open the files that match now, and those rotated while the agent was down."""
        self._discover()
        self._resume_rotated()

    def start(self) -> None:
        self.open_files()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._save()
        for followed in self._files.values():
            os.close(followed.fd)
        self._files.clear()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once()
            except OSError as exc:
                log.warning("tailing: %s", exc)
            self._stopping.wait(self._poll_s)

    def poll_once(self) -> None:
        """Find files, read every followed file to its end, then persist the positions."""
        self._discover()
        for followed in sorted(self._files.values(), key=lambda f: (not f.rotated, f.order)):
            if self._stopping.is_set():
                break
            self._read(followed)
        self._close_finished()
        self._save()

    def positions(self) -> list[Position]:
        return [f.position for f in self._files.values()]

    # -- finding files ----------------------------------------------------------------------

    def _discover(self) -> None:
        matched: set[FileId] = set()
        for source in self._inputs:
            for path in self._expand(source):
                file_id = self._follow(source, path)
                if file_id is not None:
                    matched.add(file_id)
        for file_id, followed in self._files.items():
            followed.rotated = file_id not in matched

    @staticmethod
    def _expand(source: TailInput) -> list[str]:
        found: list[str] = []
        for pattern in source.paths:
            found += sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        return found

    def _follow(self, source: TailInput, path: str) -> FileId | None:
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        file_id = (info.st_dev, info.st_ino)
        followed = self._files.get(file_id)
        if followed is not None:
            followed.position.path = path
            return file_id
        return file_id if self._open(source, path, file_id) else None

    def _open(self, source: TailInput, path: str, file_id: FileId) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != file_id:
            os.close(fd)  # replaced between stat and open; the next poll finds the new one
            return False
        position = Position(path=path, device=file_id[0], inode=file_id[1])
        saved = self._saved.pop(file_id, None)
        if saved is not None and _fingerprint_of(fd, saved.fingerprint_length) == saved.fingerprint:
            position = saved
            position.path = path
        self._opened += 1
        self._files[file_id] = _Followed(source=source, position=position, fd=fd,
                                         order=self._opened)  # fmt: skip
        log.info("following %s from offset %d", path, position.offset)
        return True

    def _resume_rotated(self) -> None:
        """Positions of files that no longer match: rotated while the agent was down."""
        for saved in list(self._saved.values()):
            source = self._source_of(saved.path)
            path = _find_inode(Path(saved.path).parent, saved.file_id)
            if source is not None and path is not None and self._open(source, path, saved.file_id):
                self._files[saved.file_id].rotated = True
        self._saved.clear()

    def _source_of(self, path: str) -> TailInput | None:
        for source in self._inputs:
            if any(Path(os.path.expanduser(p)).parent == Path(path).parent for p in source.paths):
                return source
        return None

    # -- reading ----------------------------------------------------------------------------

    def _read(self, followed: _Followed) -> None:
        position = followed.position
        size = os.fstat(followed.fd).st_size
        if size < position.offset or not self._same_start(followed):
            log.info("%s was truncated; reading it again from the start", position.path)
            position.offset = position.fingerprint = position.fingerprint_length = 0
            self._dirty = True
        grew = False
        while position.offset < size and not self._stopping.is_set():
            data = os.pread(followed.fd, min(READ_BYTES, size - position.offset), position.offset)
            final = followed.rotated and self._idle_long_enough(followed)
            consumed = self._store_lines(followed, data, final=final)
            if consumed == 0:
                break
            position.offset += consumed
            grew = self._dirty = True
        self._note_activity(followed, grew)
        if grew and position.fingerprint_length < FINGERPRINT_BYTES:
            position.fingerprint_length = min(position.offset, FINGERPRINT_BYTES)
            position.fingerprint = _fingerprint_of(followed.fd, position.fingerprint_length)

    def _same_start(self, followed: _Followed) -> bool:
        position = followed.position
        if position.fingerprint_length == 0:
            return True
        return _fingerprint_of(followed.fd, position.fingerprint_length) == position.fingerprint

    def _store_lines(self, followed: _Followed, data: bytes, *, final: bool) -> int:
        """Store the complete lines of `data`; returns the bytes whose lines were all stored."""
        source = followed.source
        max_line = max(1, self._max_event_bytes - len(source.key or b""))
        lines = list(split_lines(data, max_line, final=final))
        if not lines:
            return 0
        events = [self._make_event(source.topic, line, source.key) for line, _ in lines]
        results = self._store(events)
        stored = next((i for i, error in enumerate(results) if error is not None), len(lines))
        self.lines_read += stored
        if stored < len(lines):
            self._note_refusal(followed, results[stored])
        else:
            followed.refused = None
        return lines[stored - 1][1] if stored else 0

    def _note_refusal(self, followed: _Followed, error: Exception | None) -> None:
        reason = str(error)
        if followed.refused != reason:
            log.warning("%s: lines refused (%s); retrying", followed.position.path, reason)
        followed.refused = reason

    def _note_activity(self, followed: _Followed, grew: bool) -> None:
        if grew or followed.idle_since_ms is None:
            followed.idle_since_ms = self._clock.monotonic_ms()

    def _idle_long_enough(self, followed: _Followed) -> bool:
        idle_since = followed.idle_since_ms
        now = self._clock.monotonic_ms()
        return idle_since is not None and now - idle_since >= self._close_renamed_ms

    def _close_finished(self) -> None:
        """Close rotated files read to their end and idle for `close_renamed_ms`."""
        for file_id, followed in list(self._files.items()):
            if not followed.rotated or not self._idle_long_enough(followed):
                continue
            if os.fstat(followed.fd).st_size > followed.position.offset:
                continue
            log.info("closing %s (rotated, read to its end)", followed.position.path)
            os.close(followed.fd)
            del self._files[file_id]
            self._dirty = True

    # -- positions file ---------------------------------------------------------------------

    def _save(self) -> None:
        if not self._dirty:
            return
        self._flush()
        entries = [json.dumps(asdict(f.position), sort_keys=True) for f in self._files.values()]
        write_atomically(self._positions_path, ["[" + ",\n".join(entries) + "]"])
        self._dirty = False

    def _load(self) -> dict[FileId, Position]:
        if not self._positions_path.exists():
            return {}
        positions = [Position(**entry) for entry in json.loads(self._positions_path.read_text())]
        return {p.file_id: p for p in positions}


def _fingerprint_of(fd: int, length: int) -> int:
    if length == 0:
        return 0
    data = os.pread(fd, length, 0)
    return int(crc32c.crc32c(data)) if len(data) == length else -1


def _find_inode(directory: Path, file_id: FileId) -> str | None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == file_id and stat.S_ISREG(info.st_mode):
            return entry.path
    return None
