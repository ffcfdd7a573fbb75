"""Arrow string arrays at the byte level: which lines are plain ASCII, views of parts of lines
(``string_view`` arrays over the lines' own buffer, no copy until one cast), the rest of each
line after a header, and regex extraction that also reports how far a group reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

# Lines with bytes outside printable ASCII other than tab, LF and CR take the per-line path.
_CONTROL_ALLOWED = np.isin(np.arange(256), [9, 10, 13])
_SCAN_BLOCK = 1 << 18
# What Arrow's ascii_trim_whitespace strips.
_ASCII_WHITESPACE = np.isin(np.arange(256), [9, 10, 11, 12, 13, 32])
_VIEW_INLINE = np.arange(12)


def extract(
    values: pa.Array, pattern: str, whole: str
) -> tuple[np.ndarray, dict[str, pa.Array], np.ndarray]:
    """Which values match ``pattern``, its groups other than ``whole``, and how many bytes
    ``whole`` spans in each value (0 where it does not match)."""
    fields = pc.extract_regex(values, pattern)
    group = {f.name: fields.field(f.name) for f in fields.type}
    length = pc.fill_null(pc.binary_length(group.pop(whole)), 0)
    return (
        fields.is_valid().to_numpy(zero_copy_only=False),
        group,
        length.to_numpy(zero_copy_only=False).astype(np.int64),
    )


@dataclass(frozen=True)
class LineBytes:
    """The bytes of a string array's lines, for views of parts of them."""

    buffer: pa.Buffer
    data: np.ndarray
    starts: np.ndarray  # where each line starts in ``data`` (int64)
    ends: np.ndarray

    @classmethod
    def of(cls, lines: pa.Array) -> LineBytes | None:
        """None when the lines hold no bytes at all."""
        _, offsets_buffer, data_buffer = lines.buffers()
        if data_buffer is None:
            return None
        offsets = np.frombuffer(
            offsets_buffer, dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4
        ).astype(np.int64)
        data = np.frombuffer(data_buffer, dtype=np.uint8)
        return cls(data_buffer, data, offsets[:-1], offsets[1:])

    def views(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        return _string_views(self.buffer, self.data, starts, lengths).cast(pa.string())

    def rest(self, starts: np.ndarray) -> pa.Array:
        """Each line from ``starts`` to its end."""
        return self.views(starts, self.ends - starts)


def usual(values: pa.Array) -> pa.Array | None:
    """Which values (a binary array) are not null and hold only printable ASCII, tab, LF and CR
    bytes; None when all do. The bytes are scanned in blocks small enough to stay in the CPU's
    cache, and only the few unusual ones are traced back to their values."""
    size = len(values)
    _, offsets_buffer, data_buffer = values.buffers()
    usual = np.ones(size, dtype=bool)
    if values.null_count:
        usual &= values.is_valid().to_numpy(zero_copy_only=False)
    if data_buffer is not None and size:
        offsets = np.frombuffer(
            offsets_buffer, dtype=np.int32, count=size + 1, offset=values.offset * 4
        )
        data = np.frombuffer(data_buffer, dtype=np.uint8)
        shifted = np.empty(_SCAN_BLOCK, dtype=np.uint8)
        outside = np.empty(_SCAN_BLOCK, dtype=bool)
        for begin in range(int(offsets[0]), int(offsets[-1]), _SCAN_BLOCK):
            block = data[begin : min(begin + _SCAN_BLOCK, int(offsets[-1]))]
            length = len(block)
            # Bytes 0x20..0x7e become 0..0x5e; every other byte ends up above 0x5e.
            np.subtract(block, np.uint8(0x20), out=shifted[:length])
            np.greater(shifted[:length], np.uint8(0x5E), out=outside[:length])
            if outside[:length].any():
                at = np.flatnonzero(outside[:length])
                at = at[~_CONTROL_ALLOWED[block[at]]] + begin
                usual[np.searchsorted(offsets, at, side="right") - 1] = False
    return None if usual.all() else pa.array(usual)


def as_binary(column: pa.Array) -> pa.Array:
    return column if pa.types.is_binary(column.type) else column.cast(pa.binary())


def messages_after(lines: pa.Array, header_bytes: np.ndarray) -> pa.Array:
    """Each line without its first ``header_bytes[i]`` bytes and the whitespace after them.

    The lines (a string array without nulls) are stripped already, so nothing trails. The
    messages are first views into the lines' data (``string_view``), which one cast then copies
    into a new string array; no per-byte index is built.
    """
    size = len(lines)
    _, offsets_buffer, data_buffer = lines.buffers()
    if data_buffer is None or size == 0:
        return pa.array([""] * size, pa.string())
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=size + 1, offset=lines.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    ends = offsets[1:]
    starts = offsets[:-1] + header_bytes.astype(np.int32)
    moving = np.flatnonzero(starts < ends)
    while len(moving):
        moving = moving[_ASCII_WHITESPACE[data[starts[moving]]]]
        starts[moving] += 1
        moving = moving[starts[moving] < ends[moving]]
    return _string_views(data_buffer, data, starts, ends - starts).cast(pa.string())


def _string_views(
    buffer: pa.Buffer, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> pa.Array:
    """A ``string_view`` array of the byte ranges ``[starts[i], starts[i] + lengths[i])`` of
    ``buffer`` (whose bytes ``data`` holds). A view is 16 bytes: the length, then either the
    string itself (up to 12 bytes, zero-padded) or its first 4 bytes, the buffer's number and
    the offset. Every view first gets the 12 bytes at its start (one gather from a sliding
    window over the data); long ones then get their buffer and offset over the last 8."""
    size = len(starts)
    if len(data) == 0:
        return pa.array([""] * size, pa.string_view())
    width = len(_VIEW_INLINE)
    source = data if len(data) >= width else np.pad(data, (0, width - len(data)))
    views = np.empty((size, 4), dtype=np.int32)
    views[:, 0] = lengths
    inline = views.view(np.uint8)[:, 4:16]
    last = len(source) - width
    inline[...] = np.lib.stride_tricks.sliding_window_view(source, width)[np.minimum(starts, last)]
    for row in np.flatnonzero(starts > last).tolist():  # the few views within the data's end
        piece = data[starts[row] : starts[row] + width]
        inline[row, : len(piece)] = piece
        inline[row, len(piece) :] = 0
    inline[lengths[:, None] <= _VIEW_INLINE] = 0
    long = np.flatnonzero(lengths > width)
    views[long, 2] = 0
    views[long, 3] = starts[long]
    return pa.Array.from_buffers(pa.string_view(), size, [None, pa.py_buffer(views), buffer])
