"""Global conversion options: tfprims' own and every option of tf2jax 0.3.x.

    tfprims.update_config("strict_shape_check", False)          # from now on
    with tfprims.override_config("convert_custom_gradient", False):
      fn = tfprims.convert_functional(f, spec)                   # this conversion

Each option is read either when a function is *converted* or when the converted
function is *called* (:data:`OPTIONS` says which): an option read at conversion
is remembered by the converted function, as tf2jax does, so
``with override_config(...): fn = convert(...)`` keeps its effect on every later
call. docs/migrating-from-tf2jax.md lists every option with tf2jax's meaning
and what tfprims does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from typing import Any, Callable, Iterator, Mapping

from tfprims import errors


@dataclasses.dataclass(frozen=True)
class Option:
  """One config option: its default, when it is read, what it does."""

  default: Any
  read: str  # "call": when the converted function runs; "convert": when converting;
  # "lower": when JAX lowers a program (the first call of a jitted function);
  # "load": when an artifact is loaded (load_exported) or the CLI starts
  doc: str
  noop: str = ""  # why the option has no effect in tfprims ("" when it has one)


CACHE_ENV = "TFPRIMS_CACHE_DIR"
CACHE_OFF = ("", "0", "off", "none", "false")


def default_compilation_cache() -> str | None:
  """The ``compilation_cache`` option's default: ``$TFPRIMS_CACHE_DIR`` (None where it
  is empty or "off"), else ``$XDG_CACHE_HOME/tfprims/jax``, else
  ``~/.cache/tfprims/jax``."""
  env = os.environ.get(CACHE_ENV)
  if env is not None:
    return None if env.strip().lower() in CACHE_OFF else os.path.expanduser(env)
  base = os.environ.get("XDG_CACHE_HOME", "")
  if not os.path.isabs(base):  # the XDG spec: a relative path is ignored
    base = os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "tfprims", "jax")


OPTIONS: Mapping[str, Option] = {
  "strict_shape_check": Option(
    True,
    "call",
    (
      "Inputs must match the TF signature's shapes (None dims match anything); when "
      "off, other shapes are accepted. Params always match exactly."
    ),
  ),
  "strict_dtype_check": Option(
    True,
    "call",
    (
      "Array inputs and params must have the signature's dtype. When off, floating "
      "values for floating inputs keep their precision (bfloat16 inputs run in "
      "bfloat16, as in tf2jax) and other mismatches are cast to the signature's "
      "dtype. tf2jax's default is off."
    ),
  ),
  "named_scopes": Option(
    True, "call", ("Wrap each inlined function call in jax.named_scope(<function name>).")
  ),
  "node_scopes": Option(
    False,
    "call",
    (
      "Bind each TF node's primitive inside jax.named_scope(<node name>), so the "
      "compiled program's op_name metadata (XLA dumps, Compiled.as_text(), the JAX "
      "profiler) names the TF node: jit(f)/model/conv1/Conv2D/conv_general_dilated. "
      "Off by default: it adds 10-25% to trace + lower time (MobileNetV2, ResNet50; "
      "docs/performance.md)."
    ),
  ),
  "fast_lowerings": Option(
    True,
    "lower",
    (
      "Lower ops that declare a per-platform lowering (tfprims.register_platform_lowering) "
      "with it on that platform: on CPU, DepthwiseConv2dNative and its backprops as sums "
      "of shifted slices, 1x1 Conv2D/Conv3D as dot_general, pools as one reduce_window "
      "per pooled axis (docs/performance.md). Off: "
      "every op lowers its default impl, so a program compiles to the same HLO as the "
      "naive JAX program. Read when a program is lowered; changing it clears JAX's "
      "caches (jax.clear_caches()) so programs lowered before are lowered again."
    ),
  ),
  "tf_nan_order": Option(
    True,
    "lower",
    (
      "TopKV2 (tf.math.top_k, tf.sort, tf.argsort), NthElement and ApproxTopK order a "
      "row holding NaN as TF's CPU kernel leaves it, by running the kernel's own "
      "algorithm on such rows (docs/semantics/nn.md). It costs compile time, about "
      "0.2-2 s per op for k > 1, not run time on rows without NaN. Off: rows with NaN "
      "order every NaN above +inf (lax.top_k's order), which differs from TF's."
    ),
  ),
  "runtime_checks": Option(
    False,
    "call",
    (
      "Check under jit what TF's CPU kernels check on data (indices in range, integer "
      "division by zero, Assert conditions...): a failed check raises "
      "RuntimeCheckError through jax.debug.callback when the program runs. (Eager "
      "calls, whose values are known, always check and raise like TF.) Off by "
      "default: a jitted program then computes what docs/semantics describes."
    ),
  ),
  "x64_narrowing": Option(
    "warn",
    "convert",
    (
      "With jax_enable_x64 off, JAX computes 64-bit values in 32 bits. At conversion "
      "tfprims names the values that may change: float64/complex128 and int64 "
      "inputs, and params and constants whose known values do not survive 32 bits: "
      "'warn' (a PrecisionWarning), 'error' (a PrecisionError) or 'ignore'."
    ),
  ),
  "force_const_float32_to_bfloat16": Option(
    False,
    "convert",
    (
      "Const nodes of dtype float32 become bfloat16 (to run a function in bfloat16 "
      "without constants promoting it back to float32)."
    ),
  ),
  "force_const_float64_to_bfloat16": Option(
    False, "convert", ("Const nodes of dtype float64 become bfloat16.")
  ),
  "convert_custom_gradient": Option(
    True,
    "convert",
    (
      "tf.custom_gradient functions keep their gradient function (tf.CustomGradient); "
      "when off the forward graph is differentiated instead."
    ),
  ),
  "infer_relu_from_jax2tf": Option(
    True,
    "convert",
    (
      "In graphs from jax2tf's old graph serialization, max(x, 0) under a '_relu_' "
      "name scope becomes tf.Relu, whose derivative at 0 is JAX's (0), not "
      "tf.Maximum's (1)."
    ),
  ),
  "infer_cumulative_reduction_from_jax2tf": Option(
    True,
    "convert",
    (
      "tf2jax: rewrite jax2tf's XlaReduceWindow encodings of cumsum/cumprod/cummax/"
      "cummin as cumulative reductions."
    ),
    noop="tfprims does not convert XlaReduceWindow, the only op the pattern occurs "
    "in (a graph using it is refused with UnsupportedOpError either way)",
  ),
  "raise_on_prevent_gradient": Option(
    True,
    "convert",
    (
      "Differentiating through a PreventGradient op raises PreventGradientError (a "
      "LookupError, as in TF); when off the op is the identity, derivatives "
      "included, and a warning names the node."
    ),
  ),
  "resize_bilinear_precision": Option(
    "highest",
    "convert",
    ("tf2jax: the dot-product precision of its ResizeBilinear."),
    noop="tfprims' ResizeBilinear gathers and interpolates elementwise in float32 "
    "(TF's own arithmetic); it has no dot product whose precision could vary",
  ),
  "enable_checkify_for_asserts": Option(
    False,
    "call",
    (
      "Assert and CheckNumerics ops become jax.experimental.checkify checks (wrap "
      "the converted function in checkify.checkify to see them). Without it they "
      "check nothing, unless runtime_checks is on."
    ),
  ),
  "xlacallmodule_strict_checks": Option(
    True,
    "call",
    (
      "An XlaCallModule op (jax2tf native serialization) must have been serialized "
      "for the JAX backend it runs on; when off, a module serialized for one other "
      "platform is run anyway (with a warning), as tf2jax does. A module serialized "
      "for several platforms none of which is this one is still refused: there is "
      "no platform index to give it."
    ),
  ),
  "xla_call_module": Option(
    "read",
    "call",
    (
      "'read': an XlaCallModule op's StableHLO (jax2tf) runs as the JAX operations it "
      "was lowered from, so jax.grad/jvp/vmap work natively and jaxprs show them; a "
      "module with an operation tfprims cannot read is called as one operation (with "
      "a warning). 'opaque': always call it as one operation."
    ),
  ),
  "disable_assert_in_tensor_list_get_item": Option(
    False,
    "call",
    ("tf2jax: skip its assert that TensorListGetItem's element dtype matches the list's."),
    noop="tfprims makes no such assert: a TensorList's items keep the dtype they were written with",
  ),
  "skip_variables_evaluation_inside_tf_tracing": Option(
    False,
    "convert",
    (
      "Converting inside a TF trace (tf.function), where variables have no value: "
      "return no params (the converted function still expects them) instead of "
      "raising."
    ),
  ),
  "loop_checkpoints": Option(
    128,
    "call",
    (
      "Carries a while loop whose trip count is known only at run time keeps for its "
      "reverse-mode derivative (jax.grad through tf.While.unbounded): snapshots every "
      "ceil(n / loop_checkpoints) steps, the carries between recomputed from them "
      "(docs/control_flow.md). More: more memory, less recomputation."
    ),
  ),
  "dynamic_shape_bounds": Option(
    {},
    "call",
    (
      "Output bounds for ops whose output size depends on data ({node name or op "
      "type: n}). When such a node's input is traced (jit, vmap, grad) and a bound "
      "applies, the op binds its padded primitive (tf.Where[size=n]...): the output "
      "has n rows, TF's first results padded or cut to n (docs/semantics/array.md). "
      "Values known at trace time (numpy inputs of an eager call) are still computed "
      "exactly."
    ),
  ),
  "compilation_cache": Option(
    default_compilation_cache(),
    "load",
    (
      "The directory of JAX's persistent compilation cache, which tfprims turns on "
      "when it loads an artifact (tfprims.load_exported) and in the tfprims command "
      "line: a program compiled once is read from disk by later processes instead of "
      "compiled again (docs/performance.md, 'Cold start'). Default: $TFPRIMS_CACHE_DIR, "
      "else $XDG_CACHE_HOME/tfprims/jax, else ~/.cache/tfprims/jax (read when tfprims "
      "is imported); None, or TFPRIMS_CACHE_DIR=off, turns it off. Converting "
      "(tfprims.convert) does not turn it on: call tfprims.enable_compilation_cache(). "
      "A JAX cache directory set by the user (jax.config's jax_compilation_cache_dir, "
      "JAX_COMPILATION_CACHE_DIR) is left as it is, and used instead. Turning it on "
      "also lowers jax_persistent_cache_min_compile_time_secs from JAX's default 1 s "
      "to 0, so small programs are cached too. Changed once the cache is on, the "
      "cache moves (or stops) at once. `tfprims cache info` / `tfprims cache clear`."
    ),
  ),
}

_config = {name: option.default for name, option in OPTIONS.items()}
_noted: set = set()
_watchers: dict = {}  # option name -> called with its new value when it changes


def on_change(name: str, watcher: Callable[[Any], None]) -> None:
  """Calls ``watcher(value)`` whenever option ``name`` changes (tfprims.cache moves
  JAX's cache when ``compilation_cache`` does)."""
  _option(name)
  _watchers[name] = watcher


def _option(name: str) -> Option:
  if name not in OPTIONS:
    raise errors.UnknownConfigError(
      f"unknown tfprims config option {name!r}: not found in config; known: {sorted(OPTIONS)}"
    )
  return OPTIONS[name]


def _note_noop(name: str, stacklevel: int) -> None:
  option = OPTIONS[name]
  if option.noop and name not in _noted:
    _noted.add(name)
    warnings.warn(
      f"tfprims config option {name!r} is accepted for tf2jax compatibility "
      f"and has no effect: {option.noop}",
      stacklevel=stacklevel,
    )


def get_config(name: str) -> Any:
  """The current value of a config option."""
  _option(name)
  return _config[name]


def update_config(name: str, value: Any) -> None:
  """Sets a config option globally."""
  _option(name)
  _note_noop(name, stacklevel=3)
  _set(name, value)


@contextlib.contextmanager
def override_config(name: str, value: Any) -> Iterator[None]:
  """Temporarily sets a config option:
  ``with tfprims.override_config("strict_shape_check", False):``."""
  previous = get_config(name)
  _note_noop(name, stacklevel=4)
  _set(name, value)
  try:
    yield
  finally:
    _set(name, previous)


def _set(name: str, value: Any) -> None:
  changed = _config[name] != value
  _config[name] = value
  if changed and name in _watchers:
    _watchers[name](value)
  if changed and OPTIONS[name].read == "lower":
    # JAX caches lowered and compiled programs by jaxpr, not by our config.
    import jax

    jax.clear_caches()


def read_at_conversion() -> dict[str, Any]:
  """The current values of the options read when converting (a converted function
  keeps them for every call)."""
  return {name: _config[name] for name, option in OPTIONS.items() if option.read == "convert"}


def resolve(name: str, remembered: Mapping[str, Any] | None) -> Any:
  """An option's value for a converted function: the value it was converted with
  for an option read at conversion, else the current one."""
  if remembered is not None and name in remembered:
    return remembered[name]
  return get_config(name)
