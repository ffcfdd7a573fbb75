"""`weir demo`, the README's first command, as a user runs it: a broker, 16,000 real log lines
of eight systems, the Spark ETL to Parquet, and its report. The ETL ends after the progress
lines reach every record (its last batch is still being written then), and the report must wait
for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_process import weir
from pipeline_spark import require_spark


@pytest.mark.slow
def test_weir_demo_runs_the_etl_to_its_end_and_reports(tmp_path: Path) -> None:
    require_spark()
    done = weir("demo", "--data-dir", tmp_path / "demo", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ETL: 16,000 of 16,000 records read (100%)" in done.stdout, done.stdout
    assert "ETL: 16,000 records -> 16,000 parsed rows, 0 quarantined" in done.stdout, done.stdout
    assert "quarantined: none (every line parsed)" in done.stdout, done.stdout
    assert (tmp_path / "demo" / "warehouse" / "logs").is_dir()
