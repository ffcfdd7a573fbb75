"""A class data sharing archive for the Spark driver's JVM: its classes loaded in one mapping.

A Spark driver loads some seventeen thousand classes from its jars, each read, verified and
linked on first use: over two seconds of a session's start, and one to two of a streaming
query's until its first task. Java's dynamic class data sharing (JDK 13 and later) saves the
classes a JVM loaded, already parsed and verified, to an archive file when it exits
(``-XX:ArchiveClassesAtExit``); a later JVM with the same classpath maps that file
(``-XX:SharedArchiveFile``) instead.

``archive_options`` gives a session's driver one of the two. The archive lives in the user's
cache directory, one per PySpark version, Spark home (and its jars) and Java installation. The
first session without one writes it as ``NAME.TOKEN.partial`` when its JVM exits, which is
after the Python driver process ends (PySpark's JVM exits when its parent's pipe closes), and
starts five to six seconds slower for it. A later session adopts a partial archive once no
process is writing it and a JVM accepts it, and deletes it if one does not (a JVM killed while
writing leaves a truncated file, which would crash a JVM that maps it); partial archives left
once there is an archive (two first sessions at once) are deleted. While a JVM that will write
the archive runs, other sessions run without one. The archive holds the classes the first
session's JVM loaded: a session doing more loads the rest from the jars.

Only on Linux, where a process's command line under ``/proc`` says whether it still writes the
file. The JVM's own messages about the archive are turned off: at exit it warns about every
class it leaves out (signed jars, old class file versions).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

MAP = "-XX:SharedArchiveFile="  # the option that maps an archive
WRITE = "-XX:ArchiveClassesAtExit="  # the option that writes one at exit
QUIET = "-Xlog:cds=off,cds+dynamic=off"
ARCHIVE_SUFFIX = ".jsa"
PARTIAL_SUFFIX = ".partial"
CHECK_TIMEOUT_S = 60


def archive_options(spark_home: Path, cache: Path, *, spark_version: str) -> str | None:
    """The driver's JVM options for its class archive, or None (not on Linux, no ``java``
    found, the cache not writable, or another JVM is writing the archive)."""
    java = java_binary()
    if not sys.platform.startswith("linux") or java is None:
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        final = cache / f"{archive_name(spark_home, java, spark_version)}{ARCHIVE_SUFFIX}"
        if not final.exists():
            adopt_finished(final, java)
        if final.exists():
            for partial in partials_of(final):
                if not being_written(partial):
                    partial.unlink(missing_ok=True)
            return f"{MAP}{final} {QUIET}"
        if any_writer(final):
            return None  # a running JVM will write one when it exits
        partial = final.with_name(f"{final.stem}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}")
        return f"{WRITE}{partial} {QUIET}"
    except OSError:
        return None


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        return None
    return Path(found).resolve()


def archive_name(spark_home: Path, java: Path, spark_version: str) -> str:
    """Names the archive after what it is only valid with: the Spark version, the Spark home
    and its jars (the classpath; replaced jars change their directory's time of change), and
    the Java installation (its path, size and time of change)."""
    stat = java.stat()
    jars = (spark_home / "jars").resolve()
    jars_changed = jars.stat().st_mtime_ns if jars.exists() else 0
    identity = (f"{spark_home.resolve()}|{jars}|{jars_changed}|{java}|{stat.st_size}|"
                f"{stat.st_mtime_ns}")  # fmt: skip
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"spark-classes-{spark_version}-{digest}"


def partials_of(final: Path) -> list[Path]:
    return sorted(final.parent.glob(f"{final.stem}.*{PARTIAL_SUFFIX}"))


def adopt_finished(final: Path, java: Path) -> None:
    """Renames the first partial archive that no process writes and ``java`` accepts to
    ``final``; deletes those it rejects."""
    for partial in partials_of(final):
        if being_written(partial):
            continue
        if accepted(partial, java):
            partial.rename(final)
            return
        partial.unlink(missing_ok=True)


def any_writer(final: Path) -> bool:
    """Whether a running process names one of ``final``'s partial archives, written or still to
    be written, on its command line."""
    return _on_a_command_line(f"{final.parent / final.stem}.")


def being_written(path: Path) -> bool:
    """Whether a running process was started with ``path`` on its command line."""
    return _on_a_command_line(str(path))


def _on_a_command_line(text: str) -> bool:
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def accepted(archive: Path, java: Path) -> bool:
    """Whether a JVM starts and exits cleanly with ``archive`` mapped."""
    try:
        checked = subprocess.run(
            # A crash is the answer here; it needs no report (hs_err file).
            [
                str(java),
                f"{MAP}{archive}",
                "-XX:+SuppressFatalErrorMessage",
                *QUIET.split(),
                "-version",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return checked.returncode == 0
