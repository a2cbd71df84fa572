"""emit: readable source in a content-hashed file; lines map back to the user's file and line."""
import ast
import os

from funcgrad.transform.emit import cache_dir, module_source, write_module


def test_source_is_written_once_under_a_content_hash_and_maps_lines():
    body = [ast.Assign(targets=[ast.Name("y", ast.Store())], value=ast.BinOp(ast.Name("x", ast.Load()), ast.Mult(),
                                                                              ast.Constant(2.0)))]
    body[0].lineno = 7
    body[0]._funcgrad_file = "/user/model.py"
    body.append(ast.Return(value=ast.Name("y", ast.Load())))
    line_map = {}
    src = module_source("demo", [("f", ["x"], [ast.fix_missing_locations(s) for s in body])], None, line_map)
    assert "y = x * 2.0" in src and "import funcgrad.kernels" not in src   # K is injected by a backend
    assert ("/user/model.py", 7) in line_map.values()
    mod = write_module("demo_emit", src)
    assert os.path.dirname(mod.__file__) == cache_dir() and mod.f(3.0) == 6.0
    assert write_module("demo_emit", src) is mod


def test_fast_renderer_writes_what_the_copying_one_writes(monkeypatch):
    """The generated modules' text comes from a renderer that rewrites operator primitives as it writes them
    (no copy of each statement); it must write exactly what ``ast.unparse(pretty(...))`` writes, negative
    numbers under ``**`` and unary minus included."""
    import numpy as np

    import funcgrad
    import funcgrad.transform.emit as E
    from tests.transform import _programs as P

    seen = []
    fast = E.unparse

    def both(node, operators=True):
        text = fast(node, operators)
        seen.append((text, ast.unparse(E.pretty(node, operators))))
        return text

    monkeypatch.setattr(E, "unparse", both)

    def negatives(x):
        return np.sum(-2.0 ** x[0] + (-3) * x ** -2 - x[1:] @ x[:-1] - (-x) ** 2) - 0.0 * -0.0

    x = np.array([1.0, 2.0, 3.0])
    for jit in ("python", "njit"):
        funcgrad.source(funcgrad.grad(negatives, jit=jit), x)
        funcgrad.source(funcgrad.grad(P.looped, jit=jit), 0.5, 0.25, 4)
    funcgrad.jvp(negatives, (x,), (np.ones(3),))
    assert len(seen) > 50
    assert [a for a, b in seen if a != b] == []
