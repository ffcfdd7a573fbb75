"""Handlers the unit tests load by reference, in this process and in worker processes."""

from __future__ import annotations

import os

from weir.consumer.record import Record


def upper(record: Record) -> bytes:
    return (record.value or b"").upper()


def fail_on_three(record: Record) -> bytes:
    if record.offset == 3:
        raise RuntimeError(f"offset {record.offset} is poison")
    return b"ok"


def die_on_three(record: Record) -> None:
    if record.offset == 3:
        os._exit(9)  # the worker process dies, as a segfaulting extension would


class Handlers:
    @staticmethod
    def nested(record: Record) -> int:
        return record.offset


not_callable = 42
