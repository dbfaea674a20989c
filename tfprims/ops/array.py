"""array ops (being written)."""
