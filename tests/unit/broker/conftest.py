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
def make_world(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., GroupWorld]]:
    """Build a GroupWorld with GroupConfig overrides; every world is closed at teardown."""
    worlds: list[GroupWorld] = []

    def make(**overrides: Any) -> GroupWorld:
        config = dataclasses.replace(TEST_GROUP_CONFIG, **overrides)
        world = GroupWorld(tmp_path / f"data-{len(worlds)}", clock, config)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


@pytest.fixture
def world(make_world: Callable[..., GroupWorld]) -> GroupWorld:
    return make_world()
