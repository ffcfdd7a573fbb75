"""Fixtures: real broker processes (see broker_process.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess, require_tool  # noqa: F401  (re-exported)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker")
    process.start()
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def make(name: str = "broker", **config: object) -> BrokerProcess:
        process = BrokerProcess(tmp_path / name, config=config)
        process.start()
        started.append(process)
        return process

    yield make
    for process in started:
        if process.process is not None:
            process.stop()
