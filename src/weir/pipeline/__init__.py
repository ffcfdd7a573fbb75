"""weir.pipeline."""
