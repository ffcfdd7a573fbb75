"""How the batch parser reads a format, derived from its declared pattern (never written by hand).

RE2 (``pyarrow.compute.extract_regex``) pays for every group it tracks and for every way a
pattern could match, so the pattern is cut where that can be done without changing what it
finds:

- **the message**: a pattern ending in the rest of the line as its message (``\\s+`` or a
  separator, then ``%{GREEDYDATA:message}``, possibly optional) is read as a header, which RE2
  extracts, followed by a boundary; the message is the rest of the line after the header,
  without its leading whitespace (what the per-line reader's ``strip`` leaves);
- **a lazy field before a delimiter** (``%{DATA:component}\\s*:`` at the end of the header): RE2
  extracts what precedes it; the field runs to the first place where the delimiter, followed by
  the message boundary, occurs (a substring search), which is where the lazy field stops in the
  per-line regex too;
- **an optional lazy field and a delimiter, then a tail** (``(?:%{DATA:thread}:)?T`` at the end
  of the header): the field runs to the first delimiter that the tail (and the boundary)
  follows; without one, the field is absent and the tail starts right away; RE2 extracts the
  prefix and the tail.

- **pieces of at most three fields**: RE2 extracts with its fast one-pass engine only when a
  regex captures at most four groups (the three fields and the piece's span), so a header with
  more fields is read in pieces, each from where the previous one ended, cut at the top level
  (after a run of whitespace where there is one).

Whatever the cut, the first way of matching the part before it that RE2 finds is the one the
whole pattern takes whenever the rest matches after it (both take the first match in the same
order of preference, part by part); a line where the rest does not match after it is left to
the per-line reader. A pattern RE2 cannot run (look-arounds, back-references,
unnamed groups) has no plan: its lines are read line by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from weir.logformats.declaration import LogFormat
from weir.logformats.regex_items import Item, items

HEAD, TAIL = "weirhead", "weirtail"
MAX_FIELDS = 3  # groups per RE2 extraction besides its span
_TRAILING_ANCHORS = frozenset({r"\Z", r"\z", "$"})
_LITERAL = re.compile(r"(?:[^\\.^$*+?{}\[\]()|]|\\[^A-Za-z0-9])\Z")


@dataclass(frozen=True, slots=True)
class MessageTail:
    """The header is followed by ``boundary`` (RE2); the message starts ``skip`` bytes after
    the header's end, leading whitespace removed."""

    boundary: str
    skip: int


@dataclass(frozen=True, slots=True)
class LazySplit:
    """A lazy field (``field``) after the head, up to ``delimiter``: ``search`` (RE2) finds
    where the delimiter starts in the rest of the line. ``optional``: the field and delimiter
    may be absent, and ``tail`` (RE2, anchored, capturing ``TAIL``) follows them. ``trim``:
    whitespace before the delimiter is not the field's."""

    field: str
    delimiter: str
    search: str
    optional: bool
    trim: bool
    tail: str | None


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """``heads`` (RE2, each anchored and capturing ``HEAD``, read one after the other) and
    what follows them."""

    heads: tuple[str, ...]
    split: LazySplit | None
    message: MessageTail | None
    detect: str  # RE2 matching exactly the lines of the format


def plan_of(declared: LogFormat) -> BatchPlan | None:
    """The format's batch plan, or None when RE2 cannot run its pattern."""
    if not declared.regex:
        return None
    try:
        plan = _plan(declared)
        for regex in (*plan.heads, plan.detect, plan.split.search if plan.split else None,
                      plan.split.tail if plan.split else None):  # fmt: skip
            if regex is not None:
                pc.extract_regex(pa.array([], pa.string()), regex) if "(?P<" in regex else (
                    pc.match_substring_regex(pa.array([], pa.string()), regex)
                )
    except (ValueError, pa.ArrowInvalid):
        return None
    return plan


def re2(python_regex: str) -> str:
    """A pattern's Python regex (ASCII, DOTALL) in RE2's spelling."""
    return python_regex.replace(r"\Z", r"\z")


def _plan(declared: LogFormat) -> BatchPlan:
    found = items(declared.regex)
    while found and found[-1].atom in _TRAILING_ANCHORS:
        found.pop()
    detect = r"(?s)\A(?:" + re2(declared.regex) + r")\z"
    message = declared.columns["message"]
    cut = _message_tail(found, message)
    if cut is None:
        whole = _pieces(found)
        return BatchPlan(_heads(whole, r"\z"), None, None, detect)
    header, tail = cut
    split = _lazy_split(header, tail)
    if split is None:
        return BatchPlan(_heads(_pieces(header), tail.boundary), None, tail, detect)
    prefix, lazy = split
    return BatchPlan(_heads(_pieces(prefix), ""), lazy, tail, detect)


def _heads(pieces: list[list[Item]], boundary: str) -> tuple[str, ...]:
    heads = [r"(?s)\A(?P<" + HEAD + ">" + _text(piece) + ")" for piece in pieces]
    heads[-1] += boundary
    return tuple(heads)


def _pieces(found: list[Item]) -> list[list[Item]]:
    """``found`` cut into pieces of at most ``MAX_FIELDS`` groups (see the module)."""
    pieces: list[list[Item]] = [[]]
    for item in found:
        piece = pieces[-1]
        if piece and _groups(piece) + _groups([item]) > MAX_FIELDS:
            cut = max((n + 1 for n, i in enumerate(piece) if i.text == r"\s+"), default=len(piece))
            pieces[-1], carried = piece[:cut], piece[cut:]
            pieces.append(carried)
        pieces[-1].append(item)
    return [piece for piece in pieces if piece] or [[]]


def _groups(found: list[Item]) -> int:
    return sum(item.text.count("(?P<") for item in found)


def _text(found: list[Item]) -> str:
    return re2("".join(item.text for item in found))


def _is_rest(item: Item, field: str) -> bool:
    """``(?P<field>.*)``: the rest of the line."""
    return item.group == field and item.minimum == item.maximum == 1 and item.body == ".*"


def _is_lazy_any(item: Item) -> bool:
    return item.group is not None and item.minimum == item.maximum == 1 and item.body == ".*?"


def _once(item: Item) -> bool:
    return item.minimum == item.maximum == 1


def _message_tail(found: list[Item], field: str) -> tuple[list[Item], MessageTail] | None:
    if not found:
        return None
    last = found[-1]
    if last.minimum == 0 and last.maximum == 1 and not last.lazy and last.group is None:
        inner = items(last.body) if last.is_group else []
        if len(inner) == 2 and inner[0].text == r"\s+" and _is_rest(inner[1], field):
            return found[:-1], MessageTail(r"(?:\s|\z)", 0)
        return None
    if not _is_rest(last, field):
        return None
    before = found[-2] if len(found) > 1 else None
    if before is not None and before.text == r"\s+":
        return found[:-2], MessageTail(r"\s", 0)
    if before is not None and before.text == r"\s*":
        return found[:-2], MessageTail("", 0)
    if before is not None and _once(before) and _LITERAL.match(before.atom):
        return found[:-2], MessageTail(before.atom, len(_unescaped(before.atom)))
    return found[:-1], MessageTail("", 0)


def _lazy_split(header: list[Item], tail: MessageTail) -> tuple[list[Item], LazySplit] | None:
    for k in range(len(header) - 1, -1, -1):
        item, after = header[k], header[k + 1 :]
        if ".*?" in "".join(i.text for i in after):
            return None
        if _is_lazy_any(item):
            return _delimited(header[:k], item, after, tail)
        if item.minimum == 0 and item.maximum == 1 and item.is_group and item.group is None:
            inner = items(item.body)
            if inner and _is_lazy_any(inner[0]) and _literals(inner[1:]) and after:
                return _optional(header[:k], inner[0], inner[1:], after, tail)
    return None


def _delimited(
    prefix: list[Item], lazy: Item, after: list[Item], tail: MessageTail
) -> tuple[list[Item], LazySplit] | None:
    trim = bool(after) and after[0].text == r"\s*"
    literal = after[1:] if trim else after
    if not literal or not _literals(literal):
        return None
    delimiter = "".join(_unescaped(i.atom) for i in literal)
    search = re.escape(delimiter) + tail.boundary
    assert lazy.group is not None
    return prefix, LazySplit(lazy.group, delimiter, search, False, trim, None)


def _optional(
    prefix: list[Item], lazy: Item, literal: list[Item], after: list[Item], tail: MessageTail
) -> tuple[list[Item], LazySplit]:
    delimiter = "".join(_unescaped(i.atom) for i in literal)
    rest = _text(after)
    search = re.escape(delimiter) + "(?:" + rest + ")" + tail.boundary
    anchored = r"(?s)\A(?P<" + TAIL + ">" + rest + ")" + tail.boundary
    assert lazy.group is not None
    return prefix, LazySplit(lazy.group, delimiter, search, True, False, anchored)


def _literals(found: list[Item]) -> bool:
    return bool(found) and all(_once(i) and _LITERAL.match(i.atom) for i in found)


def _unescaped(atom: str) -> str:
    return atom[1:] if atom.startswith("\\") else atom
