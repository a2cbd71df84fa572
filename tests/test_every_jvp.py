"""Every primitive with a VJP has a JVP line, and the JVP lines call only what can be differentiated again.

Kept apart from tests/test_jvp_rules.py (which checks each line's values): this file is the
registry-wide rule that no primitive can be added with a VJP (``d[...] = ...``) and no
``t[y] = ...`` line. A JVP line is code the forward pass fills in, so like a VJP it may call only
primitives, operators, ``.shape`` and functions declared non-differentiable.
"""
import ast
import builtins

import pytest

import funcgrad  # noqa: F401  (registers every primitive)
from funcgrad.ops.registry import is_nondiff, lookup, registry

REG = registry()
WITH_VJP = sorted(n for n, p in REG.items() if p.template is not None)


def test_every_primitive_with_a_vjp_has_a_jvp_line():
    missing = [n for n in WITH_VJP if REG[n].template.jvp_body is None]
    assert not missing, (f"primitives with a VJP template but no JVP line (add `t[y] = ...` beside the "
                         f"`d[...]` lines): {missing}")


def _resolve(node, scope):
    """The object a call's function expression names (``np.sum``, ``conv2d``), or None."""
    if isinstance(node, ast.Name):
        return scope[node.id] if node.id in scope else getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope)
        return getattr(base, node.attr, None) if base is not None else None
    return None


@pytest.mark.parametrize("name", WITH_VJP)
def test_jvp_line_calls_only_primitives(name):
    tpl = REG[name].template
    for stmt in tpl.jvp_body or []:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                fn = _resolve(node.func, tpl.globals)
                assert fn is not None and (lookup(fn) is not None or is_nondiff(fn)), (
                    f"{name}: the JVP line ({tpl.filename}:{tpl.lineno}) calls {ast.unparse(node.func)}, "
                    f"which is neither a primitive nor declared non-differentiable")
