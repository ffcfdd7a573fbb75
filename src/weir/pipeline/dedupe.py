"""The log ETL's deduplication (``weir pipeline logs --dedupe``): a record that reached the topic
twice reaches the warehouse once.

A record is named by a key of two parts: an *identity* (who wrote it) and a *position* (an
integer that rises with each event that writer sends). By default (``agent``) they are the
record headers ``weir.agent`` and ``weir.pos`` that ``weir agent`` writes
(``weir.protocol.event_headers``); a declared key (``FIELD[,FIELD...]:POSITION``) takes them
from each line's parsed fields instead: columns of the ``logs`` table (``host``,
``component``, ``pid``, ...) or names in its ``fields`` map. A record without a whole key (no
such header, a field missing, a position that is not a decimal integer, or, with a declared
key, a line that does not parse) is kept as it is.

What counts as a copy: per topic-partition and identity, the job keeps the highest position it
has written (the *high water*); a record whose position does not rise above it is a copy and is
dropped. That is exact when each writer's events first reach a partition in rising position
order, which holds for the agent (a queue feeds one partition and sends one batch at a time,
in order, through an idempotent or transactional producer, so whatever lands again — a batch
resent after a restart, a retry of a client whose request timed out, another producer copying
records — lands after the original). A declared key must hold to it too: a producer with
``enable.idempotence`` (or at most one request in flight) keeps its order. A copy in another
partition than its original's is not caught. The high water of an identity that wrote nothing
for ``window`` (default 7 days) is forgotten, so the state stays bounded by the writers of the
last ``window``; a copy that comes later than that is kept.

Why a high water rather than a set of keys seen within an event-time window (Spark's
``dropDuplicatesWithinWatermark``): the job's rows never become a Spark DataFrame (its tasks
parse and write their records themselves), a set of keys would need every row to be shuffled
by its key into Spark's state store, and it grows with the event rate times the window; the
high water is one integer per writer and partition, needs no shuffle, and catches a copy however
late it comes within the window. Its price: each partition's offset range of a micro-batch is
read by one task (``minPartitions`` 1), so that a task sees every record of its partition that
precedes its own in the batch.

Where it runs: before each micro-batch the driver writes the high waters committed with the
batch before (``HIGH_WATER_FILE`` in the spool); each task starts from them, drops the copies
among its records (``TaskDedupe``), by headers before it parses them and by fields after, and
reports the new high water of each identity it saw and the copies it dropped. The driver merges
those into the state it commits with the batch (``HighWaters.merged``), so a replayed batch
starts from the same state as the first attempt and drops the same records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from weir.pipeline.kafka_io import header_column
from weir.protocol.event_headers import AGENT_HEADER, POSITION_HEADER

AGENT = "agent"
DEFAULT_WINDOW_S = 7 * 24 * 3600
# In the spool, beside the tasks' files; its own suffix keeps it from being taken for one.
HIGH_WATER_FILE = "dedupe-high-water.ipc"
HIGH_WATER_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("identity", pa.binary()),
     ("position", pa.int64()), ("last_seen_ms", pa.int64())]
)  # fmt: skip
_DECIMAL = r"\A[0-9]{1,18}\z"  # int64 holds every 18-digit number
_NONE = np.iinfo(np.int64).min  # below every position: an identity not seen before
_SEPARATOR = "\x00"

Partition = tuple[str, int]
Writer = tuple[str, int, bytes]  # topic, partition, identity


class DedupeKeyError(ValueError):
    """A key that cannot be read."""


@dataclass(frozen=True, slots=True)
class DedupeKey:
    """What names a record: ``identity`` names and a ``position`` name, of record headers
    (``headers``) or of the parsed line's fields."""

    identity: tuple[str, ...]
    position: str
    headers: bool

    @classmethod
    def parse(cls, text: str) -> DedupeKey:
        """``agent`` (the agent's headers) or ``FIELD[,FIELD...]:POSITION`` (parsed fields)."""
        text = text.strip()
        if text == AGENT:
            return cls((AGENT_HEADER,), POSITION_HEADER, headers=True)
        names, colon, position = text.rpartition(":")
        identity = tuple(name.strip() for name in names.split(","))
        if not colon or not position.strip() or not all(identity):
            raise DedupeKeyError(
                f"dedupe key {text!r}: expected {AGENT!r} or FIELD[,FIELD...]:POSITION"
            )
        return cls(identity, position.strip(), headers=False)

    def spec(self) -> str:
        """The text ``parse`` reads back."""
        if self.headers:
            return AGENT
        return f"{','.join(self.identity)}:{self.position}"

    @property
    def header_names(self) -> tuple[str, ...]:
        """The headers the job's readers must read (none for a key of fields)."""
        return (*self.identity, self.position) if self.headers else ()


def parse_window(text: str) -> int:
    """A window in seconds from ``90s``, ``30m``, ``12h``, ``7d`` or a number of seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    stripped = text.strip().lower()
    scale = units.get(stripped[-1:])
    number = stripped[:-1] if scale is not None else stripped
    try:
        seconds = int(float(number) * (scale or 1))
    except ValueError:
        raise DedupeKeyError(f"dedupe window {text!r}: expected e.g. 7d, 12h, 30m or 90s") from None
    if seconds <= 0:
        raise DedupeKeyError(f"dedupe window {text!r}: must be positive")
    return seconds


@dataclass(frozen=True, slots=True)
class Seen:
    """One writer's highest position in a partition and when (ms) a batch last saw it."""

    position: int
    last_seen_ms: int


class HighWaters:
    """Per (topic, partition, identity) its high water: the job's state, committed with each
    batch (``to_bytes``, Arrow IPC of ``HIGH_WATER_SCHEMA``)."""

    def __init__(self, seen: Mapping[Writer, Seen] | None = None) -> None:
        self.seen: dict[Writer, Seen] = dict(seen or {})

    def merged(self, reported: Mapping[Writer, int], now_ms: int, window_s: int) -> HighWaters:
        """The state after a batch whose tasks reported these high waters at ``now_ms``,
        without the writers last seen more than ``window_s`` before."""
        seen = dict(self.seen)
        for writer, position in reported.items():
            before = seen.get(writer)
            highest = position if before is None else max(before.position, position)
            seen[writer] = Seen(highest, now_ms)
        horizon = now_ms - window_s * 1000
        return HighWaters({w: s for w, s in seen.items() if s.last_seen_ms >= horizon})

    def positions(self) -> dict[Writer, int]:
        return {writer: seen.position for writer, seen in self.seen.items()}

    def to_table(self) -> pa.Table:
        writers = list(self.seen)
        columns = [
            pa.array([w[0] for w in writers], pa.string()),
            pa.array([w[1] for w in writers], pa.int32()),
            pa.array([w[2] for w in writers], pa.binary()),
            pa.array([self.seen[w].position for w in writers], pa.int64()),
            pa.array([self.seen[w].last_seen_ms for w in writers], pa.int64()),
        ]
        return pa.Table.from_arrays(columns, schema=HIGH_WATER_SCHEMA)

    @classmethod
    def from_table(cls, table: pa.Table) -> HighWaters:
        rows = zip(*(table.column(name).to_pylist() for name in HIGH_WATER_SCHEMA.names),
                   strict=True)  # fmt: skip
        return cls({(t, p, i): Seen(pos, last) for t, p, i, pos, last in rows})

    def to_bytes(self) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, HIGH_WATER_SCHEMA) as writer:
            writer.write_table(self.to_table())
        return bytes(sink.getvalue())

    @classmethod
    def from_bytes(cls, data: bytes) -> HighWaters:
        return cls.from_table(pa.ipc.open_file(pa.py_buffer(data)).read_all())

    def write(self, path: Path) -> None:
        """Replaces ``path`` whole (a reader sees the old file or the new one)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_bytes(self.to_bytes())
        os.replace(temporary, path)

    @classmethod
    def read(cls, path: Path) -> HighWaters:
        """The file ``write`` wrote, or no high water if there is none."""
        try:
            return cls.from_bytes(path.read_bytes())
        except FileNotFoundError:
            return cls()


def positions_of(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Decimal positions (binary or string) as int64; null where a value is not one."""
    text = pc.cast(values, pa.binary())
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    decimal = pc.fill_null(pc.match_substring_regex(text, _DECIMAL), False)
    return pc.cast(pc.cast(pc.if_else(decimal, text, None), pa.string()), pa.int64())


def first_sightings(
    groups: np.ndarray, positions: np.ndarray, floors: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which rows to keep, in the order given: a row of group ``g`` (-1: no group, kept) is kept
    when its position rises above ``floors[g]`` and above every earlier position of its group.
    Returns the mask and each group's highest position (at least its floor)."""
    keep = np.ones(len(groups), dtype=bool)
    highest = floors.copy()
    named = np.flatnonzero(groups >= 0)
    order = named[np.argsort(groups[named], kind="stable")]
    ordered_groups = groups[order]
    starts = np.flatnonzero(np.r_[True, ordered_groups[1:] != ordered_groups[:-1]])
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True):
        group = int(ordered_groups[start])
        rows = order[start:end]
        rising = np.maximum.accumulate(np.r_[floors[group], positions[rows]])
        keep[rows] = positions[rows] > rising[:-1]
        highest[group] = rising[-1]
    return keep, highest


class TaskDedupe:
    """One task's deduplication: starts from the high waters the driver wrote, drops the copies
    among the rows it is given (in offset order per partition), and counts per writer its new
    high water and the copies dropped. Not thread-safe (a task's own)."""

    def __init__(self, key: DedupeKey, known: Mapping[Writer, int]) -> None:
        self.key = key
        self.known = known
        self.highest: dict[Writer, int] = {}
        self.dropped: dict[Writer, int] = {}

    def keep(self, rows: pa.Table | pa.RecordBatch) -> np.ndarray:
        """The mask of the rows to keep: ``rows`` has topic, partition and offset columns, and
        the key's header columns (raw records, ``key.headers``) or its fields (parsed rows)."""
        identities, positions = self._key_columns(rows)
        named = pc.and_(pc.is_valid(identities), pc.is_valid(positions))
        if not pc.any(named).as_py():
            return np.ones(rows.num_rows, dtype=bool)
        writers, groups = _writers(rows.column("topic"), rows.column("partition"), identities,
                                   named)  # fmt: skip
        floors = np.array([self._floor(w) for w in writers], dtype=np.int64)
        values = pc.fill_null(positions, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        keep, highest = first_sightings(groups, values, floors)
        dropped = np.bincount(groups[~keep], minlength=len(writers))
        for index, writer in enumerate(writers):
            self.highest[writer] = int(highest[index])
            if dropped[index]:
                self.dropped[writer] = self.dropped.get(writer, 0) + int(dropped[index])
        return keep

    def _floor(self, writer: Writer) -> int:
        found = self.highest.get(writer)
        if found is None:
            found = self.known.get(writer)
        return _NONE if found is None else found

    def _key_columns(self, rows: pa.Table | pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
        if self.key.headers:
            parts = [rows.column(header_column(name)) for name in self.key.identity]
            position = rows.column(header_column(self.key.position))
        else:
            parts = [_field(rows, name) for name in self.key.identity]
            position = _field(rows, self.key.position)
        return _joined(parts), positions_of(position)


def _field(rows: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    """A parsed row's field as text: its column, or its value in the ``fields`` map."""
    if name in rows.schema.names and name != "fields":
        column = rows.column(name)
    else:
        column = pc.map_lookup(rows.column("fields"), pa.scalar(name), "last")
    column = pc.cast(column, pa.string())
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _joined(parts: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """The identity parts as one binary value per row (null if a part is null)."""
    binary = [pc.cast(part, pa.binary()) for part in parts]
    joined = binary[0] if len(binary) == 1 else pc.binary_join_element_wise(*binary, _SEPARATOR)
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _writers(
    topics: pa.Array | pa.ChunkedArray,
    partitions: pa.Array | pa.ChunkedArray,
    identities: pa.Array,
    named: pa.Array,
) -> tuple[list[Writer], np.ndarray]:
    """The distinct (topic, partition, identity) of the named rows, and each row's index among
    them (-1 for a row that is not named)."""
    codes = []
    values = []
    for column in (topics, partitions, identities):
        encoded = pc.dictionary_encode(column)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        codes.append(encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))
        values.append(encoded.dictionary.to_pylist())
    packed = (codes[0] * len(values[1]) + codes[1]) * max(len(values[2]), 1) + codes[2]
    mask = named.to_numpy(zero_copy_only=False)
    _, first, inverse = np.unique(packed[mask], return_index=True, return_inverse=True)
    rows = np.flatnonzero(mask)[first]
    writers = [
        (values[0][codes[0][row]], values[1][codes[1][row]], values[2][codes[2][row]])
        for row in rows.tolist()
    ]
    groups = np.full(len(packed), -1, dtype=np.int64)
    groups[mask] = inverse.reshape(-1)
    return writers, groups


def reported(rows: Iterable[Mapping[str, Any]], kind: str) -> tuple[dict[Writer, int], int]:
    """The high waters the tasks reported (manifest rows of ``kind``), the highest per writer,
    and the copies they dropped in all."""
    highest: dict[Writer, int] = {}
    dropped = 0
    for row in rows:
        if row["kind"] != kind:
            continue
        writer = (str(row["topic"]), int(row["partition"]), bytes(row["identity"]))
        position = int(row["position"])
        highest[writer] = max(highest.get(writer, position), position)
        dropped += int(row["lines"] or 0)
    return highest, dropped
