"""weir.cluster."""
