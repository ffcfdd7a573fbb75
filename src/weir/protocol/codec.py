"""Request decoding and response encoding with kio's generated message classes.

A request payload is `api_key:int16 | api_version:int16 | correlation_id:int32 | ...`; the rest
of the header (v1, or v2 with tagged fields for flexible versions) and the body decode through
kio, after `guard.checked_payload` has checked every length against the bytes present and
dropped unknown tagged fields. Responses encode the same way and come back framed.
The version table (`weir.protocol.apis`) decides what may be decoded at all.

The client side is the mirror image: `encode_request` frames a request and `decode_response`
reads a response payload, for the controller's channel to other brokers and for tests.
The classes come from kio, except the ZooKeeper-era inter-broker APIs (keys 4-7), which Kafka 4
and kio 0.6.5 dropped: those come from `weir.protocol.kio_legacy`.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import KioIndexError, load_payload_module
from kio.schema.index import PayloadEntityType
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from weir.protocol import kio_legacy
from weir.protocol.errors import (
    InvalidRequestError,
    RemoteProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
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
    #: the request's bytes (its frame without the size prefix), as quotas count them; not part
    #: of what the request says, so requests compare without it
    size: int = dataclasses.field(default=0, compare=False)


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


def _payload_module(
    api_key: int, api_version: int, entity_type: PayloadEntityType
) -> ModuleType:
    """The module of one API version's classes: kio_legacy's for the inter-broker APIs Kafka 4
    dropped, kio's for the rest."""
    if api_key in kio_legacy.api_key_map:
        return kio_legacy.load_payload_module(api_key, api_version, entity_type)
    return load_payload_module(api_key, api_version, entity_type)


#: more versions than any API has: every version of a message is below this
_VERSION_BOUND = 32


@cache
def field_names(cls: type) -> frozenset[str]:
    """The fields of one version's message class."""
    return frozenset(f.name for f in dataclasses.fields(cls))


@cache
def fields_in_any_version(cls: type) -> frozenset[str]:
    """The fields the message `cls` has in any version of its API: the names a handler that
    serves every version may give it."""
    api_key: int = cls.__api_key__  # type: ignore[attr-defined]
    # a nested entity's __type__ is `nested`: its module says request or response
    response = cls.__module__.endswith(".response")
    entity_type: PayloadEntityType = EntityType.response if response else EntityType.request
    names: set[str] = set()
    for version in range(_VERSION_BOUND):
        try:
            module = _payload_module(api_key, version, entity_type)
        except KioIndexError:
            continue
        same = getattr(module, cls.__name__, None)
        if isinstance(same, type) and dataclasses.is_dataclass(same):
            names |= field_names(same)
    return frozenset(names)


@cache
def codec_for(api_key: int, api_version: int) -> _Codec:
    request_type = _entity_class(
        _payload_module(api_key, api_version, EntityType.request), "Request"
    )
    response_type = _entity_class(
        _payload_module(api_key, api_version, EntityType.response), "Response"
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
    size = len(payload)
    payload = checked_payload(payload, codec.header_type, codec.request_type)
    try:
        header, used = codec.read_header(payload, 0)
        body, _ = codec.read_body(payload, used)
    except Exception as exc:  # kio raises several types for truncated or malformed input
        raise InvalidRequestError(f"API {api_key} v{api_version}: {exc!r}") from None
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka sends some.
    return Request(
        api_key, api_version, correlation_id, header.client_id, header, body, size
    )


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """A framed response: size prefix, response header, body."""
    codec = codec_for(api_key, api_version)
    header = codec.response_header_type(correlation_id=correlation_id)
    return _framed((codec.write_response_header, header), (codec.write_response, response))


def _framed(*parts: tuple[Callable[..., None], Any]) -> bytes:
    """A size prefix, then each entity written by its writer."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    for write, entity in parts:
        write(buffer, entity)
    view = buffer.getbuffer()
    view[:4] = size_prefix(len(view) - 4)
    del view
    return buffer.getvalue()


# ---- the client side: requests out, responses in ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClientCodec:
    write_header: Callable[..., None]
    write_request: Callable[..., None]
    read_response_header: Callable[..., Any]
    read_response: Callable[..., Any]


@cache
def _client_codec(api_key: int, api_version: int) -> _ClientCodec:
    codec = codec_for(api_key, api_version)  # built apart: a broker that only serves never needs it
    return _ClientCodec(
        write_header=entity_writer(codec.header_type),
        write_request=entity_writer(codec.request_type),
        read_response_header=entity_reader(codec.response_header_type),
        read_response=entity_reader(codec.response_type),
    )


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A framed request: size prefix, request header (v1, or v2 for flexible versions), body.
    `body` must be the request class of exactly this API version."""
    codec = codec_for(api_key, api_version)
    if type(body) is not codec.request_type:
        raise TypeError(f"API {api_key} v{api_version} takes {codec.request_type}, not {body!r}")
    header = codec.header_type(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    client = _client_codec(api_key, api_version)
    return _framed((client.write_header, header), (client.write_request, body))


def decode_response(
    api_key: int, api_version: int, payload: bytes | memoryview
) -> tuple[int, Any]:
    """(correlation_id, body) of one response payload without its size prefix. The header is
    v0, or v1 with tagged fields for flexible versions (ApiVersions: always v0), as kio's
    response class declares. Bytes after the body are ignored. Unlike a request, a response is
    not walked by the guard first, so it should come from a peer that is trusted to be sane."""
    client = _client_codec(api_key, api_version)
    try:
        header, used = client.read_response_header(payload, 0)
        body, _ = client.read_response(payload, used)
    except Exception as exc:  # kio raises several types for truncated or malformed input
        raise RemoteProtocolError(f"API {api_key} v{api_version} response: {exc!r}") from None
    return int(header.correlation_id), body


def response_type(api_key: int, api_version: int) -> type:
    return codec_for(api_key, api_version).response_type


@cache
def response_module(api_key: int, api_version: int) -> Any:
    """kio's module of response classes for one API version (looked up once)."""
    return _payload_module(api_key, api_version, EntityType.response)


@cache
def request_module(api_key: int, api_version: int) -> Any:
    """kio's module of request classes for one API version, for requests this broker sends."""
    return _payload_module(api_key, api_version, EntityType.request)
