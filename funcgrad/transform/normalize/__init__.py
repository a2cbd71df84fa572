"""Normalize: desugar the user's function into flat, explicit primitive code.

Input: a parsed function plus the structure of each argument (pytree
structure and, per leaf, array/scalar/static). Output (:class:`Lowered`): one
``ast.FunctionDef`` whose parameters are the argument *leaves* and the captured
free variables, and whose body guarantees:

* every differentiable operation is a call ``K.<primitive>(...)`` whose
  arguments are bound to the primitive's signature (operators, methods such as
  ``x.sum(axis=1)``, ``x.T`` and NumPy functions under any alias all become
  such calls, resolved by object, not by name);
* pytree reads by constant key/index/attribute, tuple unpacking, tuple and
  dict results, and calls to the user's own helper functions (same module,
  other modules, nested ``def``) are resolved statically: helpers are inlined
  with fresh names, containers disappear into their leaves;
* ``+=`` and friends are plain assignments; in-place writes are
  ``x[idx] = value`` statements;
* free variables (captured arrays and numbers) are parameters, so a captured
  value that changes takes effect at the next call without recompiling;
  modules, functions and other static objects are resolved now;
* non-differentiable NumPy calls (``np.zeros``, ``np.arange``, ...) are kept as
  ``np.<name>(...)``; anything else that cannot be differentiated is reported
  by the reverse pass if a differentiated value flows into it.

Control flow (``for``/``while``/``if``) is kept as statements with lowered
bodies; the reverse pass handles it.
"""
from __future__ import annotations

import ast
import types

from ...errors import UnsupportedSyntaxError
from ..fence import check as fence_check, error
from ..parse import Parsed
from ..values import Dyn, Static, Struct, leaves as _leaves
from .calls import Calls
from .captures import Captures
from .expressions import Expressions
from .lists import RuntimeLists
from .statements import Statements
from ..naming import RESERVED
from ..aliases import user_words
from ..unbound import guard_unbound, never_bound_reads
from .common import (Lowered, Names, Scope, _arguments, _safe, tag_file)


class Normalizer(Statements, Expressions, Calls, Captures, RuntimeLists):
    """The normalize pass; its methods are split by concern over the mixins it is made of."""

    def __init__(self, root: Parsed, allow_control_flow: bool):
        self.root = root
        self.names = Names()
        self.captured: dict = {}       # id(obj) or (scope, name) -> (outname, obj)
        self.captured_list: list = []
        self.externals: dict = {}
        self.static_key: list = []
        self.allow_control_flow = allow_control_flow
        self.has_loops = False
        self.depth = 0
        self.inline_stack: list = []
        self.tmp_count = 0
        self.param_ranks: dict = {}    # output name -> ndim of argument leaves and captured values
        self.param_kinds: dict = {}    # output name -> scalar kind ("f8", "i", ...) of leaves
        self.param_specs: dict = {}    # output name -> leaf spec (specs.leaf_spec) of argument leaves
        self.param_diff: set = set()    # output names of the differentiated argument leaves
        self._owned_structs: dict = {}  # (scope, variable) -> the container whose leaves it owns
        self.owned_leaves: set = set()  # runtime names of those leaves
        self.opaque_calls = False       # calls Numba cannot compile (library Python, logging)
        self.vspace = None              # the external name of custom.vspace (an argument of a user's vector space)

    # ------------------------------------------------------------ entry
    def lower(self, arg_values_for) -> Lowered:
        p = self.root
        fence_check(p, allow_control_flow=self.allow_control_flow)
        y = getattr(p.node, "generator_yield", None)
        if y is not None:
            raise error(p, y, "the function to differentiate is a generator (it yields): calling it makes an "
                              "iterator, not a value", "return the value (a sum, or np.stack of a list of the items)")
        scope = Scope(p, fdef=p.node)
        params = []
        body: list = []
        bound = arg_values_for(self)  # list of (argname, value tree) with Dyn leaves named
        params_of = bound
        bound = _pack_var_arguments(bound)
        if isinstance(p.fn, types.MethodType) and p.node.args.args:  # grad(model.loss): self is the instance
            scope.vars[p.node.args.args[0].arg] = Static(p.fn.__self__)
        for name, val in bound:
            scope.vars[name] = val
        if p.node.args.vararg is not None and p.node.args.vararg.arg not in scope.vars:
            scope.vars[p.node.args.vararg.arg] = Struct("tuple", [])   # f(*args) called with none
        for name, val in params_of:
            for leaf in _leaves(val):
                if isinstance(leaf, Dyn):
                    params.append(leaf.expr.id)
        self.body = body
        out = self.block(self.structured(p, p.node, scope), scope, body, top=True)
        if out is None:
            raise error(p, p.node, "the function returns nothing", "return the value to differentiate",
                        cls=UnsupportedSyntaxError)
        out = self.materialize(out, body, p.node)
        holder = ast.FunctionDef(name="_", args=_arguments([]), body=body, decorator_list=[], returns=None)
        guard_unbound(holder, params + [c[0] for c in self.captured_list], self.names.origins, self.names.fresh)
        body = holder.body
        for name, st in never_bound_reads(body, getattr(self, "placeholders", set())):
            # a name read in a loop before the iteration binds it (the last one's value), bound to a list or dict
            # there: that value is not a runtime variable the next iteration can read
            words, _ = user_words(name, self.names.origins)
            raise error(p, st, f"{words} is read before this iteration binds it (the previous iteration's value), "
                               "and what it is bound to there (a list, dict, tuple, function or None) is not a value "
                               "one iteration can pass to the next",
                        "bind it before the loop, or read it after this iteration binds it")
        tag_file(body, p.filename)
        fdef = ast.FunctionDef(name=_function_name(p.node.name), args=_arguments(params + [c[0] for c in self.captured_list]),
                               body=body or [ast.Pass()], decorator_list=[], returns=None)
        ast.fix_missing_locations(fdef)
        self.lowered_ranks = self.param_ranks
        return Lowered(node=fdef, params=params, captured=list(self.captured_list), output=out, ranks=self.param_ranks, kinds=self.param_kinds,
                       externals=self.externals, static_key=tuple(self.static_key),
                       has_loops=self.has_loops, filename=p.filename, opaque_calls=self.opaque_calls,
                       origins=dict(self.names.origins), vspace=self.vspace,
                       weak=frozenset(n for d in (self.param_specs, getattr(self, "value_specs", {}))
                                      for n, sp in d.items() if sp and sp[0] in ("f", "i")))


def _pack_var_arguments(bound):
    """The arguments of ``*args`` (named ``"*args"`` one by one) as one tuple, and the ``**kwargs`` dict (named
    ``"**kwargs"``) under the parameter's own name."""
    out, var = [], None
    for name, val in bound:
        if name.startswith("**"):
            out.append((name[2:], val))
        elif name.startswith("*"):
            if var is None:
                var = Struct("tuple", [])
                out.append((name[1:], var))
            var.items.append(val)
        else:
            out.append((name, val))
    return out


def _function_name(name):
    """The generated function's name: the user's, never a module global of the generated module (np, K)."""
    name = _safe(name)
    return name + "_" if name in RESERVED else name


def normalize(parsed: Parsed, arg_values_for, allow_control_flow=False) -> Lowered:
    """Lower ``parsed`` into flat primitive code (see the module docstring)."""
    return Normalizer(parsed, allow_control_flow).lower(arg_values_for)
