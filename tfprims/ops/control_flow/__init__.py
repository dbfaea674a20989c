"""TF2 functional control flow: If/Case (branches.py), While (loops.py) and the
Optional variants TF's gradient rewrite passes between them (optional.py), and TF1
control flow (Switch/Merge/Enter/Exit...) rebuilt as If/While nodes (v1.py).

Branch and loop bodies are library functions run by the same interpreter, so
jaxprs show ``tf.*`` primitives inside ``cond``/``tf.While``/``while``. Variables that
a body or branch writes (its ops declare ``writes_state``) and the rng key (ops
declaring ``uses_rng``) are threaded as branch/loop state; the new values come
back in the converted function's ``new_params``.
"""

from tfprims.ops.control_flow import branches, loops, optional, v1
