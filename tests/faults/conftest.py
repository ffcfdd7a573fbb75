from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, PartitionLog


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scheduler(clock: FakeClock) -> FakeScheduler:
    return FakeScheduler(clock)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(
    log_dir: Path, clock: FakeClock, scheduler: FakeScheduler
) -> Iterator[Callable[..., PartitionLog]]:
    """Open the partition log in `log_dir`; whatever a test leaves open is closed afterwards
    without flushing, as a crash would leave it."""
    opened: list[PartitionLog] = []

    def open_(config: LogConfig, **kwargs: int | bool) -> PartitionLog:
        log = PartitionLog(log_dir, config, clock, scheduler, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield open_
    for log in opened:
        for segment in log.segments:
            segment.close()
