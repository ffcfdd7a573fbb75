"""`weir logs formats tune FILE --labels CSV`: ``[mining]`` settings suggested from a labelled
sample.

FILE holds log lines; CSV is a Loghub-style structured file with one row per line of FILE, in
order, naming each line's true event (its ``EventId`` column, else ``EventTemplate``). The lines
are parsed under ``--format`` (a registered format's name or a format file), or under the format
detection gives most of them; the lines that format did not parse are left out. Their messages
are masked by the format's rules and mined under every similarity and depth of the tuning grid
(``weir.logformats.tuning``); the most accurate setting is printed as a ``[mining]`` table to
paste into the format's file, after comments giving its grouping accuracy beside that of the
format's current settings. Exits 2 when the input is unusable (a format file invalid, no such
format, CSV rows not matching the lines, no line parsed).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from weir.cli.logformats import add_formats_option, registry_of
from weir.logformats import FormatFileError, FormatRegistry, load_file
from weir.logformats.batch import BatchParser
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines
from weir.logformats.template import Masker
from weir.logformats.tuning import best, mining_section, sweep

LABEL_COLUMNS = ("EventId", "EventTemplate")


class TuneError(Exception):
    """Input the command cannot use; the message says why."""


def register(actions: Any) -> None:
    tune = actions.add_parser("tune", help="suggest a format's [mining] settings from labels")
    tune.add_argument("file", type=Path, help="log lines")
    tune.add_argument(
        "--labels",
        type=Path,
        required=True,
        metavar="CSV",
        help="Loghub-style structured CSV: each line's EventId, or EventTemplate",
    )
    tune.add_argument("--format", help="a registered format's name, or a format file "
                      "(default: the format detection gives most lines)")  # fmt: skip
    add_formats_option(tune)
    tune.set_defaults(run=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    try:
        print(suggestion(args.file, args.labels, args.format, args.formats), end="")
    except (FormatFileError, TuneError) as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2
    return 0


def suggestion(file: Path, labels: Path, format_name: str | None, formats: list[Path]) -> str:
    """The ``[mining]`` table suggested for the lines of ``file``, with comments."""
    lines = file.read_text(encoding="utf-8").splitlines()
    truth = read_labels(labels)
    if len(truth) != len(lines):
        raise TuneError(f"{labels} has {len(truth)} rows but {file} has {len(lines)} lines")
    registry, name = _registry_and_name(format_name, formats)
    name, messages = parsed_messages(registry, name, lines)
    kept = [n for n, message in enumerate(messages) if message is not None]
    if not kept:
        raise TuneError(f"no line of {file} parsed" + (f" as {name}" if name else ""))
    current = registry.reader(name).format.mining
    masked = Masker(current).mask_all(messages[n] or "" for n in kept)
    sample_truth = [truth[n] for n in kept]
    chosen = best(sweep(masked, sample_truth, current))
    miner = TemplateMiner({name: current})
    now = grouping_accuracy(mine_lines(miner, name, masked), sample_truth)
    header = (
        f"# {name}: grouping accuracy {chosen.accuracy:.4f} on {len(kept)} labelled lines"
        f" ({len(lines) - len(kept)} not parsed as {name}, left out)\n"
        f"# with the format's current settings (similarity {current.similarity:g},"
        f" depth {current.depth}): {now:.4f}\n"
    )
    return header + mining_section(chosen.settings(current))


def read_labels(path: Path) -> list[str]:
    """Each row's true event: its ``EventId``, else its ``EventTemplate``."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        column = next((c for c in LABEL_COLUMNS if c in (reader.fieldnames or ())), None)
        if column is None:
            raise TuneError(f"{path} has no {' or '.join(LABEL_COLUMNS)} column")
        return [row[column] for row in reader]


def parsed_messages(
    registry: FormatRegistry, name: str | None, lines: list[str]
) -> tuple[str, list[str | None]]:
    """The format (``name``, or the one detection gives most lines) and each line's message
    under it (None: the line did not parse as that format)."""
    parser = BatchParser(year=date.today().year, registry=registry)
    key = name.encode() if name is not None else None
    table = parser.parse(
        pa.array([key] * len(lines), pa.binary()),
        pa.array([line.encode() for line in lines], pa.binary()),
    )
    sources = [
        source if ok else None
        for source, ok in zip(table.column("source").to_pylist(),
                              table.column("parsed").to_pylist(), strict=True)
    ]  # fmt: skip
    if name is None:
        counted = Counter(source for source in sources if source is not None)
        if not counted:
            raise TuneError("no line was detected as any format; name one with --format")
        name = counted.most_common(1)[0][0]
    messages = table.column("message").to_pylist()
    return name, [m if s == name else None for m, s in zip(messages, sources, strict=True)]


def _registry_and_name(
    format_name: str | None, formats: list[Path]
) -> tuple[FormatRegistry, str | None]:
    if format_name is None:
        return registry_of(formats), None
    candidate = Path(format_name)
    if candidate.suffix == ".toml" and candidate.exists():
        return registry_of([*formats, candidate]), load_file(candidate).name
    registry = registry_of(formats)
    name = registry.canonical(format_name)
    if name is None:
        raise TuneError(f"no format {format_name!r}; see `weir logs formats list`")
    return registry, name
