"""Objects of the user's own classes made inside the differentiated function.

``Lin(w, b)(v)``, ``m = Model(a); m.energy(v)``, a dataclass's fields and ``__post_init__``, properties,
static and class methods, ``super()``: the object is a value known while transforming whose attributes are the
values its ``__init__`` set (inlined with the object as ``self``), so methods, properties and ``__call__`` are
inlined like any helper. Before, creating one was refused ("creating a 'Lin' object inside a differentiated
function is not supported"); gen_lang drew the idiom in about 1 program in 25.
"""
import dataclasses

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


class Lin:
    def __init__(self, w, b=0.0):
        self.w = w
        self.b = b

    def __call__(self, v):
        return np.sum(self.w * v) + self.b


class Quad:
    scale = 0.5

    def __init__(self, w):
        self.w = w

    def energy(self, v):
        return np.dot(self.w, v) ** 2

    @property
    def norm2(self):
        return np.sum(self.w ** 2)

    @staticmethod
    def twice(v):
        return 2.0 * v

    @classmethod
    def unit(cls, n):
        return cls(np.ones(n))


@dataclasses.dataclass
class Gauss:
    mu: float
    sigma: float = 1.0

    def __post_init__(self):
        self.var = self.sigma ** 2

    def logpdf(self, x):
        return -0.5 * np.sum((x - self.mu) ** 2) / self.var - x.size * np.log(self.sigma)


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: float


class Base:
    def __init__(self):
        super().__init__()
        self.c = 2.0

    def val(self, v):
        return self.c * v


class Derived(Base):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def val(self, v):
        return super().val(v) * self.k + 1.0


def called(x, a):
    return Lin(a, x)(a * x)


def methods_and_properties(x, a):
    m = Quad(a)
    u = Quad.unit(a.shape[0])
    return m.energy(a * x) + m.norm2 * x + Quad.twice(x) + m.scale * m.twice(x) + u.energy(a) * isinstance(m, Quad)


def dataclass_fields(x, a):
    g = Gauss(x, sigma=2.0)
    return g.logpdf(a) + g.var


def made_in_a_runtime_loop(x, a, n):
    s = 0.0
    for i in range(n):
        m = Lin(a * (i + 1.0), x)
        m.b = m.b * 2.0
        s = s + m(a)
    return s


def inherited(x, a):
    return Derived(x).val(np.sum(a)) * x


CASES = [(called, 0), (methods_and_properties, 0), (dataclass_fields, 0), (made_in_a_runtime_loop, 1),
         (inherited, 0)]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
def test_value_and_gradient(case, kw):
    fn, extra = case
    args = (0.7, np.array([1.0, -2.0, 0.5])) + ((3,) * extra)
    assert_value_and_gradient(fn, args, (0, 1), **kw)


def attribute_set_in_a_loop_on_an_outer_object(x, a, n):
    m = Lin(a, x)
    for i in range(n):
        m.b = m.b * 2.0
    return m(a)


def returned(x, a):
    return Lin(a, x)


def frozen_field_set(x, a):
    f = Frozen(x)
    f.w = 2.0 * x
    return f.w * np.sum(a)


def used_as_an_array(x, a):
    return np.sum(Lin(a, x) * a)


@pytest.mark.parametrize("fn, words", [
    (attribute_set_in_a_loop_on_an_outer_object, "setting an attribute of a 'Lin' object inside a loop or branch"),
    (returned, "returning a 'Lin' object made inside the function is not supported"),
    (frozen_field_set, "frozen dataclass"),
    (used_as_an_array, "arithmetic on|cannot be used as an array value"),
])
def test_what_cannot_be_followed_is_refused_at_the_users_line(fn, words):
    args = (0.7, np.array([1.0, -2.0, 0.5])) + ((2,) if fn is attribute_set_in_a_loop_on_an_outer_object else ())
    with pytest.raises(UnsupportedSyntaxError, match=words) as info:
        funcgrad.grad(fn, argnums=(0, 1))(*args)
    assert "test_objects.py" in str(info.value)
