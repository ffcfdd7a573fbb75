"""FrameDecoder: size-prefixed frames in, whole payloads out, from bytes alone."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.protocol.errors import FrameTooLargeError, InvalidFrameError, RemoteProtocolError
from weir.protocol.framing import NEED_DATA, SIZE_PREFIX, FrameDecoder, frame, size_prefix

MODEST = settings(max_examples=200, deadline=None)
MAX_FRAME = 1024

PAYLOADS = st.lists(st.binary(max_size=200), max_size=8)


def drain(decoder: FrameDecoder) -> list[bytes]:
    """Every whole frame the decoder holds, stopping at NEED_DATA."""
    frames = []
    while (payload := decoder.next_frame()) is not NEED_DATA:
        assert isinstance(payload, bytes)
        frames.append(payload)
    return frames


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@MODEST
@given(PAYLOADS, st.lists(st.integers(min_value=0), max_size=40))
def test_frames_reassemble_exactly_however_the_stream_is_cut(
    payloads: list[bytes], points: list[int]
) -> None:
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(MAX_FRAME)
    received = []
    for chunk in cut(stream, points):
        decoder.receive_data(chunk)
        received += drain(decoder)
    assert received == payloads
    assert decoder.buffered == 0


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 3])
def test_a_frame_fed_byte_by_byte_is_need_data_until_its_last_byte(payload: bytes) -> None:
    data = frame(payload)
    decoder = FrameDecoder(MAX_FRAME)
    for i in range(len(data) - 1):
        decoder.receive_data(data[i : i + 1])
        assert decoder.next_frame() is NEED_DATA
        assert decoder.buffered == i + 1
    decoder.receive_data(data[-1:])
    assert decoder.next_frame() == payload
    assert decoder.next_frame() is NEED_DATA


def test_an_empty_decoder_needs_data() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    assert decoder.next_frame() is NEED_DATA
    assert repr(NEED_DATA) == "NEED_DATA"


def test_a_frame_and_the_start_of_the_next_come_apart() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    decoder.receive_data(frame(b"first") + frame(b"second")[:7])
    assert decoder.next_frame() == b"first"
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(frame(b"second")[7:])
    assert decoder.next_frame() == b"second"


@pytest.mark.parametrize("size", [-1, -(2**31), -1000])
def test_a_negative_size_is_an_invalid_frame(size: int) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    decoder.receive_data(struct.pack(">i", size))
    with pytest.raises(InvalidFrameError):
        decoder.next_frame()


@pytest.mark.parametrize("size", [MAX_FRAME + 1, 2**31 - 1])
def test_an_oversized_frame_is_refused_from_its_prefix_alone(size: int) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    decoder.receive_data(size_prefix(size))  # not one byte of the payload has arrived
    with pytest.raises(FrameTooLargeError, match=r"socket\.request\.max\.bytes"):
        decoder.next_frame()


def test_a_frame_of_exactly_the_maximum_is_accepted() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    decoder.receive_data(size_prefix(MAX_FRAME))
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(b"\x01" * MAX_FRAME)
    assert decoder.next_frame() == b"\x01" * MAX_FRAME


def test_an_oversized_frame_after_a_good_one_still_yields_the_good_one_first() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    decoder.receive_data(frame(b"fine") + size_prefix(MAX_FRAME + 1))
    assert decoder.next_frame() == b"fine"
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_frame_prefixes_the_payload_with_its_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(bytearray(b"")) == b"\x00\x00\x00\x00"
    assert size_prefix(300) == b"\x00\x00\x01\x2c"
    assert SIZE_PREFIX == 4


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.binary(max_size=64), max_size=10),
    st.integers(min_value=0, max_value=4096),
)
def test_arbitrary_bytes_give_frames_or_a_remote_protocol_error(
    chunks: list[bytes], max_frame: int
) -> None:
    decoder = FrameDecoder(max_frame)
    try:
        for chunk in chunks:
            decoder.receive_data(chunk)
            for payload in drain(decoder):
                assert len(payload) <= max_frame
    except RemoteProtocolError:
        pass


def test_the_size_of_the_frame_being_received_is_known_from_its_prefix() -> None:
    decoder = FrameDecoder(1000)
    assert decoder.next_frame_size is None
    decoder.receive_data(frame(b"x" * 300)[:3])
    assert decoder.next_frame_size is None
    decoder.receive_data(frame(b"x" * 300)[3:10])
    assert decoder.next_frame_size == 300 and decoder.next_frame() is NEED_DATA


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 700), min_size=1, max_size=30),
)
def test_large_frames_received_in_place_come_out_the_same(
    payloads: list[bytes], cuts: list[int]
) -> None:
    """Frames above in_place_bytes go into buffers the decoder hands out; the stream, cut
    anywhere, still yields every payload once, in order, read-only."""
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(10_000, in_place_bytes=500)
    out: list[bytes] = []
    position, turn = 0, 0
    while position < len(stream) or decoder.next_frame_size is not None:
        while (payload := decoder.next_frame()) is not NEED_DATA:
            if isinstance(payload, memoryview):
                assert payload.readonly
            out.append(bytes(payload))
        if position >= len(stream):
            break
        step = cuts[turn % len(cuts)]
        turn += 1
        target = decoder.receive_buffer()
        if target is not None:
            with target:
                count = min(step, len(target), len(stream) - position)
                target[:count] = stream[position : position + count]
            decoder.received(count)
        else:
            count = min(step, len(stream) - position)
            decoder.receive_data(stream[position : position + count])
        position += count
    assert out == payloads


def test_a_large_frame_buffer_grows_with_what_arrives_and_never_past_the_frame() -> None:
    decoder = FrameDecoder(1 << 20, in_place_bytes=100)
    decoder.receive_data(frame(b"y" * 1000)[:50])
    sizes = []
    while (target := decoder.receive_buffer()) is not None and decoder.next_frame_size:
        with target:
            sizes.append(len(target))
            count = min(len(target), 30)  # a slow peer: 30 bytes a read
            target[:count] = b"y" * count
        decoder.received(count)
        if (payload := decoder.next_frame()) is not NEED_DATA:
            break
    assert sizes[0] == 100  # 46 bytes came with the size; room for in_place_bytes more
    assert max(sizes) < 1000 - 46  # never the whole frame ahead of its bytes
    assert isinstance(payload, memoryview) and payload.readonly and bytes(payload) == b"y" * 1000
    assert decoder.receive_buffer() is None and decoder.next_frame() is NEED_DATA


def test_a_large_frame_announced_but_not_sent_costs_what_arrived() -> None:
    decoder = FrameDecoder(1 << 20, in_place_bytes=64 * 1024)
    decoder.receive_data(frame(b"z" * (1 << 20))[:4])  # the size alone
    target = decoder.receive_buffer()
    assert target is not None and len(target) == 64 * 1024
