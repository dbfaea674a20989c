"""TF1 (v1) control flow: Switch/Merge conds and Enter/Merge/Switch/LoopCond/
NextIteration/Exit while frames, rebuilt as the If and While nodes TF2 uses.

:func:`functionalize` rewrites a graph before it runs (docs/control_flow.md):

* **while frames** (Enter nodes sharing ``frame_name``): each loop variable is an
  Enter -> Merge <- NextIteration, Merge -> Switch(LoopCond) -> Exit; constant
  Enters are loop invariants. The nodes computing the LoopCond's input become the
  cond function, the nodes computing the NextIteration inputs the body function
  (nested frames inside it are rebuilt recursively), and the frame becomes one
  ``While`` node whose outputs replace the Exits.
* **conds**: every value carries the Switch branches it was computed under (the
  predicate, seen through Identity, and the output port). A Merge joining values
  of the two branches of one predicate closes a cond; Merges of one predicate and
  enclosing branches become one ``If`` node whose branch functions hold the nodes
  computed under each branch (a branch value read directly, without a Switch, is
  fine: dead-pruned branches). Nested conds are rebuilt inside the branches.

The rewritten graph has only If/While nodes, run by branches.py/loops.py: the
same lax.cond / scan / while_loop choice, state threading, grad and vmap.
The v1 ops themselves are registered so that op reports list them as converted;
running one outside a rebuilt frame or cond is an error naming the node.
"""

from __future__ import annotations

from tfprims import core, errors, graph as graph_lib
from tfprims.core import structural

FAMILY = "control_flow"

_SWITCH = ("Switch", "RefSwitch")
_MERGE = ("Merge", "RefMerge")
_ENTER = ("Enter", "RefEnter")
_EXIT = ("Exit", "RefExit")
_NEXT = ("NextIteration", "RefNextIteration")
_LOOP_COND = ("LoopCond",)
V1_OPS = frozenset(_SWITCH + _MERGE + _ENTER + _EXIT + _NEXT + _LOOP_COND)


@structural(
  *sorted(V1_OPS),
  family=FAMILY,
  doc="TF1 control flow: rebuilt as If/While before the graph runs (tfprims.ops.control_flow.v1).",
)
def _v1_node(ctx, node, inputs):
  raise errors.ControlFlowError(
    f"{node.op} node '{node.name}' is TF1 control flow outside a graph tfprims rebuilt "
    "(only GraphDefs and TF1 graphs converted as a whole are): its frame or cond was "
    "not reconstructed"
  )


@structural(
  "ControlTrigger",
  family=FAMILY,
  doc="Nothing (a control-dependency anchor of TF1 loops and their gradients).",
)
def _control_trigger(ctx, node, inputs):
  return []


def has_v1_control_flow(graph: graph_lib.Graph) -> bool:
  return any(n.op in V1_OPS for n in graph.nodes)


def functionalize(graph: graph_lib.Graph, library: graph_lib.Library) -> graph_lib.Graph:
  """``graph`` with its TF1 conds and while frames turned into If/While nodes (whose
  functions are added to ``library``); the graph itself when it has none. Only the
  nodes the outputs need are kept (the graph's inputs too)."""
  if not has_v1_control_flow(graph):
    return graph
  needed = graph.needed
  nodes = [n for n in graph.nodes if n.name in needed or n.name in graph.inputs]
  attr_cls = type(next(iter(next(n for n in nodes if n.op in V1_OPS).attr_protos.values())))
  builder = _Builder(library, attr_cls)
  return builder.scope(
    graph.name,
    nodes,
    list(graph.inputs),
    list(graph.outputs),
    list(graph.control_outputs),
    output_names=list(graph.output_names),
  )


def _fail(message: str):
  raise errors.ControlFlowError(f"TF1 control flow: {message}")


class _Builder:
  """Rebuilds one graph's v1 control flow, adding functions to the library."""

  def __init__(self, library, attr_cls):
    self.library, self.attr_cls = library, attr_cls

  # --- attrs -------------------------------------------------------------------------------

  def func_attr(self, name):
    a = self.attr_cls()
    a.func.name = name
    return a

  def types_attr(self, nodes):
    a = self.attr_cls()
    a.list.type.extend(n.attr_protos["T"].type for n in nodes if "T" in n.attr_protos)
    return a

  def add_function(self, name, graph):
    while name in self.library:
      name += "_"
    self.library.add_graph(name, graph)
    return name

  # --- one scope: a graph or function body ---------------------------------------------------

  def scope(self, name, nodes, inputs, outputs, control_outputs, output_names=()):
    nodes = self.loops(name, nodes, inputs)
    nodes = self.conds(name, nodes, inputs, outputs, control_outputs)
    g = graph_lib.Graph(
      name=name,
      nodes=graph_lib.toposort(nodes, name),
      inputs=inputs,
      outputs=outputs,
      output_names=list(output_names),
      control_outputs=control_outputs,
    )
    return g

  def function(self, name, nodes, inputs, outputs, control_outputs=()):
    """A function graph of the nodes ``outputs`` need, its own v1 control flow rebuilt."""
    by_name = {n.name: n for n in nodes}
    keep, stack = set(), [r[0] for r in outputs] + list(control_outputs)
    while stack:
      n = stack.pop()
      if n in keep or n not in by_name:
        continue
      keep.add(n)
      stack.extend(r[0] for r in by_name[n].inputs)
      stack.extend(by_name[n].control_inputs)
    nodes = graph_lib.toposort([n for n in nodes if n.name in keep], name)
    return self.scope(name, nodes, inputs, outputs, list(control_outputs))

  # --- while frames -------------------------------------------------------------------------

  def frames(self, nodes, inputs) -> dict:
    """Node name -> its frame path (a tuple of frame names; () outside loops; None
    for constants without inputs, which belong to whichever frame reads them)."""
    parents: dict = {}
    self._frames(nodes, parents, strict=False)  # each frame's parent, from its Enters
    return self._frames(nodes, parents, strict=True)

  def _frames(self, nodes, parents, strict) -> dict:
    frame: dict[str, tuple] = {}
    for node in nodes:
      # A Merge's NextIteration input comes later in the order (the loop's back
      # edge), so only its Enter input decides its frame.
      deps = [r[0] for r in node.inputs] + node.control_inputs
      if (
        not deps
        and node.op not in V1_OPS
        and core.is_pure(node.op)
        and not core.declares(node.op, "graph_input")
      ):
        # A node without inputs (a constant whose pivot control edge an optimizer
        # dropped) belongs to whichever frame reads it: None.
        frame[node.name] = None
        continue
      found = {frame[d] for d in deps if frame.get(d) is not None}
      if len(found) > 1 and strict:
        names = sorted(d for d in deps if d in frame)
        _fail(
          f"{node.op} node '{node.name}' reads values of different while frames "
          f"({', '.join(repr(n) for n in names)}): only Enter and Exit cross frames"
        )
      f = found.pop() if found else ()
      if node.op in _ENTER:
        name = node.attr("frame_name")
        if found or any(frame.get(d, ()) is not None for d in deps):
          parents.setdefault(name, f)
        else:  # only constants enter here: the frame's other Enters tell its parent
          f = parents.get(name, ())
        f = f + (name,)
      elif node.op in _EXIT:
        if not f and not strict:
          continue
        if not f:
          _fail(
            f"{node.op} node '{node.name}' is outside any while frame (it reads "
            f"'{node.inputs[0][0] if node.inputs else ''}', which no Enter leads to)"
          )
        f = f[:-1]
      frame[node.name] = f
    return frame

  def loops(self, scope_name, nodes, inputs):
    frame = self.frames(nodes, inputs)
    top = []
    for node in nodes:
      f = frame[node.name] or ()
      if f and f[0] not in top:
        top.append(f[0])
    for fname in top:
      nodes = self.loop(fname, nodes, frame)
    return nodes

  def loop(self, fname, nodes, frame):
    members = [n for n in nodes if (frame.get(n.name) or ())[:1] == (fname,)]
    member_names = {n.name for n in members}
    consumers: dict = {}
    for n in nodes:
      for ref in n.inputs:
        consumers.setdefault(ref, []).append(n)
    by_name = {n.name: n for n in members}
    own = [n for n in members if frame[n.name] == (fname,)]
    enters = [n for n in own if n.op in _ENTER]
    loop_conds = [n for n in own if n.op in _LOOP_COND]
    if len(loop_conds) != 1:
      _fail(
        f"while frame {fname!r} has {len(loop_conds)} LoopCond nodes "
        f"({', '.join(repr(n.name) for n in loop_conds)}); a frame has one"
      )
    loop_cond = loop_conds[0]
    var_enters = [e for e in enters if not e.attr("is_constant")]
    const_enters = [e for e in enters if e.attr("is_constant")]
    loop_vars = []  # (enter, merge, next, switch or None, exit or None)
    structural_names = {loop_cond.name} | {e.name for e in enters}
    for enter in var_enters:
      merges = list(
        {c.name: c for c in consumers.get((enter.name, 0), []) if c.op in _MERGE}.values()
      )
      if len(merges) != 1:
        _fail(
          f"Enter node '{enter.name}' of while frame {fname!r} feeds "
          f"{len(merges)} Merge nodes; a loop variable's Enter feeds one"
        )
      merge = merges[0]
      others = [r for r in merge.inputs if r[0] != enter.name]
      nexts = [r for r in others if r[0] in by_name and by_name[r[0]].op in _NEXT]
      if len(merge.inputs) != 2 or len(nexts) != 1:
        _fail(
          f"Merge node '{merge.name}' of while frame {fname!r} (loop variable from "
          f"Enter '{enter.name}') has no NextIteration input"
        )
      nxt = by_name[nexts[0][0]]
      switches = [
        c
        for c in consumers.get((merge.name, 0), [])
        if c.op in _SWITCH and c.inputs[1][0] == loop_cond.name
      ]
      switch = switches[0] if switches else None
      exits = [c for c in consumers.get((switch.name, 0), []) if c.op in _EXIT] if switch else []
      loop_vars.append((enter, merge, nxt, switch, exits))
      structural_names |= {merge.name, nxt.name}
      if switch is not None:
        structural_names |= {switch.name} | {x.name for x in exits}
    for n in own:
      if (
        n.op in _MERGE
        and n.name not in structural_names
        and any(by_name[r[0]].op in _NEXT for r in n.inputs if r[0] in by_name)
      ):
        _fail(
          f"Merge node '{n.name}' joins a NextIteration of while frame {fname!r} "
          "but no loop variable's Enter"
        )
      if n.op in _NEXT and n.name not in structural_names:
        _fail(
          f"NextIteration node '{n.name}' of while frame {fname!r} feeds no loop variable's Merge"
        )
      if n.op in _SWITCH and n.inputs[1][0] == loop_cond.name and n.name not in structural_names:
        _fail(
          f"Switch node '{n.name}' on LoopCond '{loop_cond.name}' does not read a "
          "loop variable's Merge"
        )
    for n in nodes:
      if n.op in _EXIT and frame.get(n.inputs[0][0]) == (fname,) and n.name not in structural_names:
        _fail(
          f"Exit node '{n.name}' of while frame {fname!r} does not read a loop "
          "variable's Switch on the frame's LoopCond"
        )
    # Loop variables are named after their Merge inside the functions (the Switch's
    # true output is the same value); invariants keep their Enter's name.
    arg_names = [v[1].name for v in loop_vars] + [e.name for e in const_enters]
    rename = {}
    for _, merge, _, switch, _ in loop_vars:
      if switch is not None:
        rename[(switch.name, 1)] = (merge.name, 0)
    all_by_name = {n.name: n for n in nodes}
    free = {
      r[0] for n in members for r in n.inputs if r[0] in all_by_name and frame.get(r[0], ()) is None
    }
    body_nodes = [all_by_name[name] for name in sorted(free)]  # copied into the functions
    for n in members:
      if n.name in structural_names:
        continue
      body_nodes.append(
        n.rewired(
          [rename.get(r, r) for r in n.inputs],
          [c for c in n.control_inputs if c in member_names and c not in structural_names],
        )
      )
    base = fname.removesuffix("/while_context")
    cond_fn = self.add_function(
      f"{base}/v1_cond",
      self.function(
        f"{base}/v1_cond",
        body_nodes,
        list(arg_names),
        [rename.get(r, r) for r in loop_cond.inputs[:1]],
      ),
    )
    body_outputs = [rename.get(v[2].inputs[0], v[2].inputs[0]) for v in loop_vars] + [
      (e.name, 0) for e in const_enters
    ]
    body_controls = [
      c
      for v in loop_vars
      for c in v[2].control_inputs
      if c in member_names and c not in structural_names
    ]
    body_fn = self.add_function(
      f"{base}/v1_body",
      self.function(f"{base}/v1_body", body_nodes, list(arg_names), body_outputs, body_controls),
    )
    while_name = f"{base}/v1_While"
    while_node = graph_lib.Node(
      while_name,
      "While",
      [v[0].inputs[0] for v in loop_vars] + [e.inputs[0] for e in const_enters],
      sorted({c for e in enters for c in e.control_inputs}),
      {
        "cond": self.func_attr(cond_fn),
        "body": self.func_attr(body_fn),
        "T": self.types_attr(var_enters + const_enters),
      },
      loop_cond.device,
    )
    out = [n for n in nodes if n.name not in member_names and n.name not in structural_names]
    out.append(while_node)
    for i, (*_, exits) in enumerate(loop_vars):
      for x in exits:
        out.append(_identity(x, (while_name, i)))
    return out

  # --- conds --------------------------------------------------------------------------------

  def conds(self, scope_name, nodes, inputs, outputs, control_outputs):
    if not any(n.op in _SWITCH or n.op in _MERGE for n in nodes):
      return nodes
    by_name = {n.name: n for n in nodes}
    pred_input: dict = {}  # resolved predicate -> the ref its first Switch reads
    node_state: dict[str, tuple] = {}
    port_state: dict = {}

    def state_of(ref):
      return port_state.get(ref, node_state.get(ref[0], ()))

    def join(node, refs):
      out = ()
      for r in refs:
        s = state_of(r)
        if s[: len(out)] == out:
          out = s
        elif out[: len(s)] != s:
          _fail(
            f"{node.op} node '{node.name}' reads values computed under different "
            f"branches ({_describe(out)} and {_describe(s)}) without a Merge"
          )
      return out

    merges = []  # (merge node, pred ref, outer state, {branch: input ref})
    for node in nodes:
      refs = list(node.inputs)
      for c in node.control_inputs:
        cnode = by_name.get(c)
        # A control edge from a Switch only orders after it: the Switch's input state.
        refs.extend(cnode.inputs[:1] if cnode is not None and cnode.op in _SWITCH else [(c, 0)])
      if node.op in _MERGE:
        if len(node.inputs) != 2:
          _fail(f"Merge node '{node.name}' has {len(node.inputs)} inputs; conds join two")
        sa, sb = (state_of(r) for r in node.inputs)
        k = 0
        while k < min(len(sa), len(sb)) and sa[k] == sb[k]:
          k += 1
        outer = sa[:k]
        tails = [sa[k:], sb[k:]]
        if (
          sorted(len(t) for t in tails) == [1, 1]
          and tails[0][0][0] == tails[1][0][0]
          and tails[0][0][1] != tails[1][0][1]
        ):
          pred = tails[0][0][0]
          branches = {tails[0][0][1]: node.inputs[0], tails[1][0][1]: node.inputs[1]}
        elif sorted(len(t) for t in tails) == [0, 1]:
          j = 0 if tails[0] else 1
          pred, b = tails[j][0]
          branches = {b: node.inputs[j], 1 - b: node.inputs[1 - j]}
        else:
          _fail(
            f"Merge node '{node.name}' does not join the two branches of one Switch "
            f"predicate (its inputs are computed under {_describe(sa)} and "
            f"{_describe(sb)})"
          )
        node_state[node.name] = outer
        merges.append((node, pred, outer, branches))
        continue
      s = join(node, refs)
      if node.op in _SWITCH:
        pred = self.resolve(by_name, node.inputs[1])
        pred_input.setdefault(pred, node.inputs[1])
        port_state[(node.name, 0)] = s + ((pred, 0),)
        port_state[(node.name, 1)] = s + ((pred, 1),)
      node_state[node.name] = s
    for ref in outputs:
      if state_of(ref):
        _fail(
          f"output '{ref[0]}' is computed under {_describe(state_of(ref))}: it has "
          "a value only when that branch is taken (fetch the cond's Merge instead)"
        )
    for name in control_outputs:
      if node_state.get(name):
        _fail(f"control output '{name}' runs under {_describe(node_state[name])}")
    groups: dict = {}
    for merge, pred, outer, branches in merges:
      if not outer:
        groups.setdefault(pred, []).append((merge, branches))
    replaced = {}
    new_nodes = []
    for pred, group in groups.items():
      for level in self.levels(by_name, group):
        new_nodes.extend(self.build_if(by_name, pred_input[pred], pred, level, state_of, replaced))
    for node in nodes:
      if node.name in replaced or node_state.get(node.name) or node.op in _SWITCH:
        continue
      for r in node.inputs:
        if state_of(r):
          _fail(
            f"{node.op} node '{node.name}' reads '{r[0]}', computed under "
            f"{_describe(state_of(r))}, without a Merge"
          )
      new_nodes.append(node)
    # Switches read outside any branch (their outer state) are gone: nothing else may
    # read them.
    return new_nodes

  @staticmethod
  def resolve(by_name, ref):
    """A predicate ref seen through Identity nodes (a cond's ``pred_id``): the key
    that the Switches of one cond share."""
    while True:
      node = by_name.get(ref[0])
      if node is None or node.op != "Identity" or not node.inputs:
        return ref
      ref = node.inputs[0]

  def levels(self, by_name, group):
    """Merges of one predicate split so that no Merge depends on another of its
    group (the gradient of a cond reuses the forward cond's predicate)."""
    names = {m.name for m, _ in group}
    depends: dict[str, set] = {}
    for m, _ in group:
      seen, stack, found = set(), [r[0] for r in m.inputs], set()
      while stack:
        n = stack.pop()
        if n in seen or n not in by_name:
          continue
        seen.add(n)
        if n in names:
          found.add(n)
        node = by_name[n]
        stack.extend(r[0] for r in node.inputs)
        stack.extend(node.control_inputs)
      depends[m.name] = found
    level: dict[str, int] = {}

    def lv(name):
      if name not in level:
        level[name] = 1 + max((lv(d) for d in depends[name]), default=-1)
      return level[name]

    out: dict[int, list] = {}
    for m, branches in group:
      out.setdefault(lv(m.name), []).append((m, branches))
    return [out[k] for k in sorted(out)]

  def build_if(self, by_name, pred_ref, pred, group, state_of, replaced):
    """One If node for Merges of one predicate (outside any other branch)."""
    for m, _ in group:
      for n in by_name.values():
        if (m.name, 1) in n.inputs:
          _fail(
            f"{n.op} node '{n.name}' reads the value_index output of Merge "
            f"'{m.name}', which tfprims does not compute"
          )
    if_name = f"{group[0][0].name}/v1_If"
    outer_refs: list = []

    def arg(ref):
      if ref not in outer_refs:
        outer_refs.append(ref)
      return (f"{if_name}:arg{outer_refs.index(ref)}", 0)

    fnames = []
    outer_controls = set()
    for b in (1, 0):
      prefix = ((pred, b),)
      region: dict = {}
      remap: dict = {}

      def visit(ref, control=False):
        """Where ``ref``, read in branch ``b``, comes from: a Switch of this cond or
        outside (an If input), or a node computed under the branch (in ``region``)."""
        s = state_of(ref)
        node = by_name.get(ref[0])
        if (
          node is not None
          and node.op in _SWITCH
          and s[:1] == prefix
          and len(s) == 1
          and ref[1] >= 0
          and self.resolve(by_name, node.inputs[1]) == pred
        ):
          remap[ref] = arg(node.inputs[0])
          return
        if not s:
          if control:
            outer_controls.add(ref[0])
          else:
            remap[ref] = arg(ref)
          return
        if s[:1] != prefix:
          _fail(
            f"'{ref[0]}' computed under {_describe(s)} is read in the "
            f"{'true' if b else 'false'} branch of the cond on '{pred[0]}'"
          )
        stack.append(ref[0])

      stack = []
      outs = []
      for _, branches in group:
        r = branches[b]
        visit(r)
        outs.append(r)
      while stack:
        name = stack.pop()
        if name in region:
          continue
        node = by_name[name]
        region[name] = node
        for r in node.inputs:
          visit(r)
        for c in node.control_inputs:
          cnode = by_name.get(c)
          if cnode is not None and cnode.op in _SWITCH:
            continue  # ordering after a Switch: the If runs after its inputs anyway
          visit((c, 0), control=True)
      fn_nodes = [
        n.rewired([remap.get(r, r) for r in n.inputs], [c for c in n.control_inputs if c in region])
        for n in region.values()
      ]
      fn_outputs = [remap.get(r, r) for r in outs]
      fnames.append((f"{if_name}/{'then' if b else 'else'}", fn_nodes, fn_outputs))
    args = [f"{if_name}:arg{k}" for k in range(len(outer_refs))]
    built = []
    for fname, fn_nodes, fn_outputs in fnames:
      built.append(self.add_function(fname, self.function(fname, fn_nodes, list(args), fn_outputs)))
    controls = sorted(
      outer_controls | {c for m, _ in group for c in m.control_inputs if not state_of((c, 0))}
    )
    if_node = graph_lib.Node(
      if_name,
      "If",
      [pred_ref] + outer_refs,
      controls,
      {
        "then_branch": self.func_attr(built[0]),
        "else_branch": self.func_attr(built[1]),
        "Tout": self.types_attr([m for m, _ in group]),
      },
      group[0][0].device,
    )
    out = [if_node]
    for j, (m, _) in enumerate(group):
      replaced[m.name] = True
      out.append(_identity(m, (if_name, j)))
    return out


def _identity(node, ref) -> graph_lib.Node:
  """A node named like ``node`` passing on ``ref`` (a rebuilt Merge's or Exit's value)."""
  attrs = {"T": node.attr_protos["T"]} if "T" in node.attr_protos else {}
  return graph_lib.Node(node.name, "Identity", [ref], [], attrs, node.device)


def _describe(state) -> str:
  if not state:
    return "no cond"
  return " and ".join(f"the {'true' if b else 'false'} branch of '{p[0]}'" for p, b in state)
