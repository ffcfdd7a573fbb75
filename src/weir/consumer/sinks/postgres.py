"""A transactional sink in PostgreSQL (psycopg 3).

Owns `PostgresSink`. The same two tables as the SQLite sink: results (one row per result, no
unique key) and `weir_consumer_offsets`, written in one transaction. The stored offset moves
only with `UPDATE ... WHERE next_offset = <expected>` (or an INSERT that finds no row), which
READ COMMITTED re-checks after waiting for a concurrent writer's lock, so two owners of a
partition can never both commit from the same offset. Tables are created under an advisory
lock, since CREATE TABLE IF NOT EXISTS races between sessions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq

from weir.consumer.sink import (
    DEFAULT_RESULTS_TABLE,
    OFFSETS_TABLE,
    OffsetAdvance,
    ResultRow,
    SinkFencedError,
    TopicPartition,
    check_table_name,
)

SCHEMA_LOCK = 0x77656972  # "weir": the advisory lock key guarding table creation


class PostgresSink:
    """`conninfo` is a libpq connection string or URL. Thread-safety (docs/threads.md): one
    thread."""

    def __init__(self, conninfo: str, table: str = DEFAULT_RESULTS_TABLE) -> None:
        self._table = check_table_name(table)
        self._conninfo = conninfo
        self._db = psycopg.connect(conninfo, autocommit=True)
        self._create_tables()

    def _execute_again_if_lost(self, query: str, params: tuple[object, ...] = ()) -> Any:
        """Run a statement that is safe to repeat (BEGIN, a read), on a new connection if the
        old one turns out to be lost (a server restart, a network cut): whatever transaction
        it had is gone, and the framework retries from its own state."""
        try:
            return self._db.execute(query, params)
        except psycopg.OperationalError:
            if not (self._db.closed or self._db.broken):
                raise
        self._db.close()
        self._db = psycopg.connect(self._conninfo, autocommit=True)
        return self._db.execute(query, params)

    def _create_tables(self) -> None:
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} (topic text NOT NULL, "
                '"partition" integer NOT NULL, "offset" bigint NOT NULL, key bytea, '
                "result bytea)"
            )
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {OFFSETS_TABLE} (group_id text NOT NULL, "
                'topic text NOT NULL, "partition" integer NOT NULL, next_offset bigint NOT NULL, '
                'PRIMARY KEY (group_id, topic, "partition"))'
            )

    def read_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        rows = self._execute_again_if_lost(
            f'SELECT topic, "partition", next_offset FROM {OFFSETS_TABLE} WHERE group_id = %s',
            (group,),
        ).fetchall()
        wanted = set(partitions)
        return {(t, p): offset for t, p, offset in rows if (t, p) in wanted}

    def begin(self) -> None:
        self._execute_again_if_lost("BEGIN")

    def write(self, rows: Sequence[ResultRow]) -> None:
        if rows:
            with self._db.cursor() as cursor:
                cursor.executemany(f"INSERT INTO {self._table} VALUES (%s, %s, %s, %s, %s)", rows)

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
                f"INSERT INTO {OFFSETS_TABLE} VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (group, topic, index, advance.to),
            )
        else:
            cursor = self._db.execute(
                f"UPDATE {OFFSETS_TABLE} SET next_offset = %s WHERE group_id = %s AND "
                'topic = %s AND "partition" = %s AND next_offset = %s',
                (advance.to, group, topic, index, advance.expected),
            )
        return cursor.rowcount == 1

    def rollback(self) -> None:
        if not self._db.broken and self._db.info.transaction_status != pq.TransactionStatus.IDLE:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        if not self._db.closed:
            self.rollback()
            self._db.close()
