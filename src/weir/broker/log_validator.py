"""What a topic's configs demand of a batch a client produces, beyond the batch's own checks
(`weir.records.validate_batch`): keys on a compacted topic, timestamps within
message.timestamp.before/after.max.ms of the broker's clock, and the codec it is stored with
(compression.type). Pure functions: no state, no I/O."""

from __future__ import annotations

from weir.records import BatchHeader, Compression, check_keys, check_timestamps, recompress
from weir.storage import LogConfig

#: compression.type values other than `producer` -> the codec the broker stores batches with
STORED_CODEC = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def check_topic_rules(header: BatchHeader, config: LogConfig, name: str, now_ms: int) -> None:
    """RecordError if a record breaks the rules of topic partition `name`."""
    if config.compact:
        check_keys(header, name)
    bounds = config.timestamp_bounds
    if bounds is not None:
        check_timestamps(header, now_ms - bounds[0], _saturated(now_ms + bounds[1]))


def stored_form(records: bytes, header: BatchHeader, config: LogConfig) -> bytes:
    """The batch as the topic stores it: recompressed when compression.type names a codec other
    than the producer's."""
    codec = STORED_CODEC.get(config.compression_type)
    if codec is None or codec == header.compression:
        return records
    level = {
        Compression.GZIP: config.compression_gzip_level,
        Compression.LZ4: config.compression_lz4_level,
        Compression.ZSTD: config.compression_zstd_level,
    }.get(codec)
    return recompress(header, codec, None if level == -1 else level)


def _saturated(value: int) -> int:
    return min(value, 2**63 - 1)
