"""The abstract values the passes reason with while transforming a function.

A value is *static* (known now: a module, a function, a number, a flag),
*dynamic* (known when the generated code runs: an AST expression over the
generated code's names) or a *struct* (a tuple, list, dict or NamedTuple
known now whose leaves are values). Argument values are built from the
call's argument specs (:mod:`.specs`), never from the arguments themselves.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

__all__ = ["ContentsOf", "Dyn", "Obj", "Splat", "Static", "Struct", "VSElement", "leaves", "map_struct"]


@dataclass
class Dyn:
    """A runtime value: an AST expression over output-code names."""
    expr: ast.expr


class Splat(Dyn):
    """``*t.shape`` among a call's arguments: a runtime tuple of sizes passed on as it is (``*expr``)."""


@dataclass
class VSElement(Dyn):
    """A differentiated argument whose value is an object of a user's vector space (``VSpace.register(cls)``):
    known when the code runs; it can only be given to functions with derivative rules, bound and passed on."""
    cls: type = None


@dataclass
class Static:
    """A value known while transforming: module, function, number, None, string, dtype."""
    obj: object


@dataclass(eq=False)
class Obj:
    """An instance of the user's own class made inside the function (``Lin(w, b)``): its class and its
    attributes, values set by its ``__init__`` (or a dataclass's fields) and later ``obj.attr = v``. One object
    whichever name holds it (compared by identity). ``cf_mark``: the loop or branch it was made in."""
    cls: type
    attrs: dict
    cf_mark: object = None
    after: type = None    # super(): methods looked up after this class of cls's MRO
    of: object = None     # super(): the object itself


@dataclass
class Struct:
    """A container known while transforming whose leaves are values."""
    kind: str            # tuple, list, dict, namedtuple
    items: object        # list of values, or dict key -> value
    cls: type | None = None

    def values(self):
        return list(self.items.values()) if self.kind == "dict" else list(self.items)


def leaves(val):
    """The leaves of a value tree, in flatten order."""
    if isinstance(val, Struct):
        out = []
        for v in val.values():
            out.extend(leaves(v))
        return out
    return [val]


def map_struct(obj, fn, path=()):
    """A Python container tree as a :class:`Struct` whose leaves are ``fn(path, leaf)``."""
    if isinstance(obj, dict):
        return Struct("dict", {k: map_struct(v, fn, path + (k,)) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):
        return Struct("namedtuple", [map_struct(v, fn, path + (i,)) for i, v in enumerate(obj)], type(obj))
    if isinstance(obj, (tuple, list)):
        return Struct(type(obj).__name__, [map_struct(v, fn, path + (i,)) for i, v in enumerate(obj)])
    return fn(path, obj)


class ContentsOf:
    """What a rebuild check expects of a list or dict fixed into the generated code: its contents when the code
    was built. The object itself is not enough: ``sizes[0] = 3`` or ``cfg.append(...)`` between two calls keeps
    the name bound to the same list, and code built from the old contents would give a stale value."""
    __slots__ = ("snapshot",)

    def __init__(self, obj):
        self.snapshot = copy.deepcopy(obj)

    def matches(self, now):
        try:
            return type(now) is type(self.snapshot) and bool(now == self.snapshot)
        except Exception:   # (a comparison that does not give one truth value: rebuild)
            return False
