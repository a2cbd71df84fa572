"""Every primitive, declared once (forward + VJP template side by side).

Importing this package registers NumPy's primitives (:mod:`.core`); the
model toolkit's primitives register when :mod:`funcgrad.nn` is imported, which
``import funcgrad`` does. :func:`.registry.registry` lists them all.
"""
from . import core  # noqa: F401  (registers NumPy's primitives)
from . import numpy_math  # noqa: F401  (NumPy's elementwise functions, statistics, scans, sorting)
from . import numpy_shape  # noqa: F401  (shape, assembly and contraction functions)
from . import tangents  # noqa: F401  (primitives the forward pass generates)
from . import linalg  # noqa: F401,E402  (numpy.linalg and scipy.linalg)
from . import special  # noqa: F401  (scipy.special's primitives; keys registered when scipy.special is imported)
from . import stats  # noqa: F401  (scipy.stats' distribution methods; keys registered when scipy.stats is imported)
from . import complex, fft, signal  # noqa: F401  (complex numbers, numpy.fft, scipy.signal.convolve)
from . import second_order  # noqa: F401,E402  (the JVP helper kernels defined over primitives: second order)
