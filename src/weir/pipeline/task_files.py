"""One Spark task's share of a micro-batch: raw records parsed and written as Parquet files.

The log ETL job's tasks (see ``weir.pipeline.log_files``) run ``write_task(spool)`` over the raw
records of their offset range (Arrow batches of key, value, topic, partition, offset). Each
parses its records (see ``weir.logformats.batch``; the records' own timestamps give yearless
lines their year) and writes them with pyarrow under the spool directory, in the warehouse's
layout: ``logs/source=S/date=YYYY-MM-DD/hour=H/`` (columns ``LOGS_COLUMNS``; source, date and
hour live in the path) and ``quarantine/`` (columns ``QUARANTINE_COLUMNS``). Its output is
small: one ``file`` row per file written and one ``count`` row per (parsed, source, minute,
level) with its number of lines.

Files are named after the task's partition and attempt, so a failed attempt's files never
collide with the retry's; the driver keeps only the files that the job's successful tasks
reported and deletes the others before it commits the batch.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql.pandas.types import to_arrow_schema

from weir.logformats import FormatRegistry
from weir.logformats.batch import PARSED_SCHEMA, BatchParser
from weir.pipeline.manifest import COUNT, FILE, MANIFEST
from weir.pipeline.metrics import LineCount

# Columns added later go at the end: older files simply lack them (readers see nulls).
LOGS_COLUMNS = ("timestamp", "level", "component", "pid", "message", "template",
                "topic", "partition", "offset", "raw_level", "host", "thread",
                "fields")  # fmt: skip
QUARANTINE_COLUMNS = ("source", "line", "reason", "detail", "topic", "partition", "offset")
RECORD_COLUMNS = ("topic", "partition", "offset")
RAW_COLUMNS = ("key", "value", *RECORD_COLUMNS)
TIMESTAMP_COLUMN = "timestamp"  # the records' timestamps, when the batches carry them
PARSED_ARROW = pa.schema(
    [*PARSED_SCHEMA, ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
)
# ``MANIFEST`` in Arrow: the batch in which a task returns its manifest.
MANIFEST_ARROW = to_arrow_schema(MANIFEST)
PARSE_ROWS = 200_000  # raw records a task buffers before it parses them
ROWS_PER_FLUSH = 500_000  # parsed rows a task buffers before it writes them out
# Columns that repeat values enough to gain from dictionary encoding; messages and raw lines
# mostly differ, so encoding them only costs time.
_DICTIONARY_COLUMNS = ["level", "component", "pid", "template", "topic", "partition", "source",
                       "reason", "detail", "raw_level", "host", "thread"]  # fmt: skip
# Columns whose min and max let a reader skip row groups; those of messages and raw lines would
# only cost time.
_STATISTICS_COLUMNS = ["timestamp", "level", "component", "pid", "topic", "partition", "offset",
                       "source", "reason"]  # fmt: skip
_WRITE_BUFFER_BYTES = 64 << 10  # per open file (MAX_OPEN_FILES of them at most)
MIN_RUN_ROWS = 32  # mean rows per run of one directory from which runs are sliced unsorted
MAX_OPEN_FILES = 1_000  # a task's files open at once, beyond which a flush closes them
_US_PER_MINUTE = 60_000_000
_US_PER_HOUR = 3_600_000_000
_US_PER_DAY = 86_400_000_000
_EPOCH = date(1970, 1, 1)


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
    staging: str, formats: tuple[str, ...] = ()
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function of a task writing its records under ``staging``: raw Arrow batches in, the
    task's manifest (one batch of ``MANIFEST_ARROW``) out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        parser = worker_parser(date.today().year, formats)
        files = TaskFiles(Path(staging), f"part-{task}-{uuid.uuid4().hex[:8]}", parser)
        try:
            for batch in batches:
                files.add(batch)
        except BaseException:
            files.abandon()
            raise
        yield files.finish()

    return run


class TaskFiles:
    """Buffers a task's raw records and parses them whenever ``PARSE_ROWS`` are buffered; writes
    the parsed rows out whenever ``ROWS_PER_FLUSH`` are buffered and at the end; reports what it
    wrote and counted.

    Parsing many records at once spreads the parser's per-call costs and templates each
    distinct message once per call. Each directory's file stays open across flushes (a flush
    appends a row group), so a task writes one file per directory: logs spread over many hours
    cost a file per hour, and a file costs far more than a row group, a row group more than a
    row. Past ``MAX_OPEN_FILES`` directories, a flush closes its files and the next one starts
    new ones. A task holds at most about ``ROWS_PER_FLUSH`` parsed rows and ``PARSE_ROWS`` raw
    records in memory.
    """

    def __init__(self, staging: Path, name: str, parser: BatchParser) -> None:
        self.staging = staging
        self.name = name
        self.parser = parser
        self._raw: list[pa.RecordBatch] = []
        self._raw_rows = 0
        self._buffered = 0
        self._logs: dict[tuple[str, str, int], list[pa.Table]] = {}
        self._quarantine: list[pa.Table] = []
        self._written: list[str] = []
        self._counts: dict[tuple[int, str | None, int | None, str | None], int] = {}
        self._open: dict[str, tuple[pq.ParquetWriter, pa.NativeFile]] = {}
        self._flushes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffers a batch of raw records (key, value, topic, partition, offset and any other
        columns, which are ignored)."""
        if batch.num_rows == 0:
            return
        stamped = TIMESTAMP_COLUMN in batch.schema.names
        names = RAW_COLUMNS + ((TIMESTAMP_COLUMN,) if stamped else ())
        self._raw.append(batch.select(names))
        self._raw_rows += batch.num_rows
        if self._raw_rows >= min(PARSE_ROWS, ROWS_PER_FLUSH):
            self._parse()
        if self._buffered >= ROWS_PER_FLUSH:
            self._flush()

    def finish(self) -> pa.RecordBatch:
        """Writes what is buffered, closes the files and returns the task's manifest."""
        self._flush()
        self._close()
        rows: list[dict[str, object]] = [{"kind": FILE, "path": path} for path in self._written]
        rows += [
            {"kind": COUNT, "parsed": parsed, "source": source, "minute": minute,
             "level": level, "lines": lines}
            for (parsed, source, minute, level), lines in self._counts.items()
        ]  # fmt: skip
        return pa.RecordBatch.from_pylist(rows, schema=MANIFEST_ARROW)

    def abandon(self) -> None:
        """Closes the open files after a failure; the driver deletes them (none was reported)."""
        for writer, sink in self._open.values():
            with contextlib.suppress(OSError):
                writer.close()
            with contextlib.suppress(OSError):
                sink.close()
        self._open = {}

    def _parse(self) -> None:
        """Parses the buffered records into the buffered tables, counting their lines."""
        raw = pa.Table.from_batches(self._raw).combine_chunks()
        self._raw, self._raw_rows = [], 0
        self._buffered += raw.num_rows
        for table in parse_records(self.parser, raw.to_batches()[0]):
            self._count(table)
            parsed = pc.equal(table.column("parsed"), 1)
            if pc.all(parsed).as_py():
                self._add_logs(table)
                continue
            self._add_logs(table.filter(parsed))
            quarantined = table.filter(pc.invert(parsed))
            if quarantined.num_rows:
                self._quarantine.append(quarantined.select(QUARANTINE_COLUMNS))

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

    def _add_logs(self, logs: pa.Table) -> None:
        """Buffers parsed rows under their directories. Rows mostly come in runs of one hour of
        one source (logs are written in time order); when the runs are long they are sliced
        where they lie, otherwise the rows are first sorted by directory."""
        if logs.num_rows == 0:
            return
        micros = pc.cast(logs.column("timestamp"), pa.int64()).to_numpy(zero_copy_only=False)
        days = np.floor_divide(micros, _US_PER_DAY)
        hours = np.floor_divide(micros, _US_PER_HOUR) % 24
        sources = logs.column("source").combine_chunks().dictionary_encode()
        names = sources.dictionary.to_pylist()
        indices = sources.indices.to_numpy().astype(np.int64)
        code = (indices * 10_000_000 + days) * 24 + hours
        table = logs.select(LOGS_COLUMNS)
        starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
        if len(starts) * MIN_RUN_ROWS <= len(code):
            firsts = starts
        else:
            order = np.argsort(code, kind="stable")
            sorted_code = code[order]
            starts = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
            firsts = order[starts]
            table = table.take(pa.array(order))
        ends = np.r_[starts[1:], len(code)]
        keys: dict[int, tuple[str, str, int]] = {}
        for start, end, at in zip(starts.tolist(), ends.tolist(), firsts.tolist(), strict=True):
            key = keys.get(int(code[at]))
            if key is None:
                day = (_EPOCH + timedelta(days=int(days[at]))).isoformat()
                key = keys[int(code[at])] = (names[int(indices[at])], day, int(hours[at]))
            self._logs.setdefault(key, []).append(table.slice(start, end - start))

    def _flush(self) -> None:
        """Parses the buffered records and appends each directory's rows to its file, opening
        the file if need be."""
        if self._raw:
            self._parse()
        for (source, day, hour), tables in self._logs.items():
            directory = f"logs/source={source}/date={day}/hour={hour}"
            # One chunk per column: the Parquet writer otherwise walks each of the many small
            # slices a directory collects (one per run of its rows) apart.
            self._write(directory, pa.concat_tables(tables).combine_chunks())
        if self._quarantine:
            self._write("quarantine", pa.concat_tables(self._quarantine))
        self._logs, self._quarantine, self._buffered = {}, [], 0
        if len(self._open) > MAX_OPEN_FILES:
            self._close()

    def _write(self, directory: str, table: pa.Table) -> None:
        opened = self._open.get(directory)
        if opened is None:
            relative = f"{directory}/{self.name}-{self._flushes:04d}.parquet"
            sink = _output_file(self.staging / relative)
            writer = pq.ParquetWriter(
                sink,
                table.schema,
                compression="snappy",
                use_dictionary=_DICTIONARY_COLUMNS,
                write_statistics=_STATISTICS_COLUMNS,
            )
            self._open[directory] = opened = (writer, sink)
            self._written.append(relative)
        writer = opened[0]
        if not table.schema.equals(writer.schema):
            table = table.cast(writer.schema)
        writer.write_table(table)

    def _close(self) -> None:
        for writer, sink in self._open.values():
            writer.close()
            sink.close()
        self._open = {}
        self._flushes += 1


def _codes(column: pa.ChunkedArray) -> tuple[list[str | None], np.ndarray]:
    """The column's distinct values, None first, and each row's index among them (int64)."""
    encoded = column.combine_chunks().dictionary_encode()
    values: list[str | None] = [None, *encoded.dictionary.to_pylist()]
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    return values, codes


def _output_file(path: Path) -> pa.NativeFile:
    """A new file at ``path``, buffered, its directories created if missing (a spool's
    directories outlive its files, so they mostly exist already)."""
    try:
        raw = pa.OSFile(str(path), "wb")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = pa.OSFile(str(path), "wb")
    return pa.BufferedOutputStream(raw, _WRITE_BUFFER_BYTES)


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
