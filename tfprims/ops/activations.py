"""activations ops (being written)."""
