"""Mining settings chosen on labelled lines: Drain's similarity and depth swept over a grid.

A labelled sample is a format's masked messages with each line's true event (Loghub's
structured CSV gives one per line: ``EventId`` or ``EventTemplate``). ``sweep`` mines the
sample afresh under every setting of ``SIMILARITIES`` x ``DEPTHS`` (the format's masking and
delimiters kept) and scores each by Loghub's grouping accuracy; ``best`` picks the most accurate,
the shipped defaults winning a tie, then the settings nearest them. ``mining_section`` writes
settings as the ``[mining]`` table of a format file. ``weir logs formats tune`` and
``bench/logformats.py --leave-one-out`` use them.

Pure computation: no IO, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace

from weir.logformats.declaration import Mining
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines

SIMILARITIES = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
DEPTHS = (4, 5, 6)
_DEFAULT = Mining()


@dataclass(frozen=True, slots=True)
class Trial:
    """One setting of the sweep and the grouping accuracy it reached."""

    similarity: float
    depth: int
    accuracy: float

    def settings(self, base: Mining) -> Mining:
        return replace(base, similarity=self.similarity, depth=self.depth)


def sweep(
    masked: Sequence[str],
    truth: Sequence[Hashable],
    base: Mining = _DEFAULT,
    similarities: Iterable[float] = SIMILARITIES,
    depths: Iterable[int] = DEPTHS,
) -> list[Trial]:
    """The grouping accuracy of each (similarity, depth) on ``masked`` (one format's masked
    messages, in order) against ``truth`` (each one's true event), mined as one batch."""
    if len(masked) != len(truth):
        raise ValueError("one true event per message is needed")
    trials = []
    for depth in depths:
        for similarity in similarities:
            settings = replace(base, similarity=similarity, depth=depth)
            ids = mine_lines(TemplateMiner({"sample": settings}), "sample", masked)
            trials.append(Trial(similarity, depth, grouping_accuracy(ids, truth)))
    return trials


def best(trials: Iterable[Trial]) -> Trial:
    """The most accurate trial; among equals the defaults', else the one nearest them."""

    def rank(trial: Trial) -> tuple[float, float]:
        distance = abs(trial.similarity - _DEFAULT.similarity) + abs(trial.depth - _DEFAULT.depth)
        return (-round(trial.accuracy, 9), distance)

    return min(trials, key=rank)


def mining_section(mining: Mining) -> str:
    """``mining`` as a format file's ``[mining]`` table (TOML)."""
    lines = ["[mining]"]
    if mining.masking:
        lines.append("masking = [")
        lines.extend(
            f"    {{ regex = {json.dumps(rule.regex)}, mask = {json.dumps(rule.mask)} }},"
            for rule in mining.masking
        )
        lines.append("]")
    lines.append(f"similarity = {mining.similarity:g}")
    lines.append(f"depth = {mining.depth}")
    if mining.extra_delimiters:
        lines.append(f"extra_delimiters = {json.dumps(list(mining.extra_delimiters))}")
    if not mining.default_masking:
        lines.append("default_masking = false")
    return "\n".join(lines) + "\n"
