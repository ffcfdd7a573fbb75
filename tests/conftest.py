"""Suite-wide hooks. They run in the process that reports (the controller when the suite runs
on several workers), so what they show comes from the reports, not from worker memory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

#: the junit properties a test records as measured figures (`figure`)
FIGURE_PREFIX = "figure: "

_FIGURES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    test = report.nodeid.rsplit("::", 1)[-1]
    _FIGURES.extend(f"{test}: {name.removeprefix(FIGURE_PREFIX)} = {value}"
                    for name, value in report.user_properties
                    if name.startswith(FIGURE_PREFIX))  # fmt: skip


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture
def figure(request: pytest.FixtureRequest, record_property: Callable[[str, object], None]):
    """`figure(name, value, unit)`: print a measured figure (visible with -s) and record it as
    a junit property, which the terminal summary lists."""

    def measured(name: str, value: float, unit: str = "s") -> None:
        print(f"\nFIGURE {request.node.name}: {name} = {value:.3f} {unit}")
        record_property(f"{FIGURE_PREFIX}{name}", f"{value:.3f} {unit}")

    return measured
