"""Fixtures for cluster tests: a real ZooKeeper and `weir` commands run as child processes
(see cluster_processes.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_brokers import CHROOT, BrokerSet, ZooKeeperView, zookeeper_view
from cluster_processes import (
    IN_CI,
    WeirCommand,
    processes_mentioning,
    require_zookeeper,
    start_zookeeper,
)
from faultkit import netns_unavailable

from weir.cli.zookeeper import Installation, ZooKeeperServer


@pytest.fixture
def weir_command(tmp_path: Path) -> Iterator[Callable[..., WeirCommand]]:
    """Start `weir ARGS...`; afterwards anything still running that names this test's tmp_path
    (the command and the servers it started) is killed."""
    started: list[WeirCommand] = []

    def run(*args: str) -> WeirCommand:
        command = WeirCommand(list(args), tmp_path / f"command-{len(started)}")
        started.append(command)
        return command

    yield run
    for command in started:
        if command.process.poll() is None:
            command.process.kill()
            command.process.wait()
    for pid in processes_mentioning(f"{tmp_path}/"):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def zookeeper_installation() -> Installation:
    return require_zookeeper()


@pytest.fixture
def zookeeper(tmp_path: Path, zookeeper_installation: Installation) -> Iterator[ZooKeeperServer]:
    """A fresh standalone ZooKeeper on a free port: `.connect` is "127.0.0.1:PORT"; `stop()`,
    `kill()` and `start()` + `wait_ready()` (a restart on the same port and data) for faults."""
    server = start_zookeeper(tmp_path / "zookeeper", zookeeper_installation)
    yield server
    server.stop()


# ---- cluster brokers (cluster_brokers.py) -------------------------------------------------------


@pytest.fixture
def cluster_brokers(tmp_path: Path) -> Iterator[BrokerSet]:
    """Brokers for one test (`start_cluster`, `add`); every one still running is killed after
    the test (paused ones included)."""
    brokers = BrokerSet(tmp_path / "brokers")
    yield brokers
    brokers.kill_all()


@pytest.fixture
def zk_view(zookeeper: ZooKeeperServer) -> Iterator[ZooKeeperView]:
    """The test's own kazoo client on the `zookeeper` fixture, reading inside CHROOT."""
    with zookeeper_view(zookeeper.connect, CHROOT) as view:
        yield view


@pytest.fixture
def netns() -> None:
    """Network namespaces and veth pairs can be made here (root): skipped without them
    locally, failed in CI."""
    reason = netns_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
