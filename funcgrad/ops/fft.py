"""``numpy.fft``: fft ifft rfft irfft, fft2 ifft2 rfft2 irfft2, fftn ifftn rfftn irfftn, fftshift ifftshift,
with ``n``/``s``/``axes``/``norm`` (facts: autograd/numpy/fft.py and tests/test_fft.py).

Every transform is linear, so its JVP is the transform of the tangent, and its VJP (autograd's
convention, :mod:`.complex`) is the transpose: a DFT matrix is symmetric, so the VJP of ``fft`` is
``fft`` of the cotangent (same ``n``, ``axis``, ``norm``), cut or zero-padded back to the input's
shape where ``n``/``s`` padded or cut it (:func:`truncate_pad`, the transpose of padding).
The real transforms:

* ``rfft`` keeps the first ``n // 2 + 1`` outputs of ``fft`` of a real input, so its VJP is the real
  part of ``fft`` of the cotangent zero-padded to length ``n`` (``fft(g, n)`` pads): any ``n``, odd
  or even;
* ``irfft`` reads each of the half spectrum's inner frequencies twice (itself and its conjugate) and
  ignores the imaginary part of the zero (and, for even ``n``, Nyquist) frequency; its VJP is
  ``conj(rfft(g))`` with the inverse transform's scaling, weighted 2 for the inner frequencies
  (:func:`funcgrad.kernels.cpu_fft.irfft_weights`);
* the n-D ones compose the 1-D rules (the real one acts on the last transformed axis).

The VJPs are written with these primitives themselves, so derivatives of any order work. Numba has no
``np.fft``: the primitives are ``python_only``. A repeated axis in ``axes`` is refused when differentiated.
"""
from __future__ import annotations

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .registry import by_name, d, defvjp, t


# ----------------------------------------------------------------------------- samples
def _sample_1d(kind):
    """A real array of 1-3 dims, an axis, an ``n`` (None, shorter, longer) and a norm."""
    def fn(draw, dt, st, array, shapes):
        sh = shapes(draw, 1, 3, 2, 5)
        axis = draw(st.integers(-len(sh), len(sh) - 1))
        n = draw(st.sampled_from([None, max(sh[axis] - 1, 1), sh[axis] + 2]))
        if kind == "irfft" and n is None and sh[axis] < 2:
            n = 2
        norm = draw(st.sampled_from([None, "backward", "ortho", "forward"]))
        return (array(draw, sh, dt),), {"n": n, "axis": axis, "norm": norm}
    return S.custom(fn)


def _sample_nd(kind):
    """A real array of 2-3 dims, with ``s``/``axes`` (None, or a subset of the axes with new lengths)."""
    def fn(draw, dt, st, array, shapes):
        sh = shapes(draw, 2, 3, 2, 4)
        nd = len(sh)
        norm = draw(st.sampled_from([None, "ortho", "forward"]))
        if kind.endswith("2"):
            axes = draw(st.sampled_from([(-2, -1), (0, 1), (1, 0), (-1, 0)]))
        else:
            axes = draw(st.sampled_from([None, (0,), (nd - 1, 0), tuple(range(nd))]))
        if draw(st.booleans()):
            ax = axes if axes is not None else tuple(range(nd))
            s = tuple(max(sh[a] + draw(st.integers(-1, 2)), 1) for a in ax)
            if axes is None:
                axes = tuple(range(nd))
        else:
            s = None
        if kind.startswith("irfft"):
            ax = axes if axes is not None else tuple(range(nd))
            if s is None and sh[ax[-1]] < 2:
                s = tuple(sh[a] for a in ax[:-1]) + (2,)
        return (array(draw, sh, dt),), {"s": s, "axes": axes, "norm": norm}
    return S.custom(fn)


def _sample_shift(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3, 1, 5)
    axes = draw(st.sampled_from([None, 0, -1, (0,), tuple(range(len(sh)))]))
    return (array(draw, sh, dt),), {"axes": axes}


def _sample_truncate_pad(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3, 1, 4)
    target = tuple(max(n + draw(st.integers(-2, 2)), 1) for n in sh)
    return (array(draw, sh, dt), target), {}


# ----------------------------------------------------------------------------- helper
@defvjp(None, sample=S.custom(_sample_truncate_pad), python_only=True)
def truncate_pad(y, g, shape):
    """``g`` cut or zero-padded at the end of each axis to ``shape``."""
    d[g] = truncate_pad(d[y], np.shape(g))
    t[y] = truncate_pad(t[g], shape)


# ----------------------------------------------------------------------------- complex transforms
@defvjp(np.fft.fft, sample=_sample_1d("fft"), python_only=True)
def fft(y, a, n=None, axis=-1, norm=None):
    d[a] = truncate_pad(np.fft.fft(d[y], n, axis, norm), np.shape(a))
    t[y] = np.fft.fft(t[a], n, axis, norm)


@defvjp(np.fft.ifft, sample=_sample_1d("ifft"), python_only=True)
def ifft(y, a, n=None, axis=-1, norm=None):
    d[a] = truncate_pad(np.fft.ifft(d[y], n, axis, norm), np.shape(a))
    t[y] = np.fft.ifft(t[a], n, axis, norm)


@defvjp(np.fft.fft2, sample=_sample_nd("fft2"), python_only=True)
def fft2(y, a, s=None, axes=(-2, -1), norm=None):
    d[a] = truncate_pad(np.fft.fftn(d[y], K.fft_full_s(y, s, axes), K.fft_axes(a, s, axes), norm), np.shape(a))
    t[y] = np.fft.fft2(t[a], s, axes, norm)


@defvjp(np.fft.ifft2, sample=_sample_nd("ifft2"), python_only=True)
def ifft2(y, a, s=None, axes=(-2, -1), norm=None):
    d[a] = truncate_pad(np.fft.ifftn(d[y], K.fft_full_s(y, s, axes), K.fft_axes(a, s, axes), norm), np.shape(a))
    t[y] = np.fft.ifft2(t[a], s, axes, norm)


@defvjp(np.fft.fftn, sample=_sample_nd("fftn"), python_only=True)
def fftn(y, a, s=None, axes=None, norm=None):
    d[a] = truncate_pad(np.fft.fftn(d[y], K.fft_full_s(y, s, axes), K.fft_axes(a, s, axes), norm), np.shape(a))
    t[y] = np.fft.fftn(t[a], s, axes, norm)


@defvjp(np.fft.ifftn, sample=_sample_nd("ifftn"), python_only=True)
def ifftn(y, a, s=None, axes=None, norm=None):
    d[a] = truncate_pad(np.fft.ifftn(d[y], K.fft_full_s(y, s, axes), K.fft_axes(a, s, axes), norm), np.shape(a))
    t[y] = np.fft.ifftn(t[a], s, axes, norm)


# ----------------------------------------------------------------------------- real transforms
@defvjp(np.fft.rfft, sample=_sample_1d("rfft"), python_only=True)
def rfft(y, a, n=None, axis=-1, norm=None):
    d[a] = np.real(truncate_pad(np.fft.fft(d[y], K.fft_full_n(a, n, axis), axis, norm), np.shape(a)))
    t[y] = np.fft.rfft(t[a], n, axis, norm)


@defvjp(np.fft.irfft, sample=_sample_1d("irfft"), python_only=True)
def irfft(y, a, n=None, axis=-1, norm=None):
    d[a] = truncate_pad(np.conj(np.fft.rfft(d[y], None, axis, K.fft_swap_norm(norm))) * K.irfft_weights(y, axis),
                        np.shape(a))
    t[y] = np.fft.irfft(t[a], n, axis, norm)


@defvjp(np.fft.rfft2, sample=_sample_nd("rfft2"), python_only=True)
def rfft2(y, a, s=None, axes=(-2, -1), norm=None):
    d[a] = np.real(truncate_pad(np.fft.fftn(d[y], K.fft_full_s(a, s, axes), K.fft_axes(a, s, axes), norm),
                                np.shape(a)))
    t[y] = np.fft.rfft2(t[a], s, axes, norm)


@defvjp(np.fft.irfft2, sample=_sample_nd("irfft2"), python_only=True)
def irfft2(y, a, s=None, axes=(-2, -1), norm=None):
    d[a] = truncate_pad(np.conj(np.fft.rfftn(d[y], K.fft_full_s(y, None, K.fft_axes(a, s, axes)),
                                             K.fft_axes(a, s, axes), K.fft_swap_norm(norm)))
                        * K.irfft_weights(y, K.fft_axes(a, s, axes)), np.shape(a))
    t[y] = np.fft.irfft2(t[a], s, axes, norm)


@defvjp(np.fft.rfftn, sample=_sample_nd("rfftn"), python_only=True)
def rfftn(y, a, s=None, axes=None, norm=None):
    d[a] = np.real(truncate_pad(np.fft.fftn(d[y], K.fft_full_s(a, s, axes), K.fft_axes(a, s, axes), norm),
                                np.shape(a)))
    t[y] = np.fft.rfftn(t[a], s, axes, norm)


@defvjp(np.fft.irfftn, sample=_sample_nd("irfftn"), python_only=True)
def irfftn(y, a, s=None, axes=None, norm=None):
    d[a] = truncate_pad(np.conj(np.fft.rfftn(d[y], K.fft_full_s(y, None, K.fft_axes(a, s, axes)),
                                             K.fft_axes(a, s, axes), K.fft_swap_norm(norm)))
                        * K.irfft_weights(y, K.fft_axes(a, s, axes)), np.shape(a))
    t[y] = np.fft.irfftn(t[a], s, axes, norm)


# ----------------------------------------------------------------------------- shifts
@defvjp(np.fft.fftshift, sample=S.custom(_sample_shift), python_only=True)
def fftshift(y, x, axes=None):
    d[x] = np.fft.ifftshift(d[y], axes)
    t[y] = np.fft.fftshift(t[x], axes)


@defvjp(np.fft.ifftshift, sample=S.custom(_sample_shift), python_only=True)
def ifftshift(y, x, axes=None):
    d[x] = np.fft.fftshift(d[y], axes)
    t[y] = np.fft.ifftshift(t[x], axes)


for _name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "rfft2", "rfftn"):
    by_name(_name).result_kind = "complex"     # complex results from real inputs (funcgrad.transform.realness)
for _name in ("irfft", "irfft2", "irfftn"):
    by_name(_name).result_kind = "real"
