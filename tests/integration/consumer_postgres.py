"""A real PostgreSQL server (Debian's `postgresql` package) for the exactly-once sink tests.

`PostgresServer` runs initdb and pg_ctl in a fresh directory on a free port, as the
`postgres` user when the tests run as root (PostgreSQL refuses to run as root). A missing
server is a skip locally and a failure in CI (`require_tool`)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from broker_process import require_tool

DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"


def postgres_tool(name: str) -> str:
    for directory in sorted(glob.glob(DEBIAN_BINARIES), reverse=True):
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    return require_tool(name)


class PostgresServer:
    def __init__(self) -> None:
        self.initdb = postgres_tool("initdb")
        self.pg_ctl = postgres_tool("pg_ctl")
        self.as_root = os.geteuid() == 0
        self.prefix = [require_tool("runuser"), "-u", "postgres", "--"] if self.as_root else []
        self.directory = Path(tempfile.mkdtemp(prefix="weir-postgres-"))
        self.data = self.directory / "data"
        self.port = _free_port()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresServer:
        if self.as_root:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E",
                  "UTF8", "--no-sync")  # fmt: skip
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.directory / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")  # fmt: skip
        return self

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self.prefix, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
