from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import OpenLog

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, PartitionLog


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scheduler(clock: FakeClock) -> FakeScheduler:
    return FakeScheduler(clock)


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler) -> Iterator[OpenLog]:
    opened: list[PartitionLog] = []

    def open_(config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
        log = PartitionLog(tmp_path / "topic-0", config or LogConfig(), clock, scheduler, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield open_
    for log in opened:
        for segment in log.segments:
            segment.close()
