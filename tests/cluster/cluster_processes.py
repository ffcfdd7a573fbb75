"""Processes for cluster tests: free ports, `weir` commands as children, a standalone ZooKeeper
(Debian's package, through `weir.cli.zookeeper.ZooKeeperServer`, as `weir cluster up` starts it),
and the processes a test left behind. Without the zookeeper package a test is skipped locally and
fails in CI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from weir.cli.zookeeper import Installation, StartError, ZooKeeperServer, find_installation

IN_CI = os.environ.get("CI") == "true"
#: the start of the line `weir cluster up` prints once its brokers serve
READY = "weir cluster ready: bootstrap "
READY_TIMEOUT = 120  # ZooKeeper, then three brokers, on a two-core machine


def require_zookeeper() -> Installation:
    """Debian's ZooKeeper and java; skips without them locally, fails without them in CI."""
    try:
        return find_installation()
    except StartError as exc:
        if IN_CI:
            pytest.fail(f"{exc} (scripts/bootstrap installs it as root)")
        pytest.skip(str(exc))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_range(count: int) -> int:
    """The first of `count` consecutive ports that are free on 127.0.0.1 right now."""
    for _ in range(100):
        base = free_port()
        if base + count <= 65536 and all(_port_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def processes_mentioning(text: str) -> list[int]:
    """Live processes (other than this one) whose command line contains `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            pids.append(int(entry.name))
    return pids


def wait_until_gone(text: str, timeout: float = 10) -> list[int]:
    """Wait for every process mentioning `text` to exit; those still there after `timeout`."""
    deadline = time.monotonic() + timeout
    while (pids := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def run_weir(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`weir ARGS...` run to its end: its exit status, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


class WeirCommand:
    """`weir ARGS...` as a child process; its stdout and stderr go to files in `directory`."""

    def __init__(self, args: list[str], directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.stdout_path = directory / "stdout"
        self.stderr_path = directory / "stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            command = [sys.executable, "-m", "weir.cli.main", *args]
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for_line(self, prefix: str, timeout: float) -> str:
        """The first stdout line starting with `prefix`; fails the test if the command exits or
        the line does not come within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.stdout().splitlines():
                if line.startswith(prefix):
                    return line
            if self.process.poll() is not None:
                pytest.fail(f"weir exited with {self.process.returncode} before {prefix!r}:\n"
                            f"stdout: {self.stdout()}\nstderr: {self.stderr()}")  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"no {prefix!r} within {timeout}s:\nstderr: {self.stderr()}")
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)


def start_zookeeper(data_dir: Path, installation: Installation) -> ZooKeeperServer:
    """A ready ZooKeeper on a free port, its data and log in `data_dir`."""
    for _ in range(3):  # another process may take the free port before ZooKeeper binds it
        server = ZooKeeperServer(data_dir, port=free_port(), installation=installation)
        try:
            server.start()
            server.wait_ready()
        except StartError as exc:
            server.stop()
            if "already in use" not in str(exc):
                raise
            continue
        return server
    raise RuntimeError("no free port for ZooKeeper after 3 tries")


def cluster_up(
    weir_command: Callable[..., WeirCommand], data_dir: Path, brokers: int, *extra: str
) -> tuple[WeirCommand, int, int]:
    """`weir cluster up --brokers N` on free ports, started with `weir_command` (the fixture);
    (the command, ZooKeeper's port, broker 1's port). Wait for its READY line."""
    zookeeper_port, base_port = free_port(), free_port_range(brokers)
    command = weir_command("cluster", "up", "--brokers", str(brokers), "--data-dir", str(data_dir),
                           "--zookeeper-port", str(zookeeper_port), "--base-port", str(base_port),
                           *extra)  # fmt: skip
    return command, zookeeper_port, base_port
