"""Captures: free variables of the user's function become parameters (arrays, numbers) read at every
call, or values fixed into the generated code (modules, functions, flags) checked at every call."""
from __future__ import annotations

import ast

import numpy as np

from ...errors import UnsupportedSyntaxError
from ..fence import error
from ..parse import MISSING
from ..specs import leaf_spec, scalar_kind
from ..values import ContentsOf, Dyn, Static, map_struct as _map_struct
from .common import (_binding_counts, _free_getter, _is_static_tree, _local_names, _path_getter, _safe)


class Captures:
    def external(self, obj):
        for k, v in self.externals.items():
            if v is obj:
                return ast.Name(k, ast.Load())
        name = self.names.fresh(f"_ext{len(self.externals)}_{_safe(getattr(obj, '__name__', type(obj).__name__))}")
        self.externals[name] = obj
        return ast.Name(name, ast.Load())

    def lookup_name(self, name, scope, node):
        kind, val, owner = self.find_name(name, scope)
        if kind == "bound":
            return val
        if kind == "unbound":   # owner: the scope of the function the name is local to
            s, nested = scope, False
            while s is not owner:
                nested = nested or s.fdef is not None
                s = s.parent
            what, exc = (f"'{name}', a variable of the enclosing function,", "NameError") if nested else \
                (f"local variable '{name}'", "UnboundLocalError")
            raise error(scope.parsed, node, f"{what} is read here before any value is assigned to it (Python "
                                            f"raises {exc})",
                        f"assign '{name}' before this line on every path (code in a branch whose condition is "
                        "always false never runs, so its assignments do not count)", cls=UnsupportedSyntaxError)
        if val is MISSING:
            raise error(scope.parsed, node, f"name '{name}' is not defined", None, cls=UnsupportedSyntaxError)
        return self.capture(name, val, owner)

    def find_name(self, name, scope):
        """Where ``name`` read in ``scope`` gets its value, without capturing anything: ``("bound", value,
        None)``; ``("unbound", None, its function's scope)`` for a local of this or an enclosing function that
        has no value yet (it is assigned later, or only in code that does not run: Python never reads such a
        name from the module); or ``("free", object or MISSING, owner scope)`` for a name of the module, a
        closure or the builtins."""
        s = scope
        while s is not None:
            if name in s.vars:
                return "bound", s.vars[name], None
            if s.fdef is not None and name in self.local_names(s.fdef):
                return "unbound", None, s
            s = s.parent
        # free variable of the function that defined this scope
        owner = scope
        while owner.parent is not None and owner.parsed is owner.parent.parsed:
            owner = owner.parent
        return "free", owner.parsed.lookup(name), owner

    def local_names(self, fdef):
        cache = self.__dict__.setdefault("_local_names", {})   # id(fdef) -> (fdef, names): fdef kept alive
        hit = cache.get(id(fdef))
        if hit is None or hit[0] is not fdef:
            hit = cache[id(fdef)] = (fdef, _local_names(fdef))
        return hit[1]

    def binding_count(self, fdef, name):
        """How many places in ``fdef``'s source bind ``name`` (see _binding_counts)."""
        cache = self.__dict__.setdefault("_binding_counts", {})   # id(fdef) -> (fdef, counts): fdef kept alive
        hit = cache.get(id(fdef))
        if hit is None or hit[0] is not fdef:
            hit = cache[id(fdef)] = (fdef, _binding_counts(fdef))
        return hit[1].get(name, 0)

    def capture(self, name, obj, scope, getter=None):
        """A free variable's value: runtime values become parameters read at every call."""
        if getter is None:
            getter = _free_getter(scope.parsed.fn, name)
        if isinstance(obj, np.ndarray) or (isinstance(obj, (float, int, complex, np.number)) and not isinstance(obj, bool)):
            # the key names where the value is read: two objects' attributes of one name (``c1.lr``, ``c2.lr``;
            # in generated code read back, ``b.ndim`` of two right-hand sides inlined from one definition) are
            # two parameters, not one read through the first object's getter
            key = (id(scope.parsed.fn), name, getattr(getter, "_key", getattr(getter, "_path", ())))
            if key not in self.captured:
                outname = self.names.fresh(name)
                self.param_ranks[outname] = np.ndim(obj)
                self.param_kinds[outname] = scalar_kind(obj)
                self.__dict__.setdefault("value_specs", {})[outname] = leaf_spec(obj)   # for grad(f)(c) inside
                self.captured[key] = outname
                self.captured_list.append((outname, getter))
            return Dyn(ast.Name(self.captured[key], ast.Load()))
        if isinstance(obj, (tuple, list, dict)) and not _is_static_tree(obj):
            # a captured pytree of arrays: each leaf becomes a captured runtime value
            return _map_struct(obj, lambda path, leaf: self.capture(
                name + "".join(f"_{k}" for k in path), leaf, scope, _path_getter(getter, path)))
        # a value fixed into the generated code (a function, a module, a flag, a tuple of sizes): the
        # compiled code is rebuilt when the name is rebound (identity) or a static tree changes (equality; a list
        # or dict changed in place, also inside a tuple, by its contents then)
        self.static_key.append((getter, ContentsOf(obj) if isinstance(obj, (list, dict, tuple)) else obj))
        return Static(obj)

    def as_static_capture(self, v):
        """``v`` as a constant when it is a captured int (a closure's ``argnum``) used where the generated code
        needs one (indexing a tuple or list): its value now, the code rebuilt when it changes; else ``v``."""
        if not (isinstance(v, Dyn) and isinstance(v.expr, ast.Name)):
            return v
        for outname, getter in self.captured_list:
            if outname == v.expr.id:
                try:
                    val = getter()
                except Exception:
                    return v
                if isinstance(val, (int, np.integer)) and not isinstance(val, (bool, np.bool_)):
                    self.static_key.append((getter, val))
                    return Static(val)
        return v
