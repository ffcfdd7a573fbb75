"""A transactional sink in an SQLite database file, safe for several processes at once.

Owns `SQLiteSink`. Two tables: the results (topic, partition, offset, key, result: one row per
result, no unique key; exactly-once comes from the offsets, not from de-duplication) and
`weir_consumer_offsets` (group, topic, partition -> next offset), written in the same
transaction. WAL journal with synchronous=FULL: a committed transaction survives a crash of
the process or the machine. `BEGIN IMMEDIATE` takes the write lock up front, so concurrent
writers wait (up to the busy timeout) instead of failing at commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from weir.consumer.sink import (
    DEFAULT_RESULTS_TABLE,
    OFFSETS_TABLE,
    OffsetAdvance,
    ResultRow,
    SinkFencedError,
    TopicPartition,
    check_table_name,
)

BUSY_TIMEOUT_S = 60.0


class SQLiteSink:
    """Thread-safety (docs/threads.md): one thread (the fetcher that opened it)."""

    def __init__(self, path: str | Path, table: str = DEFAULT_RESULTS_TABLE) -> None:
        self._table = check_table_name(table)
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._create_tables()

    def _create_tables(self) -> None:
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} (topic TEXT NOT NULL, "
            '"partition" INTEGER NOT NULL, "offset" INTEGER NOT NULL, key BLOB, result BLOB)'
        )
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {OFFSETS_TABLE} (group_id TEXT NOT NULL, "
            'topic TEXT NOT NULL, "partition" INTEGER NOT NULL, next_offset INTEGER NOT NULL, '
            'PRIMARY KEY (group_id, topic, "partition"))'
        )

    def read_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        rows = self._db.execute(
            f'SELECT topic, "partition", next_offset FROM {OFFSETS_TABLE} WHERE group_id = ?',
            (group,),
        )
        wanted = set(partitions)
        return {(t, p): offset for t, p, offset in rows if (t, p) in wanted}

    def begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def write(self, rows: Sequence[ResultRow]) -> None:
        self._db.executemany(f"INSERT INTO {self._table} VALUES (?, ?, ?, ?, ?)", rows)

    def commit(self, group: str, offsets: Mapping[TopicPartition, OffsetAdvance]) -> None:
        fenced = [tp for tp, advance in offsets.items() if not self._advance(group, tp, advance)]
        if fenced:
            self.rollback()
            raise SinkFencedError(fenced)
        self._db.execute("COMMIT")

    def _advance(self, group: str, partition: TopicPartition, advance: OffsetAdvance) -> bool:
        topic, index = partition
        if advance.expected is None:
            cursor = self._db.execute(
                f"INSERT INTO {OFFSETS_TABLE} VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (group, topic, index, advance.to),
            )
        else:
            cursor = self._db.execute(
                f"UPDATE {OFFSETS_TABLE} SET next_offset = ? WHERE group_id = ? AND topic = ? "
                'AND "partition" = ? AND next_offset = ?',
                (advance.to, group, topic, index, advance.expected),
            )
        return cursor.rowcount == 1

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        self.rollback()
        self._db.close()
