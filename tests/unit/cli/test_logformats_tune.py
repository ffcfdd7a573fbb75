"""`weir logs formats tune FILE --labels CSV`, run as a user runs it, on a labelled Loghub sample:
the suggested [mining] table pastes into a format file and mines the sample as accurately as
the command says."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

import weir.logformats
from weir.logformats import FormatRegistry, load_text
from weir.logformats.batch import BatchParser
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines
from weir.logformats.template import Masker
from weir.logformats.tuning import DEPTHS, SIMILARITIES

WEIR = Path(sys.executable).parent / "weir"
LOGHUB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "loghub"
LINES = 600
FORMATS = Path(weir.logformats.__file__).parent / "formats"


def _tune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEIR), "logs", "formats", "tune", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _android_sample(tmp_path: Path) -> tuple[Path, Path, list[str], list[str]]:
    """The first LINES lines of Loghub's Android sample and their structured rows."""
    directory = LOGHUB / "Android"
    if not directory.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"loghub samples not found at {LOGHUB}")
        pytest.skip(f"loghub samples not found at {LOGHUB}")
    lines = (directory / "Android_2k.log").read_text(encoding="utf-8").splitlines()[:LINES]
    with (directory / "Android_2k.log_structured.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))[:LINES]
    log, labels = tmp_path / "android.log", tmp_path / "android.csv"
    log.write_text("\n".join(lines) + "\n")
    with labels.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return log, labels, lines, [row["EventId"] for row in rows]


def test_tune_prints_a_mining_table_that_mines_the_sample_as_accurately_as_it_says(
    tmp_path: Path,
) -> None:
    log, labels, lines, truth = _android_sample(tmp_path)
    done = _tune(str(log), "--labels", str(labels))
    assert done.returncode == 0, done.stderr
    said = re.search(r"^# android: grouping accuracy (\d\.\d{4}) on 600 labelled lines",
                     done.stdout, re.MULTILINE)  # fmt: skip
    assert said is not None, done.stdout
    now = re.search(r"current settings \(similarity 0.8, depth 5\): (\d\.\d{4})$", done.stdout,
                    re.MULTILINE)  # fmt: skip
    assert now is not None and float(said.group(1)) >= float(now.group(1))
    table = tomllib.loads(done.stdout)["mining"]
    assert table["similarity"] in SIMILARITIES and table["depth"] in DEPTHS
    shipped = FormatRegistry.builtin().reader("android").format
    assert [rule["regex"] for rule in table["masking"]] == [r.regex for r in shipped.mining.masking]
    # The table pasted into the format's file in place of its own, and the sample mined.
    text = (FORMATS / "android.toml").read_text().split("[[samples]]")[0]
    text = text[: text.index("[mining]")] + text[text.index("]\n\n", text.index("masking")) + 3 :]
    declared = load_text(text + done.stdout, "android.toml")
    parser = BatchParser(year=2024, registry=FormatRegistry.of([declared]))
    parsed = parser.parse(pa.array([b"android"] * LINES), pa.array([x.encode() for x in lines]))
    masked = Masker(declared.mining).mask_all(parsed.column("message").to_pylist())
    ids = mine_lines(TemplateMiner({"android": declared.mining}), "android", masked)
    assert round(grouping_accuracy(ids, truth), 4) == float(said.group(1))


def test_tune_refuses_labels_that_do_not_match_the_lines(tmp_path: Path) -> None:
    log, labels, _, _ = _android_sample(tmp_path)
    log.write_text(log.read_text() + "03-17 16:13:38.811  1702  2395 D WindowManager: one more\n")
    done = _tune(str(log), "--labels", str(labels), "--format", "android")
    assert done.returncode == 2
    assert "has 600 rows but" in done.stderr and "601 lines" in done.stderr
