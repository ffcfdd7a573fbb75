"""Control batches: the COMMIT and ABORT markers that end a transaction on a partition.

A control batch has the control and transactional attributes set and one record whose key is
version:int16 | type:int16 (0 ABORT, 1 COMMIT) and whose value is version:int16 |
coordinator_epoch:int32, as Kafka writes them.
"""

from __future__ import annotations

import struct

from weir.records.batch import BatchHeader
from weir.records.errors import CorruptRecordError
from weir.records.record import iter_records

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")


def marker_commits(header: BatchHeader) -> bool | None:
    """Whether a control batch commits (True) or aborts (False) its producer's transaction;
    None for a control record of another type (or a batch that is not one)."""
    if not header.is_control:
        return None
    for record in iter_records(header):
        if record.key is None or len(record.key) < _KEY.size:
            raise CorruptRecordError("a control record without a marker key")
        _, kind = _KEY.unpack_from(record.key)
        if kind in (ABORT, COMMIT):
            return bool(kind == COMMIT)
        return None
    return None
