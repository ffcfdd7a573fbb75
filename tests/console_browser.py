"""The web console in tests: `ConsoleProcess` runs `weir console` as a user would, and
`chromium()` drives Debian's Chromium with Playwright for Python (never a browser Playwright
downloads). Without Chromium or Playwright a test is skipped locally and failed in CI.

`watch(page)` collects what a reader would see go wrong on a page: console errors and uncaught
script errors. `screenshot(page, name)` saves a PNG under $WEIR_TEST_ARTIFACTS (default
tests/artifacts/, which git ignores).

Test modules import it as `console_browser` (tests/ is on sys.path, see waiting.py).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"
CHROMIUM = "/usr/bin/chromium"
#: headless, and no connection of Chromium's own: this machine reaches no other host
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")  # fmt: skip
READY_TIMEOUT_S = 60
ARTIFACTS = Path(os.environ.get("WEIR_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (scripts/test installs it)")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's `Browser`), closed afterwards."""
    if not os.access(CHROMIUM, os.X_OK) or shutil.which("chromedriver") is None:
        _missing("Debian's chromium and chromium-driver are not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (Python) is not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        try:
            yield browser
        finally:
            browser.close()


def watch(page: Any) -> list[str]:
    """The console errors and uncaught errors of `page` from now on, as they come."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)  # fmt: skip
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    return problems


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class ConsoleProcess:
    """`weir console --port 0 ARGS...` as a child; `url` once it said it serves."""

    def __init__(self, bootstrap: str, *args: str, log: Path) -> None:
        command = [sys.executable, "-m", "weir.cli.main", "console", "--bootstrap-server",
                   bootstrap, "--port", "0", *args]  # fmt: skip
        self.log_path = log
        with open(log, "ab") as stderr:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if readable:
                line = self.process.stdout.readline().decode()
                if line.startswith("weir console on "):
                    return line.split(" on ", 1)[1].strip()
            if self.process.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"weir console did not start:\n{self.logs()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
