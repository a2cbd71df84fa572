"""``autograd.test_util`` under funcgrad: ``check_grads`` and ``combo_check`` with autograd's call forms.

Test code written for autograd (``from autograd.test_util import check_grads``)
runs against funcgrad with ``from funcgrad.test_util import check_grads``. The
implementation (and its other, JAX-style call form) is in
:mod:`funcgrad.testing`.
"""
from .testing import EPS, RTOL, TOL, check_grads, combo_check, scalar_close

__all__ = ["check_grads", "combo_check", "scalar_close", "TOL", "RTOL", "EPS"]
