from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from weir import diskio
from weir.durable import write_atomically


@pytest.fixture(autouse=True)
def no_faults_afterwards() -> Iterator[None]:
    yield
    diskio.install_faults(None)


def test_rules_parse_with_kind_operation_call_errno_and_path() -> None:
    plan = diskio.FaultPlan.parse("segment:write:3:ENOSPC, index:sync:2+:EIO:/data/a")
    assert plan.rules == [
        diskio.FaultRule("segment", "write", 3, errno.ENOSPC),
        diskio.FaultRule("index", "sync", 2, errno.EIO, True, "/data/a"),
    ]


@pytest.mark.parametrize(
    "text", ["segment:write:3", "disk:write:1:EIO", "segment:read:1:EIO", "segment:write:0:EIO",
             "segment:write:1:ENOTANERRNO"],
)  # fmt: skip
def test_bad_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="disk fault"):
        diskio.FaultPlan.parse(text)


def test_the_chosen_call_fails_and_a_failing_write_is_torn(tmp_path: Path) -> None:
    diskio.install_faults_from_environment({diskio.FAULTS_VARIABLE: "segment:write:2:ENOSPC"})
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert diskio.write(fd, b"abcd", diskio.SEGMENT) == 4
        with pytest.raises(OSError) as failure:
            diskio.write(fd, b"efgh", diskio.SEGMENT)
        assert failure.value.errno == errno.ENOSPC and diskio.is_out_of_space(failure.value)
        assert diskio.write(fd, b"ijkl", diskio.SEGMENT) == 4
        assert diskio.write(fd, b"mnop", diskio.INDEX) == 4  # another kind counts apart
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"abcdefijklmnop"


def test_rules_with_a_path_count_only_files_under_it(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    diskio.install_faults(diskio.FaultPlan.parse(f"segment:sync:1+:EIO:{tmp_path / 'a'}"))
    for name, fails in (("b", False), ("a", True)):
        fd = os.open(tmp_path / name / "f", os.O_RDWR | os.O_CREAT)
        try:
            if fails:
                with pytest.raises(OSError, match="injected"):
                    diskio.sync(fd, diskio.SEGMENT)
            else:
                diskio.sync(fd, diskio.SEGMENT)
        finally:
            os.close(fd)


def test_an_atomic_write_that_fails_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint"
    write_atomically(target, ["old"])
    for rule in ("checkpoint:write:1:ENOSPC", "checkpoint:sync:1:EIO"):
        diskio.install_faults(diskio.FaultPlan.parse(rule))
        with pytest.raises(OSError):
            write_atomically(target, ["new"])
        assert target.read_text() == "old\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_delay_rule_stalls_the_chosen_calls_and_lets_them_succeed(tmp_path: Path) -> None:
    (tmp_path / "slow").mkdir()
    plan = diskio.FaultPlan.parse(f"segment:sync:2+:delay=300:{tmp_path / 'slow'}")
    assert plan.rules == [
        diskio.FaultRule("segment", "sync", 2, 0, True, str(tmp_path / "slow"), delay_ms=300)
    ]
    diskio.install_faults(plan)
    fd = os.open(tmp_path / "slow" / "f", os.O_RDWR | os.O_CREAT)
    other = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        took = []
        for descriptor in (fd, fd, other):
            start = time.monotonic()
            diskio.sync(descriptor, diskio.SEGMENT)
            took.append(time.monotonic() - start)
    finally:
        os.close(fd)
        os.close(other)
    assert took[0] < 0.2 and took[1] >= 0.3 and took[2] < 0.2, took


@pytest.mark.parametrize("text", ["segment:sync:1:delay=", "segment:sync:1:delay=0"])
def test_bad_delays_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="delay"):
        diskio.FaultPlan.parse(text)
