"""The transactional sink protocol that makes exactly-once delivery possible.

Owns `TransactionalSink`, `ResultRow`, `OffsetAdvance`, `SinkFencedError` and the encoding of
handler results. A sink stores the handlers' results *and* the consumed offsets in one
transaction of its own: `begin`, `write` the results, `commit` with the offsets, or `rollback`.
On assignment the framework reads the offsets back from the sink and resumes there, so a crash
between processing and commit neither loses nor duplicates a result.

Fencing: `commit` stores each partition's new offset only if the stored one is still the one
this owner started from (`OffsetAdvance.expected`); otherwise another owner (after a rebalance
this one did not notice) moved it, and the whole transaction is rolled back and
`SinkFencedError` raised. Results are plain rows: no unique key is needed for exactly-once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

TopicPartition = tuple[str, int]

DEFAULT_RESULTS_TABLE = "weir_results"
OFFSETS_TABLE = "weir_consumer_offsets"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ResultRow(NamedTuple):
    """One record's result, as a sink stores it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    result: bytes


class OffsetAdvance(NamedTuple):
    """Move a partition's stored offset from `expected` (None: no offset stored yet) to `to`."""

    expected: int | None
    to: int


class SinkFencedError(Exception):
    """Another owner moved a partition's stored offset; nothing was committed."""

    def __init__(self, partitions: Sequence[TopicPartition]) -> None:
        super().__init__(f"offsets moved by another owner: {sorted(partitions)}")
        self.partitions = list(partitions)


class TransactionalSink(Protocol):
    """Where exactly-once results go. Used by one fetcher thread only."""

    def read_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The next offset to consume of each partition that has one stored."""
        ...

    def begin(self) -> None: ...

    def write(self, rows: Sequence[ResultRow]) -> None:
        """Add results to the open transaction."""
        ...

    def commit(self, group: str, offsets: Mapping[TopicPartition, OffsetAdvance]) -> None:
        """Store the offsets in the open transaction and commit it; on a fenced partition roll
        back and raise SinkFencedError."""
        ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


def encode_result(result: object) -> bytes | None:
    """A handler's return value as a sink stores it: None writes no row, bytes are kept, str is
    UTF-8, anything else its JSON. Raises TypeError for what JSON cannot hold."""
    if result is None or isinstance(result, bytes):
        return result
    if isinstance(result, str):
        return result.encode()
    if isinstance(result, bytearray | memoryview):
        return bytes(result)
    return json.dumps(result, separators=(",", ":")).encode()


def check_table_name(name: str) -> str:
    """Table names are spliced into SQL, so only plain identifiers are accepted."""
    if not _TABLE_NAME.fullmatch(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return name
