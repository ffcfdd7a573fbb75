"""The compiled record walk against a plain-Python statement of the same rules, on batches a
client builds and on every kind of damage Hypothesis can make of them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.records import Record, build_batch
from weir.records._records_walk import inner_problem
from weir.records.batch import HEADER_SIZE

TRUNCATED, OVERRUNS, TOO_SHORT, OFFSET_DELTA, TRAILING = 1, 2, 3, 4, 5


def varlong(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint of at most ten bytes, wrapped to 64 bits; IndexError when it runs out."""
    z = 0
    for shift in range(0, 70, 7):
        byte = data[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        if byte < 0x80:
            z &= 2**64 - 1
            return (z >> 1) ^ -(z & 1), pos
    raise IndexError("varint longer than ten bytes")


def reference(data: bytes, count: int) -> tuple[int, int, int] | None:
    """The rules, one record at a time: the length frames the record inside the section, the
    record holds attributes, timestamp delta and offset delta, the offset delta is the index,
    and the records tile the section."""
    pos = 0
    for index in range(count):
        try:
            length, body = varlong(data, pos)
        except IndexError:
            return TRUNCATED, index, pos
        if length <= 0 or length > len(data) - body:
            return OVERRUNS, index, length
        record = data[: body + length]
        try:
            _, after_timestamp = varlong(record, body + 1)
            delta, _ = varlong(record, after_timestamp)
        except IndexError:
            return TOO_SHORT, index, length
        if delta != index:
            return OFFSET_DELTA, index, delta
        pos = body + length
    if pos != len(data):
        return TRAILING, count, len(data) - pos
    return None


records = st.lists(
    st.tuples(st.binary(max_size=40) | st.none(), st.binary(max_size=300) | st.none(),
              st.integers(-(2**40), 2**40)),
    min_size=1, max_size=30,
)  # fmt: skip


def section(values: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    batch = build_batch([Record(offset=i, timestamp=t, key=k, value=v)
                         for i, (k, v, t) in enumerate(values)])  # fmt: skip
    return batch[HEADER_SIZE:]


@settings(max_examples=300, deadline=None)
@given(values=records)
def test_batches_clients_build_pass(values: list[tuple[bytes | None, bytes | None, int]]) -> None:
    data = section(values)
    assert inner_problem(data, len(values)) is None
    assert reference(data, len(values)) is None


@settings(max_examples=1000, deadline=None)
@given(values=records, data=st.data())
def test_damaged_sections_get_the_same_verdict(
    values: list[tuple[bytes | None, bytes | None, int]], data: st.DataObject
) -> None:
    clean = section(values)
    damage = data.draw(st.sampled_from(["flip", "cut", "extend", "count"]))
    damaged, count = bytearray(clean), len(values)
    if damage == "flip":
        position = data.draw(st.integers(0, len(clean) - 1))
        damaged[position] ^= data.draw(st.integers(1, 255))
    elif damage == "cut":
        del damaged[data.draw(st.integers(0, len(clean) - 1)) :]
    elif damage == "extend":
        damaged += data.draw(st.binary(min_size=1, max_size=20))
    else:
        count += data.draw(st.integers(-len(values), 5).filter(lambda n: n != 0))
    assert inner_problem(bytes(damaged), count) == reference(bytes(damaged), count)


def test_memoryviews_and_bytearrays_are_read_in_place() -> None:
    data = section([(b"k", b"v", 0), (None, b"w", 1)])
    assert inner_problem(memoryview(data), 2) is None
    assert inner_problem(bytearray(data), 3) == (TRUNCATED, 2, len(data))
