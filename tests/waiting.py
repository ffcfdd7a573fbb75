"""Waiting in tests for something another process or thread does: `poll` calls a condition until
it returns a truthy value, and fails naming what was awaited, the timeout and the last value or
exception seen when it does not in time.

Test modules import it as `waiting`: tests/ is on sys.path as the directory of the suite's
conftest.py (pytest's default "prepend" import mode). Scripts outside pytest (the benches that
use tests/cluster's kits) put tests/ on sys.path themselves. It imports no pytest, so they can.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    ignoring: tuple[type[Exception], ...] = (),
    failure: Callable[[str], Exception] = AssertionError,
    detail: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of `condition()`, called every `interval` seconds. An exception
    among `ignoring` counts as "not yet"; after `timeout` seconds `failure` is raised with a
    message naming `what`, the last value or exception seen and, if given, `detail()`."""
    value, _ = timed_poll(
        condition, timeout, what,
        interval=interval, ignoring=ignoring, failure=failure, detail=detail,
    )  # fmt: skip
    return value


def timed_poll(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    ignoring: tuple[type[Exception], ...] = (),
    failure: Callable[[str], Exception] = AssertionError,
    detail: Callable[[], str] | None = None,
) -> tuple[T, float]:
    """As `poll`, with the seconds it took."""
    start = time.monotonic()
    last: object = None
    while True:
        value: T | None
        try:
            value = condition()
        except ignoring as exc:
            value, last = None, exc
        else:
            last = value
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            message = f"{what}: not within {timeout:g}s; last seen: {last!r}"
            raise failure(message if detail is None else f"{message}\n{detail()}")
        time.sleep(interval)
