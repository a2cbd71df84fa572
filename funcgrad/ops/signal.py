"""``scipy.signal.convolve(in1, in2, mode, method)``: N-D, every mode, both arguments differentiable.

Every mode's output is the centered part of the 'full' convolution (scipy's ``_centered``), so with
the cotangent ``g`` zero-padded back into the full shape (:func:`center_pad`) the VJP is that of the
full convolution, a 'valid' correlation with the other operand:
``d[in1] = convolve(g_full, flip(in2), "valid")`` and ``d[in2] = convolve(g_full, flip(in1), "valid")``
(autograd's convention: bilinear, so no conjugate on complex values). The JVP is bilinear:
``convolve(t[in1], in2) + convolve(in1, t[in2])``. scipy is Python: the primitives are ``python_only``.

``import funcgrad`` does not import scipy.signal (seconds): ``scipy.signal.convolve`` is registered as
this primitive's key once the user's code has imported it (:func:`~funcgrad.ops.registry.when_imported`).
"""
from __future__ import annotations

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .registry import alias, d, defvjp, t, when_imported


def _sample_convolve(draw, dt, st, array, shapes):
    nd = draw(st.integers(1, 3))
    mode = draw(st.sampled_from(["full", "valid", "same"]))
    s1 = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    if mode == "valid":  # one operand at least as large as the other along every axis
        s2 = tuple(draw(st.integers(1, n)) for n in s1)
        if draw(st.booleans()):
            s1, s2 = s2, s1
    else:
        s2 = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    method = draw(st.sampled_from(["auto", "direct", "fft"]))
    return (array(draw, s1, dt), array(draw, s2, dt)), {"mode": mode, "method": method}


def _sample_center(big):
    def fn(draw, dt, st, array, shapes):
        sh = shapes(draw, 1, 3, 1, 4)
        other = tuple(n + draw(st.integers(0, 3)) for n in sh)
        if big:   # center_pad: a smaller array into a larger shape
            return (array(draw, sh, dt), other), {}
        return (array(draw, other, dt), sh), {}   # center_crop: the middle of a larger array
    return S.custom(fn)


@defvjp(None, sample=_sample_center(True), python_only=True)
def center_pad(y, g, shape):
    """Zeros of ``shape`` with ``g`` in the middle (where a 'same'/'valid' convolution sits in the 'full' one)."""
    d[g] = center_crop(d[y], np.shape(g))
    t[y] = center_pad(t[g], shape)


@defvjp(None, sample=_sample_center(False), python_only=True)
def center_crop(y, g, shape):
    """The middle ``shape`` part of ``g``."""
    d[g] = center_pad(d[y], np.shape(g))
    t[y] = center_crop(t[g], shape)


@defvjp(None, sample=S.custom(_sample_convolve), python_only=True)
def convolve(y, in1, in2, mode="full", method="auto"):
    """``scipy.signal.convolve``."""
    g = center_pad(d[y], K.conv_full_shape(in1, in2))
    d[in1] = convolve(g, in2[K.flip_index(in2)], "valid", method)
    d[in2] = convolve(g, in1[K.flip_index(in1)], "valid", method)
    t[y] = convolve(t[in1], in2, mode, method) + convolve(in1, t[in2], mode, method)


def _sample_np_convolve(draw, dt, st, array, shapes):
    mode = draw(st.sampled_from(["full", "valid", "same"]))
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    return (array(draw, (n,), dt), array(draw, (m,), dt)), {"mode": mode}


@defvjp(np.convolve, sample=S.custom(_sample_np_convolve), python_only=True)
def np_convolve(y, a, v, mode="full"):
    """``numpy.convolve`` of 1-D arrays: every mode's output is the middle of the 'full' one (as scipy's), so
    the VJP is the full convolution's, a 'valid' correlation of the padded cotangent with the other operand."""
    g = center_pad(d[y], K.conv_full_shape(a, v))
    d[a] = np.convolve(g, v[K.flip_index(v)], "valid")
    d[v] = np.convolve(g, a[K.flip_index(a)], "valid")
    t[y] = np.convolve(t[a], v, mode) + np.convolve(a, t[v], mode)


def _register_scipy_key():
    import scipy.signal   # lazily (when_imported): the user's code has imported it by now
    alias(scipy.signal.convolve, convolve)


when_imported("scipy.signal", _register_scipy_key)
