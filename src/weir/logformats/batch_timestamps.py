"""A column of timestamp texts read at once, with the same result as ``TimestampReader.read``.

Each ``TimestampSyntax`` is evaluated over the texts that no earlier syntax read, in one of two
ways. When the syntax has a fixed layout (every directive of fixed width but at most one, see
``timestamps.Slot``) and a text has the layout's width, its characters are sliced at known
places and checked (digits where digits belong, the literals in place); otherwise its regex is
run by RE2 over the column (``pyarrow.compute.extract_regex``). Either way the numbers end up
in int64 arrays, from which microseconds since the epoch and their validity are computed.
Texts that no syntax reads, or that are not real dates, come out invalid: the caller leaves
those lines to the per-line reader, which quarantines them with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from weir.logformats.timestamps import (
    AHEAD_ALLOWED,
    MONTH_NUMBERS,
    SUBSECOND_UNITS,
    Slot,
    TimestampReader,
    TimestampSyntax,
    date_key,
    offset_minutes,
    subsecond_micros,
)

US_PER_S = 1_000_000
_US_PER_DAY = 86_400 * US_PER_S
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_AHEAD_US = int(AHEAD_ALLOWED.total_seconds()) * US_PER_S
_DIGIT_PAIRS = frozenset({"yy", "month", "day", "hour", "hour12", "minute", "second"})
_WORDS = frozenset({"mname", "ampm", "tz"})
_DIGIT_RUNS = frozenset({"year", *SUBSECOND_UNITS})  # every character a digit


@dataclass(slots=True)
class Parts:
    """The numbers of one set of rows (``rows``: their positions in the column)."""

    rows: np.ndarray
    numbers: dict[str, np.ndarray]  # int64 per group; -1 where a group did not match
    valid: np.ndarray


def read_column(
    reader: TimestampReader,
    texts: pa.Array,
    *,
    reference_us: np.ndarray | None,
    year: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds since the epoch (int64) of each text, and which are valid (bool)."""
    size = len(texts)
    micros = np.zeros(size, dtype=np.int64)
    done = np.zeros(size, dtype=bool)
    if texts.null_count:
        pending = np.flatnonzero(texts.is_valid().to_numpy(zero_copy_only=False))
    else:
        pending = np.arange(size)
    for syntax in reader.syntaxes:
        if len(pending) == 0:
            break
        part = _parts(syntax, texts.take(pa.array(pending)), pending)
        if part is None:
            continue
        refs = reference_us[part.rows] if reference_us is not None else None
        got, ok = _micros(syntax, reader, part, refs, year)
        micros[part.rows[ok]] = got[ok]
        done[part.rows[ok]] = True
        pending = pending[~done[pending]]
    return micros, done


def _parts(syntax: TimestampSyntax, texts: pa.Array, rows: np.ndarray) -> Parts | None:
    """The groups of the texts that ``syntax`` reads, by layout where it can, else by regex."""
    sliced = _by_layout(syntax, texts, rows)
    if sliced is not None and sliced.valid.all():
        return sliced
    if sliced is None:
        return _by_regex(syntax, texts, rows)
    # Texts the layout read keep its result; the regex reads the others (only them).
    rest = np.flatnonzero(~sliced.valid)
    matched = _by_regex(syntax, texts.take(pa.array(rest)), rows[rest])
    for name, values in matched.numbers.items():
        sliced.numbers.setdefault(name, np.full(len(rows), -1, dtype=np.int64))[rest] = values
    sliced.valid[rest] = matched.valid
    return sliced


def _by_layout(syntax: TimestampSyntax, texts: pa.Array, rows: np.ndarray) -> Parts | None:
    layout = syntax.layout
    if layout is None or len(texts) == 0 or texts.null_count:
        return None
    _, offsets_buffer, data_buffer = texts.buffers()
    if data_buffer is None:
        return None
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=len(texts) + 1,
                            offset=texts.offset * 4).astype(np.int64)  # fmt: skip
    widths = np.diff(offsets)
    fixed = sum(slot.width or 0 for slot in layout)
    width = int(widths[0])
    variable = width - fixed
    varying = [slot for slot in layout if slot.width is None]
    if variable < 1 if varying else variable != 0:
        return None
    if varying and varying[0].widest is not None and variable > varying[0].widest:
        return None  # wider than the piece can be: left to the regex, which refuses it
    same = widths == width
    chars = _rows_of(np.frombuffer(data_buffer, dtype=np.uint8), offsets, width, same)
    digits = chars - np.uint8(ord("0"))  # wraps around below "0": a digit is < 10
    is_digit = digits < 10
    valid = same.copy()
    numbers: dict[str, np.ndarray] = {}
    at = 0
    for slot in layout:
        span = slot.width if slot.width is not None else variable
        window = slice(at, at + span)
        valid &= _slot_valid(slot, chars[:, window], is_digit[:, window])
        if slot.kind in _DIGIT_PAIRS or slot.kind in _DIGIT_RUNS:
            numbers[slot.kind] = _decimal(np.where(is_digit[:, window], digits[:, window], 0))
            if slot.kind in SUBSECOND_UNITS:
                numbers[f"{slot.kind}_digits"] = np.full(len(rows), span, dtype=np.int64)
        elif slot.kind in _WORDS:
            numbers[slot.kind] = _word_codes(slot.kind, chars[:, window])
            valid &= numbers[slot.kind] != -1
        at += span
    return Parts(rows, numbers, valid)


def _rows_of(data: np.ndarray, offsets: np.ndarray, width: int, same: np.ndarray) -> np.ndarray:
    """``width`` bytes of each text (a view when the texts lie back to back, as they do when
    all have that width; texts of another width read as zeros)."""
    size, first = len(same), int(offsets[0])
    if same.all() and len(data) >= first + size * width:
        return data[first : first + size * width].reshape(size, width)
    index = np.where(same, offsets[:-1], 0)[:, None] + np.arange(width)[None, :]
    return (
        data[np.minimum(index, max(len(data) - 1, 0))]
        if len(data)
        else np.zeros((size, width), dtype=np.uint8)
    )


def _slot_valid(slot: Slot, piece: np.ndarray, is_digit: np.ndarray) -> np.ndarray:
    kind = slot.kind
    if kind in _DIGIT_PAIRS:
        first_ok = is_digit[:, 0]
        if piece.shape[1] > 1:  # "%d" reads " 9" as 9, as strptime does
            first_ok = first_ok | (piece[:, 0] == ord(" "))
        result: np.ndarray = first_ok & is_digit[:, 1:].all(axis=1)
        return result
    if kind in _DIGIT_RUNS:
        return np.asarray(is_digit.all(axis=1))
    if kind == "space":
        return np.isin(piece[:, 0], [9, 10, 11, 12, 13, 32])
    if kind == "literal":
        return np.asarray(piece[:, 0] == ord(slot.text))
    lower = piece | np.uint8(0x20)
    return np.asarray(((lower >= ord("a")) & (lower <= ord("z"))).all(axis=1))


def _word_codes(kind: str, piece: np.ndarray) -> np.ndarray:
    """``_word_number`` of each row's characters, computed once per distinct word."""
    packed = np.zeros(len(piece), dtype=np.int64)
    for column in range(piece.shape[1]):
        packed = packed * 256 + piece[:, column]
    distinct, inverse = np.unique(packed, return_inverse=True)
    width = piece.shape[1]
    table = []
    for code in distinct.tolist():
        word = int(code).to_bytes(width, "big").decode("ascii", "replace")
        number = _word_number(kind, word)
        table.append(-1 if number is None else number)
    return np.asarray(table, dtype=np.int64)[inverse]


def _decimal(digits: np.ndarray) -> np.ndarray:
    number = np.zeros(len(digits), dtype=np.int64)
    for column in range(digits.shape[1]):
        number = number * 10 + digits[:, column]
    return number


def _by_regex(syntax: TimestampSyntax, texts: pa.Array, rows: np.ndarray) -> Parts:
    found = pc.extract_regex(texts, r"(?s)\A(?:" + syntax.regex + r")\z")
    valid = found.is_valid().to_numpy(zero_copy_only=False)
    numbers: dict[str, np.ndarray] = {}
    for field in found.type:
        column = found.field(field.name)
        if field.name in _WORDS:
            numbers[field.name] = _word_numbers(field.name, column)
        elif field.name == "epoch":
            numbers["epoch_us"] = _epoch_micros(column, syntax.epoch_scale)
        else:
            numbers[field.name] = _digits(column)
            if field.name in SUBSECOND_UNITS:
                length = pc.fill_null(pc.utf8_length(column), 0)
                digits = length.to_numpy(zero_copy_only=False).astype(np.int64)
                numbers[f"{field.name}_digits"] = digits
    return Parts(rows, numbers, valid)


def _digits(column: pa.Array) -> np.ndarray:
    """Digit strings as int64; -1 where absent (null or empty)."""
    present = pc.and_(column.is_valid(), pc.not_equal(pc.fill_null(column, ""), ""))
    filled = pc.if_else(present, column, "-1")
    return np.asarray(pc.cast(filled, pa.int64()).to_numpy(zero_copy_only=False), np.int64)


def _word_numbers(kind: str, column: pa.Array) -> np.ndarray:
    """Month names (1..12), am/pm (0/12) or offsets (minutes east) per distinct value; -1
    for an absent or unknown one (an absent offset is ``tz`` -1 and means none)."""
    encoded = column.dictionary_encode()
    table = [_word_number(kind, value) for value in encoded.dictionary.to_pylist()]
    values = pc.take(pa.array(table, pa.int64()), encoded.indices)
    return np.asarray(pc.fill_null(values, -1).to_numpy(zero_copy_only=False), np.int64)


def _word_number(kind: str, value: str | None) -> int | None:
    if not value:
        return None
    if kind == "mname":
        return MONTH_NUMBERS.get(value.lower())
    if kind == "ampm":
        return 12 if value.lower() == "pm" else 0
    return offset_minutes(value) + 24 * 60  # kept non-negative; see _micros


def _epoch_micros(column: pa.Array, scale: int) -> np.ndarray:
    values = pc.cast(pc.fill_null(column, "0"), pa.float64()).to_numpy(zero_copy_only=False)
    seconds = values / scale
    fraction, whole = np.modf(seconds)
    micros = np.round(fraction * US_PER_S)
    result: np.ndarray = whole.astype(np.int64) * US_PER_S + micros.astype(np.int64)
    return result


def _micros(
    syntax: TimestampSyntax,
    reader: TimestampReader,
    part: Parts,
    reference_us: np.ndarray | None,
    year: int,
) -> tuple[np.ndarray, np.ndarray]:
    numbers, valid = part.numbers, part.valid.copy()
    if "epoch_us" in numbers:
        return numbers["epoch_us"], valid
    size = len(part.rows)
    month = numbers["month"] if "month" in numbers else numbers.get("mname", np.zeros(size))
    month = np.asarray(month, dtype=np.int64)
    day = numbers["day"]
    hour = numbers.get("hour", np.zeros(size, dtype=np.int64))
    if "hour12" in numbers:
        twelve = numbers["hour12"]
        valid &= (twelve >= 1) & (twelve <= 12)
        hour = twelve % 12 + np.maximum(numbers.get("ampm", np.zeros(size, np.int64)), 0)
    hour = np.maximum(hour, 0)
    minute = np.maximum(numbers.get("minute", np.zeros(size, dtype=np.int64)), 0)
    second = np.maximum(numbers.get("second", np.zeros(size, dtype=np.int64)), 0)
    micro = _fraction(numbers)
    years = _years(numbers, month, day, hour, minute, second, reference_us, year)
    valid &= _real(years, month, day, hour, minute, second)
    days = _days_from_civil(years, np.clip(month, 1, 12), day)
    stamps = (days * 86_400 + hour * 3_600 + minute * 60 + second) * US_PER_S + micro
    tz = numbers.get("tz")
    if tz is not None:
        offset = np.where(tz >= 0, tz - 24 * 60, 0) * 60 * US_PER_S
        stamps = stamps - offset
        local = tz < 0
    else:
        local = np.ones(size, dtype=bool)
    if reader.zone is not None and local.any():
        stamps, in_zone = _from_zone(stamps, local, reader)
        valid &= in_zone
    return stamps, valid


def _fraction(numbers: dict[str, np.ndarray]) -> np.ndarray:
    """Microseconds past the second, from whichever sub-second group the syntax has."""
    size = len(next(iter(numbers.values())))
    micro = np.zeros(size, dtype=np.int64)
    for group in SUBSECOND_UNITS.keys() & numbers.keys():
        value, digits = numbers[group], numbers[f"{group}_digits"]
        present = value >= 0
        micro += np.where(present, subsecond_micros(group, np.maximum(value, 0), digits), 0)
    return micro


def _years(
    numbers: dict[str, np.ndarray],
    month: np.ndarray,
    day: np.ndarray,
    hour: np.ndarray,
    minute: np.ndarray,
    second: np.ndarray,
    reference_us: np.ndarray | None,
    year: int,
) -> np.ndarray:
    if "year" in numbers:
        return numbers["year"]
    if "yy" in numbers:
        return 2000 + numbers["yy"]
    if reference_us is None:
        return np.full(len(month), year, dtype=np.int64)
    limit = (reference_us + _AHEAD_US).astype("datetime64[us]")
    limit_year = limit.astype("datetime64[Y]").astype(np.int64) + 1970
    limit_month = limit.astype("datetime64[M]").astype(np.int64) % 12 + 1
    limit_day = (limit - limit.astype("datetime64[M]")).astype("timedelta64[D]").astype(np.int64)
    in_day = (limit - limit.astype("datetime64[D]")).astype("timedelta64[s]").astype(np.int64)
    bound = date_key(limit_year, limit_month, limit_day + 1, in_day // 3600,
                     in_day // 60 % 60, in_day % 60)  # fmt: skip
    late = date_key(limit_year, month, day, hour, minute, second) > bound
    result: np.ndarray = limit_year - late
    return result


def _real(
    year: np.ndarray,
    month: np.ndarray,
    day: np.ndarray,
    hour: np.ndarray,
    minute: np.ndarray,
    second: np.ndarray,
) -> np.ndarray:
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    days_in_month = _DAYS_IN_MONTH[np.clip(month, 1, 12) - 1] + (leap & (month == 2))
    return np.asarray(
        (year >= 1) & (year <= 9999) & (month >= 1) & (month <= 12) & (day >= 1)
        & (day <= days_in_month) & (hour < 24) & (minute < 60) & (second < 60)
    )  # fmt: skip


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (year >= 1)."""
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    result: np.ndarray = era * 146_097 + day_of_era - 719_468
    return result


def _from_zone(
    stamps: np.ndarray, local: np.ndarray, reader: TimestampReader
) -> tuple[np.ndarray, np.ndarray]:
    """Wall-clock times of the reader's zone (where ``local``) as UTC; times that do not exist
    there (skipped by a clock change) are marked invalid, for the per-line reader."""
    zone = reader.zone
    name = getattr(zone, "key", None)
    if name is None:  # a fixed offset
        assert zone is not None
        offset = zone.utcoffset(None)
        shift = 0 if offset is None else int(offset.total_seconds()) * US_PER_S
        return np.where(local, stamps - shift, stamps), np.ones(len(stamps), dtype=bool)
    naive = pa.array(stamps, pa.timestamp("us"))
    utc = pc.assume_timezone(naive, timezone=name, ambiguous="earliest", nonexistent="earliest")
    converted = utc.cast(pa.int64()).to_numpy(zero_copy_only=False)
    back = pc.local_timestamp(utc).cast(pa.int64()).to_numpy(zero_copy_only=False)
    exists = back == stamps
    return np.where(local, converted, stamps), exists | ~local
