"""structure: returns (inside loops too), break and continue become structured control flow."""
import ast

from funcgrad.transform.parse import parse
from funcgrad.transform.structure import RET, lift_returns, single_exit, structure_loops
from tests.transform import _programs as P


def _kinds(stmts):
    return {type(n) for s in stmts for n in ast.walk(s)}


def test_return_inside_a_loop_is_lifted_and_the_body_has_a_single_exit():
    body = parse(P.early).node.body
    lifted = lift_returns(body)
    loop = next(s for s in lifted if isinstance(s, ast.For))
    assert not any(isinstance(n, ast.Return) for n in ast.walk(loop))      # no return inside the loop
    out = single_exit(structure_loops(lifted))
    assert ast.Return not in _kinds(out) and ast.Break in _kinds(out)     # break stays (a counted loop exit)
    assert any(isinstance(n, ast.Name) and n.id == RET for s in out for n in ast.walk(s))
    # the lifted function computes what the original does
    ns = {"np": __import__("numpy")}
    fn = ast.FunctionDef(name="g", args=parse(P.early).node.args, body=out + [ast.Return(ast.Name(RET, ast.Load()))],
                         decorator_list=[], returns=None, type_params=[])
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), "<t>", "exec"), ns)
    for x, n in ((1.1, 5), (0.1, 5), (0.3, 0)):
        assert ns["g"](x, n) == P.early(x, n)


def test_continue_becomes_a_guard():
    src = "def f(x):\n    for i in range(3):\n        if i == 1:\n            continue\n        x = x + i\n    return x\n"
    body = ast.parse(src).body[0].body
    out = structure_loops(body)
    assert ast.Continue not in _kinds(out)
