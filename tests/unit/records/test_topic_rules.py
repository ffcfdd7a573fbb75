"""Per-topic record rules: keys on compacted topics, timestamp bounds, broker-side compression."""

from __future__ import annotations

import pytest

from weir.records import (
    BatchHeader,
    BatchSpec,
    Compression,
    InvalidRecordError,
    InvalidTimestampError,
    Record,
    build_batch,
    check_keys,
    check_timestamps,
    iter_records,
    recompress,
)


def records(*keys: bytes | None, timestamps: list[int] | None = None) -> list[Record]:
    stamps = timestamps or [1000] * len(keys)
    return [Record(offset=i, timestamp=t, key=k, value=b"v%d" % i)
            for i, (k, t) in enumerate(zip(keys, stamps, strict=True))]  # fmt: skip


def test_records_without_a_key_are_named_by_their_index() -> None:
    check_keys(BatchHeader(build_batch(records(b"a", b"b"))), "t-0")
    with pytest.raises(InvalidRecordError) as refused:
        check_keys(BatchHeader(build_batch(records(b"a", None, b"c", None))), "t-0")
    assert [i for i, _ in refused.value.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key in topic partition t-0" in str(
        refused.value
    )


def test_timestamps_outside_the_bounds_are_named_by_their_index() -> None:
    header = BatchHeader(build_batch(records(b"a", b"b", b"c", timestamps=[500, 1000, 5000])))
    check_timestamps(header, 500, 5000)
    with pytest.raises(InvalidTimestampError) as refused:
        check_timestamps(header, 600, 4000)
    assert [i for i, _ in refused.value.record_errors] == [0, 2]
    assert refused.value.error_code == 32


@pytest.mark.parametrize("codec", list(Compression))
def test_recompression_keeps_offsets_timestamps_and_producer_fields(codec: Compression) -> None:
    spec = BatchSpec(compression=Compression.GZIP, producer_id=7, producer_epoch=2,
                     base_sequence=40)  # fmt: skip
    original = BatchHeader(build_batch(records(b"a", None, b"c", timestamps=[3, 1, 2]), spec=spec))
    again = BatchHeader(recompress(original, codec, None))
    assert again.compression is codec and again.crc_ok()
    assert (again.producer_id, again.producer_epoch, again.base_sequence) == (7, 2, 40)
    assert (again.last_offset_delta, again.max_timestamp) == (2, 3)
    assert list(iter_records(again)) == list(iter_records(original))
