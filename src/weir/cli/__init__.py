"""weir.cli."""
