"""`weir consumer run` as a child process for the consumer framework tests: started on a real
broker, scraped through its Prometheus endpoint, measured through /proc, stopped or killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from waiting import poll

HANDLERS = Path(__file__).with_name("consumer_handlers.py")
READY = re.compile(r"weir consumer running: .* metrics on http://(\S+)/metrics")


class ConsumerProcess:
    """One framework process. `metrics()` maps "name" or "name{label=value,...}" to values."""

    def __init__(
        self,
        bootstrap: str,
        handler: str,
        topic: str,
        group: str,
        log_path: Path,
        *options: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.command = [sys.executable, "-m", "weir.cli.main", "consumer", "run", handler,
                        "--topic", topic, "--group", group, "--bootstrap-server", bootstrap,
                        "--metrics-port", "0", *options]  # fmt: skip
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_address = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 60) -> ConsumerProcess:
        """Start (or start again) and wait for the ready line this start prints."""
        with open(self.log_path, "ab") as log:
            started_at = log.tell()
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd
            )
        deadline = time.monotonic() + timeout_s
        while not (ready := READY.search(self.logs(since=started_at))):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"consumer did not start:\n{self.logs()}")
            time.sleep(0.02)
        self.metrics_address = ready.group(1)
        return self

    def metrics(self) -> dict[str, float]:
        url = f"http://{self.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return values

    def memory_bytes(self, field: str = "VmRSS") -> int:
        """VmRSS (resident now) or VmHWM (the most it was ever resident)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        kilobytes = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
        assert kilobytes is not None, status
        return int(kilobytes.group(1)) * 1024

    def wait_for(
        self, condition: str, predicate: Callable[[], object], timeout_s: float = 60
    ) -> None:
        """Wait for `predicate`, failing early if the process exits."""

        def reached() -> bool:
            if predicate():
                return True
            self.check_alive()
            return False

        poll(reached, timeout_s, condition, detail=self.logs)

    def check_alive(self) -> None:
        assert self.process is not None and self.process.poll() is None, self.logs()

    def stop(self, timeout_s: float = 60) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout_s)
        self.process = None
        return code

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)
        self.process = None

    def logs(self, since: int = 0) -> str:
        """The log from byte `since` on."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[since:].decode(errors="replace")
