"""Fixtures for the coordinator tests: a world is a coordinator on real storage in tmp_path and
fake time. Here it is a GroupWorld; txn/conftest.py overrides `world_kind` so that the tests
under txn/ get a TxnWorld from the same `make_world` and `world`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from group_harness import TEST_GROUP_CONFIG, GroupWorld

from weir.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def world_kind() -> tuple[Callable[..., Any], Any]:
    """The world class `make_world` builds and the config its overrides apply to."""
    return GroupWorld, TEST_GROUP_CONFIG


@pytest.fixture
def make_world(
    tmp_path: Path, clock: FakeClock, world_kind: tuple[Callable[..., Any], Any]
) -> Iterator[Callable[..., Any]]:
    """Build a world of `world_kind` with config overrides; every world is closed at teardown."""
    build, defaults = world_kind
    worlds: list[Any] = []

    def make(**overrides: Any) -> Any:
        world = build(
            tmp_path / f"data-{len(worlds)}", clock, dataclasses.replace(defaults, **overrides)
        )
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


@pytest.fixture
def world(make_world: Callable[..., Any]) -> Any:
    return make_world()
