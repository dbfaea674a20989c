"""examples/finetune.py: plain-JAX training of a converted Keras model lowers the loss,
and after writing the params back TF computes what the converted function does."""

import importlib.util
import pathlib

import numpy as np

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "finetune.py"


def _load():
  spec = importlib.util.spec_from_file_location("finetune_example", EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_finetune_lowers_loss_and_tf_matches_after_write_back():
  finetune = _load()
  result = finetune.main(steps=30, verbose=False)
  losses = result["losses"]
  assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:3]), losses
  # TF (the Keras model, inference mode) now computes the converted function's outputs.
  assert result["max_diff"] < 1e-5
  assert result["accuracy"] > 0.7
  model, params = result["model"], result["params"]
  by_path = {v.path: v for v in model.variables}
  assert set(params) <= set(by_path)
  for name, value in params.items():
    np.testing.assert_array_equal(np.asarray(value), by_path[name].numpy(), err_msg=name)
  assert any("moving_mean" in k for k in params)   # state was trained along
