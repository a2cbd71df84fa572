"""Kernels of complex numbers, ``numpy.fft`` and ``scipy.signal.convolve`` (see funcgrad.ops.complex,
funcgrad.ops.fft and funcgrad.ops.signal).

Complex numbers follow autograd's convention: the cotangent of a complex value is the conjugate of
the steepest-ascent direction, so a holomorphic function's VJP multiplies by its derivative itself
(``d[x] = d[y] * f'(x)``, no conjugate: NumPy's real templates hold unchanged), ``grad`` of a real
function of ``z`` is ``df/dRe(z) - 1j * df/dIm(z)``, and a real input's cotangent is the real part
of what reaches it (:func:`match_complex`). The few kernels here that differ for real and complex
values (:func:`csign`, :func:`match_complex`) decide by dtype: when compiled, at typing time, so a
real array costs what it did before.

Numba has no ``np.fft`` and no scipy.signal in nopython mode: those kernels are plain Python
(their primitives are ``python_only``, so ``jit="auto"`` runs code calling them as Python over
compiled kernels) and a nopython call of one is refused with a message naming it.
"""
from __future__ import annotations

import numpy as np
from numba.core import errors
from numba import types
from numba.extending import overload

__all__ = ["conj", "real", "imag", "angle", "angle_unit", "csign", "inv_abs", "match_complex",
           "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
           "fftshift", "ifftshift", "truncate_pad", "fft_full_n", "fft_full_s", "fft_axes", "fft_swap_norm",
           "irfft_weights", "convolve", "np_convolve", "center_pad", "center_crop", "conv_full_shape", "flip_index", "real_if_close"]

_ndarray = np.ndarray

# ----------------------------------------------------------------------------- complex numbers
conj = np.conjugate        # NumPy's own functions: nopython mode supports them for real and complex values
real = np.real
imag = np.imag
angle = np.angle


def angle_unit(deg):
    """The factor of ``np.angle(z, deg)``'s derivative: 180/pi in degrees, else 1."""
    return 180.0 / np.pi if deg else 1.0


@overload(angle_unit)
def _angle_unit_ov(deg):
    return lambda deg: 180.0 / np.pi if deg else 1.0


def _is_complex(x):
    return (x.dtype.kind == "c") if type(x) is _ndarray else np.iscomplexobj(x)


def csign(x):
    """``conj(x) / |x|`` (0 at 0): the derivative of ``|x|`` in autograd's convention; ``np.sign(x)`` for
    real ``x``."""
    if not _is_complex(x):
        return np.sign(x)
    r = np.abs(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.conjugate(x) / r
    u = np.where(r == 0, 0, u)
    return u if isinstance(x, np.ndarray) else u[()]


@overload(csign)
def _csign_ov(x):
    if isinstance(x, types.Complex):
        def scalar(x):
            r = abs(x)
            return x.conjugate() / r if r != 0 else x * 0
        return scalar
    if isinstance(x, types.Array) and isinstance(x.dtype, types.Complex):
        def arr(x):
            out = np.empty(x.shape, x.dtype)   # C order whatever x's (empty_like kept a transpose's F order,
            xf = x.ravel()                     # which reshape(-1) refuses: NotImplementedError under njit)
            of = out.reshape(-1)
            for i in range(xf.size):
                r = abs(xf[i])
                of[i] = xf[i].conjugate() / r if r != 0 else 0
            return out
        return arr
    return lambda x: np.sign(x)


def inv_abs(x):
    """``1 / |x|``, 0 where ``x`` is 0 (real)."""
    r = np.abs(x)
    if isinstance(r, np.ndarray):
        out = np.zeros_like(r)
        np.divide(1.0, r, out=out, where=r != 0)
        return out
    return type(r)(1.0 / r) if r != 0 else type(r)(0.0)


@overload(inv_abs)
def _inv_abs_ov(x):
    if isinstance(x, types.Array):
        def arr(x):
            r = np.abs(x)
            out = np.zeros_like(r)
            rf = r.ravel()
            of = out.reshape(-1)
            for i in range(rf.size):
                if rf[i] != 0:
                    of[i] = 1.0 / rf[i]
            return out
        return arr

    def scalar(x):
        r = abs(x)
        return 1.0 / r if r != 0 else r * 0.0
    return scalar


def match_complex(g, x):
    """``g`` as the cotangent of ``x``: its real part where ``x`` is real, complex where ``x`` is complex
    (``g`` itself when both agree)."""
    gc, xc = _is_complex(g), _is_complex(x)
    if gc == xc:
        return g
    if gc:
        r = np.real(g)
        if isinstance(r, np.ndarray):  # ascontiguousarray would make a 0-d cotangent 1-d
            return np.ascontiguousarray(r) if r.ndim else r.copy()
        return r
    c = np.asarray(g, dtype=np.result_type(np.asarray(x).dtype, np.asarray(g).dtype))
    return c if isinstance(g, np.ndarray) else c[()]


def _complexity(t):
    dt = t.dtype if isinstance(t, types.Array) else t
    return isinstance(dt, types.Complex)


@overload(match_complex)
def _match_complex_ov(g, x):
    gc, xc = _complexity(g), _complexity(x)
    if gc == xc:
        return lambda g, x: g
    if gc:
        if isinstance(g, types.Array) and g.ndim == 0:
            return lambda g, x: np.real(g).copy()
        if isinstance(g, types.Array):
            return lambda g, x: np.ascontiguousarray(np.real(g))
        return lambda g, x: g.real
    dt = x.dtype if isinstance(x, types.Array) else x
    if isinstance(g, types.Array):
        return lambda g, x: g.astype(dt)
    return lambda g, x: dt(g)


# ----------------------------------------------------------------------------- numpy.fft
def _python_only(fn, what):
    """A nopython call of ``fn`` fails typing with a message naming ``what``."""
    @overload(fn)
    def _ov(*args, **kwargs):
        raise errors.TypingError(f"{what} has no nopython implementation (Numba does not support it)")
    return fn


def real_if_close(a, tol=100):
    """``np.real_if_close``: the real part when every imaginary part is within ``tol`` machine epsilons."""
    return np.real_if_close(a, tol)


_python_only(real_if_close, "numpy.real_if_close")


def fft(a, n=None, axis=-1, norm=None):
    return np.fft.fft(a, n, axis, norm)


def ifft(a, n=None, axis=-1, norm=None):
    return np.fft.ifft(a, n, axis, norm)


def rfft(a, n=None, axis=-1, norm=None):
    return np.fft.rfft(a, n, axis, norm)


def irfft(a, n=None, axis=-1, norm=None):
    return np.fft.irfft(a, n, axis, norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    return np.fft.fft2(a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    return np.fft.ifft2(a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    return np.fft.rfft2(a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    return np.fft.irfft2(a, s, axes, norm)


def fftn(a, s=None, axes=None, norm=None):
    return np.fft.fftn(a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    return np.fft.ifftn(a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    return np.fft.rfftn(a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    return np.fft.irfftn(a, s, axes, norm)


def fftshift(x, axes=None):
    return np.fft.fftshift(x, axes)


def ifftshift(x, axes=None):
    return np.fft.ifftshift(x, axes)


for _f in (fft, ifft, rfft, irfft, fft2, ifft2, rfft2, irfft2, fftn, ifftn, rfftn, irfftn, fftshift, ifftshift):
    _python_only(_f, f"numpy.fft.{_f.__name__}")


def truncate_pad(g, shape):
    """``g`` cut or zero-padded at the end of each axis to ``shape`` (the adjoint of an FFT's ``n``/``s``)."""
    shape = tuple(int(n) for n in shape)
    gs = np.shape(g)
    if gs == shape:
        return g
    out = np.zeros(shape, dtype=np.result_type(g))
    idx = tuple(slice(0, min(a, b)) for a, b in zip(gs, shape))
    out[idx] = np.asarray(g)[idx]
    return out


def _axes_of(ndim, s, axes):
    """The axes an n-D FFT transforms (NumPy's rules: ``axes``, else the last ``len(s)``, else all)."""
    if axes is None:
        axes = range(ndim) if s is None else range(ndim - len(s), ndim)
    axes = [int(a) for a in axes]
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for an array of dimension {ndim}")
    out = [a % ndim for a in axes]
    if len(set(out)) != len(out):
        raise NotImplementedError(f"the derivative of an FFT over a repeated axis (axes={tuple(axes)}) is not "
                                  "supported; transform each axis once")
    return tuple(out)


def fft_axes(a, s=None, axes=None):
    """The transformed axes of ``fftn(a, s, axes)`` as non-negative ints (a repeated axis is refused)."""
    return _axes_of(np.ndim(a), s, axes)


def fft_full_s(a, s=None, axes=None):
    """The transform lengths of ``fftn(a, s, axes)``: ``s``, or ``a``'s sizes along the transformed axes."""
    ax = _axes_of(np.ndim(a), s, axes)
    if s is not None:
        return tuple(int(n) for n in s)
    return tuple(np.shape(a)[i] for i in ax)


def fft_full_n(a, n=None, axis=-1):
    """The transform length of ``fft(a, n, axis)``."""
    return int(n) if n is not None else np.shape(a)[axis]


def fft_swap_norm(norm):
    """The ``norm`` whose forward transform scales like the inverse transform under ``norm``."""
    return {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}[norm]


def irfft_weights(y, axes):
    """Weights along the last transformed axis of a real inverse FFT's half spectrum (length n//2 + 1 for the
    output length n there): 1 for the zero frequency (and the Nyquist one when n is even), 2 for the others,
    which stand for a frequency and its conjugate; shaped to broadcast against the half spectrum."""
    ax = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    last = ax[-1] % np.ndim(y)
    n = np.shape(y)[last]
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    shape = [1] * np.ndim(y)
    shape[last] = n // 2 + 1
    return w.reshape(shape)


_python_only(truncate_pad, "funcgrad's FFT padding helper")


# ----------------------------------------------------------------------------- scipy.signal.convolve
def convolve(in1, in2, mode="full", method="auto"):
    import scipy.signal   # lazily: importing scipy.signal costs seconds, and only its callers need it
    return scipy.signal.convolve(in1, in2, mode, method)


_python_only(convolve, "scipy.signal.convolve")


def np_convolve(a, v, mode="full"):
    """``numpy.convolve`` (1-D)."""
    return np.convolve(a, v, mode)


_python_only(np_convolve, "numpy.convolve")


def conv_full_shape(in1, in2):
    """The shape of the 'full' convolution of ``in1`` and ``in2``."""
    s1, s2 = np.shape(in1), np.shape(in2)
    if len(s1) != len(s2):
        raise ValueError("in1 and in2 should have the same dimensionality")
    return tuple(a + b - 1 for a, b in zip(s1, s2))


def _center(big, small):
    return tuple(slice((b - s) // 2, (b - s) // 2 + s) for b, s in zip(big, small))


def center_pad(g, shape):
    """Zeros of ``shape`` with ``g`` in the middle (where scipy's 'same'/'valid' output sits in 'full')."""
    shape = tuple(int(n) for n in shape)
    if np.shape(g) == shape:
        return g
    out = np.zeros(shape, dtype=np.result_type(g))
    out[_center(shape, np.shape(g))] = g
    return out


def center_crop(g, shape):
    """The middle ``shape`` part of ``g`` (scipy's ``_centered``)."""
    shape = tuple(int(n) for n in shape)
    if np.shape(g) == shape:
        return g
    return np.ascontiguousarray(np.asarray(g)[_center(np.shape(g), shape)])


def flip_index(x):
    """The index reversing every axis of ``x``."""
    return (slice(None, None, -1),) * np.ndim(x)


_python_only(center_pad, "funcgrad's convolution padding helper")
_python_only(center_crop, "funcgrad's convolution cropping helper")
