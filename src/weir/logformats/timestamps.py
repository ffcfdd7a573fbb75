"""Reading a format's timestamp field: strptime-style formats, ISO 8601 and Unix epochs.

A format names one or more ways to read its timestamp text (tried in order):

- a strptime format, with the directives ``%Y %y %m %d %e %H %I %M %S %f %p %b %B %h %a %A
  %z %s %T %F %%`` and weir's own ``%L``; whitespace in the format matches any run of
  whitespace, as in ``strptime``. Month, day, hour, minute and second take one digit or two,
  as ``strptime``'s do. ``%f`` is a decimal fraction of a second (``.5`` is 500 ms, ``.000123``
  is 123 µs); ``%L`` is a number of milliseconds written without padding, 1 to 3 digits
  (``:6`` is 6 ms, ``:60`` is 60 ms, ``:600`` is 600 ms), as some loggers print them;
- ``ISO8601``: ``2024-03-01T12:00:00.5+02:00`` and its variants (space for ``T``, optional
  seconds and fraction, ``Z`` or an offset or nothing);
- ``UNIX`` / ``UNIX_MS``: seconds / milliseconds since the epoch (UTC).

Each is compiled once into a regex with named groups (``TimestampSyntax``), which both the
per-line reader here and the batch reader (``weir.logformats.batch_timestamps``) evaluate. The
result is naive: UTC when the text carries an offset or is an epoch, or when the format names a
``timezone`` (the text is then that zone's wall-clock time); otherwise the wall-clock time as
written. A format without a year takes it from the reference time (the record's timestamp):
the latest year that does not put the line more than a day after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ISO8601, UNIX, UNIX_MS = "ISO8601", "UNIX", "UNIX_MS"
MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
               "september", "october", "november", "december")  # fmt: skip
MONTH_NUMBERS = {name[:3]: n for n, name in enumerate(MONTH_NAMES, 1)} | {
    name: n for n, name in enumerate(MONTH_NAMES, 1)
}
AHEAD_ALLOWED = timedelta(days=1)  # how far a yearless line may be after its reference time

_DIRECTIVES: dict[str, tuple[str, int | None, int | None]] = {
    # directive: (regex, its width (None: it varies), its widest (None: unbounded))
    "Y": (r"(?P<year>\d{4})", 4, 4),
    "y": (r"(?P<yy>\d\d)", 2, 2),
    "m": (r"(?P<month>\d\d?)", 2, 2),
    "d": (r"(?P<day>\d\d?)", 2, 2),
    "e": (r"\s?(?P<day>\d\d?)", 2, 2),
    "H": (r"(?P<hour>\d\d?)", 2, 2),
    "I": (r"(?P<hour12>\d\d?)", 2, 2),
    "M": (r"(?P<minute>\d\d?)", 2, 2),
    "S": (r"(?P<second>\d\d?)", 2, 2),
    "f": (r"(?P<frac>\d{1,9})", None, 9),
    "L": (r"(?P<millis>\d{1,3})", None, 3),
    "p": (r"(?P<ampm>[AaPp][Mm])", 2, 2),
    "b": (r"(?P<mname>[A-Za-z]{3})", 3, 3),
    "h": (r"(?P<mname>[A-Za-z]{3})", 3, 3),
    "B": (r"(?P<mname>[A-Za-z]{3,9})", None, 9),
    "a": (r"[A-Za-z]{3}", 3, 3),
    "A": (r"[A-Za-z]{6,9}", None, 9),
    "z": (r"(?P<tz>Z|[+-]\d\d(?::?\d\d)?)", None, 6),
    "s": (r"(?P<epoch>\d+(?:\.\d+)?)", None, None),
}
# What a sub-second group's number means: microseconds per unit, or None for a decimal fraction
# of a second (its digits past the sixth dropped). Both readers compute with ``subsecond_micros``.
SUBSECOND_UNITS: dict[str, int | None] = {"frac": None, "millis": 1000}
_SHORTHANDS = {"T": "%H:%M:%S", "F": "%Y-%m-%d"}
_ISO_REGEX = (
    r"(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)"
    r"(?:[T ](?P<hour>\d\d):(?P<minute>\d\d)(?::(?P<second>\d\d)(?:[.,](?P<frac>\d{1,9}))?)?)?"
    r"\s*(?P<tz>Z|[+-]\d\d(?::?\d\d)?)?"
)
_EPOCH_REGEX = r"(?P<epoch>[+-]?\d+(?:\.\d+)?)"


class TimestampFormatError(ValueError):
    """A timestamp format that cannot be compiled (an unknown directive, two of one field)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One piece of a fixed layout: a group's characters, a separator, or a literal."""

    kind: str  # a group name, "space", "literal" or "skip"
    width: int | None  # None: the one piece whose width varies
    text: str = ""
    widest: int | None = None  # the most characters the piece can have (None: no bound)


@dataclass(frozen=True, slots=True)
class TimestampSyntax:
    """One way of writing a timestamp, compiled: its regex, its groups, the unit of its epoch
    (``epoch_scale``: units per second, 0 if none), and its layout when every piece but at most
    one has a fixed width (``layout``, else None)."""

    source: str
    regex: str
    groups: frozenset[str]
    epoch_scale: int = 0
    layout: tuple[Slot, ...] | None = None
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", re.compile(self.regex + r"\Z", re.ASCII))

    @property
    def has_year(self) -> bool:
        return bool(self.groups & {"year", "yy", "epoch"})


def compile_syntax(text: str) -> TimestampSyntax:
    """The syntax named by ``text``: ``ISO8601``, ``UNIX``, ``UNIX_MS`` or a strptime format."""
    if text == ISO8601:
        return TimestampSyntax(text, _ISO_REGEX, _groups_of(_ISO_REGEX))
    if text in (UNIX, UNIX_MS):
        scale = 1 if text == UNIX else 1000
        return TimestampSyntax(text, _EPOCH_REGEX, frozenset({"epoch"}), scale)
    return _strptime_syntax(text)


def _strptime_syntax(text: str) -> TimestampSyntax:
    expanded = text
    for short, long in _SHORTHANDS.items():
        expanded = expanded.replace(f"%{short}", long)
    parts: list[str] = []
    slots: list[Slot] = []
    at = 0
    while at < len(expanded):
        char = expanded[at]
        if char == "%":
            directive = expanded[at + 1 : at + 2]
            if directive == "%":
                parts.append("%")
                slots.append(Slot("literal", 1, "%"))
            elif directive in _DIRECTIVES:
                regex, width, widest = _DIRECTIVES[directive]
                parts.append(regex)
                slots.append(Slot(_slot_kind(regex), width, widest=widest))
            else:
                raise TimestampFormatError(f"unknown directive %{directive} in {text!r}")
            at += 2
        elif char.isspace():
            parts.append(r"\s+")
            slots.append(Slot("space", 1))
            at += 1
        else:
            parts.append(re.escape(char))
            slots.append(Slot("literal", 1, char))
            at += 1
    regex = "".join(parts)
    groups = _groups_of(regex)
    if len(groups) != len(re.findall(r"\(\?P<", regex)):
        raise TimestampFormatError(f"{text!r} names one part of the date twice")
    if len(groups & SUBSECOND_UNITS.keys()) > 1:
        raise TimestampFormatError(f"{text!r} has two fractions of a second (%f and %L)")
    if not groups & {"epoch", "day"} or not groups & {"epoch", "month", "mname"}:
        raise TimestampFormatError(f"{text!r} has no day and month (nor %s)")
    variable = sum(slot.width is None for slot in slots)
    layout = tuple(slots) if variable <= 1 and "epoch" not in groups else None
    return TimestampSyntax(text, regex, groups, 1 if "epoch" in groups else 0, layout)


def _slot_kind(regex: str) -> str:
    name = re.search(r"\(\?P<(\w+)>", regex)
    return name.group(1) if name else "skip"


def _groups_of(regex: str) -> frozenset[str]:
    return frozenset(re.findall(r"\(\?P<(\w+)>", regex))


def zone_of(name: str | None) -> tzinfo | None:
    """The time zone named ``name`` (IANA name, ``UTC``, or ``+hh:mm``); None for none."""
    if name is None:
        return None
    offset = re.fullmatch(r"([+-])(\d\d):?(\d\d)", name)
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        minutes = int(offset.group(2)) * 60 + int(offset.group(3))
        from datetime import timezone

        return timezone(sign * timedelta(minutes=minutes))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise TimestampFormatError(f"unknown time zone {name!r}") from error


@dataclass(frozen=True, slots=True)
class TimestampReader:
    """A format's ways of reading its timestamp, tried in order, and its time zone."""

    syntaxes: tuple[TimestampSyntax, ...]
    zone: tzinfo | None = None

    @classmethod
    def of(cls, formats: Sequence[str], zone: str | None = None) -> TimestampReader:
        return cls(tuple(compile_syntax(text) for text in formats), zone_of(zone))

    @property
    def needs_year(self) -> bool:
        return not all(syntax.has_year for syntax in self.syntaxes)

    def matches(self, text: str) -> bool:
        """Whether some syntax matches ``text`` (which ``read`` may still refuse: 30 Feb)."""
        return any(syntax.compiled.match(text) for syntax in self.syntaxes)

    def read(self, text: str, *, reference: datetime | None, year: int) -> datetime:
        """``text`` as a naive datetime (see the module); raises ValueError if no syntax reads
        it or it is not a real date. ``reference`` (naive UTC) gives yearless dates their year,
        ``year`` when there is no reference."""
        for syntax in self.syntaxes:
            match = syntax.compiled.match(text)
            if match is not None:
                return self._datetime(syntax, match.groupdict(), reference, year)
        expected = " or ".join(repr(s.source) for s in self.syntaxes)
        raise ValueError(f"{text!r} is not a timestamp in the format {expected}")

    def _datetime(
        self,
        syntax: TimestampSyntax,
        groups: Mapping[str, str | None],
        reference: datetime | None,
        year: int,
    ) -> datetime:
        if groups.get("epoch") is not None:
            seconds = float(groups["epoch"] or 0) / syntax.epoch_scale
            return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
        month = month_of(groups)
        day, hour = int(groups.get("day") or 0), hour_of(groups)
        minute, second = int(groups.get("minute") or 0), int(groups.get("second") or 0)
        micro = sum(subsecond_micros(name, int(text), len(text))
                    for name in SUBSECOND_UNITS if (text := groups.get(name)))  # fmt: skip
        explicit = year_of(groups)
        if explicit is None:
            explicit = assumed_year(month, day, hour, minute, second, reference, year)
        stamp = datetime(explicit, month, day, hour, minute, second, micro)
        offset = groups.get("tz")
        if offset is not None:
            return stamp - timedelta(minutes=offset_minutes(offset))
        if self.zone is not None:
            return stamp.replace(tzinfo=self.zone).astimezone(UTC).replace(tzinfo=None)
        return stamp


def subsecond_micros(group: str, number: Any, digits: Any) -> Any:
    """Microseconds of the sub-second group ``group`` holding ``number`` written with
    ``digits`` digits (ints, or numpy arrays of them)."""
    unit = SUBSECOND_UNITS[group]
    if unit is not None:
        return number * unit
    up = (6 - digits + abs(6 - digits)) // 2  # max(6 - digits, 0), for arrays too
    down = (digits - 6 + abs(digits - 6)) // 2
    return number * 10**up // 10**down


def year_of(groups: Mapping[str, str | None]) -> int | None:
    if groups.get("year"):
        return int(groups["year"] or 0)
    if groups.get("yy"):
        return 2000 + int(groups["yy"] or 0)
    return None


def month_of(groups: Mapping[str, str | None]) -> int:
    if groups.get("month"):
        return int(groups["month"] or 0)
    name = (groups.get("mname") or "").lower()
    if name not in MONTH_NUMBERS:
        raise ValueError(f"unknown month name {groups.get('mname')!r}")
    return MONTH_NUMBERS[name]


def hour_of(groups: Mapping[str, str | None]) -> int:
    if groups.get("hour12"):
        hour = int(groups["hour12"] or 0) % 12
        return hour + 12 if (groups.get("ampm") or "").lower() == "pm" else hour
    return int(groups.get("hour") or 0)


def offset_minutes(text: str) -> int:
    """``Z``, ``+02``, ``+0200`` or ``-02:00`` as minutes east of UTC."""
    if text == "Z":
        return 0
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
    return -minutes if text[0] == "-" else minutes


def assumed_year(
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    reference: datetime | None,
    year: int,
) -> int:
    """The year of a yearless date: the latest that does not put it more than
    ``AHEAD_ALLOWED`` after ``reference``; ``year`` when there is no reference."""
    if reference is None:
        return year
    limit = reference + AHEAD_ALLOWED
    bound = date_key(limit.year, limit.month, limit.day, limit.hour, limit.minute, limit.second)
    candidate = limit.year
    if date_key(candidate, month, day, hour, minute, second) > bound:
        candidate -= 1
    return candidate


def date_key(year: Any, month: Any, day: Any, hour: Any, minute: Any, second: Any) -> Any:
    """An integer that orders dates as time does (of ints, or of numpy arrays of them)."""
    return ((((year * 13 + month) * 32 + day) * 24 + hour) * 60 + minute) * 60 + second
