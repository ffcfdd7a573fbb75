"""The warehouse's batch commit protocol: each micro-batch's files appear in the tables once.

A micro-batch's output for every table is written under ``_staging/<query>/<batch>/<table>``
(or, by the log ETL's tasks, in a spool of their own from which the commit takes them); the files
are then renamed into the tables, and a marker ``_batches/<query>/<batch>`` records
that the batch is in. Before the first rename a manifest ``_batches/<query>/<batch>.pending``
lists the files about to appear. When Spark runs a batch again (it replays the offsets of a
batch it had not marked done when the driver died), the batch is skipped if its marker exists;
otherwise the files of its manifest are removed from the tables and the batch is written anew.
So every batch is in the tables exactly once after its commit, and whatever a crash leaves
half-moved is replaced by the replay.

A batch may also carry states of the job's own (the log ETL's template miner after the batch,
and its deduplication's high waters): the unnamed one is written as
``_batches/<query>/<batch>.state``, a named one as ``<batch>.<name>.state``, before the
marker, which names them, so the states and the batch's files are committed together; after a
restart the job resumes from the states of the last committed batch (``latest_state``). Older
states are deleted once a newer batch is committed.

``<query>`` is the streaming query's id from its checkpoint: a new checkpoint starts a new
series of batch numbers, whose markers are kept apart from the old ones.

Names under the warehouse that begin with ``_`` are not read by ``spark.read.parquet`` of a
table. The warehouse must be a local directory (or one mounted at the same path on every
executor) where a rename is atomic. A reader that lists a table while a batch is being
committed may see part of it; once ``commit`` returns, the batch is whole. Not thread-safe:
one job writes a warehouse at a time.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

BATCHES_DIR = "_batches"
STAGING_DIR = "_staging"
PENDING_SUFFIX = ".pending"
STATE_SUFFIX = ".state"
DATA_SUFFIX = ".parquet"


class BatchCommits:
    """Staging and committing one streaming query's micro-batches into ``warehouse``."""

    def __init__(self, warehouse: Path, query_id: str) -> None:
        self.warehouse = warehouse
        self.markers = warehouse / BATCHES_DIR / query_id
        self.staging_root = warehouse / STAGING_DIR / query_id

    def committed(self, batch_id: int) -> dict[str, Any] | None:
        """The marker of a committed batch (what it wrote), or None."""
        marker = self._marker(batch_id)
        if not marker.exists():
            return None
        document: dict[str, Any] = json.loads(marker.read_text())
        return document

    def stage(self, batch_id: int) -> Path:
        """An empty staging directory for the batch, after undoing any earlier attempt."""
        pending = self._pending(batch_id)
        if pending.exists():
            for relative in json.loads(pending.read_text())["files"]:
                (self.warehouse / relative).unlink(missing_ok=True)
            pending.unlink()
        staging = self.staging_root / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def commit(
        self,
        batch_id: int,
        summary: Mapping[str, Any],
        files: Iterable[str] | None = None,
        *,
        elsewhere: Mapping[str, Path] | None = None,
        state: bytes | None = None,
        states: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Moves the staged data files into their tables and writes the batch's marker.
        `files` (paths relative to the staging directory) names the files to move; anything
        else in staging, such as the output of a task attempt that no one waited for, is left
        there and removed with it. Without `files`, every data file in staging is moved.
        `elsewhere` adds files that were written outside staging (on the same filesystem): each
        path relative to the tables, as if it were staged, maps to where the file is now; they
        are moved from there. `state`, if given, is committed with the batch, and so is each
        of `states`, by its name."""
        staging = self.staging_root / str(batch_id)
        if files is None:
            chosen = sorted(staging.rglob(f"*{DATA_SUFFIX}"))
        else:
            chosen = sorted(staging / relative for relative in files)
        moves = {
            source: self._destination(batch_id, source.relative_to(staging)) for source in chosen
        }
        for relative, source in sorted((elsewhere or {}).items()):
            moves[source] = self._destination(batch_id, Path(relative))
        files = [str(target.relative_to(self.warehouse)) for target in moves.values()]
        _write_atomically(self._pending(batch_id), {"files": files})
        directories: set[Path] = set()
        for source, target in moves.items():
            if target.parent not in directories:
                target.parent.mkdir(parents=True, exist_ok=True)
                directories.add(target.parent)
            source.replace(target)
        marker = {"batch": batch_id, "files": files, **summary}
        if state is not None:
            _write_bytes_atomically(self._state(batch_id), state)
            marker["state"] = self._state(batch_id).name
        for name, data in (states or {}).items():
            _write_bytes_atomically(self._state(batch_id, name), data)
            marker.setdefault("states", {})[name] = self._state(batch_id, name).name
        _write_atomically(self._marker(batch_id), marker)
        self._pending(batch_id).unlink()
        shutil.rmtree(staging, ignore_errors=True)
        if state is not None or states:
            self._delete_states_before(batch_id)
        return marker

    def latest_state(self, before: int, name: str | None = None) -> bytes | None:
        """The state (the unnamed one, or the one called ``name``) committed with the last
        committed batch before batch ``before``, or None when there is none (or that batch
        committed no such state)."""
        committed = [int(p.name) for p in self._listing() if p.name.isdigit()]
        earlier = [batch for batch in committed if batch < before]
        if not earlier:
            return None
        marker = self.committed(max(earlier))
        if marker is None:
            return None
        file = marker.get("state") if name is None else marker.get("states", {}).get(name)
        return None if file is None else (self.markers / str(file)).read_bytes()

    def _delete_states_before(self, batch_id: int) -> None:
        for path in self._listing():
            name = path.name
            if name.endswith(STATE_SUFFIX) and int(name.split(".", 1)[0]) < batch_id:
                path.unlink(missing_ok=True)

    def _listing(self) -> list[Path]:
        return list(self.markers.iterdir()) if self.markers.exists() else []

    def _state(self, batch_id: int, name: str | None = None) -> Path:
        named = "" if name is None else f".{name}"
        return self.markers / f"{batch_id}{named}{STATE_SUFFIX}"

    def _destination(self, batch_id: int, relative: Path) -> Path:
        # Files are named after their batch, so one batch never overwrites another's.
        return self.warehouse / relative.parent / f"batch-{batch_id:08d}-{relative.name}"

    def _marker(self, batch_id: int) -> Path:
        return self.markers / str(batch_id)

    def _pending(self, batch_id: int) -> Path:
        return self.markers / f"{batch_id}{PENDING_SUFFIX}"


def _write_atomically(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w") as out:
        json.dump(document, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)


def _write_bytes_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)
