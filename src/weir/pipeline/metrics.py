"""Per-minute metrics of one micro-batch, built on the driver from its line counts.

The job counts a batch's lines once per (parsed, source, minute, level); ``BatchCounts`` keeps
those few rows and derives from them the batch's totals, its ``metrics_minute`` table (written
as one Parquet file) and the JSON rows for the metrics topic. No Spark here: the counts arrive
as plain tuples.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

ERROR_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})
METRICS_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("minute", pa.timestamp("us", tz="UTC")),
        ("level", pa.string()),
        ("lines", pa.int64()),
        ("source_lines", pa.int64()),
        ("error_rate", pa.float64()),
        ("batch", pa.int64()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)


@dataclass(frozen=True, slots=True)
class LineCount:
    """Lines of a batch with one outcome, source, minute and level.

    ``minute`` is microseconds since the epoch of the minute's start (None for quarantined
    lines, which have no timestamp).
    """

    parsed: bool
    source: str | None
    minute: int | None
    level: str | None
    lines: int


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """The line counts of one micro-batch."""

    batch_id: int
    counts: tuple[LineCount, ...]

    @classmethod
    def of(cls, batch_id: int, counts: Iterable[LineCount]) -> BatchCounts:
        return cls(batch_id, tuple(counts))

    @property
    def logs(self) -> int:
        return sum(count.lines for count in self.counts if count.parsed)

    @property
    def quarantined(self) -> int:
        return sum(count.lines for count in self.counts if not count.parsed)

    def summary(self) -> dict[str, int]:
        logs, quarantined = self.logs, self.quarantined
        return {"records": logs + quarantined, "logs": logs, "quarantined": quarantined}

    def metrics_minute(self) -> pa.Table:
        """Lines per (source, minute, level), with the source-minute's total and error rate."""
        parsed = [count for count in self.counts if count.parsed]
        totals: dict[tuple[str | None, int | None], int] = defaultdict(int)
        errors: dict[tuple[str | None, int | None], int] = defaultdict(int)
        for count in parsed:
            totals[count.source, count.minute] += count.lines
            if count.level in ERROR_LEVELS:
                errors[count.source, count.minute] += count.lines
        rows: dict[str, list[object]] = {name: [] for name in METRICS_SCHEMA.names}
        for count in parsed:
            total = totals[count.source, count.minute]
            rows["source"].append(count.source)
            rows["minute"].append(count.minute)
            rows["level"].append(count.level)
            rows["lines"].append(count.lines)
            rows["source_lines"].append(total)
            rows["error_rate"].append(errors[count.source, count.minute] / total)
            rows["batch"].append(self.batch_id)
        columns = [pa.array(rows[f.name], f.type) for f in METRICS_SCHEMA]
        return pa.table(columns, schema=METRICS_SCHEMA)

    def metrics_messages(self) -> list[tuple[bytes, bytes]]:
        """(key, value) per metrics row: the source, and the row as JSON (null fields left out,
        ``minute`` as ``yyyy-MM-ddTHH:mm:ss.SSSZ``)."""
        messages = []
        for row in self.metrics_minute().to_pylist():
            row["minute"] = _iso_minute(row["minute"])
            document = {name: value for name, value in row.items() if value is not None}
            key = (row["source"] or "").encode()
            messages.append((key, json.dumps(document, separators=(",", ":")).encode()))
        return messages


def _iso_minute(minute: datetime | None) -> str | None:
    if minute is None:
        return None
    utc = minute.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def write_parquet(table: pa.Table, directory: Path, name: str) -> Path:
    """Writes ``table`` as ``directory/name`` (snappy, as Spark writes), creating the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    pq.write_table(table, path, compression="snappy")
    return path
