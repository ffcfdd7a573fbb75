"""Formats declared as files: the shipped formats written from public documentation, a user's
own format, the errors a broken format file gives, and ``weir logs formats``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from weir.cli.main import main
from weir.logformats import (
    FormatFileError,
    FormatRegistry,
    LineParser,
    ParsedLine,
    Quarantined,
    QuarantineReason,
    load_text,
)
from weir.logformats.batch import BatchParser, parse_rows

YEAR = 2024
# Lines in each documented format (beyond the samples in the format files), and what they give.
DOCUMENTED = {
    "rfc5424": [
        (
            "<13>1 2024-03-01T12:00:00+01:00 web-1 nginx 4242 - - worker started",
            {"timestamp": datetime(2024, 3, 1, 11, 0), "host": "web-1", "pid": 4242},
        ),
        ("<13>1 2024-03-01T12:00:00Z web-1 cron - - -", {"message": ""}),
    ],
    "nginx": [
        (
            '203.0.113.9 - alice [01/Mar/2024:12:00:00 +0000] "POST /api/v1/items?id=3 HTTP/2.0" '
            '201 17 "-" "curl/8.5.0"',
            {"message": "POST /api/v1/items?id=3 HTTP/2.0", "timestamp": datetime(2024, 3, 1, 12)},
        ),
        (
            '198.51.100.7 - - [01/Mar/2024:12:00:01 +0100] "-" 400 0 "-" "-"',
            {"message": "-", "timestamp": datetime(2024, 3, 1, 11, 0, 1)},
        ),
    ],
    "cri": [
        (
            "2024-03-01T12:00:00.123456789Z stdout F GET /healthz 200",
            {"message": "GET /healthz 200", "timestamp": datetime(2024, 3, 1, 12, 0, 0, 123456)},
        ),
        (
            "2024-03-01T12:00:00.5Z stderr P ",
            {"message": "", "fields": {"stream": "stderr", "tag": "P"}},
        ),
    ],
    "logback": [
        (
            "2024-03-01 12:00:00.007 [pool-2-thread-1] WARN  com.example.Cache - evicted 12 keys",
            {"level": "WARN", "thread": "pool-2-thread-1", "message": "evicted 12 keys"},
        ),
    ],
    "syslog": [  # macOS names the sender after the tag: "tag[pid] (sender):"
        (
            "Jul  1 09:01:05 calvisitor-10-105-160-95 sandboxd[129] ([31211]): "
            "com.apple.Addres(31211) deny network-outbound /private/var/run/mDNSResponder",
            {"component": "sandboxd", "pid": 129, "fields": {"sender": "[31211]"},
             "message": "com.apple.Addres(31211) deny network-outbound "
                        "/private/var/run/mDNSResponder"},
        ),
        (
            "Jul  1 09:04:37 calvisitor-10-105-160-95 com.apple.xpc.launchd[1] "
            "(com.apple.xpc.launchd.domain.pid.WebContent.32778): Path not allowed in target "
            "domain: type = pid, path = /System/Library/Frameworks/WebKit.framework",
            {"component": "com.apple.xpc.launchd", "pid": 1,
             "fields": {"sender": "com.apple.xpc.launchd.domain.pid.WebContent.32778"},
             "message": "Path not allowed in target domain: type = pid, "
                        "path = /System/Library/Frameworks/WebKit.framework"},
        ),
        (
            "Jul  3 13:39:50 calvisitor-10-105-160-237 com.apple.xpc.launchd[1] "
            "(com.apple.WebKit.Networking.A546008E-07AF-4FFC-8FF8-D8FD260359D9[33438]): "
            "Service exited with abnormal code: 1",
            {"component": "com.apple.xpc.launchd", "pid": 1, "message":
             "Service exited with abnormal code: 1", "fields": {
                 "sender": "com.apple.WebKit.Networking.A546008E-07AF-4FFC-8FF8-D8FD260359D9[33438]"
             }},
        ),
        (
            "Jul  1 09:02:26 calvisitor-10-105-160-95 kernel[0]: ARPT: 620701.011328: "
            "AirPort_Brcm43xx::syncPowerState: WWEN[enabled] (x): y",
            {"component": "kernel", "pid": 0, "fields": {},
             "message": "ARPT: 620701.011328: AirPort_Brcm43xx::syncPowerState: "
                        "WWEN[enabled] (x): y"},
        ),
    ],
    "python": [
        (
            "2024-03-01 12:00:00,250 - app.db - WARNING - slow query: 1.2 s",
            {"level": "WARN", "raw_level": "WARNING", "component": "app.db"},
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_formats_parse_keyed_and_detected(name: str) -> None:
    parser = LineParser(year=YEAR)
    for line, expected in DOCUMENTED[name]:
        keyed = parser.parse(name, line)
        assert isinstance(keyed, ParsedLine), keyed
        assert keyed.source == name
        for field, value in expected.items():
            assert getattr(keyed, field) == value, (field, line)
        assert parser.parse(None, line) == keyed
        assert parser.detect(line) == name


def test_documented_formats_parse_alike_in_batches() -> None:
    records = [
        (key, (line + tail).encode())
        for name, cases in sorted(DOCUMENTED.items())
        for line, _ in cases
        for key in (name.encode(), None)
        for tail in ("", " ", "\nsecond line", "]", '"')
    ]
    records += [(name.encode(), line[:cut].encode()) for name, cases in DOCUMENTED.items()
                for line, _ in cases for cut in (5, 20, 40)]  # fmt: skip
    keys = pa.array([k for k, _ in records], pa.binary())
    values = pa.array([v for _, v in records], pa.binary())
    batch = BatchParser(year=YEAR).parse(keys, values)
    expected = parse_rows(LineParser(year=YEAR), keys.to_pylist(), values.to_pylist())
    assert batch.equals(expected)
    assert sum(batch.column("parsed").to_pylist()) >= 2 * sum(map(len, DOCUMENTED.values()))


USER_FORMAT = """\
name = "orders"
description = "the order service's log"
pattern = '%{TIMESTAMP_ISO8601:ts} \\[%{WORD:level}\\] order=%{ORDER:order} %{GREEDYDATA:message}'

[patterns]
ORDER = 'ORD-\\d+'

[timestamp]
format = "ISO8601"
timezone = "Europe/Paris"
field = "ts"

[[samples]]
line = '2024-07-01 09:30:00 [info] order=ORD-17 paid'
timestamp = 2024-07-01T07:30:00
level = "INFO"
message = "paid"
fields = { order = "ORD-17" }
"""


def test_a_users_format_file_parses_with_its_time_zone(tmp_path: Path) -> None:
    (tmp_path / "orders.toml").write_text(USER_FORMAT)
    registry = FormatRegistry.builtin().with_files([tmp_path])
    parser = LineParser(year=YEAR, registry=registry)
    winter = parser.parse("orders", "2024-01-15 09:30:00 [error] order=ORD-9 refused")
    assert isinstance(winter, ParsedLine)
    assert (winter.timestamp, winter.level, winter.fields) == (
        datetime(2024, 1, 15, 8, 30),
        "ERROR",
        {"order": "ORD-9"},
    )
    lines = ["2024-01-15 09:30:00 [error] order=ORD-9 refused",
             "2024-03-31 02:30:00 [info] order=ORD-1 in the hour the clocks skip"]  # fmt: skip
    keys = pa.array([b"orders"] * len(lines), pa.binary())
    values = pa.array([line.encode() for line in lines], pa.binary())
    batch = BatchParser(year=YEAR, registry=registry).parse(keys, values)
    assert batch.equals(parse_rows(parser, keys.to_pylist(), values.to_pylist()))


@pytest.mark.parametrize(
    ("change", "line", "message"),
    [
        (("%{WORD:level}", "%{NOPE:level}"), 3, "unknown pattern %{NOPE}"),
        (("%{WORD:level}", "%{WORD:order}"), 3, "field 'order' is named twice"),
        (("ORD-\\d+", "ORD-(\\d+"), 3, "does not compile"),
        (('format = "ISO8601"', 'format = "%Y-%Q"'), 9, "unknown directive %Q"),
        (('timezone = "Europe/Paris"', 'timezone = "Mars/Olympus"'), 10, "unknown time zone"),
        (('level = "INFO"', 'level = "WARN"'), 14, "level is 'INFO', expected 'WARN'"),
        (("2024-07-01 09:30:00 [info]", "2024-07-01 09:30:00 info"), 14, "does not match"),
        (("2024-07-01 09:30", "2024-07-41 09:30"), 14, "bad-timestamp"),
        (('description = "', 'colour = "blue"\ndescription = "'), 2, "unknown setting 'colour'"),
        (("[timestamp]", "[timestamp"), 8, "line 8"),
    ],
)
def test_a_broken_format_file_names_its_file_and_line(
    tmp_path: Path, change: tuple[str, str], line: int, message: str
) -> None:
    assert change[0] in USER_FORMAT
    path = tmp_path / "orders.toml"
    path.write_text(USER_FORMAT.replace(change[0], change[1], 1))
    with pytest.raises(FormatFileError) as raised:
        FormatRegistry.builtin().with_files([path])
    assert str(raised.value).startswith(f"{path}:{line}: "), str(raised.value)
    assert message in str(raised.value)


def test_a_format_may_not_take_a_registered_name() -> None:
    with pytest.raises(FormatFileError, match="already names the format syslog"):
        FormatRegistry.of([*FormatRegistry.builtin(), load_text(
            USER_FORMAT.replace('name = "orders"', 'name = "orders"\naliases = ["rfc3164"]'),
            "mine.toml",
        )])  # fmt: skip


def test_weir_logs_formats_list_and_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "orders.toml").write_text(USER_FORMAT)
    assert main(["logs", "formats", "list", "--formats", str(tmp_path)]) == 0
    listed = [json.loads(row) for row in capsys.readouterr().out.splitlines()]
    assert {"orders", "syslog", "nginx", "cri", "rfc5424", "logback", "python"} <= {
        row["name"] for row in listed
    }
    lines = tmp_path / "orders.log"
    lines.write_text("2024-07-01 09:30:00 [info] order=ORD-17 paid\n"
                     "2024-07-01 09:31:00 [info] order=17 unpaid\n")  # fmt: skip
    assert main(["logs", "formats", "test", "orders", str(lines), "--formats", str(tmp_path)]) == 1
    first, second, summary = (json.loads(row) for row in capsys.readouterr().out.splitlines())
    assert first["parsed"] and first["fields"]["fields"] == {"order": "ORD-17"}
    assert not second["parsed"] and second["reason"] == "format-mismatch"
    assert second["matched_chars"] == len("2024-07-01 09:31:00 [info] order=")
    assert "ORD" in second["fails_at"]
    assert summary["summary"] == {"format": "orders", "lines": 2, "parsed": 1, "failed": 1}


def test_an_unknown_key_names_itself_in_the_quarantine() -> None:
    result = LineParser(year=YEAR).parse("orders", "2024-07-01 09:30:00 [info] order=ORD-1 x")
    assert isinstance(result, Quarantined)
    assert result.reason == QuarantineReason.UNKNOWN_SOURCE
    assert "'orders'" in result.detail


def _kept_format(on_error: str) -> str:
    return f"""\
name = "game"
detect = false
pattern = '%{{NOTSPACE:ts}} %{{LOGLEVEL:level}} %{{GREEDYDATA:message}}'
[timestamp]
field = "ts"
format = "%Y-%m-%dT%H:%M:%S"
on_error = "{on_error}"
"""


KEPT_LINES = [b"2024-03-01T12:00:00 INFO readable", b"12:00 INFO no date",
              b"2024-02-30T12:00:00 WARN no such day"]  # fmt: skip
RECORD_TIME = datetime(2024, 3, 1, 12, 5, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("on_error", "unreadable_time"),
    [("record_time", RECORD_TIME), ("null", None)],
)
def test_a_format_may_keep_lines_whose_timestamp_it_cannot_read(
    on_error: str, unreadable_time: datetime | None
) -> None:
    declared = load_text(_kept_format(on_error), "game.toml")
    registry = FormatRegistry.of([*FormatRegistry.builtin(), declared])
    keys = pa.array([b"game"] * len(KEPT_LINES), pa.binary())
    values = pa.array(KEPT_LINES, pa.binary())
    references = pa.array([RECORD_TIME] * len(KEPT_LINES), pa.timestamp("us", tz="UTC"))
    batch = BatchParser(year=YEAR, registry=registry).parse(keys, values, references)
    expected = parse_rows(LineParser(year=YEAR, registry=registry), keys.to_pylist(),
                          KEPT_LINES, references.to_pylist())  # fmt: skip
    assert batch.equals(expected)
    assert batch.column("parsed").to_pylist() == [1, 1, 1]
    assert batch.column("timestamp").to_pylist() == [
        datetime(2024, 3, 1, 12, tzinfo=UTC), unreadable_time, unreadable_time
    ]
    assert batch.column("timestamp_inferred").to_pylist() == [False, True, True]
    assert batch.column("message").to_pylist() == ["readable", "no date", "no such day"]


@pytest.mark.parametrize("on_error", ["record_time", "null"])
def test_kept_lines_stay_on_the_batch_parsers_fast_path(on_error: str) -> None:
    """The batch parser keeps them itself, as LineParser would, but for the times its column
    reader leaves to LineParser: 02:30 on 31 March 2024 does not exist in Paris."""
    paris = _kept_format(on_error).replace('on_error', 'timezone = "Europe/Paris"\non_error')
    registry = FormatRegistry.of([load_text(paris, "game.toml")])
    lines = [*KEPT_LINES, b"2024-03-31T02:30:00 INFO skipped by the clock", b"- INFO no time"]
    keys = pa.array([b"game"] * len(lines), pa.binary())
    values = pa.array(lines, pa.binary())
    references = pa.array([RECORD_TIME] * len(lines), pa.timestamp("us", tz="UTC"))
    parser = BatchParser(year=YEAR, registry=registry)
    parts = parser.parse_parts(keys, values, references)
    expected = parse_rows(LineParser(year=YEAR, registry=registry), keys.to_pylist(), lines,
                          references.to_pylist())  # fmt: skip
    assert parser.parse(keys, values, references).equals(expected)
    fast = sorted(row for rows, _ in parts[:1] for row in rows.to_pylist())
    assert fast == [0, 1, 2, 4]  # the time the clock skipped is LineParser's
    assert expected.column("timestamp_inferred").to_pylist() == [False, True, True, False, True]


def test_by_default_a_line_whose_timestamp_cannot_be_read_is_quarantined() -> None:
    declared = load_text(_kept_format("quarantine").replace('on_error = "quarantine"\n', ""), "g")
    parser = LineParser(year=YEAR, registry=FormatRegistry.of([declared]))
    result = parser.parse("game", "12:00 INFO no date", RECORD_TIME.replace(tzinfo=None))
    assert isinstance(result, Quarantined) and result.reason == QuarantineReason.BAD_TIMESTAMP
    readable = parser.parse("game", "2024-03-01T12:00:00 INFO readable")
    assert isinstance(readable, ParsedLine) and not readable.timestamp_inferred


def test_record_time_without_a_record_keeps_the_line_without_a_time() -> None:
    parser = LineParser(year=YEAR, registry=FormatRegistry.of([load_text(
        _kept_format("record_time"), "g")]))  # fmt: skip
    result = parser.parse("game", "12:00 INFO no date")
    assert isinstance(result, ParsedLine)
    assert (result.timestamp, result.timestamp_inferred) == (None, True)


def test_an_unknown_on_error_choice_names_the_choices_and_the_line() -> None:
    with pytest.raises(FormatFileError) as raised:
        load_text(_kept_format("drop"), "game.toml")
    assert str(raised.value).startswith("game.toml:7: ")
    assert "'quarantine', 'record_time', 'null'" in str(raised.value)


def _json_format(on_error: str) -> str:
    return f"""\
name = "events"
kind = "json"
detect = false
[json]
timestamp = "at"
message = "msg"
[timestamp]
on_error = "{on_error}"
"""


JSON_LINES = [
    b'{"at": "2024-03-01T12:00:00Z", "msg": "readable"}',
    b'{"msg": "no time"}',
    b'{"at": "yesterday", "msg": "unreadable"}',
    b'{"at": "2024-03-01T12:00:00Z"}',
]


@pytest.mark.parametrize(
    ("on_error", "unreadable_time"),
    [("record_time", RECORD_TIME), ("null", None)],
)
def test_a_json_lines_format_may_keep_lines_whose_timestamp_it_cannot_read(
    on_error: str, unreadable_time: datetime | None
) -> None:
    registry = FormatRegistry.of([load_text(_json_format(on_error), "events.toml")])
    keys = pa.array([b"events"] * len(JSON_LINES), pa.binary())
    values = pa.array(JSON_LINES, pa.binary())
    references = pa.array([RECORD_TIME] * len(JSON_LINES), pa.timestamp("us", tz="UTC"))
    batch = BatchParser(year=YEAR, registry=registry).parse(keys, values, references)
    assert batch.column("parsed").to_pylist() == [1, 1, 1, 0]
    assert batch.column("timestamp").to_pylist()[:3] == [
        datetime(2024, 3, 1, 12, tzinfo=UTC), unreadable_time, unreadable_time
    ]
    assert batch.column("timestamp_inferred").to_pylist()[:3] == [False, True, True]
    assert batch.column("reason").to_pylist()[3] == "missing-field"  # a message is needed


def test_a_json_lines_format_quarantines_unreadable_timestamps_by_default() -> None:
    declared = load_text(_json_format("quarantine").replace('on_error = "quarantine"\n', ""), "e")
    parser = LineParser(year=YEAR, registry=FormatRegistry.of([declared]))
    reasons = []
    for line in JSON_LINES[1:3]:
        result = parser.parse("events", line.decode(), RECORD_TIME.replace(tzinfo=None))
        assert isinstance(result, Quarantined)
        reasons.append(result.reason)
    assert reasons == [QuarantineReason.MISSING_FIELD, QuarantineReason.BAD_TIMESTAMP]


def test_a_json_lines_format_refuses_timestamp_settings_it_cannot_use() -> None:
    with pytest.raises(FormatFileError) as raised:
        load_text(_json_format("null") + 'format = "ISO8601"\n', "events.toml")
    assert str(raised.value).startswith("events.toml:9: [timestamp] format is not a setting")
