"""`weir logs formats list|test`: the registered log formats, and a format tried on a file.

``list`` prints the formats (shipped, plus those of ``--formats``) one JSON object a line;
``test FORMAT FILE`` parses each line of FILE as FORMAT (a name, or a format file) and prints
one JSON object per line — its fields, or why it failed and where the pattern stops matching —
then a summary. It exits 1 when a line failed, 2 when a format file is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

from weir.logformats import FormatFileError, FormatRegistry, LineParser, load_file
from weir.logformats.debugger import try_lines


def register(commands: Any) -> None:
    parser = commands.add_parser("logs", help="log formats of the pipeline")
    nouns = parser.add_subparsers(dest="logs_command", required=True, metavar="NOUN")
    formats = nouns.add_parser("formats", help="list and try log formats")
    actions = formats.add_subparsers(dest="formats_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the registered formats")
    add_formats_option(listing)
    listing.set_defaults(run=run_list)
    trial = actions.add_parser("test", help="parse a file's lines with one format")
    trial.add_argument("format", help="a registered format's name, or a format file")
    trial.add_argument("file", type=Path, help="lines to parse ('-': standard input)")
    trial.add_argument("--year", type=int, help="year of timestamps without one (default: this)")
    add_formats_option(trial)
    trial.set_defaults(run=run_test)


def add_formats_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--formats",
        type=Path,
        action="append",
        default=[],
        metavar="DIR_OR_FILE",
        help="format files (TOML), or directories of them, besides the shipped ones; repeatable",
    )


def registry_of(paths: list[Path]) -> FormatRegistry:
    """The shipped formats plus ``paths``; raises FormatFileError."""
    return FormatRegistry.builtin().with_files(paths)


def run_list(args: argparse.Namespace) -> int:
    try:
        registry = registry_of(args.formats)
    except FormatFileError as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2
    for declared in registry:
        row = {
            "name": declared.name,
            "aliases": list(declared.aliases),
            "kind": declared.kind,
            "detect": declared.detect,
            "specificity": declared.specificity,
            "fields": list(declared.fields),
            "description": declared.description,
            "file": declared.origin,
        }
        print(json.dumps(row))
    return 0


def run_test(args: argparse.Namespace) -> int:
    try:
        registry, name = _registry_and_name(args)
    except FormatFileError as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2
    if name is None:
        print(f"weir: no format {args.format!r}; see `weir logs formats list`", file=sys.stderr)
        return 2
    text = sys.stdin.read() if str(args.file) == "-" else args.file.read_text(encoding="utf-8")
    parser = LineParser(year=args.year or date.today().year, registry=registry)
    reports = try_lines(parser, name, [line for line in text.splitlines() if line.strip()])
    for report in reports:
        print(json.dumps(report.as_json()))
    failed = sum(not report.parsed for report in reports)
    summary = {"format": name, "lines": len(reports), "parsed": len(reports) - failed,
               "failed": failed}  # fmt: skip
    print(json.dumps({"summary": summary}))
    return 1 if failed else 0


def _registry_and_name(args: argparse.Namespace) -> tuple[FormatRegistry, str | None]:
    candidate = Path(args.format)
    if candidate.suffix == ".toml" and candidate.exists():
        declared = load_file(candidate)
        return registry_of([*args.formats, candidate]), declared.name
    registry = registry_of(args.formats)
    return registry, registry.canonical(args.format)
