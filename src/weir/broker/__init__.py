"""weir.broker."""
