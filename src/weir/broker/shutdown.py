"""The last resort of a broker's shutdown: a deadline that holds whatever the shutdown waits on.

A broker asked to stop (SIGTERM, SIGINT) moves its leaderships away and closes in order; every
step has its own bound, but a bug in one (a task that swallowed its cancellation, a peer that
never answers) must not keep the process alive for good. `ShutdownDeadline` runs on a thread of
its own, so it fires even when the event loop is stuck: it logs what the broker was still
waiting for (every pending asyncio task and every thread's stack) and ends the process with
exit status 1.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

#: from the stop signal to the end of the process, at most (controlled shutdown included)
SHUTDOWN_DEADLINE_S = 25.0
#: the part of it the controlled shutdown may take, so that closing has the rest
CONTROLLED_SHUTDOWN_BUDGET_S = 15.0
FORCED_EXIT_STATUS = 1


class ShutdownDeadline:
    """Started once the stop is asked for; `finish()` once the broker has closed.

    Thread-safety (docs/threads.md): start and finish from the event loop's thread; the deadline
    thread only reads the loop's task list to describe it, then exits the process."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float = SHUTDOWN_DEADLINE_S):
        self.loop = loop
        self.seconds = seconds
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="weir-shutdown-deadline",
                                        daemon=True)  # fmt: skip

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._finished.set()

    def _watch(self) -> None:
        if self._finished.wait(self.seconds):
            return
        log.error("shutdown did not finish within %gs; exiting. Still waiting on:\n%s",
                  self.seconds, describe_pending(self.loop))  # fmt: skip
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        logging.shutdown()
        os._exit(FORCED_EXIT_STATUS)


def describe_pending(loop: asyncio.AbstractEventLoop) -> str:
    """One line per pending task of `loop`: its name and where it waits."""
    try:
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    except RuntimeError:  # the set changed while it was read from this thread: try once more
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    lines = []
    for task in tasks:
        frames = task.get_stack(limit=1)
        where = (f"{frames[0].f_code.co_filename}:{frames[0].f_lineno}" if frames
                 else "not started")  # fmt: skip
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", repr(coro))
        lines.append(f"  {task.get_name()} {name} at {where}")
    return "\n".join(lines) or "  no asyncio task (a thread or the loop itself is stuck)"
