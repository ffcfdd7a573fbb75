"""Running a handler over a run of records: in the worker thread, or in spawned processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from consumer_unit_records import owned, record

from weir.consumer.partition import REVOKING
from weir.consumer.record import Record
from weir.consumer.workers import ProcessRunner, ThreadRunner

HANDLERS = Path(__file__).with_name("consumer_unit_handlers.py")
RECORDS = [record(0, n) for n in range(6)]


@pytest.fixture
def process_runner(request: pytest.FixtureRequest) -> Iterator[ProcessRunner]:
    runner = ProcessRunner(f"{HANDLERS}:{request.param}", keep_results=True, processes=2)
    yield runner
    runner.close()


def test_a_thread_runner_stops_at_the_first_failure() -> None:
    def handler(r: Record) -> str:
        if r.offset == 3:
            raise KeyError("three")
        return f"r{r.offset}"

    outcome = ThreadRunner(handler, keep_results=True).run(RECORDS, owned(0))
    assert outcome.handled == 3
    assert outcome.results == [b"r0", b"r1", b"r2"]
    assert outcome.failure is not None and outcome.failure.exception == "builtins.KeyError"


def test_a_thread_runner_runs_nothing_for_a_revoked_partition() -> None:
    partition = owned(0)
    seen: list[int] = []
    runner = ThreadRunner(lambda r: seen.append(r.offset), keep_results=False)
    assert runner.run(RECORDS[:2], partition) == (2, [], None)
    partition.transition(REVOKING)
    assert runner.run(RECORDS[2:], partition) == (0, [], None)
    assert seen == [0, 1]


def test_a_thread_runner_counts_what_it_handled_before_a_failure() -> None:
    def handler(r: Record) -> None:
        if r.offset == 2:
            raise ValueError("bad record")

    for keep_results in (False, True):
        outcome = ThreadRunner(handler, keep_results).run(RECORDS, owned(0))
        assert outcome.handled == 2 and outcome.failure is not None
        assert outcome.failure.exception == "builtins.ValueError"


def test_a_thread_runner_survives_a_handler_that_exits() -> None:
    def handler(_r: Record) -> None:
        raise SystemExit(3)

    outcome = ThreadRunner(handler, keep_results=False).run(RECORDS, owned(0))
    assert outcome.handled == 0 and outcome.failure is not None
    assert outcome.failure.exception == "builtins.SystemExit"


@pytest.mark.parametrize("process_runner", ["upper"], indirect=True)
def test_process_workers_return_the_results(process_runner: ProcessRunner) -> None:
    outcome = process_runner.run(RECORDS * 30, owned(0))
    assert outcome.failure is None
    assert outcome.results == [b"VALUE-%d" % r.offset for r in RECORDS] * 30


@pytest.mark.parametrize("process_runner", ["fail_on_three"], indirect=True)
def test_process_workers_report_a_failure_with_its_stack(process_runner: ProcessRunner) -> None:
    outcome = process_runner.run(RECORDS, owned(0))
    assert outcome.handled == 3 and outcome.results == [b"ok"] * 3
    assert outcome.failure is not None
    assert outcome.failure.message == "offset 3 is poison"
    assert "fail_on_three" in outcome.failure.stacktrace


@pytest.mark.parametrize("process_runner", ["die_on_three"], indirect=True)
def test_a_dead_worker_process_fails_its_chunk_and_is_replaced(
    process_runner: ProcessRunner,
) -> None:
    outcome = process_runner.run(RECORDS, owned(0))
    assert outcome.handled == 0 and outcome.failure is not None
    assert "BrokenProcessPool" in outcome.failure.exception
    survivors = process_runner.run(RECORDS[:3], owned(0))
    assert (survivors.handled, survivors.failure) == (3, None)


def test_process_workers_refuse_a_handler_they_cannot_import() -> None:
    with pytest.raises(ValueError, match="MODULE:FUNCTION or a module-level function"):
        ProcessRunner(lambda record: None, keep_results=False, processes=1)
