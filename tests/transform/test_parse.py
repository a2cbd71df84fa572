"""parse: a function object -> its FunctionDef at the user's lines; free names resolve to objects."""
import ast

import numpy as np

from funcgrad.transform.parse import MISSING, parse
from tests.transform import _programs as P


def test_lines_are_the_users_and_free_names_resolve():
    p = parse(P.looped)
    assert isinstance(p.node, ast.FunctionDef) and p.filename == P.__file__
    src = open(P.__file__).read().splitlines()
    loop = next(n for n in ast.walk(p.node) if isinstance(n, ast.For))
    assert src[loop.lineno - 1].strip().startswith("for t in range(n)")
    assert p.lookup("DT") == P.DT and p.lookup("np") is np and p.lookup("no_such_name") is MISSING


def test_lambda_becomes_a_def_with_one_return():
    f = lambda v: v * 2.0  # noqa: E731
    node = parse(f).node
    assert isinstance(node, ast.FunctionDef) and isinstance(node.body[0], ast.Return)
    assert [a.arg for a in node.args.args] == ["v"]


def test_closure_values_are_read_per_parse():
    def make(c):
        return lambda v: v * c
    assert parse(make(2.0)).lookup("c") == 2.0 and parse(make(3.0)).lookup("c") == 3.0
