"""A regex as a sequence of top-level items (a character, an escape, a class or a group, each
with its quantifier), enough to reason about a format's pattern without a regex engine:
how specific it is (``specificity``) and how the batch parser can split it (``batch_plan``).

Only the syntax the pattern library and format files use is understood; anything else is kept
as an opaque item, which makes a pattern less specific and the batch parser more cautious,
never wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_QUANTIFIER = re.compile(r"(?:[*+?]|\{(\d*)(?:,(\d*))?\})(\?)?")
_GROUP_OPENING = re.compile(r"\(\?(?:P<(?P<name>\w+)>|:|(?P<flags>[aiLmsux-]+)(?::|\)))?")
_CLASS_ESCAPES = frozenset("dwsDWS")
_ANCHOR_ESCAPES = frozenset("AZzbB")
_ANCHORS = frozenset("^$")


@dataclass(frozen=True, slots=True)
class Item:
    """One top-level item: ``text`` is the atom and its quantifier as written."""

    text: str
    atom: str
    minimum: int  # repetitions required
    maximum: int | None  # None: unbounded
    lazy: bool
    group: str | None  # the group's name, for a named group

    @property
    def body(self) -> str:
        """What a group holds (its opening and closing removed); the atom for other items."""
        if not self.atom.startswith("("):
            return self.atom
        opening = _GROUP_OPENING.match(self.atom)
        return self.atom[opening.end() if opening else 1 : -1]

    @property
    def is_group(self) -> bool:
        return self.atom.startswith("(")

    @property
    def is_anchor(self) -> bool:
        return self.atom in _ANCHORS or (
            len(self.atom) == 2 and self.atom[0] == "\\" and self.atom[1] in _ANCHOR_ESCAPES
        )


def items(regex: str) -> list[Item]:
    """``regex`` split into its top-level items; raises ValueError if it is unbalanced."""
    found, at = [], 0
    while at < len(regex):
        end = _atom_end(regex, at)
        atom = regex[at:end]
        quantifier = _QUANTIFIER.match(regex, end)
        minimum, lazy = 1, False
        maximum: int | None = 1
        if quantifier is not None and not atom.startswith("|"):
            minimum, maximum, lazy = _bounds(quantifier)
            end = quantifier.end()
        opening = _GROUP_OPENING.match(atom) if atom.startswith("(") else None
        name = opening.group("name") if opening else None
        found.append(Item(regex[at:end], atom, minimum, maximum, lazy, name))
        at = end
    return found


def alternatives(regex: str) -> list[str]:
    """``regex`` split at its top-level ``|``."""
    parts: list[str] = []
    current: list[str] = []
    for item in items(regex):
        if item.atom == "|":
            parts.append("".join(current))
            current = []
        else:
            current.append(item.text)
    parts.append("".join(current))
    return parts


def specificity(regex: str) -> int:
    """How much a line must contain to match ``regex``: 4 per literal character, 2 per
    character of a class, 1 per character of a negated class, nothing for wildcards and
    optional parts; the least over alternatives."""
    return min(sum(_item_specificity(i) for i in items(part)) for part in alternatives(regex))


def _item_specificity(item: Item) -> int:
    if item.minimum == 0 or item.is_anchor:
        return 0
    atom = item.atom
    if atom.startswith("("):
        each = specificity(item.body)
    elif atom.startswith("[^"):
        each = 1
    elif atom.startswith("["):
        each = 2
    elif atom.startswith("\\"):
        each = 2 if atom[1:2] in _CLASS_ESCAPES else 4
    elif atom == ".":
        each = 0
    else:
        each = 4
    return each * item.minimum


def _atom_end(regex: str, at: int) -> int:
    char = regex[at]
    if char == "\\":
        return _escape_end(regex, at)
    if char == "[":
        return _class_end(regex, at)
    if char == "(":
        return _group_end(regex, at)
    if char == ")":
        raise ValueError(f"unbalanced parenthesis at position {at}")
    return at + 1


def _escape_end(regex: str, at: int) -> int:
    if at + 1 >= len(regex):
        raise ValueError("pattern ends with a backslash")
    return at + 2


def _class_end(regex: str, at: int) -> int:
    end = at + 1
    if regex[end : end + 1] == "^":
        end += 1
    if regex[end : end + 1] == "]":
        end += 1
    while end < len(regex):
        if regex[end] == "\\":
            end += 2
        elif regex[end] == "]":
            return end + 1
        else:
            end += 1
    raise ValueError(f"unterminated character class at position {at}")


def _group_end(regex: str, at: int) -> int:
    depth, end = 0, at
    while end < len(regex):
        char = regex[end]
        if char == "\\":
            end += 2
            continue
        if char == "[":
            end = _class_end(regex, end)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return end + 1
        end += 1
    raise ValueError(f"unbalanced parenthesis at position {at}")


def _bounds(quantifier: re.Match[str]) -> tuple[int, int | None, bool]:
    text = quantifier.group(0)
    lazy = quantifier.group(3) is not None
    if text[0] == "*":
        return 0, None, lazy
    if text[0] == "+":
        return 1, None, lazy
    if text[0] == "?":
        return 0, 1, lazy
    low, high = quantifier.group(1), quantifier.group(2)
    minimum = int(low or 0)
    if high is None:
        return minimum, minimum if "," not in text else None, lazy
    return minimum, int(high) if high else None, lazy
