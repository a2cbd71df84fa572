"""funcgrad: source-to-source reverse-mode autodiff for plain NumPy, compiled with Numba.

Public API (everything else is internal):

* transforms: :func:`grad`, :func:`value_and_grad`, :func:`vjp`, :func:`jvp`, :func:`linearize`,
  :func:`jacfwd`, :func:`jacrev`, :func:`hvp`, :func:`hessian`, :func:`jit`, :func:`custom_vjp`,
  :func:`custom_jvp`, :func:`stop_gradient`, :func:`source`;
* autograd's operators: :func:`jacobian`, :func:`elementwise_grad`, :func:`deriv`,
  :func:`holomorphic_grad`; ``funcgrad.builtins`` (also ``funcgrad.tuple``, ...);
* pytrees: :func:`tree_flatten`, :func:`tree_unflatten`, :func:`tree_map`, ...;
* devices: :func:`devices`, :func:`device_put`, :func:`device_get` (arrays on the GPU: numba.cuda);
* errors: :class:`UnsupportedSyntaxError`, :class:`NoDerivativeError`, ...
"""
from .api import grad, value_and_grad, vjp, jit, custom_vjp, custom_jvp, stop_gradient, source
from .custom import checkpoint_range, checkpointed, remat
from .forward_mode import jvp, jacfwd, linearize, hvp, hessian, source
from .differential import jacobian, jacrev, elementwise_grad, deriv, holomorphic_grad
from . import testing
from .tree import (tree_flatten, tree_unflatten, tree_leaves, tree_structure, tree_map,
                   register_pytree_node)
from .errors import (FuncgradError, UnsupportedSyntaxError, NoDerivativeError, TreeStructureError,
                     TransformError, CompileError, FuncgradWarning, DeviceError)
from . import nn, optim, data, checkpoint, initializers  # (funcgrad.dist: import it explicitly)
from .kernels.cuda_backend import devices, device_put, device_get
from . import misc, autograd_api  # autograd's misc helpers and operators under its names (autograd_api.__all__)
from .autograd_api import *  # noqa: F401,F403,E402  make_vjp, make_hvp, hessian_vector_product, ...
from . import integrate as _integrate  # noqa: F401  (scipy.integrate.odeint, read by the transformer)

__all__ = [
    "grad", "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "linearize", "hvp", "hessian", "jit", "custom_vjp",
    "custom_jvp", "stop_gradient", "checkpoint_range", "checkpointed", "remat",
    "source", "jacobian", "elementwise_grad", "deriv", "holomorphic_grad",
    "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "register_pytree_node",
    "FuncgradError", "UnsupportedSyntaxError", "NoDerivativeError", "TreeStructureError", "TransformError",
    "CompileError", "FuncgradWarning", "DeviceError",
    "devices", "device_put", "device_get",
    "nn", "optim", "data", "checkpoint", "initializers", "testing",
]
__version__ = "0.1.0"

# autograd's builtins (``from funcgrad import tuple``); last, and not in __all__, so that neither this
# module's code nor ``from funcgrad import *`` sees them in place of the builtins
from . import builtins  # noqa: E402
from .builtins import isinstance, tuple, list, dict  # noqa: E402,F401,A001
