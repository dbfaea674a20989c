"""nn ops (being written)."""
