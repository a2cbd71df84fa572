"""activity: only values depending on differentiated inputs through differentiable operations are active."""
import numpy as np
import pytest

from funcgrad.errors import NoDerivativeError
from funcgrad.transform.reverse import Reverse
from tests.transform import _programs as P
from tests.transform._helpers import anf_of


def _active(fn, *args, diff=(0,)):
    a, low, diffs = anf_of(fn, *args, diff=diff)
    R = Reverse(lambda s: (P.__file__, getattr(s, "lineno", None)), (), ())
    R.active = set(diffs)
    R.mark(a.body)
    return R.active


def test_activity_follows_differentiable_dependence():
    act = _active(P.straight, np.ones((2, 3)), np.ones((3, 4)), diff=(1,))
    assert "w" in act and "x" not in act and len(act) > 2


def test_a_zero_derivative_function_stops_activity():
    act = _active(P.inactive_call, np.ones(3), np.arange(3.0), diff=(1,))
    assert act == {"c"}                        # argmax(c) is piecewise constant


def test_an_active_value_into_a_call_without_rule_is_refused_at_the_users_line():
    def f(x):
        return np.sum(np.i0(x))   # (a function with no rule: np.cumsum, here before, has one now)
    with pytest.raises(NoDerivativeError, match="i0"):
        _active(f, np.ones(3))
