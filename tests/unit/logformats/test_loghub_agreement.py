"""The shipped formats against loghub's own structured CSVs: every line, every column.

Each of the eight samples in ../shared/data/loghub (relative to the repository root) is parsed
through its declared format, line by line and as one batch, and every column of the dataset's
``_structured.csv`` (but its LineId and event columns) is compared, as text, with the parsed
field that holds the same thing: dates and times are our timestamp written in the CSV's own
layout, numbers are written in decimal, absent fields are empty. Where loghub names a column
after something else (Linux's host is in "Level", OpenSSH's in "Component") the column is
compared with the field that holds that value. The one place where loghub cuts a field
differently is ZooKeeper's log4j "[%t:%C@%L]": loghub splits thread and class at the first
colon, but thread names hold colons ("QuorumPeer[myid=1]/0:0:0:0:0:0:0:0:2181"), so the class
follows the last one; its "Node" and "Component" columns are compared together with our thread
and component, joined by the colon that separates them in the line.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from weir.logformats import LineParser, ParsedLine
from weir.logformats.batch import BatchParser

REPO_ROOT = Path(__file__).resolve().parents[3]
LOGHUB = REPO_ROOT.parent / "shared" / "data" / "loghub"
YEAR = 2024
EXCLUDED = {"LineId", "EventId", "EventTemplate"}

Render = Callable[[ParsedLine], str]


def _time(layout: str, *, millis: bool = False) -> Render:
    def render(parsed: ParsedLine) -> str:
        text = parsed.timestamp.strftime(layout)
        return text[:-3] if millis else text

    return render


def _day(parsed: ParsedLine) -> str:
    return str(parsed.timestamp.day)


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _field(name: str) -> Render:
    return lambda parsed: _text(getattr(parsed, name))


CONTENT, LEVEL, COMPONENT, PID = (
    _field("message"),
    _field("raw_level"),
    _field("component"),
    _field("pid"),
)
# Per sample: its key, and per CSV column (or columns joined by ":"), our text of it.
COLUMNS: dict[str, tuple[str, dict[str, Render]]] = {
    "Android": ("android", {
        "Date": _time("%m-%d"), "Time": _time("%H:%M:%S.%f", millis=True), "Pid": PID,
        "Tid": _field("thread"), "Level": LEVEL, "Component": COMPONENT, "Content": CONTENT,
    }),
    "Apache": ("apache", {"Time": _time("%a %b %d %H:%M:%S %Y"), "Level": LEVEL,
                          "Content": CONTENT}),
    "HDFS": ("hdfs", {
        "Date": _time("%y%m%d"), "Time": _time("%H%M%S"), "Pid": PID, "Level": LEVEL,
        "Component": COMPONENT, "Content": CONTENT,
    }),
    "Hadoop": ("hadoop", {
        "Date": _time("%Y-%m-%d"), "Time": _time("%H:%M:%S,%f", millis=True), "Level": LEVEL,
        "Process": _field("thread"), "Component": COMPONENT, "Content": CONTENT,
    }),
    "Linux": ("linux", {
        "Month": _time("%b"), "Date": _day, "Time": _time("%H:%M:%S"), "Level": _field("host"),
        "Component": COMPONENT, "PID": PID, "Content": CONTENT,
    }),
    "OpenSSH": ("openssh", {
        "Date": _time("%b"), "Day": _day, "Time": _time("%H:%M:%S"),
        "Component": _field("host"), "Pid": PID, "Content": CONTENT,
    }),
    "Spark": ("spark", {
        "Date": _time("%y/%m/%d"), "Time": _time("%H:%M:%S"), "Level": LEVEL,
        "Component": COMPONENT, "Content": CONTENT,
    }),
    "Zookeeper": ("zookeeper", {
        "Date": _time("%Y-%m-%d"), "Time": _time("%H:%M:%S,%f", millis=True), "Level": LEVEL,
        "Node:Component": lambda p: f"{_text(p.thread)}:{_text(p.component)}",
        "Id": lambda p: p.fields.get("line", ""), "Content": CONTENT,
    }),
}  # fmt: skip


def _read_sample(name: str) -> tuple[list[str], list[dict[str, str]]]:
    directory = LOGHUB / name
    if not directory.is_dir():
        message = f"loghub samples not found at {LOGHUB}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    lines = (directory / f"{name}_2k.log").read_text(encoding="utf-8").splitlines()
    with (directory / f"{name}_2k.log_structured.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(lines) == len(rows) == 2000
    return lines, rows


def _disagreements(name: str, parsed: list[ParsedLine], rows: list[dict[str, str]]) -> list[str]:
    columns = COLUMNS[name][1]
    covered = {part for column in columns for part in column.split(":")}
    assert covered == set(rows[0]) - EXCLUDED, "every CSV column is compared"
    found = []
    for number, (line, row) in enumerate(zip(parsed, rows, strict=True), 1):
        for column, render in columns.items():
            expected = ":".join(row[part] for part in column.split(":"))
            if render(line) != expected.strip():
                found.append(f"line {number} {column}: {render(line)!r} != {expected!r}")
    return found


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_every_line_agrees_with_every_column_of_the_structured_csv(name: str) -> None:
    lines, rows = _read_sample(name)
    parser = LineParser(year=YEAR)
    parsed = [parser.parse(COLUMNS[name][0], line) for line in lines]
    assert all(isinstance(p, ParsedLine) for p in parsed)
    assert _disagreements(name, parsed, rows) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_the_batch_parser_agrees_as_well(name: str) -> None:
    lines, rows = _read_sample(name)
    key = COLUMNS[name][0].encode()
    table = BatchParser(year=YEAR).parse(
        pa.array([key] * len(lines), pa.binary()), pa.array([line.encode() for line in lines])
    )
    assert table.column("parsed").to_pylist() == [1] * len(lines)
    parsed = [
        ParsedLine(
            source=row["source"],
            timestamp=row["timestamp"].replace(tzinfo=None),
            level=row["level"],
            raw_level=row["raw_level"],
            component=row["component"],
            pid=row["pid"],
            message=row["message"],
            template=row["template"],
            host=row["host"],
            thread=row["thread"],
            fields=dict(row["fields"]),
        )
        for row in table.to_pylist()
    ]
    assert _disagreements(name, parsed, rows) == []
    assert all(isinstance(p.timestamp, datetime) for p in parsed)
