"""The spilling memory queue: memory first, spill while unreachable, order kept, held on stop."""

from __future__ import annotations

from pathlib import Path

from weir.agent.memory import SpillingQueue
from weir.agent.queue import Durability
from weir.clock import FakeClock


def _queue(tmp_path: Path, reachable: list[bool], shm: Path | None = None) -> SpillingQueue:
    return SpillingQueue(
        tmp_path / "spool" / "t" / "0.ring",
        topic="t",
        partition=0,
        durability=Durability.SHM if shm else Durability.MEMORY,
        capacity=4096,
        clock=FakeClock(),
        reachable=lambda: reachable[0],
        shm_path=shm,
    )


def _drain(queue: SpillingQueue) -> list[bytes]:
    out: list[bytes] = []
    while (batch := queue.peek(2, 1 << 20)).payloads:
        out += batch.payloads
        queue.acknowledge(batch)
    return out


def test_spills_only_while_unreachable_and_drains_in_order(tmp_path: Path) -> None:
    reachable = [True]
    queue = _queue(tmp_path, reachable)
    queue.append([b"a", b"b"])
    assert queue.spilled == 0 and not (tmp_path / "spool" / "t" / "0.ring").exists()
    reachable[0] = False
    queue.append([b"c"])
    reachable[0] = True
    queue.append([b"d"])  # the spill is not empty yet: d goes after c
    assert queue.spilled == 2 and queue.state().depth == 4
    assert _drain(queue) == [b"a", b"b", b"c", b"d"]
    queue.append([b"e"])
    assert queue.spilled == 2 and _drain(queue) == [b"e"]
    queue.note_delivery(False)
    queue.append([b"f"])
    assert queue.spilled == 3
    queue.close()


def test_a_clean_stop_keeps_memory_and_shm_survives_without_it(tmp_path: Path) -> None:
    reachable = [True]
    queue = _queue(tmp_path, reachable)
    queue.append([b"a", b"b"])
    reachable[0] = False
    queue.append([b"c"])
    queue.close()
    reopened = _queue(tmp_path, reachable)
    assert _drain(reopened) == [b"a", b"b", b"c"]
    reopened.close()
    shm = tmp_path / "shm" / "t" / "0.ring"
    reachable[0] = True
    first = _queue(tmp_path, reachable, shm)
    first.append([b"x", b"y"])  # not closed before the next one opens: as after kill -9
    second = _queue(tmp_path, reachable, shm)
    assert _drain(second) == [b"x", b"y"]
    second.close()
    first.close()
