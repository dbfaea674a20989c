"""The package layout holds: modules small enough to read in one sitting, imports
that go one way, op families that use only each other's public names, and no tables
of op names outside the op declarations."""

import ast
import io
import pathlib
import re
import tokenize

import pytest

import tfprims
from tfprims import core

PACKAGE = pathlib.Path(tfprims.__file__).resolve().parent
# Measured in lines of code as written, not as laid out: statements, comment lines and
# the lines of multi-line strings (docstrings). The formatter's one-argument-per-line
# calls add physical lines, not code. 550 is where the largest modules stood when the
# limit was 700 physical lines in the layout before ruff format.
MAX_CODE_LINES = 550


def _modules():
  for path in sorted(PACKAGE.rglob("*.py")):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    yield ".".join(parts), path


MODULES = dict(_modules())


def _code_lines(source: str) -> int:
  """Statements, comment lines and multi-line strings' lines: a count the layout of
  a statement over physical lines does not change."""
  statements, comments, strings = 0, set(), 0
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.NEWLINE:
      statements += 1
    elif token.type == tokenize.COMMENT:
      comments.add(token.start[0])
    elif token.type == tokenize.STRING:
      strings += token.end[0] - token.start[0]
  return statements + len(comments) + strings


def test_code_lines_ignore_layout():
  compact = "x = f(1, 2,\n      3)  # one\n"
  spread = "x = f(\n  1,\n  2,\n  3,\n)  # one\n"
  assert _code_lines(compact) == _code_lines(spread) == 2
  assert _code_lines('"""a\nb\n"""\ny = 1\n') == 4  # a docstring counts its lines


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_small_enough_to_read(name):
  lines = _code_lines(MODULES[name].read_text())
  assert lines <= MAX_CODE_LINES, (
    f"{name} has {lines} lines of code (limit {MAX_CODE_LINES}): split it"
  )


def _imported(name, path) -> set:
  """tfprims modules ``name`` imports anywhere (module level or inside functions)."""
  is_package = path.name == "__init__.py"
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative import
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    else:
      continue
    found.update(t for t in targets if t in MODULES and t != name)
  return found


def test_imports_have_no_cycles():
  graph = {name: _imported(name, path) for name, path in MODULES.items()}
  # A package's __init__ importing its own submodules is how packages assemble
  # themselves; a cycle is a module reaching itself through the others.
  for name in graph:
    graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
  state, stack = {}, []

  def visit(m):
    state[m] = 1
    stack.append(m)
    for n in sorted(graph[m]):
      if state.get(n) == 1:
        cycle = stack[stack.index(n) :] + [n]
        pytest.fail("import cycle: " + " -> ".join(cycle))
      if n not in state:
        visit(n)
    stack.pop()
    state[m] = 2

  for m in sorted(graph):
    if m not in state:
      visit(m)


def _op_family(module: str):
  """The op family of a module under tfprims.ops: the first name below it (a top-level
  module such as tfprims.ops.state_misc is its own family); None for any other module."""
  parts = module.split(".")
  return parts[2] if parts[:2] == ["tfprims", "ops"] and len(parts) > 2 else None


def _private_part(path: str):
  """``path`` (dotted) up to its first private name below tfprims.ops, or None."""
  parts = path.split(".")
  if parts[:2] != ["tfprims", "ops"]:
    return None
  for i, part in enumerate(parts[2:], start=2):
    if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
      return ".".join(parts[: i + 1])
  return None


def _private_ops_names(name, path) -> set:
  """(line, dotted name) of each private name below tfprims.ops (a name or module with a
  leading underscore) that ``name`` imports or reaches as an attribute of an imported
  module."""
  is_package = path.name == "__init__.py"
  tree = ast.parse(path.read_text())
  bound, found = {}, set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
      for a in node.names:  # import a.b binds a; import a.b as c binds c to a.b
        top = a.name.split(".")[0]
        bound[a.asname or top] = a.name if a.asname else top
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative import
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      targets = [f"{base}.{a.name}" for a in node.names]
      for a, t in zip(node.names, targets):
        bound[a.asname or a.name] = t
    else:
      continue
    found.update((node.lineno, p) for p in map(_private_part, targets) if p)
  for node in ast.walk(tree):  # module.attr chains: basic._wrap, tfprims.ops.nn._common
    chain = []
    while isinstance(node, ast.Attribute):
      chain.append(node.attr)
      node = node.value
    if chain and isinstance(node, ast.Name) and node.id in bound:
      p = _private_part(".".join([bound[node.id]] + chain[::-1]))
      if p:
        found.add((node.lineno, p))
  return found


def test_families_use_only_each_others_public_names():
  # An op family reaches another family's code only through its public names (or
  # tfprims.ops.shared / shared_specs); code outside tfprims.ops reaches none of
  # tfprims.ops' private names.
  offenders = []
  for name, path in MODULES.items():
    family = _op_family(name)
    for line, private in sorted(_private_ops_names(name, path)):
      if family is None or _op_family(private) != family:
        offenders.append(f"{name}:{line}: {private}")
  assert not offenders, (
    "private names used across op families (make them public API "
    "or move them to tfprims.ops.shared):\n" + "\n".join(offenders)
  )


def test_tensorflow_comes_from_its_one_accessor():
  # `import tensorflow` in one place: errors.import_tensorflow() says which extra to
  # install when TF is missing (TF's own submodules are imported after it has run).
  offenders = []
  for name, path in MODULES.items():
    if name == "tfprims.errors":
      continue
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import) and any(a.name == "tensorflow" for a in node.names):
        offenders.append(f"{name}:{node.lineno}")
  assert not offenders, (
    "`import tensorflow` outside tfprims.errors (use "
    "errors.import_tensorflow()):\n" + "\n".join(offenders)
  )


def test_no_op_name_tables_outside_the_op_declarations():
  # What an op is (writes state, uses rng, shape only...) is declared with the op;
  # code outside tfprims/ops asks the registry instead of listing op names.
  declared = core.declared_op_types()
  offenders = []
  for name, path in MODULES.items():
    if name.startswith(("tfprims.ops", "tfprims.testing")):
      continue
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.Set, ast.Tuple, ast.List, ast.Dict)):
        items = node.keys if isinstance(node, ast.Dict) else node.elts
        ops = [
          i.value
          for i in items
          if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in declared
        ]
        if len(ops) >= 2:
          offenders.append(f"{name}:{node.lineno}: {ops}")
  assert not offenders, "op-name tables outside op declarations:\n" + "\n".join(offenders)


def _architecture_layout_paths() -> list:
  """The paths named in docs/architecture.md's layout table (tfprims/... or, next to
  one in the same row, relative to tfprims/)."""
  doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
  table = doc.split("## The layout", 1)[1].split("\n## ", 1)[0]
  paths = []
  for row in table.splitlines():
    if not row.startswith("| `"):
      continue
    where = row.split("|")[1]
    for token in re.findall(r"`([^`]+)`", where):
      token = token.split(" ")[0]
      if not token.endswith((".py", "/")):
        continue  # not a path: `.pb`, `tf.compat.v1.Session`
      paths.append(token if token.startswith("tfprims/") else f"tfprims/{token}")
  return paths


def test_architecture_doc_names_every_module_and_package():
  paths = _architecture_layout_paths()
  assert len(paths) > 20
  missing = [p for p in paths if "<" not in p and not (PACKAGE.parent / p).exists()]
  assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
  named = {p.split("/<")[0].rstrip("/") for p in paths}
  top = [
    f"tfprims/{p.name}"
    for p in sorted(PACKAGE.iterdir())
    if (p.suffix == ".py" and p.name != "__init__.py")
    or (p.is_dir() and (p / "__init__.py").exists())
  ]
  unnamed = [p for p in top if p not in named]
  assert not unnamed, f"docs/architecture.md's layout table does not name {unnamed}"


def _declarations():
  """Every ``register_op("Name", ...)`` call in the package: (module, name, call)."""
  for name, path in MODULES.items():
    for node in ast.walk(ast.parse(path.read_text())):
      if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register_op"
      ):
        yield name, node.args[0].value, node


def test_declarations_do_not_repeat_their_op_name():
  # A factory that needs the op being declared gets it from rules.per_op (register_op
  # calls it with the new TFOp), so no keyword or later argument spells the name again.
  declarations = list(_declarations())
  assert len(declarations) > 400, "the scan found no declarations: it checks nothing"
  repeats = []
  for module, op_type, call in declarations:
    values = [kw.value for kw in call.keywords] + list(call.args[1:])
    where = [kw.arg or "**" for kw in call.keywords] + ["<positional>"] * (len(call.args) - 1)
    for value, arg in zip(values, where):
      if any(isinstance(n, ast.Constant) and n.value == op_type for n in ast.walk(value)):
        repeats.append(f"{module}:{call.lineno} {op_type} ({arg})")
  assert not repeats, "register_op calls repeat their op name (use rules.per_op):\n" + "\n".join(
    repeats
  )
