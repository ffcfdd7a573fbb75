"""Weir: a Kafka-compatible log streaming platform."""

__version__ = "0.1.0"
