"""Names of the functions a user's code calls, spelled the way users import them.

``public_name(scipy.special.multigammaln)`` is ``"scipy.special.multigammaln"`` (not the private
module it is defined in), ``public_name(np.linalg.det)`` is ``"numpy.linalg.det"``,
``public_name(math.lgamma)`` is ``"math.lgamma"``. Error messages use it to name a call the user
wrote, so the user can find it (and give it a rule) without knowing funcgrad's internals.
"""
from __future__ import annotations

import sys
import types

import numpy as np

__all__ = ["public_name"]

_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, np.ufunc)
# where ufuncs (which carry no module of their own) are usually imported from
_UFUNC_HOMES = ("numpy", "scipy.special")


def public_name(obj) -> str:
    """The shortest importable dotted name of ``obj`` (a function, ufunc, builtin, bound method or
    callable object); its qualified name where no module reaches it."""
    name = getattr(obj, "__name__", None)
    qual = getattr(obj, "__qualname__", None) or name
    if not isinstance(qual, str):  # a callable object: name its class
        return f"{public_name(type(obj))} object"
    self_ = getattr(obj, "__self__", None)
    if self_ is not None and not isinstance(self_, type(sys)) and not isinstance(obj, type):
        return _bound_name(obj, self_, name)
    mod = getattr(obj, "__module__", None)
    if isinstance(self_, type(sys)):          # a builtin function of a module: math.lgamma
        mod = self_.__name__
    candidates = [mod] if isinstance(mod, str) and mod else list(_UFUNC_HOMES)
    if candidates[0] in ("builtins", "__main__"):
        return qual
    for m in candidates:
        for prefix in _public_prefixes(m):
            if _resolves(prefix, qual, obj):
                return f"{prefix}.{qual}"
    if not isinstance(obj, _FUNCTION_TYPES):  # a callable object (np.vectorize(f)) carrying a function's name
        return f"{public_name(type(obj))} object"
    return f"{candidates[0]}.{qual}" if isinstance(mod, str) and mod else qual


def _bound_name(obj, self_, name):
    """``scipy.stats.norm.logpdf``, ``numpy.random.normal``, ``numpy.add.at``, ``Generator.normal``."""
    if callable(self_) and getattr(self_, "__name__", None):   # a method of a function object (np.add.at)
        return f"{public_name(self_)}.{name}"
    mods = [getattr(type(self_), "__module__", None), getattr(getattr(obj, "__func__", None), "__module__", None)]
    for m in mods:
        if not isinstance(m, str):
            continue
        for prefix in _public_prefixes(m):
            mod = sys.modules.get(prefix)
            if mod is None:
                continue
            try:
                if getattr(mod, name, None) == obj:      # np.random.normal: the module exports the method
                    return f"{prefix}.{name}"
            except Exception:  # pragma: no cover - an object with a strange __eq__
                pass
            for attr, val in vars(mod).items():         # scipy.stats.norm: the module exports the object
                if val is self_ and not attr.startswith("_"):
                    return f"{prefix}.{attr}.{name}"
    return f"{type(self_).__qualname__}.{name}"


def _public_prefixes(module_name):
    """``scipy``, ``scipy.special`` for ``scipy.special._basic`` (stopping at the first private part)."""
    parts = module_name.split(".")
    out = []
    for k in range(1, len(parts) + 1):
        if k > 1 and parts[k - 1].startswith("_"):
            break
        out.append(".".join(parts[:k]))
    return out


def _resolves(module_name, qual, obj):
    mod = sys.modules.get(module_name)
    if mod is None:
        return False
    cur = mod
    for part in qual.split("."):
        cur = getattr(cur, part, None)
        if cur is None:
            return False
    return cur is obj
