"""weir.protocol."""
