from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from txn_harness import TEST_TXN_CONFIG, TxnWorld

from weir.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_world(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., TxnWorld]]:
    """Build a TxnWorld with TxnConfig overrides; every world is closed at teardown."""
    worlds: list[TxnWorld] = []

    def make(**overrides: Any) -> TxnWorld:
        config = dataclasses.replace(TEST_TXN_CONFIG, **overrides)
        world = TxnWorld(tmp_path / f"data-{len(worlds)}", clock, config)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


@pytest.fixture
def world(make_world: Callable[..., TxnWorld]) -> TxnWorld:
    return make_world()
