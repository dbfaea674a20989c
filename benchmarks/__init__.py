"""Benchmarks of tfprims against TensorFlow and tf2jax (not part of the test run)."""
