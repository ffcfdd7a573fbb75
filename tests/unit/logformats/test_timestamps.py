"""Timestamp directives, read by the per-line reader (``timestamps``) and the column reader
(``batch_timestamps``) from the same compiled syntax: one-digit minutes and seconds, and ``%L``,
milliseconds written without padding, which ``%f`` would read as a fraction."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.logformats import FormatRegistry, LineParser, ParsedLine, load_text
from weir.logformats.batch import BatchParser, parse_rows
from weir.logformats.batch_timestamps import read_column
from weir.logformats.timestamps import TimestampFormatError, TimestampReader

CASES = [
    ("%Y-%m-%d %H:%M:%S", "2024-03-01 12:3:6", datetime(2024, 3, 1, 12, 3, 6)),
    ("%Y-%m-%d %H:%M:%S", "2024-03-01 12:03:06", datetime(2024, 3, 1, 12, 3, 6)),
    ("%Y-%m-%d %H:%M:%S", "2024-3-1 1:2:3", datetime(2024, 3, 1, 1, 2, 3)),
    ("%Y-%m-%d %H:%M:%S:%L", "2024-03-01 12:3:6:6", datetime(2024, 3, 1, 12, 3, 6, 6_000)),
    ("%Y-%m-%d %H:%M:%S:%L", "2024-03-01 12:03:06:60", datetime(2024, 3, 1, 12, 3, 6, 60_000)),
    ("%Y-%m-%d %H:%M:%S:%L", "2024-03-01 12:03:06:600", datetime(2024, 3, 1, 12, 3, 6, 600_000)),
    ("%Y-%m-%d %H:%M:%S:%L", "2024-03-01 12:03:06:006", datetime(2024, 3, 1, 12, 3, 6, 6_000)),
    ("%Y-%m-%d %H:%M:%S.%f", "2024-03-01 12:3:6.6", datetime(2024, 3, 1, 12, 3, 6, 600_000)),
    ("%Y-%m-%d %H:%M:%S.%f", "2024-03-01 12:03:06.000006", datetime(2024, 3, 1, 12, 3, 6, 6)),
    ("%Y-%m-%d %H:%M:%S.%f", "2024-03-01 12:03:06.123456789",
     datetime(2024, 3, 1, 12, 3, 6, 123_456)),
    ("%d/%m %H:%M:%S.%L", "1/3 9:5:7.12", datetime(2024, 3, 1, 9, 5, 7, 12_000)),
    # as a phone's health app writes them (Loghub's HealthApp)
    ("%Y%m%d-%H:%M:%S:%L", "20171224-0:2:9:65", datetime(2017, 12, 24, 0, 2, 9, 65_000)),
    ("%Y%m%d-%H:%M:%S:%L", "20171223-22:15:29:606",
     datetime(2017, 12, 23, 22, 15, 29, 606_000)),
    ("%Y%m%d-%H:%M:%S:%L", "20171223-22:15:29:6", datetime(2017, 12, 23, 22, 15, 29, 6_000)),
]  # fmt: skip
UNREADABLE = [
    ("%Y-%m-%d %H:%M:%S:%L", "2024-03-01 12:03:06:6000"),  # %L has at most three digits
    ("%Y-%m-%d %H:%M:%S", "2024-03-01 12:60:06"),
    ("%Y-%m-%d %H:%M:%S", "2024-03-01 12:3:"),
    ("%Y-%m-%d %H:%M:%S", "2024-03-01 12:345:6"),
]


def _column(syntax: str, texts: list[str]) -> list[datetime | None]:
    """``texts`` read by the column reader (None where it reads nothing)."""
    micros, valid = read_column(
        TimestampReader.of([syntax]), pa.array(texts), reference_us=None, year=2024
    )
    stamps = micros.astype("datetime64[us]").astype(datetime).tolist()
    return [stamp if ok else None for stamp, ok in zip(stamps, valid.tolist(), strict=True)]


@pytest.mark.parametrize(("syntax", "text", "expected"), CASES)
def test_each_directive_form_reads_alike_line_by_line_and_by_column(
    syntax: str, text: str, expected: datetime
) -> None:
    assert TimestampReader.of([syntax]).read(text, reference=None, year=2024) == expected
    assert _column(syntax, [text]) == [expected]


def test_a_column_of_mixed_widths_reads_as_each_text_alone() -> None:
    """The column reader slices texts of the layout's width and runs the regex on the rest;
    texts of both kinds in one column must still read as the per-line reader reads them."""
    for syntax in {syntax for syntax, _, _ in CASES}:
        texts = [text for s, text, _ in CASES if s == syntax]
        texts = texts * 3 + [text for s, text in UNREADABLE if s == syntax]
        reader = TimestampReader.of([syntax])
        expected = []
        for text in texts:
            try:
                expected.append(reader.read(text, reference=None, year=2024))
            except ValueError:
                expected.append(None)
        assert _column(syntax, texts) == expected, syntax


@pytest.mark.parametrize(("syntax", "text"), UNREADABLE)
def test_texts_that_are_not_times_are_refused_by_both(syntax: str, text: str) -> None:
    with pytest.raises(ValueError):
        TimestampReader.of([syntax]).read(text, reference=None, year=2024)
    assert _column(syntax, [text]) == [None]


def test_percent_f_is_a_fraction_and_percent_l_milliseconds() -> None:
    fraction = TimestampReader.of(["%H:%M:%S:%f %d.%m.%Y"])
    millis = TimestampReader.of(["%H:%M:%S:%L %d.%m.%Y"])
    text = "12:3:6:6 01.03.2024"
    assert fraction.read(text, reference=None, year=0).microsecond == 600_000
    assert millis.read(text, reference=None, year=0).microsecond == 6_000


def test_a_format_with_two_fractions_of_a_second_is_refused() -> None:
    with pytest.raises(TimestampFormatError, match="two fractions"):
        TimestampReader.of(["%Y-%m-%d %H:%M:%S.%f.%L"])


GAME = '''
name = "game"
pattern = '%{DATE:timestamp} %{LOGLEVEL:level} %{GREEDYDATA:message}'
[patterns]
DATE = '\\d{4}-\\d\\d-\\d\\d \\d\\d?:\\d\\d?:\\d\\d?:\\d+'
[timestamp]
format = "%Y-%m-%d %H:%M:%S:%L"
[[samples]]
line = '2024-03-01 12:3:6:6 INFO level loaded'
timestamp = 2024-03-01T12:03:06.006
'''


def test_a_declared_format_with_unpadded_milliseconds_parses_alike_in_both_parsers() -> None:
    registry = FormatRegistry.of([*FormatRegistry.builtin(), load_text(GAME, "game.toml")])
    lines = [b"2024-03-01 12:3:6:6 INFO a", b"2024-03-01 12:03:06:600 WARN b",
             b"2024-03-01 9:59:59:99 INFO c", b"2024-03-01 12:03:06:1000 INFO d"]  # fmt: skip
    keys = pa.array([b"game"] * len(lines), pa.binary())
    values = pa.array(lines, pa.binary())
    batch = BatchParser(year=2024, registry=registry).parse(keys, values)
    expected = parse_rows(LineParser(year=2024, registry=registry), keys.to_pylist(), lines)
    assert batch.equals(expected)
    stamps = batch.column("timestamp").to_pylist()
    assert [stamp.replace(tzinfo=None) if stamp else None for stamp in stamps] == [
        datetime(2024, 3, 1, 12, 3, 6, 6_000),
        datetime(2024, 3, 1, 12, 3, 6, 600_000),
        datetime(2024, 3, 1, 9, 59, 59, 99_000),
        None,  # four digits are not milliseconds: quarantined
    ]
    assert batch.column("reason").to_pylist()[3] == "bad-timestamp"
    parsed = LineParser(year=2024, registry=registry).parse("game", lines[0].decode())
    assert isinstance(parsed, ParsedLine) and parsed.message == "a"
    assert np.all(batch.column("parsed").to_numpy()[:3] == 1)


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2060, 12, 31)),
    padded=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_unpadded_numbers_read_as_pythons_strptime_reads_them(
    moment: datetime, padded: list[bool]
) -> None:
    numbers = (moment.month, moment.day, moment.hour, moment.minute, moment.second)
    month, day, hour, minute, second = (
        f"{n:02d}" if pad else str(n) for n, pad in zip(numbers, padded, strict=True)
    )
    text = f"{moment.year}-{month}-{day} {hour}:{minute}:{second}"
    syntax = "%Y-%m-%d %H:%M:%S"
    expected = datetime.strptime(text, syntax)
    assert TimestampReader.of([syntax]).read(text, reference=None, year=0) == expected
    assert _column(syntax, [text]) == [expected]


HEALTHAPP = '''
name = "healthapp"
detect = false
pattern = '%{STAMP:timestamp}\\|%{PART:component}\\|%{INT:pid}\\|%{GREEDYDATA:message}'
[patterns]
STAMP = '[^|]+'
PART = '[^|]*'
[timestamp]
format = "%Y%m%d-%H:%M:%S:%L"
'''
# Loghub's HealthApp sample (logpai/loghub, HealthApp/HealthApp_2k.log): a third of its lines
# write an hour, minute or second with one digit, or milliseconds with fewer than three.
HEALTHAPP_LINES = [
    ("20171223-22:15:29:606|Step_LSC|30002312|onStandStepChanged 3579",
     datetime(2017, 12, 23, 22, 15, 29, 606_000)),
    ("20171223-22:15:35:11|Step_SPUtils|30002312| getTodayTotalDetailSteps = "
     "1514038440000##7015##548365##8661##13026##27177962",
     datetime(2017, 12, 23, 22, 15, 35, 11_000)),
    ("20171223-22:16:0:119|Step_LSC|30002312|processHandleBroadcastAction "
     "action:android.intent.action.TIME_TICK", datetime(2017, 12, 23, 22, 16, 0, 119_000)),
    ("20171223-22:25:13:8|Step_StandReportReceiver|30002312|onReceive action: "
     "android.intent.action.SCREEN_OFF", datetime(2017, 12, 23, 22, 25, 13, 8_000)),
    ("20171223-22:53:7:6|Step_LSC|30002312|onExtend:1514040786000 0 0 5",
     datetime(2017, 12, 23, 22, 53, 7, 6_000)),
    ("20171223-23:7:6:75|Step_LSC|30002312|onStandStepChanged 3761",
     datetime(2017, 12, 23, 23, 7, 6, 75_000)),
    ("20171224-0:0:0:215|Step_LSC|30002312|processHandleBroadcastAction "
     "action:android.intent.action.TIME_TICK", datetime(2017, 12, 24, 0, 0, 0, 215_000)),
    ("20171224-0:5:22:473|Step_LSC|30002312|onStandStepChanged 3786",
     datetime(2017, 12, 24, 0, 5, 22, 473_000)),
    ("20171224-0:37:23:74|Step_LSC|30002312|processHandleBroadcastAction "
     "action:android.intent.action.TIME_TICK", datetime(2017, 12, 24, 0, 37, 23, 74_000)),
]  # fmt: skip


def test_loghubs_healthapp_lines_with_unpadded_fields_are_read_not_quarantined() -> None:
    registry = FormatRegistry.of([*FormatRegistry.builtin(), load_text(HEALTHAPP, "h.toml")])
    lines = [line.encode() for line, _ in HEALTHAPP_LINES] * 3
    keys = pa.array([b"healthapp"] * len(lines), pa.binary())
    values = pa.array(lines, pa.binary())
    batch = BatchParser(year=2024, registry=registry).parse(keys, values)
    expected = parse_rows(LineParser(year=2024, registry=registry), keys.to_pylist(), lines)
    assert batch.equals(expected)
    assert batch.column("reason").to_pylist() == [None] * len(lines)
    stamps = [stamp.replace(tzinfo=None) for stamp in batch.column("timestamp").to_pylist()]
    assert stamps == [stamp for _, stamp in HEALTHAPP_LINES] * 3
    assert batch.column("component").to_pylist()[3] == "Step_StandReportReceiver"
