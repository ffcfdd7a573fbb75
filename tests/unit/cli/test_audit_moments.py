"""`weir audit --since/--until`: ISO times and durations back from now, to milliseconds."""

from __future__ import annotations

import argparse
import datetime

import pytest

from weir.cli.audit import moment

NOW = datetime.datetime(2026, 5, 1, 8, 30, tzinfo=datetime.UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "ago_s"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 7 * 86400), ("1.5h", 5400)],
)
def test_a_duration_is_that_long_before_now(text: str, ago_s: int) -> None:
    assert moment(text, NOW) == NOW_MS - ago_s * 1000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-01T08:00Z", NOW_MS - 1800_000),
        ("2026-05-01T08:00", NOW_MS - 1800_000),  # UTC unless it says
        ("2026-05-01T10:00+02:00", NOW_MS - 1800_000),
        ("2026-05-01", NOW_MS - 8 * 3600_000 - 1800_000),
    ],
)
def test_an_iso_time(text: str, expected: int) -> None:
    assert moment(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "5 minutes", "-2h", "2026-13-01"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="neither an ISO time"):
        moment(text)
