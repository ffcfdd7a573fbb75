"""weir.consumer."""
