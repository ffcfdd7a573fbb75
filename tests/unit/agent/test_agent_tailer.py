"""The tailer on real files and fake time: line splitting, rotation, truncation, positions."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from weir.agent.event import Event
from weir.agent.tail import FileTailer, TailInput, parse_inputs, parse_tail_flag, split_lines
from weir.clock import FakeClock


def test_split_lines_keeps_partial_lines_and_splits_long_ones() -> None:
    assert list(split_lines(b"a\r\nbb\ncc", 10, final=False)) == [(b"a", 3), (b"bb", 6)]
    assert list(split_lines(b"a\ncc", 10, final=True)) == [(b"a", 2), (b"cc", 4)]
    assert list(split_lines(b"abcdefg\nh", 3, final=False)) == [
        (b"abc", 3),
        (b"def", 6),
        (b"g", 8),
    ]
    assert list(split_lines(b"\n\n", 3, final=False)) == [(b"", 1), (b"", 2)]


def test_flag_and_config_inputs() -> None:
    assert parse_tail_flag("/var/log/*.log:app") == TailInput(
        paths=("/var/log/*.log",), topic="app"
    )
    with pytest.raises(ValueError):
        parse_tail_flag("no-topic")
    (parsed,) = parse_inputs([{"paths": ["a/*.log"], "topic": "t", "key": "apache"}])
    assert parsed == TailInput(paths=("a/*.log",), topic="t", key=b"apache")
    with pytest.raises(ValueError, match="unknown"):
        parse_inputs([{"paths": ["x"], "topic": "t", "colour": "red"}])


class Collector:
    """A store that keeps the lines it is given, refusing while `refuse` is set."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.refuse = False
        self.flushes = 0

    def store(self, events: list[Event]) -> Sequence[Exception | None]:
        if self.refuse:
            return [RuntimeError("queue full")] * len(events)
        self.lines += [e.value or b"" for e in events]
        return [None] * len(events)

    def flush(self) -> None:
        self.flushes += 1


def _tailer(tmp_path: Path, collector: Collector, clock: FakeClock) -> FileTailer:
    source = TailInput(paths=(str(tmp_path / "logs" / "*.log"),), topic="t")
    return FileTailer(
        (source,),
        spool=tmp_path / "spool",
        store=collector.store,
        make_event=lambda topic, value, key: Event(topic=topic, value=value, key=key),
        flush=collector.flush,
        clock=clock,
        max_event_bytes=100,
        close_renamed_ms=1000,
    )


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    (tmp_path / "spool").mkdir()
    return tmp_path / "logs"


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_rotation_partial_lines_and_restart(tmp_path: Path, logs: Path) -> None:
    collector, clock = Collector(), FakeClock()
    tailer = _tailer(tmp_path, collector, clock)
    _append(logs / "a.log", b"one\ntw")
    tailer.open_files()
    tailer.poll_once()
    assert collector.lines == [b"one"]
    _append(logs / "a.log", b"o\nthree")
    (logs / "a.log").rename(logs / "a.log.1")
    _append(logs / "a.log", b"four\n")
    tailer.poll_once()
    assert collector.lines == [b"one", b"two", b"four"]
    clock.advance(1000)
    tailer.poll_once()  # the rotated file is idle: its unfinished line is its last
    assert collector.lines[-1] == b"three"
    clock.advance(1000)
    tailer.poll_once()
    assert [p.path for p in tailer.positions()] == [str(logs / "a.log")]
    tailer.stop()
    assert collector.flushes > 0
    _append(logs / "a.log", b"five\n")
    restarted = _tailer(tmp_path, collector, clock)
    restarted.open_files()
    restarted.poll_once()
    restarted.stop()
    assert collector.lines == [b"one", b"two", b"four", b"three", b"five"]


def test_truncation_and_refusal(tmp_path: Path, logs: Path) -> None:
    collector, clock = Collector(), FakeClock()
    tailer = _tailer(tmp_path, collector, clock)
    _append(logs / "a.log", b"aaaa\nbbbb\n")
    tailer.open_files()
    tailer.poll_once()
    os.truncate(logs / "a.log", 0)
    _append(logs / "a.log", b"c\n")
    collector.refuse = True
    tailer.poll_once()
    collector.refuse = False
    tailer.poll_once()
    os.truncate(logs / "a.log", 0)
    _append(logs / "a.log", b"dddddddddddddddd\n")  # longer than before: the start changed
    tailer.poll_once()
    tailer.stop()
    assert collector.lines == [b"aaaa", b"bbbb", b"c", b"dddddddddddddddd"]
