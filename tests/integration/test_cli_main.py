"""`weir --help` as a user meets it: every command group's --help lists all its subcommands with
a one-line help each."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest
from broker_process import weir

from weir.cli.main import build_parser


def command_groups(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Every command with subcommands (`topic`, `logs formats`, ...) and their names."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if path:
                yield path, list(action.choices)
            for name, sub in action.choices.items():
                yield from command_groups(sub, (*path, name))


GROUPS = list(command_groups(build_parser()))


def listed_subcommands(help_text: str) -> dict[str, list[str]]:
    """The subcommands listed under positional arguments, each with its lines of help."""
    section = help_text.split("positional arguments:", 1)[1].split("\noptions:", 1)[0]
    listed: dict[str, list[str]] = {}
    current: list[str] = []
    for line in section.splitlines()[2:]:  # after the blank and the ACTION line
        entry = re.fullmatch(r" {4}(\S+)(?: +(.*))?", line)
        if entry:
            current = listed.setdefault(entry[1], [])
            if entry[2]:
                current.append(entry[2])
        elif line.strip():
            current.append(line.strip())
    return listed


def test_the_command_groups_are_those_weir_help_lists() -> None:
    listed = weir("--help", env={"COLUMNS": "80"})
    assert listed.returncode == 0
    for path, _ in GROUPS:
        assert re.search(rf"^ {{4}}{path[0]} ", listed.stdout, re.MULTILINE), path
    assert {"topic", "group", "txn", "acl", "user", "cluster"} <= {p[0] for p, _ in GROUPS}


@pytest.mark.parametrize(("path", "subcommands"), GROUPS, ids=[" ".join(p) for p, _ in GROUPS])
def test_a_command_groups_help_lists_every_subcommand_on_one_line(
    path: tuple[str, ...], subcommands: list[str]
) -> None:
    shown = weir(*path, "--help", env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    listed = listed_subcommands(shown.stdout)
    assert list(listed) == subcommands, shown.stdout
    for name, lines in listed.items():
        assert len(lines) == 1 and lines[0], f"weir {' '.join(path)} --help: {name}: {lines}"
