"""The durable queue of one topic-partition: a ring buffer in a memory-mapped file.

On-disk format (all integers big-endian)::

    page 0: two header slots of 64 bytes at offsets 0 and 64, written alternately
        magic u32 | version u16 | pad u16 | generation u64 | capacity u64
        read_position u64 | read_sequence u64 | write_position u64 | dropped u64 | crc32c u32
    from byte 4096: `capacity` bytes of ring data holding records back to back
        length u32 | crc32c u32 (of sequence + payload) | sequence u64 | payload

Positions are logical byte offsets that only grow; the physical place of a byte is
`4096 + position % capacity`, and a record may wrap around the end of the data area.
Every record carries its sequence number (the read sequence plus its index in the queue), so
records left over from an earlier lap never pass for new ones.

Recovery after kill -9 or power loss: take the header slot with a valid checksum and the highest
generation, then walk from the read position while records have a valid checksum and the expected
sequence; the write position is the end of the last complete record. The header is written when
the read position moves (acknowledgement, overwrite) and at recovery, not on every append: it is
only a hint for the write position, which the walk always finds again, so a crash after a record
was written loses nothing it wrote.

Thread-safety (docs/threads.md): every public method takes the ring's lock; callers may share one
ring freely. Once closed, a ring refuses appends (`RingClosed`), peeks nothing and ignores
acknowledgements, so a sender still running while the agent stops leaves the records for the next
start. The ring never decides policy on its own: `append` raises `RingFull` unless asked to
overwrite.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

MAGIC = 0x57524E47
VERSION = 1
DATA_START = 4096
_HEADER = struct.Struct(">IHHQQQQQQ")
_HEADER_CRC = struct.Struct(">I")
_SLOT_SIZE = 64
_RECORD = struct.Struct(">IIQ")
_SEQUENCE = struct.Struct(">Q")
_LENGTH = struct.Struct(">I")
PEEK_SLACK = 64 * 1024  # read beyond max_bytes so the record that crosses it comes in one copy
RECORD_OVERHEAD = _RECORD.size


class RingFull(Exception):
    """The ring has no room for the records and overwriting was not allowed."""


class RingClosed(Exception):
    """The ring was closed (the agent is stopping); nothing was stored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordBatchView:
    """Records copied out of the ring, with the positions needed to acknowledge them."""

    payloads: list[bytes]
    first_sequence: int
    end_position: int

    @property
    def end_sequence(self) -> int:
        return self.first_sequence + len(self.payloads)


@dataclass(frozen=True, slots=True, kw_only=True)
class RingState:
    read_position: int
    read_sequence: int
    write_position: int
    write_sequence: int
    dropped: int
    capacity: int

    @property
    def depth(self) -> int:
        return self.write_sequence - self.read_sequence

    @property
    def used_bytes(self) -> int:
        return self.write_position - self.read_position


class DiskRing:
    """A ring of length-prefixed, checksummed records in one memory-mapped file."""

    def __init__(self, path: Path, capacity: int) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = _open_sized(path, DATA_START + capacity)
        self.capacity = os.fstat(self._file.fileno()).st_size - DATA_START
        self._map = mmap.mmap(self._file.fileno(), DATA_START + self.capacity)
        self._generation = 0
        self._read_position = 0
        self._read_sequence = 0
        self._write_position = 0
        self._write_sequence = 0
        self.dropped = 0
        self._recover()

    # -- public API -------------------------------------------------------------------------

    def append(self, payloads: list[bytes], *, overwrite: bool) -> int:
        """Store the payloads in order; returns how many old records were overwritten."""
        if len(payloads) == 1:
            needed = RECORD_OVERHEAD + len(payloads[0])
        else:
            needed = RECORD_OVERHEAD * len(payloads) + sum(map(len, payloads))
        if needed > self.capacity:
            raise RingFull(f"{needed} bytes can never fit a ring of {self.capacity} bytes")
        if not payloads:
            return 0
        with self._lock:
            if self._map.closed:
                raise RingClosed(f"queue {self.path} is closed")
            evicted = 0
            if self.capacity - (self._write_position - self._read_position) < needed:
                evicted = self._make_room(needed, overwrite)
                # The new read position must be on disk before its old records are overwritten.
                self._write_header()
            self._write_records(payloads)
            return evicted

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        """Copy up to `max_records` records from the read position without consuming them,
        stopping once `max_bytes` of payload were taken (at least one record if there is one)."""
        with self._lock:
            payloads: list[bytes] = []
            position = self._read_position
            if position < self._write_position and not self._map.closed:
                payloads, position = self._copy_records(position, max_records, max_bytes)
            return RecordBatchView(
                payloads=payloads, first_sequence=self._read_sequence, end_position=position
            )

    def _copy_records(
        self, position: int, max_records: int, max_bytes: int
    ) -> tuple[list[bytes], int]:
        """The records from `position`: one copy of the bytes they span, split there."""
        available = self._write_position - position
        chunk = self._get(position, min(available, max_bytes + PEEK_SLACK))
        payloads: list[bytes] = []
        at = size = 0
        while len(payloads) < max_records and size < max_bytes:
            if at + RECORD_OVERHEAD > len(chunk):
                break
            (length,) = _LENGTH.unpack_from(chunk, at)
            end = at + RECORD_OVERHEAD + length
            if end > len(chunk):
                break
            payloads.append(chunk[at + RECORD_OVERHEAD : end])
            size += length
            at = end
        if not payloads:
            payload, end_position = self._read_record_at(position)
            return [payload], end_position
        return payloads, position + at

    def acknowledge(self, batch: RecordBatchView) -> None:
        """Advance the read position past `batch`, unless overwriting already moved beyond it."""
        with self._lock:
            if batch.end_sequence <= self._read_sequence or self._map.closed:
                return
            self._read_position = batch.end_position
            self._read_sequence = batch.end_sequence
            self._write_header()

    def flush(self) -> None:
        """Make everything appended so far durable; other threads keep running meanwhile.

        On Linux the kernel tracks the pages written through the shared mapping, so `fdatasync`
        writes them and waits for the device exactly as `msync(MS_SYNC)` would, but it lets go
        of the interpreter lock while it waits (the mapping's own flush does not). The file's size
        never changes, so a data sync covers everything recovery reads. Elsewhere the mapping is
        msynced and the file fsynced.
        """
        if self._map.closed:
            return
        if sys.platform == "linux":
            os.fdatasync(self._file.fileno())
        else:
            self._map.flush()
            os.fsync(self._file.fileno())

    def state(self) -> RingState:
        with self._lock:
            return RingState(
                read_position=self._read_position,
                read_sequence=self._read_sequence,
                write_position=self._write_position,
                write_sequence=self._write_sequence,
                dropped=self.dropped,
                capacity=self.capacity,
            )

    def free_bytes(self) -> int:
        with self._lock:
            return self.capacity - (self._write_position - self._read_position)

    def close(self) -> None:
        with self._lock:
            if not self._map.closed:
                self._map.flush()
                self._map.close()
                self._file.close()

    # -- records ----------------------------------------------------------------------------

    def _make_room(self, needed: int, overwrite: bool) -> int:
        evicted = 0
        while self.capacity - (self._write_position - self._read_position) < needed:
            if not overwrite:
                raise RingFull(f"queue {self.path.name} is full ({self.capacity} bytes)")
            _, self._read_position = self._read_record_at(self._read_position)
            self._read_sequence += 1
            evicted += 1
        self.dropped += evicted
        return evicted

    def _write_records(self, payloads: list[bytes]) -> None:
        """Frame and checksum each payload, then copy the whole run into the ring at once."""
        sequence = self._write_sequence
        if len(payloads) == 1:
            run = _record_head(payloads[0], sequence) + payloads[0]
            sequence += 1
        else:
            parts: list[bytes] = []
            for payload in payloads:
                parts += (_record_head(payload, sequence), payload)
                sequence += 1
            run = b"".join(parts)
        position = self._write_position
        offset = position % self.capacity
        if offset + len(run) <= self.capacity:
            start = DATA_START + offset
            self._map[start : start + len(run)] = run
        else:
            self._put(position, run)
        self._write_position = position + len(run)
        self._write_sequence = sequence

    def _read_record_at(self, position: int) -> tuple[bytes, int]:
        length, _, _ = _RECORD.unpack(self._get(position, RECORD_OVERHEAD))
        payload = self._get(position + RECORD_OVERHEAD, length)
        return payload, position + RECORD_OVERHEAD + length

    def _valid_record_at(self, position: int, sequence: int) -> int | None:
        """The end position of a complete record with `sequence` at `position`, else None."""
        room = self._read_position + self.capacity - position
        if room < RECORD_OVERHEAD:
            return None
        length, checksum, found = _RECORD.unpack(self._get(position, RECORD_OVERHEAD))
        if found != sequence or length > room - RECORD_OVERHEAD:
            return None
        payload = self._get(position + RECORD_OVERHEAD, length)
        if crc32c.crc32c(payload, crc32c.crc32c(struct.pack(">Q", found))) != checksum:
            return None
        end: int = position + RECORD_OVERHEAD + length
        return end

    def _put(self, position: int, data: bytes) -> None:
        offset = position % self.capacity
        first = min(len(data), self.capacity - offset)
        self._map[DATA_START + offset : DATA_START + offset + first] = data[:first]
        if first < len(data):
            self._map[DATA_START : DATA_START + len(data) - first] = data[first:]

    def _get(self, position: int, length: int) -> bytes:
        offset = position % self.capacity
        first = min(length, self.capacity - offset)
        data = self._map[DATA_START + offset : DATA_START + offset + first]
        if first < length:
            data += self._map[DATA_START : DATA_START + length - first]
        return data

    # -- header and recovery ----------------------------------------------------------------

    def _write_header(self) -> None:
        self._generation += 1
        body = _HEADER.pack(
            MAGIC,
            VERSION,
            0,
            self._generation,
            self.capacity,
            self._read_position,
            self._read_sequence,
            self._write_position,
            self.dropped,
        )
        slot = (self._generation % 2) * _SLOT_SIZE
        self._map[slot : slot + len(body) + 4] = body + _HEADER_CRC.pack(crc32c.crc32c(body))

    def _read_header_slot(self, slot: int) -> tuple[int, ...] | None:
        raw = self._map[slot : slot + _HEADER.size + 4]
        body, (checksum,) = raw[: _HEADER.size], _HEADER_CRC.unpack(raw[_HEADER.size :])
        fields = _HEADER.unpack(body)
        if fields[0] != MAGIC or crc32c.crc32c(body) != checksum or fields[4] != self.capacity:
            return None
        return fields

    def _recover(self) -> None:
        slots = [self._read_header_slot(s) for s in (0, _SLOT_SIZE)]
        valid = [s for s in slots if s is not None]
        if not valid:
            self._write_header()
            return
        fields = max(valid, key=lambda f: f[3])
        self._generation = fields[3]
        self._read_position, self._read_sequence = fields[5], fields[6]
        self.dropped = fields[8]
        self._write_position, self._write_sequence = self._scan_records()
        self._write_header()

    def _scan_records(self) -> tuple[int, int]:
        position, sequence = self._read_position, self._read_sequence
        while (end := self._valid_record_at(position, sequence)) is not None:
            position, sequence = end, sequence + 1
        return position, sequence


def _record_head(payload: bytes, sequence: int) -> bytes:
    """What precedes a payload in the ring: length, checksum (of sequence and payload), sequence."""
    checksum = crc32c.crc32c(payload, crc32c.crc32c(_SEQUENCE.pack(sequence)))
    return _RECORD.pack(len(payload), checksum, sequence)


def _open_sized(path: Path, size: int) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    file = open(path, "a+b")  # noqa: SIM115  (owned by the ring until close())
    if os.fstat(file.fileno()).st_size < size:
        file.truncate(size)
    return file
