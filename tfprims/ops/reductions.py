"""reductions ops (being written)."""
