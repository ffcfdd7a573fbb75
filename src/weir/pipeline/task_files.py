"""One Spark task's share of a micro-batch: raw records parsed, quarantine and logs written,
the parsed rows of new messages spooled for the driver.

The log ETL job's tasks (see ``weir.pipeline.log_files``) run ``write_task(spool)`` over the raw
records of their offset range (Arrow batches of key, value, topic, partition, offset). Each
parses its records (see ``weir.logformats.batch``; the records' own timestamps give yearless
lines their year) and writes the quarantined ones with pyarrow as ``quarantine/`` Parquet files
(columns ``QUARANTINE_COLUMNS``). Parsed rows whose masked message the driver's template miner
knew before the batch (``weir.pipeline.logs_writer.known_ids``) are stamped with their template
id and written as ``logs`` files at once; the others, unsplit, go to one Arrow IPC file under
``parsed/`` (``PARSED_LOGS``), which the driver stamps and writes once it has mined
the batch (``weir.pipeline.logs_writer``). Its output is small: one ``file`` row per Parquet
file, one ``parsed`` row for its parsed-rows file if it left rows, one ``count`` row per
(parsed, source, minute, level) with its number of lines, and one ``template`` row per distinct
(source, masked message) with its lines, first and last timestamps and first offset, which the
driver mines.

When the job deduplicates (``weir.pipeline.dedupe``), a task drops the copies among its
records before anything is counted or written: by the key's headers before it parses them, by
its fields after (rows then go on in offset order), and reports one ``high-water`` row per
writer it saw.

Files are named after the task's partition and attempt, so a failed attempt's files never
collide with the retry's; the driver keeps only the files that the job's successful tasks
reported and deletes the others before it commits the batch.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.pandas.types import to_arrow_schema

from weir.logformats import FormatRegistry
from weir.logformats.batch import PARSED_SCHEMA, BatchParser
from weir.logformats.mining import Occurrences, earliest, latest
from weir.pipeline import logs_writer
from weir.pipeline.dedupe import HIGH_WATER_FILE, DedupeKey, HighWaters, TaskDedupe
from weir.pipeline.kafka_io import HEADER_COLUMN_PREFIX
from weir.pipeline.logs_writer import (
    LOGS_COLUMNS,
    PARSED_SUFFIX,
    DirectoryFiles,
    LogsFiles,
    TemplateIds,
    known_ids,
    task_name,
)
from weir.pipeline.manifest import COUNT, FILE, HIGH_WATER, MANIFEST, PARSED, TEMPLATE
from weir.pipeline.metrics import LineCount

QUARANTINE_COLUMNS = ("source", "line", "reason", "detail", "topic", "partition", "offset")
RECORD_COLUMNS = ("topic", "partition", "offset")
RAW_COLUMNS = ("key", "value", *RECORD_COLUMNS)
TIMESTAMP_COLUMN = "timestamp"  # the records' timestamps, when the batches carry them
PARSED_ARROW = pa.schema(
    [*PARSED_SCHEMA, ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
)
# The rows a task leaves for the driver: the logs columns but the template id, and source.
PARSED_LOGS = pa.schema([PARSED_ARROW.field(name) for name in (*LOGS_COLUMNS, "source")
                         if name != "template_id"])  # fmt: skip
# ``MANIFEST`` in Arrow: the batch in which a task returns its manifest.
MANIFEST_ARROW = to_arrow_schema(MANIFEST)
PARSE_ROWS = 200_000  # raw records a task buffers before it parses them
_US_PER_MINUTE = 60_000_000
_OCCURRENCES = [("template", "count"), ("timestamp", "min"), ("timestamp", "max"),
                ("partition", "min"), ("offset", "min")]  # fmt: skip


def parse_records(parser: BatchParser, batch: pa.RecordBatch) -> Iterator[pa.Table]:
    """The raw records of ``batch`` (key, value, topic, partition, offset) parsed, in parts:
    single-chunk tables of ``PARSED_ARROW``, rows grouped by how they were parsed."""
    records = [batch.column(name) for name in RECORD_COLUMNS]
    stamps = batch.column(TIMESTAMP_COLUMN) if TIMESTAMP_COLUMN in batch.schema.names else None
    for rows, part in parser.parse_parts(batch.column("key"), batch.column("value"), stamps):
        columns = [part.column(name).chunk(0) for name in PARSED_SCHEMA.names]
        columns += [column.take(rows) for column in records]
        yield pa.Table.from_arrays(columns, schema=PARSED_ARROW)


@functools.lru_cache(maxsize=4)
def worker_parser(year: int, formats: tuple[str, ...] = ()) -> BatchParser:
    """The parser of this Python worker's tasks: Spark reuses a worker for task after task, and
    the parser keeps the templates of the messages it has seen. ``formats``: the job's format
    files, besides the shipped ones."""
    registry = FormatRegistry.builtin().with_files(Path(path) for path in formats)
    return BatchParser(year=year, registry=registry)


def write_task(
    staging: str, formats: tuple[str, ...] = (), dedupe: str | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function of a task writing its records under ``staging``: raw Arrow batches in, the
    task's manifest (one batch of ``MANIFEST_ARROW``) out. ``dedupe``: the key the job
    deduplicates on (``DedupeKey.spec``), if it does."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parser = worker_parser(date.today().year, formats)
        spool = Path(staging)
        files = TaskFiles(spool, task_name(), parser, known_ids(spool), task_dedupe(spool, dedupe))
        try:
            for batch in batches:
                files.add(batch)
        except BaseException:
            files.abandon()
            raise
        yield files.finish()

    return run


def task_dedupe(spool: Path, key: str | None) -> TaskDedupe | None:
    """The task's deduplication on ``key``, from the high waters the driver left in ``spool``."""
    if key is None:
        return None
    return TaskDedupe(DedupeKey.parse(key), HighWaters.read(spool / HIGH_WATER_FILE).positions())


class TaskFiles:
    """Buffers a task's raw records and parses them whenever ``PARSE_ROWS`` are buffered: counts
    their lines, notes their distinct masked messages in its occurrences, hands the parsed rows
    whose template id ``known`` gives to its logs files (``LogsFiles``) and appends the others
    to the task's parsed-rows file, and buffers the quarantined rows, which it writes whenever
    ``logs_writer.ROWS_PER_FLUSH`` are buffered and at the end; reports what it wrote and
    counted.

    Parsing many records at once spreads the parser's per-call costs and masks each distinct
    message once per call. A task holds at most about ``PARSE_ROWS`` raw records and their
    parsed rows, and ``ROWS_PER_FLUSH`` quarantined and as many stamped rows, in memory.
    """

    def __init__(
        self,
        staging: Path,
        name: str,
        parser: BatchParser,
        known: TemplateIds | None = None,
        dedupe: TaskDedupe | None = None,
    ) -> None:
        self.staging = staging
        self.name = name
        self.parser = parser
        self.known = known
        self.dedupe = dedupe
        self.files = DirectoryFiles(staging, name)
        self._logs = LogsFiles(self.files)
        self._raw: list[pa.RecordBatch] = []
        self._raw_rows = 0
        self._quarantine: list[pa.Table] = []
        self._quarantined = 0
        self._parsed: tuple[pa.ipc.RecordBatchStreamWriter, pa.NativeFile] | None = None
        self._parsed_file: str | None = None
        self._counts: dict[tuple[int, str | None, int | None, str | None], int] = {}
        self._occurrences: dict[tuple[str, str], Occurrences] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffers a batch of raw records (key, value, topic, partition, offset, optionally
        their timestamps and header columns; any other columns are ignored)."""
        if batch.num_rows == 0:
            return
        names = [*RAW_COLUMNS, *(name for name in batch.schema.names
                                 if name == TIMESTAMP_COLUMN
                                 or name.startswith(HEADER_COLUMN_PREFIX))]  # fmt: skip
        self._raw.append(batch.select(names))
        self._raw_rows += batch.num_rows
        if self._raw_rows >= PARSE_ROWS:
            self._parse()
        if self._quarantined >= logs_writer.ROWS_PER_FLUSH:
            self._flush()

    def finish(self) -> pa.RecordBatch:
        """Writes what is buffered, closes the files and returns the task's manifest."""
        if self._raw:
            self._parse()
        self._flush()
        self._logs.flush()
        self.files.close()
        if self._parsed is not None:
            writer, sink = self._parsed
            writer.close()
            sink.close()
            self._parsed = None
        rows: list[dict[str, object]] = [{"kind": FILE, "path": p} for p in self.files.written]
        if self._parsed_file is not None:
            rows.append({"kind": PARSED, "path": self._parsed_file})
        rows += [
            {"kind": COUNT, "parsed": parsed, "source": source, "minute": minute,
             "level": level, "lines": lines}
            for (parsed, source, minute, level), lines in self._counts.items()
        ]  # fmt: skip
        rows += [
            {"kind": TEMPLATE, "source": o.source, "template": o.template, "lines": o.lines,
             "first_seen": o.first_seen, "last_seen": o.last_seen,
             "partition": o.position[0], "offset": o.position[1]}
            for o in self._occurrences.values()
        ]  # fmt: skip
        if self.dedupe is not None:
            rows += [
                {"kind": HIGH_WATER, "topic": topic, "partition": partition,
                 "identity": identity, "position": position,
                 "lines": self.dedupe.dropped.get((topic, partition, identity), 0)}
                for (topic, partition, identity), position in self.dedupe.highest.items()
            ]  # fmt: skip
        return pa.RecordBatch.from_pylist(rows, schema=MANIFEST_ARROW)

    def abandon(self) -> None:
        """Closes the open files after a failure; the driver deletes them (none was reported)."""
        self.files.abandon()
        if self._parsed is not None:
            for closing in self._parsed:
                with contextlib.suppress(OSError):
                    closing.close()
            self._parsed = None

    def _parse(self) -> None:
        """Parses the buffered records: counts their lines, spools the parsed rows, notes their
        masked messages and buffers the quarantined rows."""
        raw = pa.Table.from_batches(self._raw).combine_chunks()
        self._raw, self._raw_rows = [], 0
        dedupe = self.dedupe
        if dedupe is not None and dedupe.key.headers:
            raw = raw.filter(dedupe.keep(raw)).combine_chunks()
        if raw.num_rows == 0:
            return
        tables: Iterable[pa.Table] = parse_records(self.parser, raw.to_batches()[0])
        if dedupe is not None and not dedupe.key.headers:
            tables = deduplicated(list(tables), dedupe)
        for table in tables:
            self._count(table)
            parsed = pc.equal(table.column("parsed"), 1)
            if pc.all(parsed).as_py():
                self._add_parsed(table)
                continue
            self._add_parsed(table.filter(parsed))
            quarantined = table.filter(pc.invert(parsed))
            if quarantined.num_rows:
                self._quarantine.append(quarantined.select(QUARANTINE_COLUMNS))
                self._quarantined += quarantined.num_rows

    def _count(self, table: pa.Table) -> None:
        """Adds the table's lines per (parsed, source, minute, level) to the task's counts. Each
        row's key is packed into one integer (its minute, and the indices of its source and
        level among the table's distinct ones), so one sort of integers groups the rows."""
        if table.num_rows == 0:
            return
        stamps = table.column("timestamp").combine_chunks()
        timed = stamps.is_valid().to_numpy(zero_copy_only=False)
        minutes = np.floor_divide(stamps.cast(pa.int64()).fill_null(0).to_numpy(), _US_PER_MINUTE)
        parsed = table.column("parsed").combine_chunks().to_numpy(zero_copy_only=False)
        sources, source_codes = _codes(table.column("source"))
        levels, level_codes = _codes(table.column("level"))
        first = int(minutes[timed].min()) if timed.any() else 0
        minute_codes = np.where(timed, minutes - first + 1, 0)
        packed = (
            (minute_codes * (len(sources) + 1) + source_codes) * (len(levels) + 1) + level_codes
        ) * 2 + (parsed == 1)
        keys, lines = np.unique(packed, return_counts=True)
        for key, count in zip(keys.tolist(), lines.tolist(), strict=True):
            rest, is_parsed = divmod(key, 2)
            rest, level = divmod(rest, len(levels) + 1)
            minute, source = divmod(rest, len(sources) + 1)
            counted = (
                int(is_parsed),
                sources[source],
                (minute - 1 + first) * _US_PER_MINUTE if minute else None,
                levels[level],
            )
            self._counts[counted] = self._counts.get(counted, 0) + count

    def _add_parsed(self, parsed: pa.Table) -> None:
        """Notes the masked messages of parsed rows in its occurrences, and hands the rows to
        the logs files, stamped, or to the parsed-rows file."""
        if parsed.num_rows == 0:
            return
        rows = parsed.select(PARSED_LOGS.names)
        self._note_occurrences(rows)
        if self.known is None:
            self._spool(rows)
            return
        stamped = self.known.stamp(rows)
        known = stamped.column("template_id").is_valid()
        if pc.all(known).as_py():
            self._logs.add(stamped)
            return
        self._logs.add(stamped.filter(known))
        self._spool(rows.filter(pc.invert(known)))

    def _spool(self, rows: pa.Table) -> None:
        """Appends parsed rows (``PARSED_LOGS``) to the task's parsed-rows file."""
        if rows.num_rows == 0:
            return
        if self._parsed is None:
            self._parsed_file = f"parsed/{self.name}{PARSED_SUFFIX}"
            sink = logs_writer.output_file(self.staging / self._parsed_file)
            self._parsed = (pa.ipc.new_stream(sink, PARSED_LOGS), sink)
        for batch in rows.to_batches():
            self._parsed[0].write_batch(batch)

    def _note_occurrences(self, rows: pa.Table) -> None:
        grouped = rows.group_by(["source", "template"]).aggregate(_OCCURRENCES)
        columns = [grouped.column(n).to_pylist() for n in ("source", "template",
                   "template_count", "partition_min", "offset_min")]  # fmt: skip
        stamps = [pc.cast(grouped.column(f"timestamp_{f}"), pa.int64()).to_pylist()
                  for f in ("min", "max")]  # fmt: skip
        found = self._occurrences
        for source, template, lines, partition, offset, first, last in zip(
            *columns, *stamps, strict=True
        ):
            key = (source, template)
            seen = found.get(key)
            if seen is None:
                found[key] = Occurrences(source, template, lines, first, last, (partition, offset))
            else:
                found[key] = Occurrences(
                    source, template, seen.lines + lines, earliest(seen.first_seen, first),
                    latest(seen.last_seen, last), min(seen.position, (partition, offset)),
                )  # fmt: skip

    def _flush(self) -> None:
        """Appends the buffered quarantined rows to the task's quarantine file."""
        if self._quarantine:
            self.files.write("quarantine", pa.concat_tables(self._quarantine))
        self._quarantine, self._quarantined = [], 0


def deduplicated(tables: list[pa.Table], dedupe: TaskDedupe) -> list[pa.Table]:
    """Parsed rows without the copies ``dedupe`` finds by their fields, in offset order."""
    if not tables:
        return []
    rows = pa.concat_tables(tables).sort_by([("partition", "ascending"), ("offset", "ascending")])
    return [rows.filter(dedupe.keep(rows)).combine_chunks()]


def _codes(column: pa.ChunkedArray) -> tuple[list[str | None], np.ndarray]:
    """The column's distinct values, None first, and each row's index among them (int64)."""
    encoded = column.combine_chunks().dictionary_encode()
    values: list[str | None] = [None, *encoded.dictionary.to_pylist()]
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    return values, codes


def line_counts(rows: list[dict[str, object]]) -> list[LineCount]:
    """The ``count`` rows of a job's manifests, summed over its tasks."""
    totals: dict[tuple[object, ...], int] = {}
    for row in rows:
        if row["kind"] == COUNT:
            key = (row["parsed"], row["source"], row["minute"], row["level"])
            totals[key] = totals.get(key, 0) + int(row["lines"])  # type: ignore[call-overload]
    return [
        LineCount(
            parsed=parsed == 1,
            source=source,  # type: ignore[arg-type]
            minute=minute,  # type: ignore[arg-type]
            level=level,  # type: ignore[arg-type]
            lines=lines,
        )
        for (parsed, source, minute, level), lines in totals.items()
    ]
