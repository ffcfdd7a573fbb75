"""The dead-letter directory: events the agent accepted but the cluster will never take.

An event goes here when its topic does not exist on a reachable cluster that will not create it:
delivering it again would only loop. Each topic has one append-only file,
`<spool>/dead-letter/<topic>.records`, of records back to back (big-endian):

    length u32 | crc32c u32 (of the payload) | payload (the stored form of `weir.agent.event`)

A batch is written and fsynced before the queue it came from lets it go, so an event is always in
a queue, in the dead-letter file, or both (after a crash in between). `read_dead_letters` reads a
file back (up to the first damaged record). Counts per topic and the last reason are kept since
the agent started; the files keep the events until an operator removes them.

Thread-safety (docs/threads.md): every method takes the instance's lock.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import crc32c

from weir.agent.event import Event, decode_event

DEAD_LETTER_DIRECTORY = "dead-letter"
DEAD_LETTER_SUFFIX = ".records"
_HEAD = struct.Struct(">II")


@dataclass(frozen=True, slots=True)
class DeadLetterStatus:
    topic: str
    events: int
    reason: str
    path: str


class DeadLetters:
    """Appends refused events to per-topic files and counts them."""

    def __init__(self, spool: Path) -> None:
        self.directory = spool / DEAD_LETTER_DIRECTORY
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._reasons: dict[str, str] = {}

    def path(self, topic: str) -> Path:
        return self.directory / f"{topic}{DEAD_LETTER_SUFFIX}"

    def add(self, topic: str, payloads: list[bytes], reason: str) -> None:
        """Append the payloads durably (written and fsynced before this returns)."""
        records = b"".join(_HEAD.pack(len(p), crc32c.crc32c(p)) + p for p in payloads)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.path(topic), "ab") as file:
                file.write(records)
                file.flush()
                os.fsync(file.fileno())
            self._counts[topic] = self._counts.get(topic, 0) + len(payloads)
            self._reasons[topic] = reason

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def statuses(self) -> list[DeadLetterStatus]:
        with self._lock:
            return [
                DeadLetterStatus(topic, count, self._reasons[topic], str(self.path(topic)))
                for topic, count in sorted(self._counts.items())
            ]


def read_dead_letters(path: Path, topic: str) -> list[Event]:
    """The events of one dead-letter file, in the order they were written."""
    data = path.read_bytes()
    events, at = [], 0
    while at + _HEAD.size <= len(data):
        length, checksum = _HEAD.unpack_from(data, at)
        payload = data[at + _HEAD.size : at + _HEAD.size + length]
        if len(payload) < length or crc32c.crc32c(payload) != checksum:
            break
        events.append(decode_event(topic, payload))
        at += _HEAD.size + length
    return events
