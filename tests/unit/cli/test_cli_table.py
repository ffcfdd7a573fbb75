"""The console's tables: each column as wide as its widest value, so values never run together."""

from __future__ import annotations

from weir.cli.table import table_lines

LONG_ID = "weir-console-consumer-3c7e1d52-8a4b-4f0e-9d1c-6f0621c3f905"


def test_a_long_value_widens_its_column_and_the_next_starts_after_it() -> None:
    header, short, long = table_lines(
        ("TOPIC", "PARTITION", "CONSUMER-ID", "HOST"),
        [("t", 0, "c-1", "/10.0.0.1"), ("a-much-longer-topic", 12, LONG_ID, "/127.0.0.1")],
    )
    host = header.index("HOST")
    assert long[host - 2 : host] == "  "
    assert long[host:] == "/127.0.0.1" and short[host:] == "/10.0.0.1"
    assert long.split() == ["a-much-longer-topic", "12", LONG_ID, "/127.0.0.1"]
    assert header.index("PARTITION") == len("a-much-longer-topic") + 2


def test_missing_values_show_a_dash_and_no_line_ends_in_spaces() -> None:
    lines = table_lines(("TOPIC", "LAG", "CLIENT-ID"), [("t", None, None), ("t", 5, "")])
    assert lines[1].split() == ["t", "-", "-"]
    assert all(line == line.rstrip() for line in lines)


def test_a_table_without_rows_is_its_header() -> None:
    assert table_lines(("Topic", "Partition"), []) == ["Topic  Partition"]
