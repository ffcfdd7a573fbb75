"""The log ETL's tables as Iceberg tables in a SQL catalog (pyiceberg), one commit per table per
micro-batch, each batch's Kafka offsets in its snapshots' summaries.

The catalog is pyiceberg's ``SqlCatalog``: on SQLite (``sqlite:///PATH``, the default, a file in
the warehouse) or on PostgreSQL (``postgresql+psycopg://USER:PASSWORD@HOST/DB``); the tables'
data and metadata files go under the warehouse directory, ``<namespace>/<table>/``. The tables
(``TABLES``) are made on first use from the first batch's columns, partitioned as
``PARTITIONING`` says (identity on ``source``, the day of the timestamp). A batch whose rows
bring a column the table lacks adds it first, in the same commit (``union_by_name``): columns
are only ever added.

Every snapshot a batch adds carries in its summary the streaming query's id (``QUERY_ID``), the
batch's number (``BATCH_ID``) and the Kafka offsets the batch ends at (``OFFSETS``, JSON
``{"topic": {"partition": next offset}}``, as in Spark's checkpoint). Iceberg commits one table
at a time, so a batch is four commits; a table whose latest batch-bearing snapshot
(``held_batch``) already holds the batch is skipped when the batch is replayed after a crash.
So each table holds each batch once, however many times Spark replays it.

``compact`` rewrites each partition's small files into one, and ``expire`` drops old snapshots
and deletes the files only they referenced; a compaction's snapshots carry over the batch
properties of the snapshot they replace, so the tables still say which batch they hold.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

QUERY_ID = "weir.query-id"
BATCH_ID = "weir.batch-id"
OFFSETS = "weir.offsets"
BATCH_PROPERTIES = (QUERY_ID, BATCH_ID, OFFSETS)
TABLES = ("logs", "quarantine", "metrics_minute", "templates")
#: Partition fields by table: (source column, transform); ``day`` is the timestamp's day.
PARTITIONING: Mapping[str, tuple[tuple[str, str], ...]] = {
    "logs": (("source", "identity"), ("timestamp", "day")),
    "quarantine": (("source", "identity"),),
    "metrics_minute": (("source", "identity"), ("minute", "day")),
    "templates": (("source", "identity"),),
}
#: Properties of the tables made: their Parquet files compressed as the Parquet output's are.
TABLE_PROPERTIES = {"write.parquet.compression-codec": "snappy"}
#: Tables each batch replaces whole (the others it appends to).
REPLACED = frozenset({"templates"})
DEFAULT_NAMESPACE = "weir"
CATALOG_FILE = "catalog.db"
CATALOG_NAME = "weir"
COMMIT_ATTEMPTS = 5  # a commit that loses a race (a maintenance run) is tried again
DEFAULT_TARGET_FILE_BYTES = 128 << 20
DEFAULT_EXPIRE_AFTER = timedelta(days=7)
_EPOCH = date(1970, 1, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class IcebergOutput:
    """Where the Iceberg tables are: the catalog's SQLAlchemy URI (None: SQLite in the
    warehouse), the namespace, and the warehouse directory of their files."""

    warehouse: Path
    catalog_uri: str | None = None
    namespace: str = DEFAULT_NAMESPACE

    @property
    def uri(self) -> str:
        return self.catalog_uri or f"sqlite:///{self.warehouse / CATALOG_FILE}"

    def catalog(self) -> SqlCatalog:
        from pyiceberg.catalog.sql import SqlCatalog

        self.warehouse.mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog(CATALOG_NAME, uri=self.uri, warehouse=self.warehouse.as_uri())
        catalog.create_namespace_if_not_exists(self.namespace)
        return catalog

    def identifier(self, table: str) -> str:
        return f"{self.namespace}.{table}"


@dataclass(frozen=True, slots=True)
class BatchIdentity:
    """A micro-batch of a streaming query: its number and the offsets it ends at."""

    query_id: str
    batch_id: int
    offsets: Mapping[str, Mapping[str, int]]

    def properties(self) -> dict[str, str]:
        return {
            QUERY_ID: self.query_id,
            BATCH_ID: str(self.batch_id),
            OFFSETS: json.dumps(self.offsets, sort_keys=True, separators=(",", ":")),
        }


def checkpoint_offsets(checkpoint: Path, batch_id: int) -> dict[str, dict[str, int]]:
    """The offsets batch ``batch_id`` ends at, from Spark's offset log in the checkpoint
    (written before the batch runs: a version line, the batch's metadata, then one line per
    source)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    offsets: dict[str, dict[str, int]] = json.loads(lines[-1])
    return offsets


def held_batch(table: Table, query_id: str) -> int | None:
    """The last batch of query ``query_id`` that ``table`` holds: the batch named by its
    newest snapshot (following the current snapshot's ancestors) that names one, if that
    snapshot is of this query; None otherwise."""
    properties = batch_properties(table)
    if properties is None or properties.get(QUERY_ID) != query_id:
        return None
    return int(properties[BATCH_ID])


def batch_properties(table: Table) -> dict[str, str] | None:
    """The batch properties of the newest snapshot that has them, or None."""
    for snapshot in ancestors(table):
        found = snapshot.summary.additional_properties if snapshot.summary else {}
        if QUERY_ID in found:
            return {name: found[name] for name in BATCH_PROPERTIES if name in found}
    return None


def ancestors(table: Table) -> Iterator[Any]:
    """The current snapshot, then its parent, and so on (as far as they are kept)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)


class IcebergTables:
    """The log ETL's tables in one catalog namespace, over one connection pool to the catalog
    (``close`` closes it; so does leaving a ``with`` block). Not thread-safe: one job writes
    them."""

    def __init__(self, output: IcebergOutput) -> None:
        self.output = output
        self.catalog = output.catalog()

    def __enter__(self) -> IcebergTables:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.catalog.close()

    def commit_batch(self, batch: BatchIdentity, rows: Mapping[str, pa.Table]) -> list[str]:
        """Commits each table's rows of ``batch`` (one commit per table, appended, or in place
        of its rows for ``REPLACED`` tables) unless the table holds the batch already; returns
        the tables committed to."""
        committed = []
        for name in TABLES:
            if name in rows and self.commit(name, rows[name], batch):
                committed.append(name)
        return committed

    def commit(self, name: str, rows: pa.Table, batch: BatchIdentity) -> bool:
        """One table's rows of ``batch`` in one commit; False if the table held it already."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name, rows.schema)
            held = held_batch(table, batch.query_id)
            if held is not None and held >= batch.batch_id:
                return False
            try:
                write_rows(table, rows, batch.properties(), replace=name in REPLACED)
                return True
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def table(self, name: str, schema: pa.Schema) -> Table:
        """The table ``name``, made with ``schema`` and its partitioning if missing."""
        from pyiceberg.exceptions import NoSuchTableError

        identifier = self.output.identifier(name)
        try:
            table = self.catalog.load_table(identifier)
        except NoSuchTableError:
            table = self.catalog.create_table_if_not_exists(
                identifier, schema=schema, properties=TABLE_PROPERTIES
            )
        if table.spec().is_unpartitioned() and table.current_snapshot() is None:
            # Made in two steps: a crash between them leaves an empty unpartitioned table.
            partition(table, PARTITIONING[name])
        return table

    def load(self, name: str) -> Table:
        return self.catalog.load_table(self.output.identifier(name))

    def existing(self) -> list[str]:
        """The log ETL's tables that exist in the namespace."""
        present = {identifier[-1] for identifier in self.catalog.list_tables(self.output.namespace)}
        return [name for name in TABLES if name in present]


def partition(table: Table, fields: tuple[tuple[str, str], ...]) -> None:
    from pyiceberg.transforms import DayTransform, IdentityTransform

    transforms: dict[str, Callable[[], Any]] = {"identity": IdentityTransform, "day": DayTransform}
    with table.update_spec() as spec:
        for column, transform in fields:
            suffix = "" if transform == "identity" else f"_{transform}"
            spec.add_field(column, transforms[transform](), f"{column}{suffix}")


def write_rows(table: Table, rows: pa.Table, properties: dict[str, str], *, replace: bool) -> None:
    """One transaction: the columns ``rows`` bring that the table lacks added, then the rows
    appended (or written in place of every row, ``replace``), their snapshots summarised with
    ``properties``."""
    with table.transaction() as transaction:
        if set(rows.schema.names) - set(table.schema().column_names):
            with transaction.update_schema() as update:
                update.union_by_name(rows.schema)
        if replace and holds_rows(table):
            transaction.overwrite(rows, snapshot_properties=properties)
        elif rows.num_rows == 0 or transaction.table_metadata.spec().is_unpartitioned():
            transaction.append(rows, snapshot_properties=properties)
        else:
            append_partitioned(table, transaction, rows, properties)


def append_partitioned(
    table: Table, transaction: Any, rows: pa.Table, properties: dict[str, str]
) -> None:
    """``transaction.append(rows)`` for a partitioned table, sorting the rows by partition once:
    pyiceberg's own append filters the whole batch once per partition it touches, which for a
    batch of logs spread over many sources and days costs far more than writing them."""
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        bin_pack_arrow_table,
        pyarrow_to_schema,
        write_file,
    )
    from pyiceberg.table import TableProperties, WriteTask

    metadata = transaction.table_metadata
    schema = metadata.schema()
    _check_pyarrow_schema_compatible(schema, rows.schema, format_version=metadata.format_version)
    task_schema = pyarrow_to_schema(rows.schema, name_mapping=schema.name_mapping,
                                    format_version=metadata.format_version)  # fmt: skip
    target = int(metadata.properties.get(
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
    ))  # fmt: skip
    write_uuid = uuid.uuid4()
    counter = itertools.count()
    tasks = (
        WriteTask(
            write_uuid=write_uuid,
            task_id=next(counter),
            schema=task_schema,
            record_batches=batches,
            partition_key=key,
        )
        for key, part in partitions(metadata, rows)
        for batches in bin_pack_arrow_table(part, target)
    )
    data_files = list(write_file(io=table.io, table_metadata=metadata, tasks=tasks))
    with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)


def partitions(metadata: Any, rows: pa.Table) -> Iterator[tuple[Any, pa.Table]]:
    """The rows of each partition of the table's spec, with its pyiceberg partition key: the
    rows sorted by their partition values once, then sliced where those change."""
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

    schema, spec = metadata.schema(), metadata.spec()
    values = {}
    for index, field in enumerate(spec.fields):
        source = schema.find_field(field.source_id)
        column = rows.column(schema.find_column_name(field.source_id))
        values[f"_{index}"] = field.transform.pyarrow_transform(source.field_type)(column)
    keys = pa.table(values)
    order = pc.sort_indices(keys, [(name, "ascending") for name in values])
    keys, ordered = keys.take(order), rows.take(order)
    changed = np.zeros(max(keys.num_rows - 1, 0), dtype=bool)
    for name in values:
        column = keys.column(name).combine_chunks()
        before, after = column.slice(0, len(column) - 1), column.slice(1)
        differs = pc.fill_null(pc.not_equal(before, after), False)
        nulls_differ = pc.xor(pc.is_null(before), pc.is_null(after))
        changed |= pc.or_(differs, nulls_differ).to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(changed) + 1).tolist()]
    ends = [*starts[1:], keys.num_rows]
    for start, end in zip(starts, ends, strict=True):
        field_values = [
            PartitionFieldValue(field=field, value=keys.column(f"_{index}")[start].as_py())
            for index, field in enumerate(spec.fields)
        ]
        key = PartitionKey(field_values=field_values, partition_spec=spec, schema=schema)
        yield key, ordered.slice(start, end - start).combine_chunks()


def holds_rows(table: Table) -> bool:
    current = table.current_snapshot()
    summary = current.summary if current is not None else None
    return summary is not None and int(summary.get("total-records") or 0) > 0


@dataclass(frozen=True, slots=True)
class Compaction:
    """What compacting one table did: the partitions rewritten, files before and after."""

    table: str
    partitions: int
    files_before: int
    files_after: int


def compact(table: Table, name: str, target_file_bytes: int) -> Compaction:
    """Rewrites each partition that has more than one file smaller than ``target_file_bytes``
    into new files, in one transaction whose snapshots keep the table's batch properties."""
    small: dict[tuple[Any, ...], list[Any]] = {}
    for task in table.scan().plan_files():
        data = task.file
        if data.file_size_in_bytes < target_file_bytes:
            key = tuple(data.partition[i] for i in range(len(data.partition)))
            small.setdefault(key, []).append(data)
    chosen = {key: files for key, files in small.items() if len(files) > 1}
    if not chosen:
        return Compaction(name, 0, 0, 0)
    properties = batch_properties(table) or {}
    with table.transaction() as transaction:
        for key in chosen:
            where = partition_filter(PARTITIONING[name], key)
            rows = table.scan(row_filter=where).to_arrow()
            transaction.overwrite(rows, overwrite_filter=where, snapshot_properties=properties)
    after = sum(1 for task in table.scan().plan_files()
                if tuple(task.file.partition[i] for i in range(len(task.file.partition)))
                in chosen)  # fmt: skip
    before = sum(len(files) for files in chosen.values())
    return Compaction(name, len(chosen), before, after)


def partition_filter(fields: tuple[tuple[str, str], ...], key: tuple[Any, ...]) -> Any:
    """The rows of one partition (``key``: its values, one per field) as a pyiceberg filter."""
    # pyiceberg's expressions are pydantic models, whose generated signatures mypy misreads.
    from pyiceberg import expressions

    made: Any = expressions
    conditions = []
    for (column, transform), value in zip(fields, key, strict=True):
        if value is None:
            conditions.append(made.IsNull(column))
        elif transform == "identity":
            conditions.append(made.EqualTo(column, value))
        else:
            start = datetime.combine(_EPOCH + timedelta(days=value), datetime.min.time(), UTC)
            conditions.append(made.GreaterThanOrEqual(column, start.isoformat()))
            conditions.append(made.LessThan(column, (start + timedelta(days=1)).isoformat()))
    return conditions[0] if len(conditions) == 1 else made.And(*conditions)


@dataclass(frozen=True, slots=True)
class Expiry:
    """What expiring one table's old snapshots did."""

    snapshots: int
    files_deleted: int


def expire(table: Table, older_than: datetime) -> Expiry:
    """Expires the snapshots made before ``older_than`` (never the current one), then deletes
    the files that only they referenced: data files, manifests and manifest lists."""
    current = table.current_snapshot()
    old, kept = [], []
    for snapshot in table.snapshots():
        is_current = current is not None and snapshot.snapshot_id == current.snapshot_id
        if snapshot.timestamp_ms < older_than.timestamp() * 1000 and not is_current:
            old.append(snapshot)
        else:
            kept.append(snapshot)
    if not old:
        return Expiry(0, 0)
    unreferenced = referenced_files(table, old) - referenced_files(table, kept)
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
    for path in sorted(unreferenced):
        table.io.delete(path)
    return Expiry(len(old), len(unreferenced))


def referenced_files(table: Table, snapshots: list[Any]) -> set[str]:
    """The files that ``snapshots`` reference: their manifest lists, their manifests and the
    data files live in them."""
    paths: set[str] = set()
    for snapshot in snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                paths.add(entry.data_file.file_path)
    return paths


def maintain(
    output: IcebergOutput,
    *,
    expire_older_than: timedelta = DEFAULT_EXPIRE_AFTER,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Compacts every table's small files, then expires its snapshots older than
    ``expire_older_than``; returns what it did, by table."""
    report: dict[str, Any] = {}
    with IcebergTables(output) as tables:
        for name in tables.existing():
            report[name] = maintain_table(tables, name, expire_older_than, target_file_bytes, now)
    return report


def maintain_table(
    tables: IcebergTables,
    name: str,
    expire_older_than: timedelta,
    target_file_bytes: int,
    now: datetime | None,
) -> dict[str, int]:
    """``maintain`` of one table."""
    compaction = compact(tables.load(name), name, target_file_bytes)
    # After the compaction: its own intermediate snapshots may be old enough already.
    cutoff = (now or datetime.now(UTC)) - expire_older_than
    expiry = expire(tables.load(name), cutoff)
    return {
        "partitions_compacted": compaction.partitions,
        "files_before": compaction.files_before,
        "files_after": compaction.files_after,
        "snapshots_expired": expiry.snapshots,
        "files_deleted": expiry.files_deleted,
    }
