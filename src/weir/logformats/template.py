"""Event templates: a message with its variable parts masked as ``<*>``.

The masking is deterministic and context-free (a compiled regex's ``re.sub``, then lists
joined), so the same message always yields the same template and templates can be grouped on in
the warehouse. It masks, in this order of preference at any position: dates and times written
into messages (``Fri Jun 17 07:07:00 2005``, ``2015-07-29 17:41:44,747``, ``07:07:00``: each
one ``<*>``), UUIDs, IPv4 addresses, hex literals and hex-looking ids, filesystem paths, numeric
suffixes of identifiers (``blk_<*>``, ``appattempt_<*>``), and free-standing numbers (including
signed, decimal and dotted numbers). Digits inside words (``workers2``, ``u0``) are left alone.
Last, a list of masked tokens (``blk_<*> blk_<*> blk_<*>``, ``<*>, <*>``) becomes one of them:
how many items a list has varies, not the event. It does not try to equal loghub's
EventTemplate, which is mined from a whole corpus rather than from one line.

A format's ``Masker`` applies the format's own masking rules (``[mining] masking``) before
these; ``weir.logformats.mining`` clusters the masked messages into templates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from weir.logformats.declaration import Mining

MASK = "<*>"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}(?![\w.])"
_HEX_LITERAL = r"0[xX][0-9a-fA-F]+\b"
# A hex-looking id: 6+ hex characters mixing digits and letters, e.g. 9f4ef63, a64f992.
_HEX_ID = r"(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{6,}\b"
# A path needs a letter in some segment, so "/10.0.0.1:80" stays an address.
_PATH = r"(?<![/.])(?:/[\w.\-]+)*/[\w.\-]*[A-Za-z][\w.\-]*(?:/[\w.\-]+)*/?"
_NUMBER = r"(?<!\.)[-+]?\d+(?:\.\d+)*(?!\w)"
# The numeric tail of an identifier: blk_-1608 -> blk_<*>, attempt_1445_0020_m_01 -> attempt_<*>.
_ID_SUFFIX = r"(?<=_)-?\d\w*"

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*\.?,?"
_TIME = r"\d\d?:\d\d(?::\d\d(?:[.,]\d+)?)?"
# Fri Jun 17 07:07:00 2005, Jun 17 07:07:00, 2015-07-29 17:41:44,747, 2015-07-29T17:41:44Z, 07:07:00
_DATE = (
    rf"(?:(?:{_WEEKDAY} +)?{_MONTH} +\d\d?,?(?: +{_TIME})?(?: +\d{{4}})?"
    rf"|\d{{4}}-\d\d-\d\d(?:[ T]{_TIME}(?:Z|[+-]\d\d:?\d\d)?)?"
    rf"|\d\d:\d\d:\d\d(?:[.,]\d+)?)(?!\w)"
)
# A list: the same masked token again and again, apart by spaces or commas.
_LIST = re.compile(r"(?<!\S)(\S*<\*>\S*?)(?:,? +\1)+(?!\S)")

# The leading lookahead rejects most positions before any alternative is tried (it doubles
# throughput): a variable starts with a hex digit, a sign, a slash, or a month's or a
# weekday's initial. Every alternative but _ID_SUFFIX starts a new word.
_VARIABLE = re.compile(
    r"(?=[0-9a-fA-F/+\-JMNOSTW])(?:"
    + _ID_SUFFIX
    + r"|(?<!\w)(?:"
    + "|".join((_DATE, _UUID, _IPV4, _HEX_LITERAL, _HEX_ID, _PATH, _NUMBER))
    + "))",
    re.ASCII,
)


def template_of(message: str) -> str:
    """``message`` with every variable part replaced by ``<*>``."""
    masked = _VARIABLE.sub(MASK, message)
    return _LIST.sub(r"\1", masked) if _has_list(masked) else masked


def _has_list(masked: str) -> bool:
    """Whether two words in a row are one masked token (what ``_LIST`` needs; far cheaper)."""
    return any(MASK in one and one.rstrip(",") == two.rstrip(",")
               for one, two in pairwise(masked.split()))  # fmt: skip


def templates_of(messages: Iterable[str]) -> list[str]:
    """``template_of`` of each message, in order."""
    return [template_of(message) for message in messages]


class Masker:
    """A format's masking: its own rules in order, then (by default) ``template_of``'s."""

    def __init__(self, mining: Mining) -> None:
        self.rules = tuple(
            (re.compile(rule.regex), MASK if rule.mask == "*" else f"<{rule.mask}>")
            for rule in mining.masking or ()
        )
        self.default_masking = mining.default_masking

    def mask(self, message: str) -> str:
        for regex, token in self.rules:
            message = regex.sub(token, message)
        return template_of(message) if self.default_masking else message

    def mask_all(self, messages: Iterable[str]) -> list[str]:
        if not self.rules and self.default_masking:
            return [template_of(message) for message in messages]
        return [self.mask(message) for message in messages]
