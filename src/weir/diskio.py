"""Every write weir makes to its data directories, named by the kind of file it touches.

Segments, indexes, checkpoints and the embedded metadata go through `write`, `pwrite`,
`truncate` and `sync` here, so that one place can tell which failures a full or failing disk
produces and a test can make chosen calls fail in a real process.

Fault injection: `install_faults(FaultPlan.parse(text))`, or the environment variable
`WEIR_DISK_FAULTS` read by `install_faults_from_environment()` at process start. The text is a
comma-separated list of rules `KIND:OP:N[+]:ERRNO[:PATH]`: the N-th call (1-based, counted per
rule in this process) of that kind and operation, on a file under PATH if one is given, fails with
that errno, and with `N+` every later call too. A failing write first writes half of its bytes, as
a write that runs out of space does. In place of an errno, `delay=MS` makes the call wait MS
milliseconds and then succeed (a stalled disk).

Nothing here knows about logs or brokers; it only names files' kinds.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

SEGMENT = "segment"
INDEX = "index"
CHECKPOINT = "checkpoint"
METADATA = "metadata"
KINDS = (SEGMENT, INDEX, CHECKPOINT, METADATA)

WRITE = "write"
TRUNCATE = "truncate"
SYNC = "sync"
OPERATIONS = (WRITE, TRUNCATE, SYNC)

FAULTS_VARIABLE = "WEIR_DISK_FAULTS"

#: errors a full disk or an exhausted process limit produces: the operation can be undone and
#: retried later. Any other error means the disk itself is failing.
OUT_OF_SPACE_ERRORS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)


def is_out_of_space(exc: OSError) -> bool:
    return exc.errno in OUT_OF_SPACE_ERRORS


@dataclass(frozen=True, slots=True)
class FaultRule:
    kind: str
    operation: str
    call: int
    errno: int  # 0 for a delay
    and_later: bool = False
    path: str | None = None
    delay_ms: int = 0

    def fires(self, count: int) -> bool:
        return count == self.call or (self.and_later and count > self.call)


class FaultPlan:
    """Which calls fail. Thread-safe: calls are counted under a lock."""

    def __init__(self, rules: list[FaultRule]) -> None:
        self.rules = rules
        self._counts = [0] * len(rules)
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        return cls([_parse_rule(part.strip()) for part in text.split(",") if part.strip()])

    def check(self, kind: str, operation: str, fd: int) -> int | None:
        """Count this call against the rules it matches; the errno it must fail with, or None."""
        failure = None
        for i, rule in enumerate(self.rules):
            if rule.kind != kind or rule.operation != operation:
                continue
            if rule.path is not None and not _fd_path(fd).startswith(rule.path):
                continue
            with self._lock:
                self._counts[i] += 1
                count = self._counts[i]
            if not rule.fires(count):
                continue
            if rule.delay_ms:
                time.sleep(rule.delay_ms / 1000)
            elif failure is None:
                failure = rule.errno
        return failure


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _parse_rule(text: str) -> FaultRule:
    parts = text.split(":", 4)
    if len(parts) not in (4, 5):
        raise ValueError(f"disk fault {text!r} is not KIND:OP:N[+]:ERRNO[:PATH]")
    kind, operation, call, name = parts[:4]
    path = os.path.abspath(parts[4]) if len(parts) == 5 else None
    if kind not in KINDS:
        raise ValueError(f"disk fault {text!r}: kind must be one of {', '.join(KINDS)}")
    if operation not in OPERATIONS:
        raise ValueError(f"disk fault {text!r}: operation must be one of {', '.join(OPERATIONS)}")
    and_later = call.endswith("+")
    number = call.rstrip("+")
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"disk fault {text!r}: N must be a positive call number")
    if name.startswith(_DELAY):
        delay = name.removeprefix(_DELAY)
        if not delay.isdigit() or int(delay) < 1:
            raise ValueError(f"disk fault {text!r}: delay must be a positive number of ms")
        return FaultRule(kind, operation, int(number), 0, and_later, path, int(delay))
    code = getattr(errno, name, None)
    if not isinstance(code, int):
        raise ValueError(f"disk fault {text!r}: unknown errno {name!r}")
    return FaultRule(kind, operation, int(number), code, and_later, path)


_DELAY = "delay="


_plan: FaultPlan | None = None


def install_faults(plan: FaultPlan | None) -> None:
    global _plan
    _plan = plan


def install_faults_from_environment(environ: Mapping[str, str] = os.environ) -> FaultPlan | None:
    text = environ.get(FAULTS_VARIABLE, "")
    plan = FaultPlan.parse(text) if text else None
    install_faults(plan)
    return plan


def _injected(kind: str, operation: str, fd: int) -> int | None:
    return None if _plan is None else _plan.check(kind, operation, fd)


def _fail(code: int, kind: str, operation: str) -> OSError:
    return OSError(code, f"{os.strerror(code)} (injected into {kind} {operation})")


def write(fd: int, data: bytes | bytearray | memoryview, kind: str) -> int:
    """os.write; returns the bytes written, which may be fewer than asked."""
    code = _injected(kind, WRITE, fd)
    if code is not None:
        os.write(fd, memoryview(data)[: len(data) // 2])
        raise _fail(code, kind, WRITE)
    return os.write(fd, data)


def pwrite(fd: int, data: bytes | bytearray | memoryview, offset: int, kind: str) -> int:
    code = _injected(kind, WRITE, fd)
    if code is not None:
        raise _fail(code, kind, WRITE)
    return os.pwrite(fd, data, offset)


def write_all(fd: int, data: bytes | bytearray | memoryview, kind: str) -> None:
    """Write all of `data` at the file's position, raising on any failure."""
    view = memoryview(data)
    while view:
        written = write(fd, view, kind)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (short write)")
        view = view[written:]


def truncate(fd: int, size: int, kind: str) -> None:
    code = _injected(kind, TRUNCATE, fd)
    if code is not None:
        raise _fail(code, kind, TRUNCATE)
    os.ftruncate(fd, size)


def reserve(fd: int, length: int, kind: str) -> None:
    """Allocate `length` bytes of disk for the file without changing its size (fallocate with
    FALLOC_FL_KEEP_SIZE), so later writes up to there cannot run out of space."""
    code = _injected(kind, WRITE, fd)
    if code is not None:
        raise _fail(code, kind, WRITE)
    _fallocate(fd, _KEEP_SIZE, 0, length)


def release_reserved(fd: int, size: int, kind: str) -> None:
    """Give back the space reserved past `size`, the file's end (truncating to the size the
    file already has frees the blocks beyond it on ext4, xfs and tmpfs; punching a hole past
    the end does not on ext4)."""
    code = _injected(kind, TRUNCATE, fd)
    if code is not None:
        raise _fail(code, kind, TRUNCATE)
    os.ftruncate(fd, size)


def sync(fd: int, kind: str, *, data_only: bool = False) -> None:
    code = _injected(kind, SYNC, fd)
    if code is not None:
        raise _fail(code, kind, SYNC)
    if data_only:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if _libc.fallocate(fd, mode, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
