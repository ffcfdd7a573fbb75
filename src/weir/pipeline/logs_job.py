"""The log ETL job: raw log lines in a topic to a Parquet warehouse of logs, quarantine, metrics.

Each record's value is one raw line (UTF-8); its key, when present, names the source format
(``hdfs``, ``apache``, ``syslog``, ... or an alias: any format of ``weir.logformats``, the
shipped ones and the job's own format files, ``LogsJob.formats``); without a key the format is
detected from the line. A line that does not parse goes to ``quarantine`` with the reason, never
dropped. A line whose timestamp has no year takes the year of the record's timestamp. A line
whose timestamp cannot be read is quarantined too, unless its format keeps such lines
(``[timestamp] on_error``): then it is in ``logs`` with ``timestamp_inferred`` set and the
record's timestamp, or none (filed under ``logs_writer.NULL_PARTITION``).

The job is one Structured Streaming query over ``readStream.format("weir-log-files")``
(``weir.pipeline.log_files``), from the earliest offsets, handled batch by batch with
``foreachBatch``. Before each micro-batch's Spark job runs, the driver writes the template ids
its miner knows (``weir.logformats.mining``: every masked message mined so far keeps its id)
into the warehouse's spool. The job's tasks read their offset ranges, parse the records over
Arrow batches and write the quarantine files themselves (``weir.pipeline.task_files``); they
stamp the parsed rows whose masked message is known with its id and write them as ``logs``
files, and leave the rest in the spool as Arrow files, returning only the files, line counts
and distinct masked messages. The driver mines those messages into template ids (one Drain
tree per format); if rows were left (messages new in the batch), it stamps them and writes
their ``logs`` files itself, a thread per left file (``weir.pipeline.logs_writer``). The
driver writes the batch's metrics from the counts and the
``templates`` table (id, source, template, first_seen, last_seen, count: every template so
far, one file replaced by each batch; ``read_templates``) from the miner, and commits the
reported files into the tables together with the miner's state. Mining on the driver sees
each distinct masked message of a batch once, however many lines repeat it, and in one order,
so template ids do not depend on how the batch was split into tasks. Spark records each
micro-batch's offsets in the checkpoint before it runs and replays an unfinished batch after a
restart; ``weir.pipeline.warehouse.BatchCommits`` makes the replay replace, never duplicate,
what the batch wrote, and the replay mines from (and its tasks stamp with) the miner state
committed with the batch before it. So each input line lands in the warehouse exactly once,
with the template id it would have had without the restart, even across a kill -9 of the
driver. Each batch's per-minute metrics also go, as JSON, to a metrics topic; there a
replayed batch may publish its rows again (at-least-once; each row carries its ``batch``).

With ``dedupe`` (``weir.pipeline.dedupe``) a record that reached the topic twice is written
once: before each batch the driver writes the high waters committed with the batch before into
the spool, the tasks drop the copies among their records (each partition's range read by one
task), and the driver commits the high waters they report, merged, with the batch (a named
state beside the miner's). Each batch's marker then counts the copies dropped
(``duplicates``; ``records`` counts them too).

With ``iceberg`` (``weir.pipeline.iceberg_tables``) the tables are Iceberg tables in a catalog
instead: the batch's files are read back and committed, one commit per table, each snapshot
naming the batch and its Kafka offsets; a table that holds the batch already (it was committed
before a crash) is skipped on the replay. The batch's marker, with the miner's state and the
high waters, is written once every table holds the batch, so a replay mines from the same state
and stamps the same template ids as the first attempt did.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from weir.clock import Clock, SystemClock
from weir.logformats import FormatRegistry
from weir.logformats.batch import BatchParser
from weir.logformats.mining import Occurrences, TemplateMiner
from weir.pipeline.dedupe import (
    DEFAULT_WINDOW_S,
    HIGH_WATER_FILE,
    DedupeKey,
    HighWaters,
    reported,
)
from weir.pipeline.iceberg_tables import (
    BatchIdentity,
    IcebergOutput,
    IcebergTables,
    checkpoint_offsets,
)
from weir.pipeline.kafka_io import MessagePublisher, ensure_topic
from weir.pipeline.log_files import (
    DEDUPE_OPTION,
    FORMATS_OPTION,
    SPOOL_OPTION,
    LogFilesDataSource,
)
from weir.pipeline.log_files import FORMAT as LOG_FILES_FORMAT
from weir.pipeline.logs_writer import (
    KNOWN_IDS_FILE,
    PARSED_SUFFIX,
    TemplateIds,
    template_ids_table,
    write_left_rows,
    write_template_ids,
)
from weir.pipeline.manifest import FILE, HIGH_WATER, PARSED, TEMPLATE
from weir.pipeline.metrics import (
    QUARANTINE_SCHEMA,
    BatchCounts,
    write_parquet,
)
from weir.pipeline.task_files import PARSE_ROWS, line_counts, parse_records
from weir.pipeline.warehouse import DATA_SUFFIX, STAGING_DIR, BatchCommits

METRICS_FILE = "part-00000-metrics.snappy.parquet"
EMPTY_FILE = "part-00000-empty.snappy.parquet"
TEMPLATES_FILE = "part-00000-templates.snappy.parquet"
TABLES = ("logs", "quarantine", "metrics_minute", "templates")
TEMPLATES_SCHEMA = pa.schema(
    [("id", pa.int64()), ("source", pa.string()), ("template", pa.string()),
     ("first_seen", pa.timestamp("us", tz="UTC")), ("last_seen", pa.timestamp("us", tz="UTC")),
     ("count", pa.int64())]
)  # fmt: skip
TEMPLATES_DDL = (
    "id BIGINT, source STRING, template STRING, first_seen TIMESTAMP, "
    "last_seen TIMESTAMP, `count` BIGINT"
)
TRIGGER_INTERVAL = "1 second"
# Rows per Arrow batch handed to the parser by the job's tasks: large batches spread its fixed
# per-batch costs.
PARSE_BATCH_RECORDS = PARSE_ROWS
STOP_POLL_S = 1
# The job's JVMs plan micro-batches, launch tasks and collect the tasks' small manifests; the
# records never reach them. Their just-in-time compiler's optimising tier (C2) kept compiling
# batch after batch, about a quarter of a core-second per micro-batch for code that hardly
# runs; the first tier alone compiles for a small fraction of that.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
# The tasks' Python workers allocate their Arrow buffers from pyarrow's mimalloc pool, which
# hands freed memory back to the OS 10 ms later; the next batch's buffers then fault it in
# again, every page zeroed by the kernel, 2 MiB at a time (the pool's memory takes huge pages).
# A task frees and reallocates hundreds of megabytes per million records, and on a virtual
# machine zeroing costs about a second per GiB. Without purging, a worker keeps its peak (a few
# hundred MiB) until Spark retires it, and faults each page in once.
SPARK_CONFIG = {
    "spark.driver.extraJavaOptions": JVM_OPTIONS,
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
    "spark.executorEnv.MIMALLOC_PURGE_DELAY": "-1",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
}
SPOOL_DIR = "tasks"
HIGH_WATER_STATE = "high-water"  # the name of the deduplication's state in the batch commits


@dataclass(frozen=True, slots=True, kw_only=True)
class LogsJob:
    """Where the job reads and writes, and how it runs."""

    bootstrap: str
    topic: str
    warehouse: Path
    checkpoint: Path
    metrics_topic: str | None = None
    once: bool = False
    max_records_per_trigger: int | None = None
    formats: tuple[Path, ...] = ()  # format files or directories, besides the shipped formats
    #: librdkafka settings (security ones: `weir.protocol.client_settings`) of every client
    client_settings: Mapping[str, str] = field(default_factory=dict)
    #: what names a record for deduplication (`weir.pipeline.dedupe`); None: no deduplication
    dedupe: DedupeKey | None = None
    #: how long the job remembers a writer's high water after its last record
    dedupe_window_s: int = DEFAULT_WINDOW_S
    #: the Iceberg catalog to write the tables to; None: Parquet files under ``warehouse``
    iceberg: IcebergOutput | None = None

    @property
    def metrics_topic_name(self) -> str:
        return self.metrics_topic or f"{self.topic}.metrics"

    def client(self) -> dict[str, str]:
        """The settings of the job's own clients (the metrics topic's)."""
        return {**self.client_settings, "bootstrap.servers": self.bootstrap}

    def source_client_options(self) -> dict[str, str]:
        """The client settings as options of the source (Spark's `kafka.` prefix)."""
        return {f"kafka.{name}": value for name, value in self.client_settings.items()}


@dataclass(slots=True)
class RunSummary:
    """What the micro-batches committed by this run read and wrote."""

    batches: int = 0
    records: int = 0
    logs: int = 0
    quarantined: int = 0
    duplicates: int = 0
    replayed: list[int] = field(default_factory=list)

    def add(self, marker: dict[str, Any]) -> None:
        self.batches += 1
        self.records += marker["records"]
        self.logs += marker["logs"]
        self.quarantined += marker["quarantined"]
        self.duplicates += marker.get("duplicates", 0)


def parse_batches(
    batches: Iterator[pa.RecordBatch], registry: FormatRegistry | None = None
) -> Iterator[pa.RecordBatch]:
    """Raw records (key, value, topic, partition, offset, and optionally their timestamps) to
    one row per line, parsed or not.

    Rows come out grouped by how they were parsed, not in input order.
    """
    parser = BatchParser(year=date.today().year, registry=registry)
    for batch in batches:
        for table in parse_records(parser, batch):
            yield from table.to_batches()


def run_logs_job(
    spark: SparkSession,
    job: LogsJob,
    *,
    stop: threading.Event | None = None,
    on_poll: Callable[[StreamingQuery], None] | None = None,
) -> RunSummary:
    """Runs the streaming query until it finishes (``once``) or ``stop`` is set, then stops it.
    ``on_poll(query)`` is called each time the driver looks at it (every STOP_POLL_S).

    A failed query raises its StreamingQueryException.
    """
    FormatRegistry.builtin().with_files(job.formats)  # a bad format file fails here, at once
    ensure_topic(job.client(), job.metrics_topic_name)
    writer = BatchWriter(job)
    try:
        query = start_query(spark, job, writer)
        try:
            while query.isActive and not (stop is not None and stop.is_set()):
                query.awaitTermination(STOP_POLL_S)
                if on_poll is not None:
                    on_poll(query)
        finally:
            query.stop()
        query.awaitTermination()
    finally:
        writer.close()
    return writer.summary


def start_query(spark: SparkSession, job: LogsJob, writer: BatchWriter) -> StreamingQuery:
    spark.dataSource.register(LogFilesDataSource)
    reader = (
        spark.readStream.format(LOG_FILES_FORMAT)
        .option("bootstrap.servers", job.bootstrap)
        .option("subscribe", job.topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .option(SPOOL_OPTION, str(spool_of(job.warehouse)))
        .option(FORMATS_OPTION, json.dumps([str(path.resolve()) for path in job.formats]))
    )
    reader = reader.options(**job.source_client_options())
    if job.dedupe is not None:
        # One task per partition's range: it sees every record that precedes its own.
        reader = reader.option(DEDUPE_OPTION, job.dedupe.spec()).option("minPartitions", "1")
    if job.max_records_per_trigger is not None:
        reader = reader.option("maxRecordsPerTrigger", str(job.max_records_per_trigger))
    stream = (
        reader.load()
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(job.checkpoint))
    )
    if job.once:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=TRIGGER_INTERVAL)
    return stream.start()


def spool_of(warehouse: Path) -> Path:
    """Where the job's tasks write their files before the driver stages them for a batch."""
    return warehouse / STAGING_DIR / SPOOL_DIR


class BatchWriter:
    """The ``foreachBatch`` function: one micro-batch of parsed rows into the tables.

    Runs on the driver. A batch whose marker exists (it was committed before Spark recorded it
    done) is skipped; otherwise its tables are staged, its metrics published to the metrics
    topic, and its files committed into the warehouse with the template miner's state (and the
    deduplication's high waters). The miner and the high waters are loaded from the states of
    the last committed batch before the first batch that uses them.
    """

    def __init__(self, job: LogsJob, clock: Clock | None = None) -> None:
        self.job = job
        self.clock = clock or SystemClock()
        self.summary = RunSummary()
        self._commits: BatchCommits | None = None
        self._metrics: MessagePublisher | None = None
        self._miner: TemplateMiner | None = None
        self._high_waters: HighWaters | None = None
        self._iceberg: IcebergTables | None = None

    def __call__(self, manifests: DataFrame, batch_id: int) -> None:
        commits = self._batch_commits()
        if commits.committed(batch_id) is not None:
            self.summary.replayed.append(batch_id)
            self._miner = self._high_waters = None
            return
        miner = self._template_miner(commits, batch_id)
        try:
            staging = commits.stage(batch_id)
            spool = spool_of(self.job.warehouse)
            # Before the tasks run: what they start from.
            write_template_ids(spool / KNOWN_IDS_FILE, miner.known())
            high_waters = self._high_waters_before(commits, batch_id, spool)
            manifest = manifests.toArrow().to_pylist()  # runs the batch's tasks
            counts, files, spooled = write_tables(manifest, spool, staging, batch_id, miner)
            if self._metrics is None:
                self._metrics = MessagePublisher(self.job.client(), self.job.metrics_topic_name)
            self._metrics.publish(counts.metrics_messages())
            summary: dict[str, Any] = counts.summary()
            states = {}
            if high_waters is not None:
                high_waters, summary["duplicates"] = self._after(high_waters, manifest)
                summary["records"] += summary["duplicates"]
                states[HIGH_WATER_STATE] = high_waters.to_bytes()
            if self.job.iceberg is None:
                marker = commits.commit(batch_id, summary, files, elsewhere=spooled,
                                        state=miner.to_bytes(), states=states)  # fmt: skip
            else:
                self._commit_to_iceberg(batch_id, batch_rows(staging, files, spooled))
                marker = commits.commit(batch_id, summary, [], state=miner.to_bytes(),
                                        states=states)  # fmt: skip
                for path in spooled.values():
                    path.unlink(missing_ok=True)
        except BaseException:
            # They took in a batch that is not committed.
            self._miner = self._high_waters = None
            raise
        self._high_waters = high_waters
        self.summary.add(marker)
        if self.job.iceberg is None:
            delete_templates_before(self.job.warehouse, batch_id)

    def _commit_to_iceberg(self, batch_id: int, rows: dict[str, pa.Table]) -> None:
        """Each table's rows of the batch in one Iceberg commit, unless it holds them."""
        assert self.job.iceberg is not None
        if self._iceberg is None:
            self._iceberg = IcebergTables(self.job.iceberg)
        offsets = checkpoint_offsets(self.job.checkpoint, batch_id)
        batch = BatchIdentity(checkpoint_query_id(self.job), batch_id, offsets)
        self._iceberg.commit_batch(batch, rows)

    def _high_waters_before(
        self, commits: BatchCommits, batch_id: int, spool: Path
    ) -> HighWaters | None:
        """The high waters committed with the batch before (None without deduplication),
        written to the spool for the batch's tasks."""
        if self.job.dedupe is None:
            return None
        if self._high_waters is None:
            state = commits.latest_state(batch_id, HIGH_WATER_STATE)
            self._high_waters = HighWaters() if state is None else HighWaters.from_bytes(state)
        self._high_waters.write(spool / HIGH_WATER_FILE)
        return self._high_waters

    def _after(self, before: HighWaters, manifest: list[dict[str, Any]]) -> tuple[HighWaters, int]:
        """The high waters after the batch, and the copies its tasks dropped."""
        highest, dropped = reported(manifest, HIGH_WATER)
        return before.merged(highest, self.clock.milliseconds(), self.job.dedupe_window_s), dropped

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._iceberg is not None:
            self._iceberg.close()
            self._iceberg = None

    def _batch_commits(self) -> BatchCommits:
        if self._commits is None:
            self._commits = BatchCommits(self.job.warehouse, checkpoint_query_id(self.job))
        return self._commits

    def _template_miner(self, commits: BatchCommits, batch_id: int) -> TemplateMiner:
        if self._miner is None:
            registry = FormatRegistry.builtin().with_files(self.job.formats)
            settings = {declared.name: declared.mining for declared in registry}
            state = commits.latest_state(batch_id)
            self._miner = (
                TemplateMiner(settings)
                if state is None
                else TemplateMiner.from_bytes(state, settings)
            )
        return self._miner


def read_logs(spark: SparkSession, warehouse: Path) -> DataFrame:
    """The warehouse's ``logs`` table. Its files may come from older versions of the job, with
    fewer columns (columns are only ever added): the schemas are merged, so the columns an old
    file lacks read as nulls."""
    return spark.read.option("mergeSchema", "true").parquet(str(warehouse / "logs"))


def checkpoint_query_id(job: LogsJob) -> str:
    """The query id Spark keeps in the checkpoint's ``metadata`` file; it outlives restarts."""
    document = json.loads((job.checkpoint / "metadata").read_text())
    query_id: str = document["id"]
    return query_id


def read_templates(spark: SparkSession, warehouse: Path) -> DataFrame:
    """The warehouse's ``templates`` table as of its last committed batch (each batch writes the
    whole table; an older file may linger briefly after a crash, and is not read)."""
    files = sorted((warehouse / "templates").glob(f"batch-*{DATA_SUFFIX}"))
    if not files:
        return spark.createDataFrame([], schema=TEMPLATES_DDL)
    return spark.read.parquet(str(files[-1]))


def delete_templates_before(warehouse: Path, batch_id: int) -> None:
    """Deletes the ``templates`` files of batches before ``batch_id`` (a later one holds all)."""
    newest = f"batch-{batch_id:08d}-"
    for path in (warehouse / "templates").glob(f"batch-*{DATA_SUFFIX}"):
        if path.name < newest:
            path.unlink(missing_ok=True)


def batch_rows(staging: Path, files: list[str], spooled: Mapping[str, Path]) -> dict[str, pa.Table]:
    """The rows of each table of a batch whose files ``write_tables`` wrote: ``files`` under
    ``staging``, ``spooled`` where they are (both by their paths in the tables). A logs file's
    source, in its path, becomes its rows' ``source`` column (its date and hour are the
    timestamp's)."""
    tables: dict[str, list[pa.Table]] = {}
    located = [(relative, staging / relative) for relative in files] + list(spooled.items())
    for relative, path in located:
        name = relative.split("/", 1)[0]
        rows = pq.ParquetFile(path).read()
        if name == "logs":
            rows = rows.append_column("source", pa.array([source_of(relative)] * rows.num_rows,
                                                         pa.string()))  # fmt: skip
        tables.setdefault(name, []).append(rows)
    return {name: pa.concat_tables(parts, promote_options="permissive")
            for name, parts in tables.items()}  # fmt: skip


def source_of(relative: str) -> str:
    """The source of a logs file from its path, ``logs/source=S/...``."""
    directory = relative.split("/")[1]
    return directory.removeprefix("source=")


def write_tables(
    manifest: list[dict[str, Any]],
    spool: Path,
    staging: Path,
    batch_id: int,
    miner: TemplateMiner,
) -> tuple[BatchCounts, list[str], dict[str, Path]]:
    """Mines the templates of a batch whose tasks ran, has its logs files written and writes
    the rest of its tables under ``staging``; returns its line counts, the files written to
    ``staging`` and the tasks' files, each by its path in the tables, with where it is in
    ``spool``.

    ``manifest``: the rows of the batch's Spark job, in which each task parsed its records and
    wrote its quarantine file, the logs files of the rows whose template id the miner knew and
    the other parsed rows into ``spool``, reporting them, its line counts and its distinct
    masked messages; then, the messages mined, the logs files of the parsed rows left are
    written here. Files in the spool
    that no successful task reported (left by a failed attempt) are deleted, and the
    parsed-rows files once written out. The metrics, computed from the counts, an empty
    quarantine file when nothing was quarantined, and the templates table are written here.
    """
    reported = {row["path"]: spool / row["path"] for row in manifest if row["kind"] == FILE}
    parsed = [row["path"] for row in manifest if row["kind"] == PARSED]
    delete_unreported(spool, {*reported.values(), *(spool / path for path in parsed)})
    ids = miner.mine(occurrences_of(manifest))
    if parsed:
        written = write_left_rows(spool, parsed, TemplateIds(template_ids_table(ids)))
        reported.update({path: spool / path for path in written})
        delete_unreported(spool, set(reported.values()))
    counts = BatchCounts.of(batch_id, line_counts(manifest))
    files = []
    if not counts.quarantined:
        write_parquet(QUARANTINE_SCHEMA.empty_table(), staging / "quarantine", EMPTY_FILE)
        files.append(f"quarantine/{EMPTY_FILE}")
    write_parquet(counts.metrics_minute(), staging / "metrics_minute", METRICS_FILE)
    files.append(f"metrics_minute/{METRICS_FILE}")
    write_parquet(templates_table(miner), staging / "templates", TEMPLATES_FILE)
    files.append(f"templates/{TEMPLATES_FILE}")
    return counts, files, reported


def delete_unreported(spool: Path, keep: set[Path]) -> None:
    """Deletes the data and parsed-rows files in ``spool`` that are not in ``keep``."""
    for suffix in (DATA_SUFFIX, PARSED_SUFFIX):
        for path in spool.rglob(f"*{suffix}"):
            if path not in keep:
                path.unlink()


def occurrences_of(manifest: list[dict[str, Any]]) -> list[Occurrences]:
    """The ``template`` rows of the tasks' manifests."""
    return [
        Occurrences(
            row["source"],
            row["template"],
            row["lines"],
            row["first_seen"],
            row["last_seen"],
            (row["partition"], row["offset"]),
        )
        for row in manifest
        if row["kind"] == TEMPLATE
    ]


def templates_table(miner: TemplateMiner) -> pa.Table:
    """The miner's templates as the ``templates`` table."""
    rows = miner.templates()
    stamp = TEMPLATES_SCHEMA.field("first_seen").type
    columns = {
        "id": pa.array([t.id for t in rows], pa.int64()),
        "source": pa.array([t.source for t in rows], pa.string()),
        "template": pa.array([t.template for t in rows], pa.string()),
        "first_seen": pa.array([t.first_seen for t in rows], pa.int64()).cast(stamp),
        "last_seen": pa.array([t.last_seen for t in rows], pa.int64()).cast(stamp),
        "count": pa.array([t.count for t in rows], pa.int64()),
    }
    return pa.table(columns, schema=TEMPLATES_SCHEMA)
