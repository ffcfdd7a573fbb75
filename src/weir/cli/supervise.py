"""Supervising child processes in the foreground: `weir zookeeper start` and `weir cluster up`.

`LoggedProcess` is one child whose output goes to a log file. `StopRequest` turns SIGINT and
SIGTERM into a flag that the supervising loop checks between its own steps, so Ctrl-C and a
SIGTERM stop the same way and no exception ever lands inside a wait or a library call (a
`KeyboardInterrupt` raised inside `subprocess`'s waitpid bookkeeping can leave a later wait
blocked for good). `stop_all` stops children within a bounded time: SIGTERM to all at once,
a shared deadline, SIGKILL for what is left, and the names of those it had to kill.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType

#: how long a child has to go once SIGKILL is sent (it cannot refuse; only a stuck kernel can)
KILL_WAIT_SECONDS = 5.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StartError(Exception):
    """A child service could not start, or died; the message is written for the user."""


class Interrupted(Exception):
    """SIGINT or SIGTERM asked the supervisor to stop; raised only by `StopRequest.check()`."""


class StopRequest:
    """While entered, SIGINT and SIGTERM record a stop request instead of interrupting.

    Thread-safety (docs/threads.md): enter and check from the main thread only (Python runs signal
    handlers there).
    """

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def check(self) -> None:
        """Raise Interrupted once a stop was requested."""
        if self.signal is not None:
            raise Interrupted(self.signal.name)

    def sleep(self, seconds: float) -> None:
        """Sleep (a signal ends the sleep early), then `check()`."""
        self.check()
        time.sleep(seconds)
        self.check()


class LoggedProcess:
    """One child process, its stdout and stderr appended to a log file.

    The child gets its own process group, so a Ctrl-C at the terminal reaches only the
    supervising weir process, which then stops its children in order. Where util-linux's
    `setpriv` exists the child is also sent SIGTERM if weir itself dies, so no server outlives
    an interrupted test run. That signal is tied to the spawning *thread* (PR_SET_PDEATHSIG):
    spawn from a thread that lives as long as the child, e.g. the main thread."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    def spawn(self, command: Sequence[str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        setpriv = shutil.which("setpriv")
        guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*guard, *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} is not running"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def poll(self) -> int | None:
        """The exit code once the child has exited; None while it runs (or was never started)."""
        return None if self.process is None else self.process.poll()

    def terminate(self) -> None:
        """Send SIGTERM without waiting (several children can then stop at once)."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the child to exit, then SIGKILL it if it has not;
        whether it had to be killed."""
        if self.process is None:
            return False
        try:
            self.process.wait(timeout)
            return False
        except subprocess.TimeoutExpired:
            self.kill()
            return True

    def stop(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after `timeout` seconds; whether it had to be killed."""
        self.terminate()
        return self.wait_stopped(timeout)

    def kill(self) -> None:
        """SIGKILL, and wait (boundedly) for the child to go."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            # a child in uninterruptible sleep goes later; weir does not wait on it for good
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(KILL_WAIT_SECONDS)

    def log_since_start(self) -> str:
        """What the child has logged since its last spawn."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_since_start().splitlines()[-lines:])

    def describe_log(self) -> str:
        """The end of the log since the last spawn, introduced for an error message."""
        tail = self.log_tail()
        return f"the end of {self.log_path}:\n{tail}" if tail else f"nothing in {self.log_path}"

    def describe_exit(self) -> str:
        """How the child ended: "exited with code N" or "was killed by SIGNAME"."""
        code = self.poll()
        if code is not None and code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def exit_error(self) -> StartError:
        return StartError(f"{self.name} {self.describe_exit()}; {self.describe_log()}")


def stop_all(children: Sequence[LoggedProcess], timeout: float) -> list[str]:
    """SIGTERM every child at once, give them `timeout` seconds between them, SIGKILL the rest;
    the names of the children that had to be killed."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + timeout
    return [
        child.name
        for child in children
        if child.wait_stopped(max(0.0, deadline - time.monotonic()))
    ]
