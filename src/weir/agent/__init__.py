"""weir.agent."""
