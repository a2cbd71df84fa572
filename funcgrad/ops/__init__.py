"""Every primitive, declared once (forward + VJP template side by side).

Importing this package registers NumPy's primitives (:mod:`.core`); the
model toolkit's primitives register when :mod:`funcgrad.nn` is imported, which
``import funcgrad`` does. :func:`.registry.registry` lists them all.
"""
from . import core  # noqa: F401  (registers NumPy's primitives)
from . import tangents  # noqa: F401  (primitives the forward pass generates)
from . import complex, fft, signal  # noqa: F401  (complex numbers, numpy.fft, scipy.signal.convolve)
