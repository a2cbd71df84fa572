"""funcgrad: source-to-source reverse-mode autodiff for plain NumPy, compiled with Numba."""
from .tree import (tree_flatten, tree_unflatten, tree_leaves, tree_structure, tree_map,
                   register_pytree_node)
from .errors import FuncgradError, UnsupportedSyntaxError, NoDerivativeError, TreeStructureError

__all__ = [
    "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "register_pytree_node",
    "FuncgradError", "UnsupportedSyntaxError", "NoDerivativeError", "TreeStructureError",
]
__version__ = "0.1.0"
