"""weir.pipeline.parsing: raw log lines to warehouse rows.

Owns one parser per source format (Apache error log, HDFS, OpenSSH, Linux syslog, Zookeeper,
Hadoop, Spark, Android logcat, JSON lines), format detection, level normalisation and event
templates, in pure Python (LineParser), and the same parsing over whole Arrow batches
(``weir.pipeline.parsing.batch``, pyarrow compute with LineParser for what it cannot do).
Every line yields a ParsedLine or a Quarantined with its reason: nothing is dropped.
It must never do IO, read the clock except for ``parse_line``'s documented default year, or
import Spark, storage, broker or cluster code.
"""

from weir.pipeline.parsing.levels import CANONICAL_LEVELS, normalise_level
from weir.pipeline.parsing.model import ParsedLine, Quarantined, QuarantineReason
from weir.pipeline.parsing.parser import (
    DETECTION_ORDER,
    SOURCES,
    LineParser,
    canonical_source,
    detect,
    parse_line,
)
from weir.pipeline.parsing.template import MASK, template_of

__all__ = [
    "CANONICAL_LEVELS",
    "DETECTION_ORDER",
    "MASK",
    "SOURCES",
    "LineParser",
    "ParsedLine",
    "QuarantineReason",
    "Quarantined",
    "canonical_source",
    "detect",
    "normalise_level",
    "parse_line",
    "template_of",
]
