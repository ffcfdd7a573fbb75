"""weir.ops."""
