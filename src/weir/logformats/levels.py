"""Normalisation of log levels to one upper-case vocabulary across all source formats.

Canonical names, lowest first: TRACE, DEBUG, INFO, NOTICE, WARN, ERROR, CRITICAL, FATAL.
Android's single letters (V/D/I/W/E/F/A), syslog and Apache names (emerg, alert, crit, err,
warning, notice, trace1..8) and java.util.logging names (FINEST..SEVERE) map onto them. An
unrecognised level is kept, upper-cased, rather than guessed at.
"""

from __future__ import annotations

CANONICAL_LEVELS = ("TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "ERROR", "CRITICAL", "FATAL")

_ALIASES = {
    "TRACE": ("V", "VERBOSE", "FINEST", "FINER", *(f"TRACE{n}" for n in range(1, 9))),
    "DEBUG": ("D", "FINE", "CONFIG"),
    "INFO": ("I", "INFORMATION", "INFORMATIONAL"),
    "NOTICE": ("N",),
    "WARN": ("W", "WARNING"),
    "ERROR": ("E", "ERR", "SEVERE"),
    "CRITICAL": ("C", "CRIT"),
    # Android's "A" is Log.wtf/assert: the process is about to die.
    "FATAL": ("F", "A", "ALERT", "EMERG", "EMERGENCY", "PANIC"),
}

_CANONICAL_BY_NAME = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_CANONICAL_BY_NAME.update({name: name for name in CANONICAL_LEVELS})


def normalise_level(raw: str) -> str:
    """The canonical name for ``raw`` (any case), or ``raw`` upper-cased if it is not known."""
    upper = raw.strip().upper()
    return _CANONICAL_BY_NAME.get(upper, upper)
