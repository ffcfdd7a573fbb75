"""A real broker process for integration tests: `weir broker start` on an ephemeral port."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"


class BrokerProcess:
    """One `weir broker start` child. `restart()` keeps the data directory and the port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        config: dict[str, object] | None = None,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        log_dirs: list[Path] | None = None,
    ) -> None:
        """`env`: variables added to this environment for the child; `prefix`: a command the
        broker runs under (e.g. `prlimit --nofile=256:256`); `log_dirs`: several log directories
        (`log.dirs`, given instead of `--data-dir`; `data_dir` then only names the broker's
        config, log and ready files)."""
        self.data_dir = data_dir
        self.env = env
        self.prefix = prefix or []
        self.log_dirs = log_dirs
        if log_dirs:
            config = {**(config or {}), "log.dirs": ",".join(str(d) for d in log_dirs)}
        self.config_file: Path | None = None
        if config:
            self.config_file = data_dir.parent / f"{data_dir.name}.toml"
            self.config_file.write_text("".join(f'"{k}" = {_toml(v)}\n' for k, v in config.items()))
        self.port = 0
        #: listener name -> port, when the config names several listeners (`listeners`)
        self.listeners: dict[str, int] = {}
        self._named_listeners = bool(config and "listeners" in config)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the broker is not running"
        return self.process.pid

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        where = [] if self.log_dirs else ["--data-dir", str(self.data_dir)]
        if not self._named_listeners:  # else the config's `listeners` say where
            where += ["--listen", f"127.0.0.1:{self.port}"]
        command = [*self.prefix, sys.executable, "-m", "weir.cli.main", "broker", "start",
                   *where, "--ready-file", str(ready)]  # fmt: skip
        if self.config_file is not None:
            command += ["--config", str(self.config_file)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        env = None if self.env is None else {**os.environ, **self.env}
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while not ready.exists() or not ready.read_text().strip():
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker not ready after {timeout}s:\n{self.logs()}")
            time.sleep(0.05)
        first, *named = ready.read_text().split()
        self.port = int(first.rsplit(":", 1)[1])
        self.listeners = {
            line.split("://", 1)[0]: int(line.rsplit(":", 1)[1]) for line in named
        }

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        self.process = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def weir(
    *args: str | Path,
    env: dict[str, str] | None = None,
    input: str | None = None,
    stdout: Any = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`weir ARGS` as a user runs it, with its exit status, stdout and stderr. `env`: variables
    added to this environment; `input`: its stdin; `stdout`: where its output goes instead of
    being captured."""
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", *map(str, args)],
        input=input,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
        text=True,
        timeout=timeout,
    )


def table_rows(output: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table in a command's output whose header line starts with
    `first_header`, each cut at its header's column starts. A value that does not start where
    its column does (one that ran into the next) fails the calling test."""
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    header = lines[at]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[at + 1 :]:
        assert all(line[s - 1 : s] in (" ", "") for s in starts[1:]), f"{header}\n{line}"
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        assert all(" " not in cell for cell in cells), f"{header}\n{line}"
        rows.append(dict(zip(header.split(), cells, strict=True)))
    return rows


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def require_tool(name: str) -> str:
    """The path of a command-line tool; skips without it locally, fails without it in CI."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed (scripts/bootstrap installs it as root)")
        pytest.skip(f"{name} is not installed")
    return path
