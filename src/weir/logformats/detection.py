"""Which format detection gives each line of a file, and which user formats shadow built-ins.

``detections`` runs detection (``LineParser.candidates``) over lines and says, per line, the
format that takes it, or why none does (no format matched, or two equally specific formats
did). ``DetectionReport`` tallies those per format, with the first few lines of each. A user
format that takes part in detection takes a line from a shipped one when detection with the
shipped formats alone would have given the line to that one, or makes it ambiguous when it
matches the line as specifically as another format does: each such pair is reported with its
number of lines and the first of them, since the user's format then silently reads lines
written by another system, or sends them to quarantine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from weir.logformats.parser import LineParser
from weir.logformats.registry import FormatRegistry

Numbered = tuple[int, str]  # a line's number in its file (from 1) and its text
NO_FORMAT = "none"  # the reason of a line no format matches


@dataclass(frozen=True, slots=True)
class Detection:
    """What detection does with one line: ``format`` takes it, or none does for ``reason``
    (``none``, or ``ambiguous: a, b``); ``shadowed`` names the shipped format that would have
    taken it had the user formats ``shadowing`` (``format``, or some of the ambiguous ones)
    not been registered."""

    numbered: Numbered
    format: str | None
    reason: str = ""
    shadowed: str | None = None
    shadowing: tuple[str, ...] = ()


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
    """A user format (``user``) took ``lines`` lines that the shipped ``builtin`` would have,
    or (``ambiguous``) made them ambiguous."""

    user: str
    user_file: str
    builtin: str
    lines: int
    first: Numbered
    ambiguous: bool = False


@dataclass(slots=True)
class DetectionReport:
    """Per detected format its share of the lines; ``undetected`` per reason (``none``: no
    format matched; ``ambiguous: a, b``: formats of equal specificity did). ``add`` takes
    each line's ``Detection``, keeping the first ``examples`` lines of each outcome."""

    examples: int = 3
    taken: dict[str, Share] = field(default_factory=dict)
    undetected: dict[str, Share] = field(default_factory=dict)
    shadowed: dict[tuple[str, str, bool], Share] = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(s.lines for s in (*self.taken.values(), *self.undetected.values()))

    def add(self, detection: Detection) -> None:
        if detection.format is None:
            share = self.undetected.setdefault(detection.reason, Share())
        else:
            share = self.taken.setdefault(detection.format, Share())
        share.add(detection.numbered, self.examples)
        if detection.shadowed is None:
            return
        for user in detection.shadowing:
            key = (user, detection.shadowed, detection.format is None)
            self.shadowed.setdefault(key, Share()).add(detection.numbered, 1)

    def shadowing(self, registry: FormatRegistry) -> list[Shadowing]:
        """Each user format that took lines a shipped one would have, with that one."""
        return [
            Shadowing(user, registry.reader(user).format.origin, builtin, share.lines,
                      share.first[0], ambiguous)
            for (user, builtin, ambiguous), share in self.shadowed.items()
        ]  # fmt: skip


def detections(
    registry: FormatRegistry,
    lines: Iterable[Numbered],
    *,
    builtin: FormatRegistry | None = None,
) -> Iterator[Detection]:
    """What detection with ``registry`` does with each of ``lines``; shadowing is judged
    against ``builtin`` (the shipped formats by default)."""
    shipped = builtin if builtin is not None else FormatRegistry.builtin()
    parser = LineParser(year=2000, registry=registry)
    alone = LineParser(year=2000, registry=shipped)
    for numbered in lines:
        matching = parser.candidates(numbered[1])
        users = tuple(name for name in matching if name not in shipped.names)
        shadowed = alone.detect(numbered[1]) if users else None
        if len(matching) == 1:
            yield Detection(numbered, matching[0], shadowed=shadowed, shadowing=users)
        else:
            reason = NO_FORMAT if not matching else "ambiguous: " + ", ".join(matching)
            yield Detection(numbered, None, reason, shadowed, users)


def detection_report(
    registry: FormatRegistry,
    lines: Iterable[Numbered],
    *,
    builtin: FormatRegistry | None = None,
    examples: int = 3,
) -> DetectionReport:
    """The tally of ``detections(registry, lines, builtin=builtin)``."""
    report = DetectionReport(examples)
    for detection in detections(registry, lines, builtin=builtin):
        report.add(detection)
    return report
