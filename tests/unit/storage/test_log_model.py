"""Random append/read/roll/truncate/reopen sequences against a plain list of batches."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from weir.clock import FakeClock, FakeScheduler
from weir.records import BatchSpec, Compression, Record, build_batch, iter_batches, iter_records
from weir.storage import LogConfig, OffsetOutOfRangeError, PartitionLog

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=300, segment_index_bytes=80)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="weir-model-"))
        self.clock = FakeClock()
        self.scheduler = FakeScheduler(self.clock)
        self.log = self._open(clean=True)
        self.batches: list[tuple[int, list[bytes]]] = []  # (base offset, values)
        self.seq = 0

    def _open(self, clean: bool, recovery_point: int = 0) -> PartitionLog:
        return PartitionLog(
            self.dir / "t-0",
            CONFIG,
            self.clock,
            self.scheduler,
            recovery_point=recovery_point,
            clean_shutdown=clean,
        )

    @property
    def end(self) -> int:
        return self.batches[-1][0] + len(self.batches[-1][1]) if self.batches else 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        count=st.integers(1, 12),
        size=st.integers(0, 400),
        codec=st.sampled_from(list(Compression)),
    )
    def append(self, count: int, size: int, codec: Compression) -> None:
        values = [f"{self.seq}-{i}-".encode() + bytes([65 + i % 26]) * size for i in range(count)]
        self.seq += 1
        self.clock.advance(7)
        now = self.clock.milliseconds()
        records = [Record(offset=i, timestamp=now, key=None, value=v) for i, v in enumerate(values)]
        info = self.log.append(
            build_batch(records, spec=BatchSpec(compression=codec)), leader_epoch=1
        )
        assert info.first_offset == self.end
        assert info.last_offset == self.end + count - 1
        assert self.log.high_watermark < info.last_offset + 1  # the append alone did not move it
        self.batches.append((self.end, values))
        self.log.update_high_watermark(self.end)  # as the partition's leader alone does

    @rule(data=st.data(), max_bytes=st.integers(1, 5000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(0, self.end + 1))
        if offset > self.end:
            try:
                self.log.read(offset, max_bytes)
            except OffsetOutOfRangeError:
                return
            raise AssertionError("read past the log end offset did not fail")
        info = self.log.read(offset, max_bytes)
        if offset == self.end:
            assert info.data is None
            return
        assert info.data is not None
        raw = info.data.read_bytes()
        headers = list(iter_batches(raw, verify_crc=True))
        assert headers, "a read below the end returns at least one batch"
        assert len(headers) == 1 or len(raw) <= max_bytes
        expected = [b for b in self.batches if b[0] + len(b[1]) > offset]
        for header, (base, values) in zip(headers, expected, strict=False):
            assert header.base_offset == base
            assert [r.value for r in iter_records(header)] == values
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        following = [b[0] for b in self.batches if b[0] > headers[-1].base_offset]
        assert info.data.next_offset == (following[0] if following else self.end)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.batches) - 1))
        base = self.batches[index][0]
        self.log.truncate_to(base)
        del self.batches[index:]

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        if clean:
            self.log.close()
            self.log = self._open(clean=True)
            assert not self.log.load_report.problems
        else:  # a crash after the last fsync: files closed as they are, indexes untrimmed
            self.log.flush()
            for segment in self.log.segments:
                segment.close()
            self.log = self._open(clean=False)
            assert not self.log.load_report.problems

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.end
        assert self.log.high_watermark == self.end
        bases = [s.base_offset for s in self.log.segments]
        assert bases == sorted(set(bases))

    @invariant()
    def index_agrees_with_scan(self) -> None:
        for segment in self.log.segments:
            scanned = list(segment.batches())
            for target in (segment.base_offset, segment.base_offset + 3, self.end - 1):
                found = segment.translate_offset(target)
                linear = next((b for b in scanned if b.last_offset >= target), None)
                assert found == linear


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
