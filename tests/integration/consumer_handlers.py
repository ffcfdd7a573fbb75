"""Handlers that `weir consumer run` processes load by path in the consumer framework tests.

A handler has only the record, so its settings come from the environment: WEIR_TEST_OUT is a
directory where each process appends one line per call to a file of its own (`<pid>.log`,
opened with O_APPEND: a short line is written whole even when threads share it) and
WEIR_TEST_SLEEP_MS makes each call take that long.
"""

from __future__ import annotations

import os
import time

from weir.consumer import Record

_out: int | None = None


def _pause() -> None:
    delay_ms = float(os.environ.get("WEIR_TEST_SLEEP_MS", "0"))
    if delay_ms:
        time.sleep(delay_ms / 1000)


def _write(kind: str, record: Record) -> None:
    global _out
    if _out is None:
        path = os.path.join(os.environ["WEIR_TEST_OUT"], f"{os.getpid()}.log")
        _out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    value = (record.value or b"").decode()
    os.write(_out, f"{kind} {record.topic} {record.partition} {record.offset} {value}\n".encode())


def seen(record: Record) -> None:
    """At-least-once: note that the record was handled."""
    _pause()
    _write("seen", record)


def result(record: Record) -> bytes:
    """Exactly-once: the record's result, stored in the sink."""
    _pause()
    return b"result:" + (record.value or b"")


def slow(_record: Record) -> None:
    _pause()


def poison(record: Record) -> None:
    """Fails on every record whose value starts with "poison"; notes every attempt."""
    _write("attempt", record)
    if (record.value or b"").startswith(b"poison"):
        raise ValueError(f"cannot handle {record.value!r}")


def read_lines(directory: str | os.PathLike[str]) -> list[list[str]]:
    """Every line every process wrote, split into fields."""
    lines = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as log:
            lines += [line.split(" ", 4) for line in log.read().splitlines()]
    return lines
