"""The transactional sinks that ship with weir, and opening one from a URL.

`sqlite:PATH` opens an SQLite database file (created if missing); `postgresql://...` (or any
libpq connection string starting `postgres`) a PostgreSQL database. Both keep results in
`table` and offsets in `weir_consumer_offsets`.
"""

from __future__ import annotations

from collections.abc import Callable

from weir.consumer.sink import DEFAULT_RESULTS_TABLE, TransactionalSink, check_table_name


def sink_factory(url: str, table: str = DEFAULT_RESULTS_TABLE) -> Callable[[], TransactionalSink]:
    """A function that opens the sink `url` names (each fetcher opens its own)."""
    check_table_name(table)
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        if not path:
            raise ValueError("sqlite: needs a path, e.g. sqlite:results.db")
        return lambda: _sqlite(path, table)
    if url.startswith(("postgresql:", "postgres:")):
        return lambda: _postgres(url, table)
    raise ValueError(f"unknown sink {url!r}: expected sqlite:PATH or postgresql://...")


def _sqlite(path: str, table: str) -> TransactionalSink:
    from weir.consumer.sinks.sqlite import SQLiteSink

    return SQLiteSink(path, table)


def _postgres(url: str, table: str) -> TransactionalSink:
    from weir.consumer.sinks.postgres import PostgresSink  # psycopg only when asked for

    return PostgresSink(url, table)
