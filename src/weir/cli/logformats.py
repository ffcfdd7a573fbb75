"""`weir logs formats list|test|detect`: the registered log formats, a format tried on a file,
and which format detection picks for a file's lines.

``list`` prints the formats (shipped, plus those of ``--formats``) one JSON object a line;
``test FORMAT FILE`` parses each line of FILE as FORMAT (a name, or a format file) and prints
one JSON object per line — its fields, or why it failed and where the pattern stops matching —
then a summary. It exits 1 when a line failed, 2 when a format file is invalid.
``detect FILE`` prints, per format detection gave lines to, their number and the first of them,
then the lines no format took (per reason) and a summary; with ``--lines`` it first prints each
line's own outcome. It warns on standard error for each user format that takes lines a shipped
format would have taken, or makes them ambiguous. It exits 1 when some line was not detected,
2 when a format file is invalid.
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
from weir.logformats.detection import (
    Detection,
    DetectionReport,
    Shadowing,
    Share,
    detections,
)


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
    detect = actions.add_parser("detect", help="which format detection picks for each line")
    detect.add_argument("file", type=Path, help="lines to detect ('-': standard input)")
    detect.add_argument("--examples", type=int, default=3, metavar="N",
                        help="lines shown per format and per reason (default 3)")  # fmt: skip
    detect.add_argument("--lines", action="store_true",
                        help="first, one JSON object per line: its format")  # fmt: skip
    add_formats_option(detect)
    detect.set_defaults(run=run_detect)
    from weir.cli.logformats_tune import register as register_tune  # it imports this module

    register_tune(actions)


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
    parser = LineParser(year=args.year or date.today().year, registry=registry)
    reports = try_lines(parser, name, [line for line in _lines_of(args.file) if line.strip()])
    for report in reports:
        print(json.dumps(report.as_json()))
    failed = sum(not report.parsed for report in reports)
    summary = {"format": name, "lines": len(reports), "parsed": len(reports) - failed,
               "failed": failed}  # fmt: skip
    print(json.dumps({"summary": summary}))
    return 1 if failed else 0


def run_detect(args: argparse.Namespace) -> int:
    try:
        registry = registry_of(args.formats)
    except FormatFileError as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2
    lines = [(n, line) for n, line in enumerate(_lines_of(args.file), 1) if line.strip()]
    report = DetectionReport(args.examples)
    for detection in detections(registry, lines):
        report.add(detection)
        if args.lines:
            print(json.dumps(_line_row(detection)))
    for name, share in sorted(report.taken.items(), key=lambda item: -item[1].lines):
        print(json.dumps({"format": name, "lines": share.lines, "first": _numbered(share)}))
    for reason, share in sorted(report.undetected.items()):
        row = {"format": None, "reason": reason, "lines": share.lines, "first": _numbered(share)}
        print(json.dumps(row))
    undetected = sum(share.lines for share in report.undetected.values())
    summary = {"lines": report.lines, "detected": report.lines - undetected,
               "undetected": undetected}  # fmt: skip
    print(json.dumps({"summary": summary}))
    for found in report.shadowing(registry):
        print(_shadowing_warning(found), file=sys.stderr)
    return 1 if undetected else 0


def _shadowing_warning(found: Shadowing) -> str:
    done = "takes" if not found.ambiguous else "makes ambiguous (quarantined)"
    return (
        f"weir: warning: the format {found.user} ({found.user_file}) shadows the built-in "
        f"{found.builtin}: it {done} {found.lines} line(s) that {found.builtin} would take "
        f"(first: line {found.first[0]}); if they are not {found.user}'s, give them a key "
        f"or set detect = false in {found.user_file}"
    )


def _line_row(detection: Detection) -> dict[str, object]:
    """One line's outcome: its number, the format that takes it (or null and the reason
    none does), the shipped format it would otherwise have gone to, and the line."""
    number, line = detection.numbered
    row: dict[str, object] = {"line_number": number, "format": detection.format}
    if detection.format is None:
        row["reason"] = detection.reason
    if detection.shadowed is not None:
        row["shadows"] = detection.shadowed
    row["line"] = line
    return row


def _lines_of(path: Path) -> list[str]:
    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    return text.splitlines()


def _numbered(share: Share) -> list[dict[str, object]]:
    return [{"line_number": number, "line": line} for number, line in share.first]


def _registry_and_name(args: argparse.Namespace) -> tuple[FormatRegistry, str | None]:
    candidate = Path(args.format)
    if candidate.suffix == ".toml" and candidate.exists():
        declared = load_file(candidate)
        return registry_of([*args.formats, candidate]), declared.name
    registry = registry_of(args.formats)
    return registry, registry.canonical(args.format)
