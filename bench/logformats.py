"""Template mining benchmark: Loghub's grouping accuracy of weir's template ids, per data set.

A data set is a directory of ``--data`` holding Loghub's layout: ``<Name>/<Name>_2k.log`` (raw
lines) and ``<Name>/<Name>_2k.log_structured.csv`` (one row per line, with its true
``EventTemplate``); every such directory is measured (``--only`` picks some). Each data set's
lines are parsed by weir's batch parser under the format its name names (its name lower-cased
as the record key: a shipped format or one of ``--formats``; ``--format NAME=FORMAT`` names
another), or, when no format has that name, under the format detection gives each line. Their
messages are masked by their format's rules and mined in one batch per format, as the log ETL's
driver mines a micro-batch (``weir.logformats.mining``). The template id of each line is
compared with the CSV's ``EventTemplate`` by Loghub's grouping accuracy (a line is grouped
correctly when the lines sharing its template id are exactly those sharing its true template),
printed beside Drain's published figure where there is one (Zhu et al., "Tools and Benchmarks
for Automated Log Parsing", ICSE-SEIP 2019, table of accuracies) and the goal of 0.95. Also
reports how many lines did not parse, how many templates were found beside the true number,
and the parsing and mining time.

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
DRAIN_PUBLISHED = {"HDFS": 0.998, "Hadoop": 0.948, "Spark": 0.920, "Zookeeper": 0.967,
                   "Linux": 0.690, "Android": 0.911, "Apache": 1.000, "OpenSSH": 0.788}  # fmt: skip
GOAL = 0.95
LOG_SUFFIX, STRUCTURED_SUFFIX = "_2k.log", "_2k.log_structured.csv"


def data_sets(data: Path) -> list[str]:
    """The names of the directories of ``data`` that hold a Loghub sample, sorted."""
    return sorted(
        directory.name
        for directory in data.iterdir()
        if (directory / f"{directory.name}{LOG_SUFFIX}").is_file()
        and (directory / f"{directory.name}{STRUCTURED_SUFFIX}").is_file()
    )


def sample(data: Path, name: str) -> tuple[list[str], list[str]]:
    """The data set's raw lines and each one's true template."""
    directory = data / name
    lines = (directory / f"{name}{LOG_SUFFIX}").read_text(encoding="utf-8").splitlines()
    with (directory / f"{name}{STRUCTURED_SUFFIX}").open(encoding="utf-8", newline="") as f:
        truth = [row["EventTemplate"] for row in csv.DictReader(f)]
    if len(lines) != len(truth):
        raise ValueError(f"{name}: {len(lines)} lines but {len(truth)} structured rows")
    return lines, truth


def template_ids(
    parser: BatchParser, source: str | None, lines: list[str]
) -> tuple[list[int], dict[str, int]]:
    """Each line's template id (0 for a line that did not parse), and the templates found per
    format. ``source``: the lines' format, or None to detect each line's."""
    key = source.encode() if source is not None else None
    keys = pa.array([key] * len(lines), pa.binary())
    parsed = parser.parse(keys, pa.array([line.encode() for line in lines], pa.binary()))
    masked = parsed.column("template").to_pylist()
    sources = parsed.column("source").to_pylist()
    by_format: dict[str, list[int]] = {}
    for n, template in enumerate(masked):
        if template is not None:
            by_format.setdefault(sources[n], []).append(n)
    miner = TemplateMiner({name: parser.registry.reader(name).format.mining for name in by_format})
    found, templates = [0] * len(lines), {}
    for name, rows in sorted(by_format.items()):
        before = len(miner)
        ids = mine_lines(miner, name, [masked[n] for n in rows])
        for n, template_id in zip(rows, ids, strict=True):
            found[n] = template_id
        templates[name] = len(miner) - before
    return found, templates


def measure(data: Path, name: str, parser: BatchParser, source: str | None) -> dict[str, Any]:
    lines, truth = sample(data, name)
    started = time.perf_counter()
    ids, found = template_ids(parser, source, lines)
    seconds = time.perf_counter() - started
    accuracy = grouping_accuracy(ids, truth)
    published = DRAIN_PUBLISHED.get(name)
    return {
        "format": source if source is not None else "detected",
        "grouping_accuracy": round(accuracy, 4),
        "drain_published": published,
        "at_least_drain": None if published is None else accuracy >= published,
        "at_least_goal": accuracy >= GOAL,
        "lines": len(lines),
        "unparsed_lines": ids.count(0),
        "templates_found": sum(found.values()),
        "templates_by_format": found,
        "templates_true": len(set(truth)),
        "parse_and_mine_s": round(seconds, 3),
    }


def format_of(registry: FormatRegistry, name: str, named: dict[str, str]) -> str | None:
    """The format of data set ``name``: as ``--format`` names it, else its own name's, else
    None (each line's is detected)."""
    key = named.get(name, name.lower())
    found = registry.canonical(key)
    if found is None and name in named:
        raise SystemExit(f"--format {name}={key}: no format {key!r}; see `weir logs formats list`")
    return found


def _named_formats(pairs: list[str]) -> dict[str, str]:
    named = {}
    for pair in pairs:
        data_set, separator, format_name = pair.partition("=")
        if not separator or not data_set or not format_name:
            raise SystemExit(f"--format takes DATASET=FORMAT, not {pair!r}")
        named[data_set] = format_name
    return named


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA, help="one directory per data set")
    parser.add_argument("--formats", type=Path, nargs="*", default=[],
                        help="format files or directories besides the shipped ones")  # fmt: skip
    parser.add_argument("--format", action="append", default=[], metavar="DATASET=FORMAT",
                        help="the format of a data set its name does not name; repeatable")
    parser.add_argument("--only", nargs="*", metavar="DATASET", help="measure only these")
    parser.add_argument("--out", "--output", type=Path, default=RESULTS)
    return parser.parse_args()


def report_of(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    settings = {"data": str(args.data), "formats": [str(path) for path in args.formats],
                "goal": GOAL, "drain": "drain3 (Drain), per format"}  # fmt: skip
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform()}  # fmt: skip
    return {
        "benchmark": "logformats",
        "machine": machine,
        "settings": settings,
        "results": results,
        "below_goal": [name for name, result in results.items() if not result["at_least_goal"]],
        "below_drain": [n for n, result in results.items() if result["at_least_drain"] is False],
    }


def main() -> int:
    args = arguments()
    registry = FormatRegistry.builtin().with_files(args.formats)
    batch_parser = BatchParser(year=2000, registry=registry)
    named = _named_formats(args.format)
    names = [name for name in data_sets(args.data) if not args.only or name in args.only]
    if not names:
        raise SystemExit(f"no Loghub-layout data set in {args.data} (<Name>/<Name>{LOG_SUFFIX})")
    results = {
        name: measure(args.data, name, batch_parser, format_of(registry, name, named))
        for name in names
    }
    text = json.dumps(report_of(args, results), indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
