"""Record batch v2 on the wire and on disk.

Owns the batch header view, CRC32C, in-place offset/epoch rewrites, record iteration, batch
building, compression codecs and client-batch validation. Imports nothing but the standard
library, crc32c and cramjam; never touches sockets or files.
"""

from weir.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    HeaderFields,
    iter_batches,
    peek_offset_and_size,
    peek_transactional,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from weir.records.compression import Compression
from weir.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from weir.records.record import (
    BatchSpec,
    Record,
    build_batch,
    iter_records,
    recompress,
    simple_batch,
)
from weir.records.validation import (
    check_inner_offsets,
    check_keys,
    check_timestamps,
    validate_batch,
)

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "BatchHeader",
    "BatchSpec",
    "Compression",
    "CorruptRecordError",
    "HeaderFields",
    "InvalidRecordError",
    "InvalidTimestampError",
    "Record",
    "RecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "build_batch",
    "check_inner_offsets",
    "check_keys",
    "check_timestamps",
    "iter_batches",
    "iter_records",
    "peek_offset_and_size",
    "peek_transactional",
    "recompress",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "simple_batch",
    "validate_batch",
]
