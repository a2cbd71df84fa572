"""The README's coverage table, made from the registry: ``python -m tests.coverage_table``.

Every function funcgrad differentiates is a key of the registry (``funcgrad/ops``): a primitive with
VJP and JVP lines, a definition over primitives, or a NumPy function lowered onto others; functions
whose derivative is zero (comparisons, ``argmax``, rounding) are declared as such. This lists them
by the module users call them from. ``tests/test_coverage_table.py`` fails when the README's table
(between the ``coverage`` markers) is not what this prints, so the README stays true.
"""
from __future__ import annotations

import collections
import types

import numpy as np
import scipy.integrate  # noqa: F401  (their keys register when the user imports them)
import scipy.linalg  # noqa: F401
import scipy.signal  # noqa: F401
import scipy.special  # noqa: F401
import scipy.stats  # noqa: F401

import funcgrad  # noqa: F401
from funcgrad.custom import CustomVJPFunction
from funcgrad.ops import registry as R
from funcgrad.transform.public_names import public_name
from funcgrad.transform.normalize.common import _METHODS
from funcgrad.transform.normalize.lowerings import LOWERINGS

BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"
MODULES = ["numpy", "ndarray methods", "numpy.linalg", "numpy.fft", "scipy.special", "scipy.stats",
           "scipy.linalg", "scipy.signal", "scipy.integrate", "math", "builtins"]


def _python_only_code(fn, seen=None):
    """Whether a definition (a Python function over primitives) calls a primitive with no nopython kernel."""
    seen = seen if seen is not None else set()
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return False
    seen.add(id(fn))
    g = fn.__globals__
    objs = [g.get(n) for n in fn.__code__.co_names if n in g]
    objs += [getattr(o, n, None) for o in list(objs) if isinstance(o, types.ModuleType)
             for n in fn.__code__.co_names]
    for c in fn.__code__.co_consts:   # nested functions and lambdas: the names they read
        if isinstance(c, types.CodeType):
            objs += [g.get(n) for n in c.co_names if n in g]
    for o in objs:
        if isinstance(o, CustomVJPFunction):
            return True
        p = R.lookup(o) if callable(o) else None
        if p is not None and p.python_only:
            return True
        if isinstance(o, types.FunctionType) and o.__module__ and o.__module__.startswith("funcgrad") \
                and _python_only_code(o, seen):
            return True
    return False


def entries():
    """``{module: {name: (kind, python_only)}}``; kind is "rule" or "zero"."""
    R._run_deferred()
    found = {}
    for p in R.registry().values():
        for k in [p.key] + list(p.extra_keys):
            found.setdefault(id(k), (k, "rule", p.python_only))
    for k, d in R._DEFINED.values():
        found.setdefault(id(k), (k, "rule", _python_only_code(d.fn)))
    for k in LOWERINGS:
        found.setdefault(id(k), (k, "rule", False))
    for k in R._NONDIFF.values():
        found.setdefault(id(k), (k, "zero", False))
    table = collections.defaultdict(dict)
    for k, kind, py in found.values():
        name = public_name(k)
        if name.startswith("funcgrad") or "." not in name and name not in ("abs", "len", "round", "sum", "max",
                                                                                "min", "pow"):
            continue
        mod, _, short = name.rpartition(".")
        mod = mod or "builtins"
        if mod.startswith("scipy.stats."):
            mod, short = "scipy.stats", f"{mod[len('scipy.stats.'):]}.{short}"
        table[mod][short] = (kind, py)
    for meth, fn in _METHODS.items():
        p = R.lookup(fn) if fn is not None else None
        table["ndarray methods"][f".{meth}"] = ("zero" if fn is not None and R.is_nondiff(fn) else "rule",
                                                bool(p and p.python_only))
    return table


def markdown():
    t = entries()
    lines = [BEGIN, "",
             "| module | functions differentiated | zero derivative (runs, no rule needed) |",
             "|---|---|---|"]
    for mod in MODULES:   # (primitives other tests register in this process live in their own modules)
        if mod not in t:
            continue
        rules = sorted(n for n, (k, _) in t[mod].items() if k == "rule")
        zero = sorted(n for n, (k, _) in t[mod].items() if k == "zero")
        fmt = [f"`{n}`" + ("†" if t[mod][n][1] else "") for n in rules]
        lines.append(f"| `{mod}` ({len(rules)}) | {' '.join(fmt)} | {' '.join(f'`{n}`' for n in zero)} |")
    lines += ["", "† runs as Python over compiled kernels: `jit=\"auto\"` runs a function calling it as Python, "
              "`jit=\"whole\"` refuses it at your line.", "", END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
