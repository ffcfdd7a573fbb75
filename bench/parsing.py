"""Batch parsing speed: the declared formats' batch parser beside the hand-written one they
replaced, on the same lines in the same run.

The old parser is ``weir.pipeline.parsing`` as of --old-commit (default 9259a33, the last commit
before formats were declared), taken from git into a temporary directory; the new one is
``weir.logformats.batch`` of this checkout. Each side runs in its own Python process (the two
packages cannot share one interpreter's ``weir``), the sides alternating --rounds times; each
process builds its parser, parses one warm-up batch, then times ``parse_parts`` over keyed
batches of --records lines: every Loghub sample shipped in ``weir/cli/demo_data`` cycled
together ("all"), and each sample alone. A fresh parser per timed batch (``cold``: every distinct
message is masked once) and the same parser again (``warm``: messages masked in an earlier batch
are looked up) are both reported. Figures are lines per CPU second of the parsing process
(``time.process_time``: on a machine shared with other work, wall-clock time measures the
neighbours as much as the parser), the median over rounds of the best of --repeats in a
process.

Prints JSON; writes it to bench/results/parsing.json (or --out).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "src" / "weir" / "cli" / "demo_data"
RESULTS = REPO / "bench" / "results" / "parsing.json"
OLD_COMMIT = "9259a33"


def demo_lines() -> dict[str, list[bytes]]:
    """Each shipped sample's lines, by source key."""
    found = {}
    for path in sorted(DEMO_DATA.glob("*.log.gz")):
        source = path.name.split("_", 1)[0].lower()
        found[source] = gzip.decompress(path.read_bytes()).splitlines()
    return found


def make_parser(side: str) -> Any:
    if side == "old":
        from weir.pipeline.parsing.batch import BatchParser as OldParser  # type: ignore

        return OldParser(year=2024)
    from weir.logformats.batch import BatchParser

    return BatchParser(year=2024)


def timed_rates(side: str, records: int, repeats: int) -> dict[str, dict[str, float]]:
    """Lines per second of ``side``'s parser, cold and warm, per batch kind (run in a worker)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    samples = demo_lines()
    batches = {"all": [(s, line) for s, lines in samples.items() for line in lines]}
    batches.update({s: [(s, line) for line in lines] for s, lines in samples.items()})
    rates: dict[str, dict[str, float]] = {}
    for kind, lines in batches.items():
        chosen = [lines[n % len(lines)] for n in range(records)]
        keys = pa.array([s.encode() for s, _ in chosen], pa.binary())
        values = pa.array([line for _, line in chosen], pa.binary())
        make_parser(side).parse_parts(keys.slice(0, 1000), values.slice(0, 1000))
        cold, warm = [], []
        for _ in range(repeats):
            parser = make_parser(side)
            started = time.process_time()
            parser.parse_parts(keys, values)
            cold.append(time.process_time() - started)
            started = time.process_time()
            parser.parse_parts(keys, values)
            warm.append(time.process_time() - started)
        rates[kind] = {"cold": records / min(cold), "warm": records / min(warm)}
    return rates


def old_tree(commit: str, into: Path) -> Path:
    """``src`` of ``commit`` extracted under ``into``; returns its path."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def run_side(side: str, source_path: Path, records: int, repeats: int) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": str(source_path)}
    command = [sys.executable, __file__, "--worker", side, "--records", str(records),
               "--repeats", str(repeats)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="lines per timed batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-commit", default=OLD_COMMIT)
    parser.add_argument("--out", "--output", type=Path, default=RESULTS)
    parser.add_argument("--worker", choices=("old", "new"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(timed_rates(args.worker, args.records, args.repeats)))
        return 0
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as scratch:
        sources = {"old": old_tree(args.old_commit, Path(scratch)), "new": REPO / "src"}
        for _ in range(args.rounds):
            for side in ("old", "new"):
                runs[side].append(run_side(side, sources[side], args.records, args.repeats))
    results: dict[str, Any] = {}
    for kind in runs["new"][0]:
        results[kind] = {}
        for state in ("cold", "warm"):
            old = statistics.median(run[kind][state] for run in runs["old"])
            new = statistics.median(run[kind][state] for run in runs["new"])
            results[kind][state] = {"old_lines_per_s": round(old), "new_lines_per_s": round(new),
                                    "new_vs_old": round(new / old, 3)}  # fmt: skip
    report = {
        "benchmark": "parsing",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "records": args.records,
            "repeats": args.repeats,
            "rounds": args.rounds,
            "old_commit": args.old_commit,
        },
        "results": results,
    }
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
