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

With ``--default-mining`` every format's ``[mining]`` section is ignored: the messages are
masked by the default rules alone and mined with the default settings (``Mining()``), as a
format that declares none would be. With ``--leave-one-out`` each data set is also mined with
the similarity and depth chosen on the others (``weir.logformats.tuning``'s grid: the setting
under which most of the others reach Drain's published figure, then the highest mean grouping
accuracy over them), a measure of how well settings chosen on some systems hold on another:
``leave_one_out`` gives the setting and the accuracy it reaches on the data set left out.

Prints JSON; writes it to bench/results/logformats.json (or --out).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from weir.logformats import FormatRegistry
from weir.logformats.batch import BatchParser
from weir.logformats.declaration import Mining
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines
from weir.logformats.template import Masker
from weir.logformats.tuning import DEPTHS, SIMILARITIES

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


@dataclass(frozen=True)
class Parsed:
    """A data set's lines parsed: each one's format (None: it did not parse) and message."""

    sources: list[str | None]
    messages: list[str | None]

    def by_format(self) -> dict[str, list[int]]:
        """The numbers of the lines each format parsed."""
        found: dict[str, list[int]] = {}
        for n, source in enumerate(self.sources):
            if source is not None:
                found.setdefault(source, []).append(n)
        return found


def parse(parser: BatchParser, source: str | None, lines: list[str]) -> Parsed:
    """``lines`` parsed under ``source`` (None: each line's format is detected)."""
    key = source.encode() if source is not None else None
    keys = pa.array([key] * len(lines), pa.binary())
    parsed = parser.parse(keys, pa.array([line.encode() for line in lines], pa.binary()))
    messages = parsed.column("message").to_pylist()
    sources = [
        name if ok else None
        for name, ok in zip(parsed.column("source").to_pylist(),
                            parsed.column("parsed").to_pylist(), strict=True)
    ]  # fmt: skip
    return Parsed(sources, messages)


def template_ids(
    parsed: Parsed, settings: Callable[[str], Mining]
) -> tuple[list[int], dict[str, int]]:
    """Each line's template id (0 for a line that did not parse), and the templates found per
    format, each format's messages masked and mined under ``settings(format)``."""
    by_format = parsed.by_format()
    miner = TemplateMiner({name: settings(name) for name in by_format})
    found, templates = [0] * len(parsed.sources), {}
    for name, rows in sorted(by_format.items()):
        masker = Masker(settings(name))
        masked = masker.mask_all(parsed.messages[n] or "" for n in rows)
        before = len(miner)
        for n, template_id in zip(rows, mine_lines(miner, name, masked), strict=True):
            found[n] = template_id
        templates[name] = len(miner) - before
    return found, templates


def settings_of(registry: FormatRegistry, default_mining: bool) -> Callable[[str], Mining]:
    """Each format's mining settings: its own, or the defaults."""
    if default_mining:
        return lambda name: Mining()
    return lambda name: registry.reader(name).format.mining


def measure(
    lines: list[str], truth: list[str], parsed: Parsed, settings: Callable[[str], Mining],
    name: str, source: str | None,
) -> dict[str, Any]:  # fmt: skip
    started = time.perf_counter()
    ids, found = template_ids(parsed, settings)
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
        "mine_s": round(seconds, 3),
    }


Grid = dict[tuple[float, int], dict[str, float]]  # (similarity, depth) -> data set -> accuracy


def grid_accuracies(
    samples: dict[str, tuple[list[str], Parsed]], settings: Callable[[str], Mining]
) -> Grid:
    """Each data set's grouping accuracy under every (similarity, depth) of the tuning grid,
    the rest of each format's settings kept."""
    grid: Grid = {}
    for depth in DEPTHS:
        for similarity in SIMILARITIES:
            tried = _with(settings, similarity, depth)
            grid[(similarity, depth)] = {
                name: grouping_accuracy(template_ids(parsed, tried)[0], truth)
                for name, (truth, parsed) in samples.items()
            }
    return grid


def _with(
    settings: Callable[[str], Mining], similarity: float, depth: int
) -> Callable[[str], Mining]:
    return lambda name: replace(settings(name), similarity=similarity, depth=depth)


def leave_one_out(grid: Grid, name: str) -> dict[str, Any]:
    """The setting chosen on every data set but ``name`` (most of them at least Drain's figure,
    then the highest mean accuracy) and the accuracy it reaches on ``name``."""

    def score(setting: tuple[float, int]) -> tuple[int, float]:
        others = {n: a for n, a in grid[setting].items() if n != name}
        reached = sum(a >= DRAIN_PUBLISHED[n] for n, a in others.items() if n in DRAIN_PUBLISHED)
        return reached, sum(others.values()) / max(len(others), 1)

    similarity, depth = max(grid, key=score)
    accuracy = grid[(similarity, depth)][name]
    published = DRAIN_PUBLISHED.get(name)
    return {
        "similarity": similarity,
        "depth": depth,
        "grouping_accuracy": round(accuracy, 4),
        "at_least_drain": None if published is None else accuracy >= published,
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
    parser.add_argument(
        "--format",
        action="append",
        default=[],
        metavar="DATASET=FORMAT",
        help="the format of a data set its name does not name; repeatable",
    )
    parser.add_argument("--only", nargs="*", metavar="DATASET", help="measure only these")
    parser.add_argument(
        "--default-mining",
        action="store_true",
        help="ignore every format's [mining] section: default masking, settings",
    )
    parser.add_argument(
        "--leave-one-out",
        action="store_true",
        help="also mine each data set with settings chosen on the others",
    )
    parser.add_argument("--out", "--output", type=Path, default=RESULTS)
    return parser.parse_args()


def report_of(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    settings = {"data": str(args.data), "formats": [str(path) for path in args.formats],
                "goal": GOAL, "drain": "weir's MaskedDrain (drain3), per format",
                "default_mining": args.default_mining,
                "leave_one_out": args.leave_one_out}  # fmt: skip
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
    settings = settings_of(registry, args.default_mining)
    samples, results = {}, {}
    for name in names:
        lines, truth = sample(args.data, name)
        source = format_of(registry, name, named)
        started = time.perf_counter()
        parsed = parse(batch_parser, source, lines)
        parse_s = time.perf_counter() - started
        samples[name] = (truth, parsed)
        results[name] = measure(lines, truth, parsed, settings, name, source)
        results[name]["parse_s"] = round(parse_s, 3)
    if args.leave_one_out:
        grid = grid_accuracies(samples, settings)
        for name in names:
            results[name]["leave_one_out"] = leave_one_out(grid, name)
    text = json.dumps(report_of(args, results), indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
