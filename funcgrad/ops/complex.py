"""Complex numbers: ``np.real``, ``np.imag``, ``np.conj``, ``np.angle`` (and ``np.abs`` in :mod:`.core`).

The convention is autograd's (facts: autograd/numpy/numpy_vjps.py and numpy_vspaces.py): a cotangent
is a covector, the conjugate of the steepest-ascent direction, so

* a holomorphic function's VJP multiplies by its derivative (``d[x] = d[y] * f'(x)``): NumPy's
  templates in :mod:`.core` serve complex values unchanged, and every NumPy kernel they call takes
  complex arrays;
* ``grad`` of a real function of complex ``z`` is ``df/dRe(z) - 1j * df/dIm(z)`` (so
  ``grad(lambda z: np.abs(z) ** 2)(1 + 2j) == 2 - 4j``, as autograd gives);
* a real input's cotangent is the real part of what reaches it, and a complex input's is complex: the
  reverse pass keeps each cotangent in its value's kind (``match_complex``, emitted only where complex
  values may meet real ones: :mod:`funcgrad.transform.realness`);
* non-holomorphic functions (``abs``, ``angle``, ``real``, ``imag``, ``conj``) have the rules below, whose
  derivatives are themselves primitives, so any order of derivative is right.

``np.sign`` of a complex value is treated as having no derivative, as autograd does.
"""
from __future__ import annotations

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .registry import by_name, d, defvjp, nondiff, t


def _sample_nonzero(draw, dt, st, array, shapes):
    """Values of either sign, away from 0 (where abs, angle and these helpers are singular)."""
    x = array(draw, shapes(draw, 0), dt, "positive")
    flip = array(draw, np.shape(x), np.float64) > 0
    return ((np.where(flip, -x, x).astype(dt) if isinstance(x, np.ndarray) else (-x if flip else x)),), {}


@defvjp(np.real, sample=S.unary(), elementwise=True)
def real(y, x):
    d[x] = d[y]                    # made complex by the reverse pass where x is complex
    t[y] = np.real(t[x])


@defvjp(np.imag, sample=S.unary(), elementwise=True)
def imag(y, x):
    d[x] = -1j * d[y]
    t[y] = np.imag(t[x])


@defvjp(np.conjugate, name="conj", sample=S.unary(), elementwise=True)
def conj(y, x):
    d[x] = np.conj(d[y])
    t[y] = np.conj(t[x])


nondiff(K.angle_unit)   # 1 or 180/pi: a constant of the static deg flag


@defvjp(np.angle, sample=S.custom(_sample_nonzero), elementwise=True)
def angle(y, z, deg=False):
    """``np.angle``: ``Im(dz / z)``, in degrees with ``deg=True``."""
    d[z] = d[y] * (-1j * K.angle_unit(deg)) * csign(z) * inv_abs(z)
    t[y] = np.imag(t[z] * csign(z)) * inv_abs(z) * K.angle_unit(deg)


@defvjp(None, sample=S.custom(_sample_nonzero), elementwise=True)
def csign(y, x):
    """``conj(x) / |x|`` (0 at 0), the derivative of ``|x|``; ``np.sign(x)`` for real ``x``."""
    d[x] = (np.conj(d[y]) - d[y] * y * y) * inv_abs(x) * 0.5
    t[y] = (np.conj(t[x]) - y * y * t[x]) * inv_abs(x) * 0.5


@defvjp(None, sample=S.custom(_sample_nonzero), elementwise=True)
def inv_abs(y, x):
    """``1 / |x|``, 0 where ``x`` is 0."""
    d[x] = -d[y] * y * y * csign(x)
    t[y] = -match_complex(t[x] * csign(x), y) * y * y


def _sample_match_complex(draw, dt, st, array, shapes):
    sh = shapes(draw, 0)
    return (array(draw, sh, dt), array(draw, sh, dt)), {}


@defvjp(None, sample=S.custom(_sample_match_complex))
def match_complex(y, g, x):
    """``g`` as the cotangent of ``x``: its real part where ``x`` is real, complex where ``x`` is complex."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = match_complex(d[y], g)
    t[y] = match_complex(t[g], x)


def _sample_real_if_close(draw, dt, st, array, shapes):
    sh = shapes(draw, 0)
    x = array(draw, sh, dt)
    if np.iscomplexobj(x) and draw(st.booleans()):
        x = np.real(x) + 1e-18j   # imaginary parts within tol: the result is real
    return (x,), {}


@defvjp(np.real_if_close, sample=S.custom(_sample_real_if_close), python_only=True)
def real_if_close(y, a, tol=100):
    """The real part of ``a`` where NumPy drops the (tiny) imaginary parts, else ``a`` itself."""
    d[a] = match_complex(d[y], a)
    t[y] = match_complex(t[a], y)


# how each primitive's result kind follows from its operands' (read by funcgrad.transform.realness)
for _name in ("real", "imag", "angle", "inv_abs", "absolute"):
    by_name(_name).result_kind = "real"
for _name in ("imag", "angle", "csign"):
    by_name(_name).zero_on_real = True     # piecewise constant at real values
by_name("csign").real_form = "sign"        # what the reverse pass emits for real operands
