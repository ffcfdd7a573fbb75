"""The agent's check, at start-up, that each tailed input's record key names a log format.

An `[[inputs]]` table's `key` is the record key of every line it ships, and the log ETL reads a
record key as the name of the line's format (see `weir.logformats`). A key that names no
registered format (the shipped ones, or those of the agent's `formats` setting: format files or
directories of them, as `weir pipeline logs --formats` takes) would send every line of that
input to quarantine, so the agent refuses to start instead. Inputs without a key are not
checked: the ETL detects their format line by line.

It reads format files only; it never touches the queues or the network.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from weir.agent.tail import TailInput
from weir.logformats import FormatFileError, FormatRegistry


class UnknownFormatKey(ValueError):
    """An input's key names no registered format, or a format file of the agent is invalid."""


def check_input_keys(inputs: Iterable[TailInput], formats: Iterable[Path] = ()) -> None:
    """Raises UnknownFormatKey if an input's key names no format of the shipped ones plus
    ``formats``; the registry is loaded only when an input has a key."""
    keyed = [source for source in inputs if source.key is not None]
    if not keyed:
        return
    try:
        registry = FormatRegistry.builtin().with_files(formats)
    except FormatFileError as error:
        raise UnknownFormatKey(str(error)) from None
    for source in keyed:
        key = (source.key or b"").decode(errors="replace")
        if registry.canonical(key) is None:
            raise UnknownFormatKey(
                f"[[inputs]] of topic {source.topic!r}: key {key!r} names no registered log "
                f"format (known: {', '.join(registry.names)}); declare it in a format file "
                "and list that file or its directory in the agent's formats setting "
                "(or --formats)"
            )
