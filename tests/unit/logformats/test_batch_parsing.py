"""BatchParser (Arrow compute over whole batches) against LineParser line by line, with the
batch plans derived from the declared patterns.

``parse_rows`` (LineParser per line) is the reference: on every loghub sample, keyed and
unkeyed, and on malformed and unusual lines, the batch parser must produce the same table.
"""

from __future__ import annotations

import gzip
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weir
import weir.logformats.batch as batch_module
from weir.logformats import FormatRegistry, LineParser
from weir.logformats.batch import PARSED_SCHEMA, BatchParser, parse_rows
from weir.pipeline.logs_job import parse_batches
from weir.pipeline.task_files import PARSED_ARROW

REPO_ROOT = Path(__file__).resolve().parents[3]
LOGHUB = REPO_ROOT.parent / "shared" / "data" / "loghub"
DEMO_DATA = Path(weir.__file__).parent / "cli" / "demo_data"
YEAR = 2024
SAMPLES = {
    "Android": "android",
    "Apache": "apache",
    "HDFS": "hdfs",
    "Hadoop": "hadoop",
    "Linux": "linux",
    "OpenSSH": "openssh",
    "Spark": "spark",
    "Zookeeper": "zookeeper",
}

Record = tuple[bytes | None, bytes | None]


DETECTION_ORDER = FormatRegistry.builtin().names


def _assert_same(
    records: list[Record], *, year: int = YEAR, references: pa.Array | None = None
) -> pa.Table:
    keys = pa.array([key for key, _ in records], pa.binary())
    values = pa.array([value for _, value in records], pa.binary())
    batch = BatchParser(year=year).parse(keys, values, references)
    refs = references.to_pylist() if references is not None else None
    expected = parse_rows(LineParser(year=year), keys.to_pylist(), values.to_pylist(), refs)
    assert batch.schema == PARSED_SCHEMA
    if not batch.equals(expected):
        for name in PARSED_SCHEMA.names:
            got, want = batch.column(name).to_pylist(), expected.column(name).to_pylist()
            differing = [
                (records[n], got[n], want[n]) for n in range(len(got)) if got[n] != want[n]
            ]
            assert not differing, (name, differing[:5])
    return batch


def _sample_lines(name: str) -> list[bytes]:
    path = LOGHUB / name / f"{name}_2k.log"
    if path.exists():
        return path.read_bytes().splitlines()
    with gzip.open(DEMO_DATA / f"{name}_2k.log.gz") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_loghub_sample_keyed_and_unkeyed(name: str) -> None:
    lines = _sample_lines(name)
    keyed = _assert_same([(SAMPLES[name].encode(), line) for line in lines])
    assert sum(keyed.column("parsed").to_pylist()) == len(lines)
    _assert_same([(None, line) for line in lines])


def test_all_samples_mixed_in_one_batch() -> None:
    records: list[Record] = []
    for name, source in sorted(SAMPLES.items()):
        records += [(source.encode(), line) for line in _sample_lines(name)[:300]]
        records += [(None, line) for line in _sample_lines(name)[300:400]]
    records = records[::2] + records[1::2]
    _assert_same(records)


TRICKY: list[Record] = [
    (None, b""),
    (b"hdfs", None),
    (None, None),
    (b"hdfs", b"  \t "),
    (None, b"just some words with no header"),
    (None, b"\x00\x01\xff garbage ]]][[["),
    (b"hdfs", b"17/06/09 20:10:40 INFO spark.SecurityManager: x"),
    (b"nginx", b"anything"),
    (b"", b"081109 203615 148 INFO dfs.DataNode: empty key"),
    (b"\xff\xfe", b"081109 203615 148 INFO dfs.DataNode: undecodable key"),
    (b" HDFS ", b"081109 203615 148 INFO dfs.DataNode: key with spaces and case"),
    (b"syslog", b"Jun 14 15:16:01 combo su(pam_unix)[1]: alias"),
    (b"ssh", b"Dec 10 06:55:46 LabSZ sshd[24200]: alias"),
    (None, b"081399 203615 148 INFO dfs.DataNode: month 13"),
    (b"hdfs", b"081100 203615 148 INFO dfs.DataNode: month 0"),
    (b"hdfs", b"081131 203615 148 INFO dfs.DataNode: Nov 31"),
    (b"hdfs", b"081109 243615 148 INFO dfs.DataNode: hour 24"),
    (b"hdfs", b"081109 206015 148 INFO dfs.DataNode: minute 60"),
    (b"hdfs", b"081109 203660 148 INFO dfs.DataNode: second 60"),
    (b"hdfs", b"081109 203615 99999999999999999999999 INFO dfs.DataNode: huge pid"),
    (b"linux", b"Foo 14 15:16:01 combo su: no such month"),
    (b"linux", b"Jun 0 15:16:01 combo su: day 0"),
    (b"android", b"02-29 10:00:00.000  1  2 I Tag: leap"),
    (b"android", b"02-30 10:00:00.000  1  2 I Tag: not a day"),
    (b"apache", b"[Sun Dec 04 04:47:44 0000] [error] year zero"),
    (b"apache", b"[Sun Dec 04 04:47:44.1234567 2005] [core:error] [pid 12:tid 34] long fraction"),
    (b"apache", b"[Sun Dec 04 04:47:44 2005] [notice]"),
    (b"apache", b"[Sun Dec 04 04:47:44 2005] [warn]   spaced   "),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [main:Foo@1] -"),
    (b"zookeeper", b"2000-02-29 17:41:44,747 - WARN  [main:Foo@1] - leap century"),
    (b"zookeeper", b"1900-02-29 17:41:44,747 - WARN  [main:Foo@1] - not a leap century"),
    (b"hadoop", b"2015-10-18 18:01:47,978 INFO [main] org.Foo:"),
    (b"hadoop", b"2015-10-18 18:01:47,978 INFO [main] : no component"),
    (b"spark", b"17/06/09 20:10:40 ERROR executor.Executor: boom\njava.lang.Error: x\n\tat b(C)"),
    (b"spark", b"17/06/09 20:10:40 INFO spark.Foo: crlf\r\n"),
    (b"spark", b"\r\n  17/06/09 20:10:40 INFO spark.Foo: padded  \t\r\n"),
    (b"spark", b"17/06/09 20:10:40 INFO spark.Foo: vertical\x0btab"),
    (b"spark", b"17/06/09 20:10:40 INFO spark.Foo: form feed at end\x0c"),
    (b"spark", b"\x1c17/06/09 20:10:40 INFO spark.Foo: separator first"),
    (b"spark", b"17/06/09 20:10:40 INFO spark.Foo: trailing separator\x1f"),
    (b"spark", "17/06/09 20:10:40 INFO spark.Foo: caf\u00e9 \u2003".encode()),
    (b"spark", "17/06/09 20:10:40 INFO spark.Foo: nbsp\u00a0".encode()),
    (b"spark", b"17/06/09 20:10:40 INFO spark.Foo: bad utf-8 \xc3\x28"),
    (b"spark", "\u0661\u0667/06/09 20:10:40 INFO spark.Foo: arabic digits".encode()),
    (b"spark", b"17/06/09 20:10:40 info spark.Foo: lower-case level"),
    (b"linux", b"Jun 14 15:16:01 combo kernel:"),
    (b"linux", b"Jun  9 15:16:01 combo kernel[12]: x"),
    (b"linux", b"Jun 14 15:16:01 combo a b c: component with spaces"),
    (b"linux", b"Jun 14 15:16:01 combo x[abc]: not a pid"),
    (b"linux", b"Jun 14 15:16:01 combo x]: bracket"),
    (b"linux", b"Jun 14 15:16:01 combo x:y no space after the colon"),
    (b"linux", b"Jun 14 15:16:01 combo [7]: no component"),
    (b"linux", b"Jun 14 15:16:01 combo\t  x[7]:"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [QuorumPeer[myid=1]/0:0:2181:Foo@774] - m"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a:b@1:c@2] - the first origin that fits"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a@1:b@2] - at signs in the thread"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [Foo@1] - no thread"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a:b@x] - not a line number"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a:b@1]- no space"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a:b]c@1] - bracket in the component"),
    (b"zookeeper", b"2015-07-29 17:41:44,747 - INFO  [a:b@1] -\tc:d@2] - two origins"),
    (b"openssh", b"Dec 10 06:55:46 LabSZ sshd[24200]:"),
    (b"android", b"03-17 16:13:38.811  1702  2395 A Tag: wtf"),
    (None, b"{not json"),
    (None, b'{"ts": 1, "msg": "json"}'),
    (b"json", b"[1, 2]"),
    (b"json", b'{"msg": "no time"}'),
    (b"json", b'{"ts": "yesterday", "msg": "x"}'),
    (b"json", b'{"timestamp": "2024-01-02T03:04:05Z", "level": "warning", "message": "m 12"}'),
    (None, b"  {   "),
]


def test_a_parser_reused_batch_after_batch_agrees_with_the_line_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Templates kept from earlier batches, and the bound on how many are kept, change nothing."""
    monkeypatch.setattr(batch_module, "TEMPLATE_CACHE_SIZE", 1_000)
    parser = BatchParser(year=YEAR)
    for name, source in sorted(SAMPLES.items()):
        lines = _sample_lines(name)
        for chunk in (lines[:700], lines[300:1000], lines[:700]):
            keys = pa.array([source.encode()] * len(chunk), pa.binary())
            values = pa.array(chunk, pa.binary())
            expected = parse_rows(LineParser(year=YEAR), keys.to_pylist(), chunk)
            assert parser.parse(keys, values).equals(expected), name
            assert len(parser._templates) <= 1_000


def test_malformed_and_unusual_lines() -> None:
    _assert_same(TRICKY)
    _assert_same(TRICKY, year=2023)
    _assert_same(TRICKY * 3)


def test_record_timestamps_give_yearless_lines_their_year() -> None:
    """The year of a syslog line is its record's: the year before when the line would
    otherwise be more than a day after its record (a December line shipped in January)."""
    records: list[Record] = [
        (b"syslog", b"Dec 31 23:59:59 h k: late"),
        (b"syslog", b"Jan  1 00:00:01 h k: early"),
        (b"android", b"02-29 10:00:00.000  1  2 I Tag: leap"),
        *TRICKY,
    ]
    for stamp in ("2025-01-01T00:00:30", "2024-12-31T23:00:00", "2023-06-01T00:00:00"):
        moment = datetime.fromisoformat(stamp).replace(tzinfo=UTC)
        refs = pa.array([moment] * len(records), pa.timestamp("us", tz="UTC"))
        table = _assert_same(records, references=refs)
        years = [t.year if t else None for t in table.column("timestamp").to_pylist()[:2]]
        assert years == {"2025-01-01T00:00:30": [2024, 2025], "2024-12-31T23:00:00": [2024, 2025],
                         "2023-06-01T00:00:00": [2022, 2023]}[stamp]  # fmt: skip


def test_empty_batch() -> None:
    assert _assert_same([]).num_rows == 0


_HEADERS = [
    "081109 203615 148 INFO dfs.DataNode:",
    "2015-10-18 18:01:47,978 INFO [main] org.Foo:",
    "2015-07-29 17:41:44,747 - INFO  [main:Foo@1] -",
    "[Sun Dec 04 04:47:44 2005] [notice]",
    "[Sun Feb 29 04:47:44.5 2005] [core:error] [pid 7]",
    "17/06/09 20:10:40 INFO spark.Foo:",
    "03-17 16:13:38.811  1702  2395 D Tag:",
    "Dec 10 06:55:46 LabSZ sshd[24200]:",
    "Jun 14 15:16:01 combo kernel:",
    '{"ts": 1, "msg": ',
]
_TAIL_CHARACTERS = " \t\r\n:[]@-_./0123456789aAfFxZ\x0b\u00e9{}"
_TAILS = st.text(alphabet=st.sampled_from(_TAIL_CHARACTERS), max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from([None, "unknown", *DETECTION_ORDER]),
            st.sampled_from(_HEADERS),
            st.integers(min_value=0, max_value=60),
            _TAILS,
        ),
        max_size=20,
    )
)
def test_mangled_headers_agree(lines: list[tuple[str | None, str, int, str]]) -> None:
    _assert_same(
        [
            (None if source is None else source.encode(), (header[:cut] + tail).encode())
            for source, header, cut, tail in lines
        ]
    )


def test_the_jobs_parse_batches_keeps_each_records_topic_partition_and_offset() -> None:
    records = TRICKY + [(b"hdfs", line) for line in _sample_lines("HDFS")[:50]]
    keys = pa.array([key for key, _ in records], pa.binary())
    values = pa.array([value for _, value in records], pa.binary())
    offsets = pa.array(range(100, 100 + len(records)), pa.int64())
    batch = pa.RecordBatch.from_arrays(
        [keys, values, pa.array(["t"] * len(records)), pa.array([3] * len(records), pa.int32()),
         offsets],
        names=["key", "value", "topic", "partition", "offset"],
    )  # fmt: skip
    out = pa.Table.from_batches(list(parse_batches(iter([batch]))), schema=PARSED_ARROW)
    out = out.sort_by("offset")
    expected = parse_rows(LineParser(year=date.today().year), keys.to_pylist(), values.to_pylist())
    assert out.select(PARSED_SCHEMA.names).equals(expected)
    assert out.column("offset").to_pylist() == offsets.to_pylist()
    assert set(out.column("topic").to_pylist()) == {"t"}
    assert set(out.column("partition").to_pylist()) == {3}
