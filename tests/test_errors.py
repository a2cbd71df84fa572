"""Unsupported constructs raise errors naming the user's file and line."""
import inspect

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import NoDerivativeError, UnsupportedSyntaxError
from tests.fixtures import unsupported as U


def _line(tag):
    src, start = inspect.getsourcelines(U)
    for i, ln in enumerate(src):
        if ln.rstrip().endswith(f"# LINE: {tag}"):
            return i + 1
    raise AssertionError(tag)


SYNTAX_CASES = [
    ("uses_try", "try"), ("uses_with", "with"), ("uses_yield", "yield"),
    ("uses_global", "global"), ("uses_nonlocal", "nonlocal"), ("uses_class", "class"), ("uses_del", "del"),
]


@pytest.mark.parametrize("fname,tag", SYNTAX_CASES)
def test_unsupported_syntax_points_at_user_line(fname, tag):
    fn = getattr(U, fname)
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(fn)(np.ones(3))
    e = ei.value
    assert isinstance(e, SyntaxError)
    assert e.lineno == _line(tag), str(e)
    assert e.filename == U.__file__
    assert e.text is not None and f"LINE: {tag}" in e.text
    assert "hint" in str(e)
    assert f"{U.__file__}:{e.lineno}" in str(e)


@pytest.mark.parametrize("fname,tag", [("uses_unknown_function", "no-rule"),
                                       ("uses_helper_without_rule", "helper-no-rule")])
def test_call_without_rule_names_function_and_line(fname, tag):
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.grad(getattr(U, fname))(np.ones(3))
    msg = str(ei.value)
    assert f"{U.__file__}:{_line(tag)}" in msg
    assert "custom_vjp" in msg
    assert "i0" in msg   # (np.cumsum and np.sort, used here before, have rules now)


def test_bad_argnums_and_outputs():
    f = lambda x, y: np.sum(x * y)  # noqa: E731
    with pytest.raises(ValueError, match="argnums=2 is out of range"):
        funcgrad.grad(f, argnums=2)(np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match="argnums must be an int or a tuple"):
        funcgrad.grad(f, argnums="x")(np.ones(2), np.ones(2))
    g = lambda x: x * 2  # noqa: E731
    with pytest.raises(TypeError, match=r"requires a scalar output.*shape \(3,\)"):
        funcgrad.grad(g)(np.ones(3))
    with pytest.raises(TypeError, match="dtype int64.*only floating-point inputs"):
        funcgrad.grad(lambda x: np.sum(x * 2.0))(np.arange(3))
    with pytest.raises(TypeError, match="has_aux=True.*pair"):
        funcgrad.grad(lambda x: np.sum(x), has_aux=True)(np.ones(3))


def test_refusal_traceback_is_trimmed_of_funcgrad_frames():
    import os
    import traceback
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(U.uses_try)(np.ones(3))
    frames = traceback.extract_tb(ei.value.__traceback__)
    pkg = os.path.dirname(funcgrad.__file__)
    inside = [f for f in frames if f.filename.startswith(pkg)]
    assert len(inside) <= 1, [f"{f.filename}:{f.lineno}" for f in inside]   # the API's own re-raise only
    text = "".join(traceback.format_exception(ei.value))
    assert f'File "{U.__file__}", line {_line("try")}' in text and "normalize" not in text
