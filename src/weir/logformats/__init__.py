"""weir.logformats: log formats declared as data, and raw lines parsed with them.

A format is a TOML file (``weir.logformats.declaration``): a Grok-style pattern with named
fields (``weir.logformats.grok``), how to read its timestamp (``weir.logformats.timestamps``),
which fields fill which warehouse columns, and sample lines that loading checks. The shipped
formats live in ``weir/logformats/formats/``; users add their own files to a
``FormatRegistry``. Lines are parsed one at a time (``LineParser``) or a whole Arrow batch at a
time (``weir.logformats.batch``, derived from the same patterns), and their messages mined into
templates (``weir.logformats.mining``). Every line yields a ParsedLine or a Quarantined with its
reason: nothing is dropped.

It must never do IO other than reading format files, read the clock except for
``parse_line``'s documented default year, or import Spark, the Kafka client, or the broker,
storage, cluster and pipeline packages.
"""

from weir.logformats.declaration import FormatFileError, LogFormat, load_file, load_text
from weir.logformats.levels import CANONICAL_LEVELS, normalise_level
from weir.logformats.model import ParsedLine, Quarantined, QuarantineReason
from weir.logformats.parser import LineParser, parse_line
from weir.logformats.registry import FormatRegistry
from weir.logformats.template import MASK, template_of

__all__ = [
    "CANONICAL_LEVELS",
    "MASK",
    "FormatFileError",
    "FormatRegistry",
    "LineParser",
    "LogFormat",
    "ParsedLine",
    "QuarantineReason",
    "Quarantined",
    "load_file",
    "load_text",
    "normalise_level",
    "parse_line",
    "template_of",
]
