"""Every registered op declares a property-test spec, and docs/ops.md is current."""

import importlib.util
import pathlib

import pytest

import tfprims.ops  # noqa: F401
from tfprims.core import get_op, registered_ops
from tfprims.testing import CHECKS, Spec, load_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _gen_module():
  spec = importlib.util.spec_from_file_location("gen_ops_doc", ROOT / "scripts" / "gen_ops_doc.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_every_op_has_a_spec():
  missing = [op for op in registered_ops() if get_op(op).spec is None]
  assert not missing, (
    f"ops without a property-test spec: {missing}. Add spec=lambda st: st.Spec(...) to "
    "their register_op; an op that cannot be tested against TF declares a spec with every "
    "check in skip={...} and the reason."
  )


@pytest.mark.parametrize("op_type", registered_ops())
def test_spec_is_well_formed(op_type):
  spec = load_spec(get_op(op_type))
  assert isinstance(spec, Spec)
  assert set(spec.skip) <= set(CHECKS)
  assert all(isinstance(r, str) and r.strip() for r in spec.skip.values())
  if not spec.skips_everything:
    assert spec.calls is not None, "a spec running checks needs a calls strategy"


def test_ops_doc_is_current():
  gen = _gen_module()
  path = ROOT / "docs" / "ops.md"
  assert path.exists(), "docs/ops.md is missing: run scripts/gen_ops_doc.py"
  current = gen.strip_error_columns(path.read_text())
  expected = gen.strip_error_columns(gen.render())
  assert current == expected, "docs/ops.md is stale: run `python scripts/gen_ops_doc.py`"


def test_fidelity_doc_is_current():
  spec = importlib.util.spec_from_file_location(
    "gen_fidelity_doc", ROOT / "scripts" / "gen_fidelity_doc.py"
  )
  gen = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gen)
  path = ROOT / "docs" / "fidelity.md"
  current = path.read_text()
  assert current == gen.render(current), (
    "docs/fidelity.md is stale: run `python scripts/gen_fidelity_doc.py` (after a property "
    "run with TFPRIMS_DRAWN_VALUES=property_tests/drawn_values.json when draws changed)"
  )
