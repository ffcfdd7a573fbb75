"""Request decoding and response encoding with kio's generated message classes.

A request payload is `api_key:int16 | api_version:int16 | correlation_id:int32 | ...`; the rest
of the header (v1, or v2 with tagged fields for flexible versions) and the body decode through
kio, after `guard.checked_payload` has checked every length against the bytes present and
dropped unknown tagged fields. Responses encode the same way and come back framed.
The version table (`weir.protocol.apis`) decides what may be decoded at all.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from weir.protocol.errors import InvalidRequestError, UnknownApiKeyError, UnsupportedVersionError
from weir.protocol.framing import size_prefix
from weir.protocol.guard import checked_payload

_PEEK = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any
    body: Any


@dataclass(frozen=True, slots=True)
class _Codec:
    request_type: type
    response_type: type
    read_header: Callable[..., Any]
    read_body: Callable[..., Any]
    write_response_header: Callable[..., None]
    write_response: Callable[..., None]
    response_header_type: type
    header_type: type


def _entity_class(module: Any, suffix: str) -> type:
    for name in dir(module):
        value = getattr(module, name)
        if (
            isinstance(value, type)
            and name.endswith(suffix)
            and getattr(value, "__type__", None) in (EntityType.request, EntityType.response)
        ):
            return value
    raise LookupError(f"{module.__name__} defines no {suffix}")


@cache
def codec_for(api_key: int, api_version: int) -> _Codec:
    request_type = _entity_class(
        load_payload_module(api_key, api_version, EntityType.request), "Request"
    )
    response_type = _entity_class(
        load_payload_module(api_key, api_version, EntityType.response), "Response"
    )
    header_type = request_type.__header_schema__  # type: ignore[attr-defined]
    response_header_type = response_type.__header_schema__  # type: ignore[attr-defined]
    return _Codec(
        request_type=request_type,
        response_type=response_type,
        read_header=entity_reader(header_type),
        read_body=entity_reader(request_type),
        write_response_header=entity_writer(response_header_type),
        write_response=entity_writer(response_type),
        response_header_type=response_header_type,
        header_type=header_type,
    )


def peek_header(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of any request header."""
    if len(payload) < _PEEK.size:
        raise InvalidRequestError(f"request of {len(payload)} bytes has no header")
    api_key, api_version, correlation_id = _PEEK.unpack_from(payload)
    return api_key, api_version, correlation_id


def decode_request(
    payload: bytes | memoryview, supported: Mapping[int, tuple[int, int]]
) -> Request:
    """Decode one request payload (without its size prefix)."""
    api_key, api_version, correlation_id = peek_header(payload)
    if api_key not in supported:
        raise UnknownApiKeyError(f"unknown API key {api_key}")
    low, high = supported[api_key]
    if not low <= api_version <= high:
        raise UnsupportedVersionError(
            f"API {api_key} version {api_version} is outside {low}..{high}",
            api_key=api_key, api_version=api_version, correlation_id=correlation_id,
        )  # fmt: skip
    try:
        codec = codec_for(api_key, api_version)
    except (LookupError, ImportError, RuntimeError) as exc:  # kio: UnknownEntity
        raise UnsupportedVersionError(
            f"API {api_key} version {api_version} cannot be decoded: {exc}",
            api_key=api_key, api_version=api_version, correlation_id=correlation_id,
        ) from None  # fmt: skip
    payload = checked_payload(payload, codec.header_type, codec.request_type)
    try:
        header, used = codec.read_header(payload, 0)
        body, _ = codec.read_body(payload, used)
    except Exception as exc:  # kio raises several types for truncated or malformed input
        raise InvalidRequestError(f"API {api_key} v{api_version}: {exc!r}") from None
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka sends some.
    return Request(api_key, api_version, correlation_id, header.client_id, header, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """A framed response: size prefix, response header, body."""
    codec = codec_for(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    codec.write_response_header(buffer, codec.response_header_type(correlation_id=correlation_id))
    codec.write_response(buffer, response)
    view = buffer.getbuffer()
    view[:4] = size_prefix(len(view) - 4)
    del view
    return buffer.getvalue()


def response_type(api_key: int, api_version: int) -> type:
    return codec_for(api_key, api_version).response_type


@cache
def response_module(api_key: int, api_version: int) -> Any:
    """kio's module of response classes for one API version (looked up once)."""
    return load_payload_module(api_key, api_version, EntityType.response)
