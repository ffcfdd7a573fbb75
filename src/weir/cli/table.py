"""The console commands' tables, padded as kafka-consumer-groups.sh pads them: every column as
wide as its widest value (its header included), values left-aligned, columns apart by a gap, so
that a long value (a consumer id, a transactional id) widens its column instead of running into
the next. The last column is not padded, so no line ends in spaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

GAP = "  "
#: what a table shows for a value that is not known (no committed offset, no owner)
MISSING = "-"


def table_lines(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The header line, then a line per row; None shows as MISSING."""
    cells = [list(header)] + [[_text(value) for value in row] for row in rows]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    return [
        GAP.join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    ]


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    for line in table_lines(header, rows):
        print(line)


def _text(value: object) -> str:
    return MISSING if value is None else str(value)
