"""The source transformation: parse -> fence -> normalize -> anf -> reverse -> emit.

This package is also what ``funcgrad.source`` names, so it is callable:
``funcgrad.source(f)`` returns the generated Python source of a transformed
function (see :func:`funcgrad.api.source`).
"""
import sys as _sys
import types as _types


class _CallableModule(_types.ModuleType):
    def __call__(self, fun, *example_args):
        from ..api import source
        return source(fun, *example_args)


_sys.modules[__name__].__class__ = _CallableModule
