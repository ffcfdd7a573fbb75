"""Which format detection gives each line of a file, and which user formats shadow built-ins.

``detection_report`` runs detection (``LineParser.candidates``) over lines and tallies the lines
each format takes, with the first few of each, and the lines no format takes (none matched, or
two equally specific formats did). A user format that takes part in detection takes lines from a
shipped one when detection with the shipped formats alone would have given a line to that one:
each such pair is reported with its number of lines and the first of them, since the user's
format then silently reads lines written by another system.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from weir.logformats.parser import LineParser
from weir.logformats.registry import FormatRegistry

Numbered = tuple[int, str]  # a line's number in its file (from 1) and its text


@dataclass(slots=True)
class Share:
    """The lines one outcome took: how many, and the first ``examples`` of them."""

    lines: int = 0
    first: list[Numbered] = field(default_factory=list)

    def add(self, numbered: Numbered, examples: int) -> None:
        self.lines += 1
        if len(self.first) < examples:
            self.first.append(numbered)


@dataclass(frozen=True, slots=True)
class Shadowing:
    """A user format (``user``) took ``lines`` lines that the shipped ``builtin`` would have."""

    user: str
    user_file: str
    builtin: str
    lines: int
    first: Numbered


@dataclass(slots=True)
class DetectionReport:
    """Per detected format its share of the lines; ``undetected`` per reason (``none``: no
    format matched; ``ambiguous: a, b``: formats of equal specificity did)."""

    taken: dict[str, Share] = field(default_factory=dict)
    undetected: dict[str, Share] = field(default_factory=dict)
    shadowing: list[Shadowing] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return sum(s.lines for s in (*self.taken.values(), *self.undetected.values()))


def detection_report(
    registry: FormatRegistry,
    lines: Iterable[Numbered],
    *,
    builtin: FormatRegistry | None = None,
    examples: int = 3,
) -> DetectionReport:
    """How detection with ``registry`` reads ``lines``; shadowing is judged against
    ``builtin`` (the shipped formats by default)."""
    shipped = builtin if builtin is not None else FormatRegistry.builtin()
    parser = LineParser(year=2000, registry=registry)
    alone = LineParser(year=2000, registry=shipped)
    report = DetectionReport()
    shadowed: dict[tuple[str, str], Share] = {}
    for numbered in lines:
        matching = parser.candidates(numbered[1])
        if len(matching) != 1:
            reason = "none" if not matching else "ambiguous: " + ", ".join(matching)
            report.undetected.setdefault(reason, Share()).add(numbered, examples)
            continue
        name = matching[0]
        report.taken.setdefault(name, Share()).add(numbered, examples)
        if name not in shipped.names:
            would = alone.detect(numbered[1])
            if would is not None:
                shadowed.setdefault((name, would), Share()).add(numbered, 1)
    report.shadowing = [
        Shadowing(user, registry.reader(user).format.origin, would, share.lines, share.first[0])
        for (user, would), share in shadowed.items()
    ]
    return report
