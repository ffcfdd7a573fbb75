"""A micro-batch's line counts to its totals, metrics_minute rows and metrics topic messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from weir.pipeline.metrics import (
    METRICS_SCHEMA,
    QUARANTINE_SCHEMA,
    BatchCounts,
    LineCount,
    write_parquet,
)

MINUTE = datetime(2015, 10, 18, 18, 1, tzinfo=UTC)
MINUTE_US = int(MINUTE.timestamp()) * 1_000_000
NEXT_US = MINUTE_US + 60_000_000

COUNTS = BatchCounts.of(
    7,
    [
        LineCount(parsed=True, source="hdfs", minute=MINUTE_US, level="INFO", lines=6),
        LineCount(parsed=True, source="hdfs", minute=MINUTE_US, level="ERROR", lines=3),
        LineCount(parsed=True, source="hdfs", minute=MINUTE_US, level="FATAL", lines=1),
        LineCount(parsed=True, source="hdfs", minute=NEXT_US, level="WARN", lines=2),
        LineCount(parsed=True, source="linux", minute=MINUTE_US, level=None, lines=5),
        LineCount(parsed=False, source="hdfs", minute=None, level=None, lines=4),
        LineCount(parsed=False, source=None, minute=None, level=None, lines=1),
    ],
)


def test_summary_counts_logs_and_quarantine() -> None:
    assert COUNTS.summary() == {"records": 22, "logs": 17, "quarantined": 5}


def test_metrics_minute_rows_have_totals_and_error_rates() -> None:
    table = COUNTS.metrics_minute()
    assert table.schema == METRICS_SCHEMA
    rows = {(r["source"], r["minute"], r["level"]): r for r in table.to_pylist()}
    assert len(rows) == 5
    info = rows["hdfs", MINUTE, "INFO"]
    assert (info["lines"], info["source_lines"], info["error_rate"]) == (6, 10, 0.4)
    assert rows["hdfs", MINUTE, "FATAL"]["error_rate"] == 0.4
    warn = rows["hdfs", datetime(2015, 10, 18, 18, 2, tzinfo=UTC), "WARN"]
    assert (warn["source_lines"], warn["error_rate"]) == (2, 0.0)
    assert rows["linux", MINUTE, None]["source_lines"] == 5
    assert {r["batch"] for r in rows.values()} == {7}


def test_metrics_messages_are_json_rows_keyed_by_source() -> None:
    messages = COUNTS.metrics_messages()
    assert len(messages) == 5
    documents = [(key, json.loads(value)) for key, value in messages]
    key, info = next((k, d) for k, d in documents if d.get("level") == "INFO")
    assert key == b"hdfs"
    assert info == {
        "source": "hdfs",
        "minute": "2015-10-18T18:01:00.000Z",
        "level": "INFO",
        "lines": 6,
        "source_lines": 10,
        "error_rate": 0.4,
        "batch": 7,
    }
    linux = next(d for k, d in documents if k == b"linux")
    assert "level" not in linux


def test_an_empty_batch_has_an_empty_metrics_table(tmp_path: Path) -> None:
    empty = BatchCounts.of(0, [])
    assert empty.summary() == {"records": 0, "logs": 0, "quarantined": 0}
    assert empty.metrics_messages() == []
    path = write_parquet(empty.metrics_minute(), tmp_path / "metrics", "part.parquet")
    assert pq.read_table(path).schema == METRICS_SCHEMA
    quarantine = write_parquet(QUARANTINE_SCHEMA.empty_table(), tmp_path / "q", "part.parquet")
    assert pq.read_table(quarantine).num_rows == 0
