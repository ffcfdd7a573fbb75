"""`weir quota`'s reading of kafka-configs.sh's entity flags."""

from __future__ import annotations

import pytest

from weir.cli.main import build_parser
from weir.cli.quota import entity_parts


def parts(*argv: str) -> list[tuple[str, str | None]]:
    args = build_parser().parse_args(["quota", "describe", *argv])
    return entity_parts(args.entity_type, args.entity_names)


def test_names_pair_with_types_in_order() -> None:
    assert parts("--entity-type", "users", "--entity-default",
                 "--entity-type", "clients", "--entity-name", "app") == [
        ("user", ""), ("client-id", "app"),
    ]  # fmt: skip
    assert parts("--entity-type", "users", "--entity-type", "clients") == [
        ("user", None), ("client-id", None),
    ]  # fmt: skip


@pytest.mark.parametrize("argv", [
    ["--entity-type", "users", "--entity-name", "a", "--entity-name", "b"],
    ["--entity-type", "users", "--entity-type", "users"],
])  # fmt: skip
def test_names_without_types_and_repeated_types_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="weir: "):
        parts(*argv)
