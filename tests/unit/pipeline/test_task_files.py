"""A task's records parsed and written as the warehouse's Parquet files, with its manifest."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

import weir
from weir.logformats.batch import BatchParser
from weir.logformats.mining import TemplateMiner
from weir.pipeline import logs_writer, task_files
from weir.pipeline.logs_job import occurrences_of
from weir.pipeline.logs_writer import (
    LOGS_COLUMNS,
    TemplateIds,
    template_ids_table,
    write_left_rows,
    write_template_ids,
)
from weir.pipeline.task_files import QUARANTINE_COLUMNS, line_counts


def write_task(
    staging: str, formats: tuple[str, ...] = ()
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Both steps of a batch, as the job runs them: the task's parse, the driver's mining of its
    masked messages, and the writing of its parsed rows as logs files, whose paths are added to
    the task's manifest."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        (manifest,) = list(task_files.write_task(staging, formats)(batches))
        rows = manifest.to_pylist()
        ids = TemplateIds(template_ids_table(TemplateMiner().mine(occurrences_of(rows))))
        parsed = [row["path"] for row in rows if row["kind"] == "parsed"]
        written = write_left_rows(Path(staging), parsed, ids)
        rows += [{"kind": "file", "path": path} for path in written]
        yield pa.RecordBatch.from_pylist(rows, schema=task_files.MANIFEST_ARROW)

    return run


DEMO_DATA = Path(weir.__file__).parent / "cli" / "demo_data"
LINES = [
    (b"hdfs", b"081109 203615 148 INFO dfs.DataNode$PacketResponder: one"),
    (b"hdfs", b"081109 203807 222 WARN dfs.DataNode$PacketResponder: two"),
    (b"hdfs", b"081109 213807 222 ERROR dfs.DataNode: next hour"),
    (b"spark", b"17/06/09 20:10:40 INFO spark.SecurityManager: three"),
    (b"hdfs", b"not an hdfs line"),
    (b"nosuch", b"whatever"),
]


def _batch(records: list[tuple[bytes, bytes]], first_offset: int) -> pa.RecordBatch:
    size = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "topic": pa.array(["t"] * size),
            "partition": pa.array([1] * size, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + size), pa.int64()),
        }
    )


def test_a_task_writes_logs_by_directory_and_quarantine(tmp_path: Path) -> None:
    batches = [_batch(LINES[:3], 0), _batch(LINES[3:], 3)]
    (manifest,) = list(write_task(str(tmp_path))(iter(batches)))
    rows = manifest.to_pylist()
    files = sorted(row["path"] for row in rows if row["kind"] == "file")
    assert [f.rsplit("/", 1)[0] for f in files] == [
        "logs/source=hdfs/date=2008-11-09/hour=20",
        "logs/source=hdfs/date=2008-11-09/hour=21",
        "logs/source=spark/date=2017-06-09/hour=20",
        "quarantine",
    ]
    hour_20 = pq.read_table(tmp_path / files[0])
    assert hour_20.column_names == list(LOGS_COLUMNS)
    assert hour_20.column("offset").to_pylist() == [0, 1]
    assert hour_20.column("level").to_pylist() == ["INFO", "WARN"]
    # "one" and "two" differ in their only word: Drain keeps them apart.
    ids = [pq.read_table(tmp_path / f).column("template_id").to_pylist() for f in files[:3]]
    assert len({i for file_ids in ids for i in file_ids}) == 4
    assert None not in ids[0]
    quarantine = pq.read_table(tmp_path / files[3])
    assert quarantine.column_names == list(QUARANTINE_COLUMNS)
    assert quarantine.column("reason").to_pylist() == ["format-mismatch", "unknown-source"]
    counts = line_counts(rows)
    assert sum(c.lines for c in counts if c.parsed) == 4
    assert sum(c.lines for c in counts if not c.parsed) == 2
    minutes = {c.minute for c in counts if c.parsed and c.source == "hdfs"}
    assert len(minutes) == 3


def test_rows_of_known_messages_are_stamped_and_written_by_the_task_itself(
    tmp_path: Path,
) -> None:
    """With the ids its miner knew before the batch in the spool, a task writes the logs files
    of rows with known messages at once, with the ids the driver's mining gives them, and
    leaves only the others for the second step."""
    (earlier,) = list(write_task(str(tmp_path / "first"))(iter([_batch(LINES[:2], 0)])))
    miner = TemplateMiner()
    miner.mine(occurrences_of(earlier.to_pylist()))
    spool = tmp_path / "spool"
    write_template_ids(spool / logs_writer.KNOWN_IDS_FILE, miner.known())
    known_before = dict(miner.known())
    (manifest,) = list(task_files.write_task(str(spool))(iter([_batch(LINES[:4], 10)])))
    rows = manifest.to_pylist()
    (parsed,) = [row["path"] for row in rows if row["kind"] == "parsed"]
    left = pa.ipc.open_stream(pa.memory_map(str(spool / parsed))).read_all()
    assert left.column("message").to_pylist() == ["next hour", "three"]
    logs = [row["path"] for row in rows if row["kind"] == "file"]
    assert [path.rsplit("/", 1)[0] for path in logs] == ["logs/source=hdfs/date=2008-11-09/hour=20"]
    written = pq.read_table(spool / logs[0])
    assert written.column("offset").to_pylist() == [10, 11]
    ids = miner.mine(occurrences_of(rows))
    stamped = written.column("template_id").to_pylist()
    assert stamped == [known_before[("hdfs", "one")], known_before[("hdfs", "two")]]
    assert stamped == [ids[("hdfs", "one")], ids[("hdfs", "two")]]


def test_a_replaced_known_ids_file_is_read_again(tmp_path: Path) -> None:
    assert logs_writer.known_ids(tmp_path) is None
    write_template_ids(tmp_path / logs_writer.KNOWN_IDS_FILE, {("hdfs", "one"): 1})
    first = logs_writer.known_ids(tmp_path)
    assert first is not None and logs_writer.known_ids(tmp_path) is first
    write_template_ids(tmp_path / logs_writer.KNOWN_IDS_FILE, {("hdfs", "one"): 1, ("a", "b"): 2})
    second = logs_writer.known_ids(tmp_path)
    assert second is not first and second is not None and len(second.ids) == 2


def test_line_counts_sum_over_tasks() -> None:
    row = {"kind": "count", "path": None, "parsed": 1, "source": "hdfs", "minute": 60_000_000,
           "level": "INFO", "lines": 2}  # fmt: skip
    (count,) = line_counts([row, {**row, "lines": 3}, {"kind": "file", "path": "x"}])
    assert (count.parsed, count.source, count.lines) == (True, "hdfs", 5)


def test_a_task_without_records_reports_nothing(tmp_path: Path) -> None:
    (manifest,) = list(write_task(str(tmp_path))(iter([])))
    assert manifest.num_rows == 0


def test_a_full_buffer_is_appended_to_the_open_file_as_a_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_writer, "ROWS_PER_FLUSH", 2)
    monkeypatch.setattr(task_files, "PARSE_ROWS", 2)
    batches = [_batch(LINES[:2], 0), _batch(LINES[:2], 2)]
    (manifest,) = list(write_task(str(tmp_path))(iter(batches)))
    (file,) = [row["path"] for row in manifest.to_pylist() if row["kind"] == "file"]
    assert file.rsplit("/", 1)[0] == "logs/source=hdfs/date=2008-11-09/hour=20"
    parquet = pq.ParquetFile(tmp_path / file)
    assert parquet.metadata.num_row_groups == 2
    assert parquet.read().column("offset").to_pylist() == [0, 1, 2, 3]
    assert [p.name for p in tmp_path.rglob("*.parquet")] == [file.rsplit("/", 1)[1]]
    assert parquet.read().column("template_id").to_pylist() == [1, 2, 1, 2]


def test_past_the_open_file_limit_a_flush_closes_its_files_and_new_ones_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_writer, "ROWS_PER_FLUSH", 2)
    monkeypatch.setattr(task_files, "PARSE_ROWS", 2)
    monkeypatch.setattr(logs_writer, "MAX_OPEN_FILES", 0)
    batches = [_batch(LINES[:2], 0), _batch(LINES[:2], 2)]
    (manifest,) = list(write_task(str(tmp_path))(iter(batches)))
    files = sorted(row["path"] for row in manifest.to_pylist() if row["kind"] == "file")
    assert len(files) == 2
    assert {f.rsplit("/", 1)[0] for f in files} == {"logs/source=hdfs/date=2008-11-09/hour=20"}
    offsets = [pq.read_table(tmp_path / f).column("offset").to_pylist() for f in files]
    assert sorted(offsets) == [[0, 1], [2, 3]]
    assert sorted(p.name for p in tmp_path.rglob("*.parquet")) == sorted(
        f.rsplit("/", 1)[1] for f in files
    )


def test_a_failing_task_closes_its_files_and_reports_nothing(tmp_path: Path) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield _batch(LINES[:2], 0)
        raise OSError("the fetch failed")

    with pytest.raises(OSError, match="the fetch failed"):
        list(task_files.write_task(str(tmp_path))(failing()))


def test_a_task_reports_each_masked_message_once_with_its_lines_times_and_first_offset(
    tmp_path: Path,
) -> None:
    lines = [(b"hdfs", b"081109 203615 148 INFO dfs.DataNode$PacketResponder: sent 3 bytes"),
             (b"hdfs", b"081109 203715 148 INFO dfs.DataNode$PacketResponder: sent 9 bytes"),
             (b"hdfs", b"081109 203815 148 INFO dfs.DataNode$PacketResponder: done")]  # fmt: skip
    (manifest,) = list(task_files.write_task(str(tmp_path))(iter([_batch(lines, 7)])))
    found = {(o.template, o.lines, o.position) for o in occurrences_of(manifest.to_pylist())}
    assert found == {("sent <*> bytes", 2, (1, 7)), ("done", 1, (1, 9))}
    (sent,) = [o for o in occurrences_of(manifest.to_pylist()) if o.lines == 2]
    assert sent.last_seen - sent.first_seen == 60_000_000


def test_counts_are_lines_per_outcome_source_minute_and_level(tmp_path: Path) -> None:
    """The task's counts equal a count of its parsed rows one by one, quarantined ones too."""
    sample = DEMO_DATA / "HDFS_2k.log.gz"
    lines = gzip.decompress(sample.read_bytes()).splitlines()[:500]
    records = [(b"hdfs", line) for line in lines] + LINES
    records += [(b"linux", b"Jan  1 00:00:59 host cron[1]: early"), (b"nosuch", b"x")]
    files = task_files.TaskFiles(tmp_path, "part-x", BatchParser(year=2024))
    expected: Counter[tuple[object, ...]] = Counter()
    for table in task_files.parse_records(files.parser, _batch(records, 0)):
        files._count(table)
        for row in table.select(["parsed", "source", "timestamp", "level"]).to_pylist():
            stamp = row["timestamp"]
            minute = None if stamp is None else int(stamp.timestamp()) // 60 * 60_000_000
            expected[(row["parsed"], row["source"], minute, row["level"])] += 1
    assert files._counts == dict(expected)
    assert sum(expected.values()) == len(records)
    assert any(key[0] == 0 and key[2] is None for key in expected)


def test_planning_the_stream_does_not_import_the_parser() -> None:
    """The process Spark starts to create the source asks its schema and needs neither pyarrow
    nor the Kafka client; those that plan micro-batches create its stream reader; the parser
    and the Parquet writing are for the tasks alone."""
    probe = (
        "import sys\n"
        "from weir.pipeline.log_files import LogFilesDataSource\n"
        "options = {'bootstrap.servers': 'localhost:9', 'subscribe': 't', 'spool': '/nowhere'}\n"
        "source = LogFilesDataSource(options)\n"
        "assert source.schema().fieldNames()[0] == 'kind'\n"
        "loaded = [m for m in ('pyarrow', 'confluent_kafka', 'numpy', 'pandas') "
        "if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "source.streamReader(source.schema())\n"
        "loaded = [m for m in ('weir.pipeline.task_files', 'weir.logformats.batch', "
        "'pandas') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


KEPT = """\
name = "{name}"
detect = false
pattern = '%{{NOTSPACE:ts}} %{{LOGLEVEL:level}} %{{GREEDYDATA:message}}'
[timestamp]
field = "ts"
format = "%Y-%m-%dT%H:%M:%S"
on_error = "{on_error}"
"""


def test_lines_kept_without_their_own_time_are_flagged_and_filed_by_the_time_they_have(
    tmp_path: Path,
) -> None:
    formats = tmp_path / "formats"
    formats.mkdir()
    (formats / "timed.toml").write_text(KEPT.format(name="timed", on_error="record_time"))
    (formats / "untimed.toml").write_text(KEPT.format(name="untimed", on_error="null"))
    (formats / "strict.toml").write_text(KEPT.format(name="strict", on_error="quarantine"))
    records = [(b"timed", b"2024-03-01T10:00:00 INFO own time"), (b"timed", b"?? INFO record's"),
               (b"untimed", b"?? INFO none"), (b"untimed", b"?? ERROR none either"),
               (b"strict", b"?? INFO quarantined")]  # fmt: skip
    batch = _batch(records, 0)
    record_time = pa.array([1_717_243_200_000_000] * 5, pa.int64())  # 2024-06-01 12:00 UTC
    batch = batch.append_column("timestamp", record_time.cast(pa.timestamp("us", tz="UTC")))
    spool = tmp_path / "spool"
    (manifest,) = list(write_task(str(spool), (str(formats),))(iter([batch])))
    files = sorted(row["path"] for row in manifest.to_pylist() if row["kind"] == "file")
    assert [f.rsplit("/", 1)[0] for f in files] == [
        "logs/source=timed/date=2024-03-01/hour=10",
        "logs/source=timed/date=2024-06-01/hour=12",
        "logs/source=untimed/date=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__",
        "quarantine",
    ]
    own, recorded, untimed, quarantine = (pq.read_table(spool / f) for f in files)
    assert quarantine.column("source").to_pylist() == ["strict"]
    assert quarantine.column("reason").to_pylist() == ["bad-timestamp"]
    assert own.column("timestamp_inferred").to_pylist() == [False]
    assert recorded.column("timestamp_inferred").to_pylist() == [True]
    assert untimed.column("timestamp").to_pylist() == [None, None]
    assert untimed.column("timestamp_inferred").to_pylist() == [True, True]
    assert untimed.column("message").to_pylist() == ["none", "none either"]
    assert None not in untimed.column("template_id").to_pylist()
