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
