"""Parsed rows stamped with their template ids and written as the ``logs`` table's Parquet
files.

Before a micro-batch runs, the driver writes the ids of every masked message its miner already
knows (``weir.logformats.mining``) into the spool (``KNOWN_IDS_FILE``, by
``write_template_ids``). The batch's tasks (``weir.pipeline.task_files``) stamp the rows whose
masked message is known (``TemplateIds``, ``known_ids``) and write them at once (``LogsFiles``);
they leave the other rows in the spool as Arrow IPC files (``PARSED_LOGS``), and report the
distinct masked messages they saw. The driver mines those into template ids; then, if any rows
were left, it reads each left file, adds each row's ``template_id`` and writes the rows
(``write_left_rows``, one thread per file: pyarrow's compute functions and Parquet writer run
outside Python's global lock).
Logs files are laid out as ``logs/source=S/date=YYYY-MM-DD/hour=H/`` (columns ``LOGS_COLUMNS``;
source, date and hour live in the path; rows without a timestamp under ``NULL_PARTITION``).
Files are named after the task's partition and attempt, so a failed attempt's files never
collide with the retry's.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from pyspark import TaskContext

# Columns added later go at the end: older files simply lack them (readers see nulls).
LOGS_COLUMNS = ("timestamp", "level", "component", "pid", "message", "template",
                "topic", "partition", "offset", "raw_level", "host", "thread",
                "fields", "template_id", "timestamp_inferred")  # fmt: skip
PARSED_SUFFIX = ".arrow"
# In the spool, beside the tasks' files; its own suffix keeps it from being taken for one.
KNOWN_IDS_FILE = "known-template-ids.ipc"
TEMPLATE_IDS = pa.schema(
    [("source", pa.string()), ("template", pa.string()), ("template_id", pa.int64())]
)
ROWS_PER_FLUSH = 500_000  # parsed rows a task buffers before it writes them out
# Columns that repeat values enough to gain from dictionary encoding; messages and raw lines
# mostly differ, so encoding them only costs time.
DICTIONARY_COLUMNS = ["level", "component", "pid", "template", "topic", "partition", "source",
                      "reason", "detail", "raw_level", "host", "thread",
                      "template_id"]  # fmt: skip
# Columns whose min and max let a reader skip row groups; those of messages and raw lines would
# only cost time.
STATISTICS_COLUMNS = ["timestamp", "level", "component", "pid", "topic", "partition", "offset",
                      "source", "reason", "template_id"]  # fmt: skip
_WRITE_BUFFER_BYTES = 64 << 10  # per open file (MAX_OPEN_FILES of them at most)
MIN_RUN_ROWS = 32  # mean rows per run of one directory from which runs are sliced unsorted
MAX_OPEN_FILES = 1_000  # a task's files open at once, beyond which a flush closes them
_US_PER_HOUR = 3_600_000_000
_US_PER_DAY = 86_400_000_000
_EPOCH = date(1970, 1, 1)
_KEY_SEPARATOR = "\x00"
# Rows without a timestamp (a format's ``on_error = "null"``) go to date=/hour= directories of
# Hive's name for null, which Spark reads back as null partition values.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_UNTIMED_DAY = 9_000_000  # after 9999-12-31, the last day a timestamp can have


def task_name() -> str:
    """``part-<partition>-<attempt>-<random>``: unique to this task attempt."""
    context = TaskContext.get()
    task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
    return f"part-{task}-{uuid.uuid4().hex[:8]}"


class DirectoryFiles:
    """A task's Parquet files under ``staging``, one open per directory: each ``write`` to a
    directory appends a row group to its file. ``close`` closes them all; the next write to a
    directory then starts a new file. ``written``: every file, relative to ``staging``."""

    def __init__(self, staging: Path, name: str) -> None:
        self.staging = staging
        self.name = name
        self.written: list[str] = []
        self._open: dict[str, tuple[pq.ParquetWriter, pa.NativeFile]] = {}
        self._closes = 0

    def __len__(self) -> int:
        return len(self._open)

    def write(self, directory: str, table: pa.Table) -> None:
        opened = self._open.get(directory)
        if opened is None:
            relative = f"{directory}/{self.name}-{self._closes:04d}.parquet"
            sink = output_file(self.staging / relative)
            writer = pq.ParquetWriter(
                sink,
                table.schema,
                compression="snappy",
                use_dictionary=[c for c in DICTIONARY_COLUMNS if c in table.schema.names],
                write_statistics=[c for c in STATISTICS_COLUMNS if c in table.schema.names],
            )
            self._open[directory] = opened = (writer, sink)
            self.written.append(relative)
        writer = opened[0]
        if not table.schema.equals(writer.schema):
            table = table.cast(writer.schema)
        writer.write_table(table)

    def close(self) -> None:
        for writer, sink in self._open.values():
            writer.close()
            sink.close()
        self._open = {}
        self._closes += 1

    def abandon(self) -> None:
        """Closes the open files after a failure; the driver deletes them (none was reported)."""
        for writer, sink in self._open.values():
            with contextlib.suppress(OSError):
                writer.close()
            with contextlib.suppress(OSError):
                sink.close()
        self._open = {}


class LogsFiles:
    """Buffers parsed rows by directory and appends each directory's rows to its file whenever
    ``ROWS_PER_FLUSH`` are buffered and at the end.

    A task thus writes one file per directory: logs spread over many hours cost a file per
    hour, and a file costs far more than a row group, a row group more than a row. Past
    ``MAX_OPEN_FILES`` directories, a flush closes its files and the next one starts new ones.
    """

    def __init__(self, files: DirectoryFiles) -> None:
        self.files = files
        self._logs: dict[tuple[str, str, str], list[pa.Table]] = {}
        self._buffered = 0

    def add(self, logs: pa.Table) -> None:
        """Buffers parsed rows (``LOGS_COLUMNS`` and ``source``) under their directories. Rows
        mostly come in runs of one hour of one source (logs are written in time order); when
        the runs are long they are sliced where they lie, otherwise the rows are first sorted
        by directory."""
        if logs.num_rows == 0:
            return
        days, hours = _days_and_hours(logs.column("timestamp"))
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
        keys: dict[int, tuple[str, str, str]] = {}
        for start, end, at in zip(starts.tolist(), ends.tolist(), firsts.tolist(), strict=True):
            key = keys.get(int(code[at]))
            if key is None:
                day, hour = _partition_values(int(days[at]), int(hours[at]))
                key = keys[int(code[at])] = (names[int(indices[at])], day, hour)
            self._logs.setdefault(key, []).append(table.slice(start, end - start))
        self._buffered += logs.num_rows
        if self._buffered >= ROWS_PER_FLUSH:
            self.flush()

    def flush(self) -> None:
        """Appends each directory's buffered rows to its file."""
        for (source, day, hour), tables in self._logs.items():
            directory = f"logs/source={source}/date={day}/hour={hour}"
            # One chunk per column: the Parquet writer otherwise walks each of the many small
            # slices a directory collects (one per run of its rows) apart.
            self.files.write(directory, pa.concat_tables(tables).combine_chunks())
        self._logs, self._buffered = {}, 0
        if len(self.files) > MAX_OPEN_FILES:
            self.files.close()


def _days_and_hours(stamps: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's day since the epoch and hour of the day (int64); ``_UNTIMED_DAY`` and 0 for
    a row without a timestamp."""
    micros = pc.cast(stamps, pa.int64())
    timed = micros.is_valid().to_numpy(zero_copy_only=False)
    values = micros.fill_null(0).to_numpy(zero_copy_only=False)
    days = np.where(timed, np.floor_divide(values, _US_PER_DAY), _UNTIMED_DAY)
    hours = np.where(timed, np.floor_divide(values, _US_PER_HOUR) % 24, 0)
    return days, hours


def _partition_values(day: int, hour: int) -> tuple[str, str]:
    """The ``date`` and ``hour`` of a directory; Hive's null for rows without a timestamp."""
    if day == _UNTIMED_DAY:
        return NULL_PARTITION, NULL_PARTITION
    return (_EPOCH + timedelta(days=day)).isoformat(), str(hour)


def template_ids_table(ids: Mapping[tuple[str, str], int]) -> pa.Table:
    """The template id of each (source, masked message), as a ``TEMPLATE_IDS`` table."""
    sources, templates, numbers = [], [], []
    for (source, template), template_id in ids.items():
        sources.append(source)
        templates.append(template)
        numbers.append(template_id)
    return pa.table([sources, templates, numbers], schema=TEMPLATE_IDS)


def write_template_ids(path: Path, ids: Mapping[tuple[str, str], int]) -> None:
    """``template_ids_table(ids)`` in Arrow IPC, replacing ``path`` whole (a reader sees the
    old file or the new one)."""
    table = template_ids_table(ids)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_file(sink, TEMPLATE_IDS) as writer:
        writer.write_table(table)
    os.replace(temporary, path)


_known: dict[Path, tuple[tuple[int, int, int], TemplateIds]] = {}


def known_ids(spool: Path) -> TemplateIds | None:
    """The ids the driver knew before the running batch (``KNOWN_IDS_FILE`` in ``spool``), or
    None if it wrote none. A worker keeps the file's lookup until the driver replaces it."""
    path = spool / KNOWN_IDS_FILE
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    version = (status.st_ino, status.st_mtime_ns, status.st_size)
    cached = _known.get(path)
    if cached is None or cached[0] != version:
        with pa.memory_map(str(path)) as source:
            cached = _known[path] = (version, TemplateIds(pa.ipc.open_file(source).read_all()))
    return cached[1]


class TemplateIds:
    """Looks up the template ids of parsed rows by (source, template)."""

    def __init__(self, table: pa.Table) -> None:
        """``table``: ``TEMPLATE_IDS``."""
        self.ids = table.column("template_id").combine_chunks()
        keys = _keys(table.column("source"), table.column("template"))
        self._options = pc.SetLookupOptions(value_set=keys)

    def stamp(self, parsed: pa.Table) -> pa.Table:
        """``parsed`` (``PARSED_LOGS``) with its ``template_id`` column (null where none is
        known)."""
        keys = _keys(parsed.column("source"), parsed.column("template"))
        positions = pc.index_in(keys, options=self._options)
        return parsed.append_column("template_id", pc.take(self.ids, positions))


def _keys(sources: pa.ChunkedArray, templates: pa.ChunkedArray) -> pa.Array:
    joined = pc.binary_join_element_wise(sources, templates, _KEY_SEPARATOR)
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def read_parsed(path: Path) -> Iterator[pa.Table]:
    """The tables of a parsed-rows file, one per record batch."""
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        for batch in reader:
            yield pa.Table.from_batches([batch])


def write_left_rows(spool: Path, left: list[str], ids: TemplateIds) -> list[str]:
    """Writes the parsed-rows files ``left`` (paths relative to ``spool``), stamped with
    ``ids``, as logs files under ``spool``, one thread per file; returns the files written."""
    if not left:
        return []
    with ThreadPoolExecutor(min(len(left), os.cpu_count() or 1)) as pool:
        written = pool.map(lambda relative: write_parsed(spool, relative, ids), left)
        return [path for paths in written for path in paths]


def write_parsed(spool: Path, relative: str, ids: TemplateIds) -> list[str]:
    """The logs files of one parsed-rows file, stamped with ``ids``: the files written."""
    files = DirectoryFiles(spool, task_name())
    logs = LogsFiles(files)
    try:
        for table in read_parsed(spool / relative):
            logs.add(ids.stamp(table))
        logs.flush()
        files.close()
    except BaseException:
        files.abandon()
        raise
    return files.written


def output_file(path: Path) -> pa.NativeFile:
    """A new file at ``path``, buffered, its directories created if missing (a spool's
    directories outlive its files, so they mostly exist already)."""
    try:
        raw = pa.OSFile(str(path), "wb")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = pa.OSFile(str(path), "wb")
    return pa.BufferedOutputStream(raw, _WRITE_BUFFER_BYTES)
