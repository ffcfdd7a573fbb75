"""weir.logformats per line: the shipped formats on the shipped samples, quarantine, JSON lines,
templates and fuzzing. (Agreement with loghub's structured CSVs: test_loghub_agreement.py.)"""

from __future__ import annotations

import gzip
from datetime import date, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weir
from weir.logformats import (
    FormatRegistry,
    LineParser,
    ParsedLine,
    Quarantined,
    QuarantineReason,
    parse_line,
    template_of,
)

DEMO_DATA = Path(weir.__file__).parent / "cli" / "demo_data"
YEAR = 2024  # loghub's syslog, OpenSSH, Linux and Android lines carry no year.
MODEST = settings(max_examples=300, deadline=None)
SOURCES = FormatRegistry.builtin().names
# Per sample: the key that names its format, and the format detection finds (a Linux syslog
# looks like any system's syslog: detection files it as such).
SAMPLES = {
    "Android": ("android", "android"),
    "Apache": ("apache", "apache"),
    "HDFS": ("hdfs", "hdfs"),
    "Hadoop": ("hadoop", "hadoop"),
    "Linux": ("linux", "syslog"),
    "OpenSSH": ("openssh", "openssh"),
    "Spark": ("spark", "spark"),
    "Zookeeper": ("zookeeper", "zookeeper"),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_detection_recognises_every_shipped_demo_sample(name: str) -> None:
    key, detected = SAMPLES[name]
    with gzip.open(DEMO_DATA / f"{name}_2k.log.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    parser = LineParser(year=YEAR)
    assert len(lines) == 2000
    assert {parser.detect(line) for line in lines} == {detected}
    assert all(parser.parse(None, line) == parser.parse(detected, line) for line in lines)
    assert all(isinstance(parser.parse(key, line), ParsedLine) for line in lines)


def test_parsed_fields_of_one_line_per_format() -> None:
    hdfs = parse_line("hdfs", "081109 203615 148 INFO dfs.DataNode$PacketResponder: done", year=1)
    assert hdfs == ParsedLine(
        source="hdfs",
        timestamp=datetime(2008, 11, 9, 20, 36, 15),
        level="INFO",
        raw_level="INFO",
        component="dfs.DataNode$PacketResponder",
        pid=148,
        message="done",
        template="done",
        fields={},
    )
    android = parse_line("Android", "03-17 16:13:38.811  1702  2395 V Tag: x=1", year=2017)
    assert isinstance(android, ParsedLine)
    assert (android.timestamp, android.level, android.raw_level) == (
        datetime(2017, 3, 17, 16, 13, 38, 811000),
        "TRACE",
        "V",
    )
    assert (android.pid, android.thread, android.component) == (1702, "2395", "Tag")


def test_apache_24_format_with_module_and_pid() -> None:
    line = (
        "[Wed Oct 11 14:32:52.123456 2000] [core:error] [pid 35708:tid 4328636416] "
        "[client 1.2.3.4] File does not exist"
    )
    result = parse_line("apache", line)
    assert isinstance(result, ParsedLine)
    assert result.timestamp == datetime(2000, 10, 11, 14, 32, 52, 123456)
    assert (result.level, result.component, result.pid) == ("ERROR", "core", 35708)
    assert result.message == "[client 1.2.3.4] File does not exist"


def test_unknown_key_is_quarantined_naming_the_key() -> None:
    result = parse_line("myapp", "2024-01-01 anything", year=YEAR)
    assert isinstance(result, Quarantined)
    assert result.reason == QuarantineReason.UNKNOWN_SOURCE
    assert "'myapp'" in result.detail and "syslog" in result.detail


def test_a_macos_syslog_line_is_filed_as_syslog_with_its_host_and_the_records_year() -> None:
    line = "Nov 24 09:12:01 Johns-MacBook-Pro syslogd[115]: ASL Sender Statistics"
    parser = LineParser(year=1999)
    result = parser.parse(None, line, reference=datetime(2026, 1, 3, 8, 0))
    assert isinstance(result, ParsedLine)
    assert (result.source, result.host, result.timestamp) == (
        "syslog",
        "Johns-MacBook-Pro",
        datetime(2025, 11, 24, 9, 12, 1),
    )


def test_equally_specific_formats_make_a_line_ambiguous(tmp_path: Path) -> None:
    copy = tmp_path / "macos.toml"
    copy.write_text(
        'name = "macos"\n'
        "pattern = '%{SYSLOGTIMESTAMP:timestamp}\\s+%{SYSLOGHOST:host}\\s+%{SYSLOGPROG}:"
        "(?:\\s+%{GREEDYDATA:message})?'\n"
        '[timestamp]\nformat = "%b %d %H:%M:%S"\n'
    )
    registry = FormatRegistry.builtin().with_files([tmp_path])
    parser = LineParser(year=YEAR, registry=registry)
    line = "Nov 24 09:12:01 mbp kernel[0]: hello"
    result = parser.parse(None, line)
    assert isinstance(result, Quarantined)
    assert result.reason == QuarantineReason.AMBIGUOUS_FORMAT
    assert "macos" in result.detail and "syslog" in result.detail
    assert parser.detect(line) is None
    keyed = parser.parse("macos", line)
    assert isinstance(keyed, ParsedLine) and keyed.source == "macos"


def test_syslog_year_comes_from_the_parser_and_defaults_to_today() -> None:
    line = "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown"
    explicit = parse_line("linux", line, year=2005)
    assert isinstance(explicit, ParsedLine)
    assert explicit.timestamp == datetime(2005, 6, 14, 15, 16, 1)
    before = date.today().year
    defaulted = parse_line("linux", line)
    assert isinstance(defaulted, ParsedLine)
    assert defaulted.timestamp.year in {before, date.today().year}


def test_multi_line_record_stays_one_message() -> None:
    line = "17/06/09 20:10:40 ERROR executor.Executor: boom\njava.lang.Error: x\n\tat a.b(C.java:1)"
    result = parse_line(None, line)
    assert isinstance(result, ParsedLine)
    assert result.source == "spark"
    assert result.message == "boom\njava.lang.Error: x\n\tat a.b(C.java:1)"


@pytest.mark.parametrize(
    ("source", "line", "reason"),
    [
        (None, "", QuarantineReason.EMPTY),
        ("hdfs", "  \t ", QuarantineReason.EMPTY),
        (None, "just some words with no header", QuarantineReason.NO_FORMAT_MATCHED),
        (None, "\x00\x01\xff garbage ]]][[[", QuarantineReason.NO_FORMAT_MATCHED),
        (
            "hdfs",
            "17/06/09 20:10:40 INFO spark.SecurityManager: x",
            QuarantineReason.FORMAT_MISMATCH,
        ),
        ("no-such-format", "anything", QuarantineReason.UNKNOWN_SOURCE),
        (None, "081399 203615 148 INFO dfs.DataNode: month 13", QuarantineReason.BAD_TIMESTAMP),
        ("linux", "Foo 14 15:16:01 combo su: no such month", QuarantineReason.BAD_TIMESTAMP),
        (None, "{not json", QuarantineReason.BAD_JSON),
        (
            None,
            "Dec 10 06:55:46 LabSZ sshd[24200] no colon after the tag",
            QuarantineReason.NO_FORMAT_MATCHED,
        ),
        ("json", "[1, 2]", QuarantineReason.FORMAT_MISMATCH),
        ("json", '{"msg": "no time"}', QuarantineReason.MISSING_FIELD),
        ("json", '{"ts": "yesterday", "msg": "x"}', QuarantineReason.BAD_TIMESTAMP),
        ("json", '["not", "an", "object"]', QuarantineReason.FORMAT_MISMATCH),
        ("json", "{" * 100_000, QuarantineReason.BAD_JSON),
    ],
)
def test_unparseable_lines_are_quarantined_with_a_reason(
    source: str | None, line: str, reason: QuarantineReason
) -> None:
    result = parse_line(source, line, year=YEAR)
    assert isinstance(result, Quarantined)
    assert (result.line, result.reason) == (line, reason)
    assert result.detail


def test_feb_29_needs_a_leap_default_year() -> None:
    line = "02-29 10:00:00.000  1  2 I Tag: leap"
    assert isinstance(parse_line("android", line, year=2024), ParsedLine)
    result = parse_line("android", line, year=2023)
    assert isinstance(result, Quarantined)
    assert (result.source, result.reason) == ("android", QuarantineReason.BAD_TIMESTAMP)


def test_json_line_with_standard_names_and_an_offset() -> None:
    line = (
        '{"timestamp": "2024-03-01T12:00:00.5+02:00", "level": "warning", '
        '"component": "billing", "pid": 42, "message": "retry 3 of 5", "extra": true}'
    )
    assert LineParser(year=YEAR).detect(line) == "json"
    assert parse_line(None, line) == ParsedLine(
        source="json",
        timestamp=datetime(2024, 3, 1, 10, 0, 0, 500000),
        level="WARN",
        raw_level="warning",
        component="billing",
        pid=42,
        message="retry 3 of 5",
        template="retry <*> of <*>",
        fields={"extra": "true"},
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"ts": 1700000000, "msg": "x"}', datetime(2023, 11, 14, 22, 13, 20)),
        ('{"ts": 1700000000250, "msg": "x"}', datetime(2023, 11, 14, 22, 13, 20, 250000)),
        ('{"@timestamp": "2024-01-02T03:04:05Z", "msg": "x"}', datetime(2024, 1, 2, 3, 4, 5)),
        ('{"time": "2024-01-02 03:04:05", "msg": "x"}', datetime(2024, 1, 2, 3, 4, 5)),
    ],
)
def test_json_timestamps_become_naive_utc(line: str, expected: datetime) -> None:
    result = parse_line("json", line)
    assert isinstance(result, ParsedLine)
    assert result.timestamp == expected


def test_json_alias_fields() -> None:
    line = '{"ts": 0, "severity": "E", "logger": "a.b", "pid": "7", "msg": {"k": 1}}'
    result = parse_line("jsonl", line)
    assert isinstance(result, ParsedLine)
    assert (result.level, result.raw_level, result.component, result.pid) == (
        "ERROR",
        "E",
        "a.b",
        7,
    )
    assert result.message == '{"k": 1}'


@pytest.mark.parametrize(
    ("message", "template"),
    [
        (
            "Received block blk_-1608999687919862906 of size 91178 from /10.250.10.6",
            "Received block blk_<*> of size <*> from /<*>",
        ),
        ("workerEnv.init() ok /etc/httpd/conf/workers2.properties", "workerEnv.init() ok <*>"),
        ("Connection to 10.1.2.3:50010 lost", "Connection to <*>:<*> lost"),
        ("lock=233570404, flags=0x1, token a64f992", "lock=<*>, flags=<*>, token <*>"),
        ("request 123e4567-e89b-12d3-a456-426614174000 done", "request <*> done"),
        ("attempt_1445144423722_0020_m_000001 moved", "attempt_<*> moved"),
        ("user u0 on ssh2 at t761", "user u0 on ssh2 at t761"),
    ],
)
def test_template_masks_variable_parts(message: str, template: str) -> None:
    assert template_of(message) == template


@MODEST
@given(source=st.sampled_from([None, "unknown", *sorted(SOURCES)]), line=st.text())
def test_parse_line_never_raises_on_arbitrary_text(source: str | None, line: str) -> None:
    result = parse_line(source, line, year=YEAR)
    assert isinstance(result, ParsedLine | Quarantined)
    if isinstance(result, Quarantined):
        assert result.line == line
        assert result.detail


_HEADERS = [
    "081109 203615 148 INFO dfs.DataNode:",
    "2015-10-18 18:01:47,978 INFO [main] org.Foo:",
    "2015-07-29 17:41:44,747 - INFO  [main:Foo@1] -",
    "[Sun Dec 04 04:47:44 2005] [notice]",
    "17/06/09 20:10:40 INFO spark.Foo:",
    "03-17 16:13:38.811  1702  2395 D Tag:",
    "Dec 10 06:55:46 LabSZ sshd[24200]:",
    "Jun 14 15:16:01 combo kernel:",
    '{"ts": 1, "msg": ',
]


@MODEST
@given(
    header=st.sampled_from(_HEADERS),
    cut=st.integers(min_value=0, max_value=60),
    tail=st.text(),
    source=st.sampled_from([None, *SOURCES]),
)
def test_parse_line_never_raises_on_mangled_headers(
    header: str, cut: int, tail: str, source: str | None
) -> None:
    line = header[:cut] + tail
    result = parse_line(source, line, year=YEAR)
    assert isinstance(result, ParsedLine | Quarantined)
    if isinstance(result, ParsedLine):
        assert result.template == template_of(result.message)
