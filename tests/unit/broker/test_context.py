"""What every handler builds its responses with: `make` serves every version of a message from
one superset of fields, and refuses a name no version has (a misspelt field)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from weir.broker.context import make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import response_module


def partition_response(version: int, **fields: object) -> object:
    m = response_module(ApiKey.PRODUCE, version)
    return make(m.PartitionProduceResponse, index=0, error_code=ErrorCode.none, base_offset=5,
                log_append_time=None, log_start_offset=0, **fields)  # fmt: skip


def test_fields_an_older_version_lacks_are_dropped_for_it() -> None:
    old = partition_response(3, record_errors=(), error_message="why")
    new = partition_response(9, record_errors=(), error_message="why")
    assert not hasattr(old, "error_message") and not hasattr(old, "log_start_offset")
    assert new.error_message == "why"  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [3, 9])
def test_a_field_no_version_has_is_refused(version: int) -> None:
    with pytest.raises(TypeError, match="PartitionProduceResponse has no field error_mesage"):
        partition_response(version, record_errors=(), error_mesage="why")


def test_a_top_level_response_is_checked_alike() -> None:
    m = response_module(ApiKey.PRODUCE, 3)
    response = make(m.ProduceResponse, responses=(), throttle_time=None, node_endpoints=())
    assert not hasattr(response, "node_endpoints")  # a v11 field, dropped for v3
    with pytest.raises(TypeError, match="throttle_time_ms"):
        make(m.ProduceResponse, responses=(), throttle_time_ms=0)
