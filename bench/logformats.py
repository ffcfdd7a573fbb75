"""Template mining benchmark: Loghub's grouping accuracy of weir's template ids, per data set.

For each Loghub sample (the 2,000-line ``*_2k.log`` files with their ``*_structured.csv``, in
--data), the lines are parsed by weir's batch parser under their format (the data set's name as
the record key), their messages masked by the format's rules and mined in one batch, as the log
ETL's driver mines a micro-batch (``weir.logformats.mining``). The template id of each line is
compared with the CSV's ``EventTemplate`` by Loghub's grouping accuracy (a line is grouped
correctly when the lines sharing its template id are exactly those sharing its true template),
printed beside Drain's published figure (Zhu et al., "Tools and Benchmarks for Automated Log
Parsing", ICSE-SEIP 2019, table of accuracies) and the goal of 0.95. Also reports how many
templates were found beside the true number, and the mining time.

Prints JSON; writes it to bench/results/logformats.json (or --out).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from weir.logformats import FormatRegistry
from weir.logformats.batch import BatchParser
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines

DATA = Path("/work/shared/data/loghub")
RESULTS = Path(__file__).resolve().parent / "results" / "logformats.json"
DATA_SETS = ("HDFS", "Hadoop", "Spark", "Zookeeper", "Linux", "Android", "Apache", "OpenSSH")
DRAIN_PUBLISHED = {"HDFS": 0.998, "Hadoop": 0.948, "Spark": 0.920, "Zookeeper": 0.967,
                   "Linux": 0.690, "Android": 0.911, "Apache": 1.000, "OpenSSH": 0.788}  # fmt: skip
GOAL = 0.95


def sample(data: Path, name: str) -> tuple[list[str], list[str]]:
    """The data set's raw lines and each one's true template."""
    directory = data / name
    lines = (directory / f"{name}_2k.log").read_text(encoding="utf-8").splitlines()
    with (directory / f"{name}_2k.log_structured.csv").open(encoding="utf-8", newline="") as f:
        truth = [row["EventTemplate"] for row in csv.DictReader(f)]
    if len(lines) != len(truth):
        raise ValueError(f"{name}: {len(lines)} lines but {len(truth)} structured rows")
    return lines, truth


def template_ids(parser: BatchParser, source: str, lines: list[str]) -> tuple[list[int], int]:
    """Each line's template id (0 for a line that did not parse), and the templates found."""
    keys = pa.array([source.encode()] * len(lines), pa.binary())
    parsed = parser.parse(keys, pa.array([line.encode() for line in lines], pa.binary()))
    masked = parsed.column("template").to_pylist()
    kept = [n for n, template in enumerate(masked) if template is not None]
    miner = TemplateMiner({source: parser.registry.reader(source).format.mining})
    ids = mine_lines(miner, source, [masked[n] for n in kept])
    found = [0] * len(lines)
    for n, template_id in zip(kept, ids, strict=True):
        found[n] = template_id
    return found, len(miner)


def measure(data: Path, name: str, parser: BatchParser) -> dict[str, Any]:
    lines, truth = sample(data, name)
    started = time.perf_counter()
    ids, found = template_ids(parser, name.lower(), lines)
    seconds = time.perf_counter() - started
    accuracy = grouping_accuracy(ids, truth)
    return {
        "grouping_accuracy": round(accuracy, 4),
        "drain_published": DRAIN_PUBLISHED[name],
        "at_least_drain": accuracy >= DRAIN_PUBLISHED[name],
        "at_least_goal": accuracy >= GOAL,
        "lines": len(lines),
        "unparsed_lines": ids.count(0),
        "templates_found": found,
        "templates_true": len(set(truth)),
        "parse_and_mine_s": round(seconds, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA, help="one directory per data set")
    parser.add_argument("--formats", type=Path, nargs="*", default=[],
                        help="format files or directories besides the shipped ones")  # fmt: skip
    parser.add_argument("--out", "--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    registry = FormatRegistry.builtin().with_files(args.formats)
    batch_parser = BatchParser(year=2000, registry=registry)
    results = {name: measure(args.data, name, batch_parser) for name in DATA_SETS}
    report: dict[str, Any] = {
        "benchmark": "logformats",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {"data": str(args.data), "goal": GOAL, "drain": "drain3 (Drain), per format"},
        "results": results,
        "below_goal": [name for name, result in results.items() if not result["at_least_goal"]],
        "below_drain": [name for name, result in results.items() if not result["at_least_drain"]],
    }
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
