from __future__ import annotations

import bisect
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.storage.index import OffsetIndex, TimeIndex


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), min_size=0, max_size=60),
    targets=st.lists(st.integers(0, 5000), max_size=20),
)
def test_offset_index_lookup_agrees_with_a_linear_scan(
    tmp_path_factory: object, gaps: list[tuple[int, int]], targets: list[int]
) -> None:
    path = Path(tmp_path_factory.mktemp("idx")) / "0.index"  # type: ignore[attr-defined]
    index = OffsetIndex(path, 100, 8 * 100)
    entries = []
    offset, position = 100, 0
    for offset_gap, position_gap in gaps:
        offset += offset_gap
        position += position_gap
        index.append(offset, position)
        entries.append((offset, position))
    for target in [*targets, *(o for o, _ in entries)]:
        target += 100
        linear = [e for e in entries if e[0] <= target]
        assert index.lookup(target) == (linear[-1] if linear else (100, 0))
    positions = [p for _, p in entries]
    for target in targets:
        i = bisect.bisect_right(positions, target)
        assert index.lookup_position(target) == (entries[i - 1] if i else (100, 0))
    index.close()
    reopened = OffsetIndex(path, 100, 8 * 100)
    assert reopened.entries == len(entries)
    reopened.close()


def test_indexes_trim_and_reopen(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 10)
    for i in range(1, 5):
        index.maybe_append(1000 * i, 10 * i)
    index.maybe_append(1500, 60)  # not newer: ignored
    assert index.entries == 4
    index.trim()
    index.close()
    assert (tmp_path / "0.timeindex").stat().st_size == 48
    reopened = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 10)
    assert reopened.entries == 4 and reopened.last_entry == (4000, 40)
    assert reopened.lookup(2500) == (2000, 20)
    assert reopened.lookup(10) == (-1, 0)
    reopened.truncate_to(30)
    assert reopened.last_entry == (2000, 20)
    reopened.close()


def test_an_untrimmed_index_counts_only_written_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 8 * 1000)
    for i in range(1, 8):
        index.append(i * 3, i * 100)
    index.close()  # as after a crash: still pre-allocated, zeros after the entries
    reopened = OffsetIndex(tmp_path / "0.index", 0, 8 * 1000)
    assert reopened.entries == 7 and reopened.capacity == 1000
    assert reopened.lookup(10) == (9, 300)
    reopened.close()
