"""Pipeline: the order of the passes, and what a transformed function compiles to.

parse -> fence -> normalize -> anf -> reverse (or forward) -> emit. ``build(...)`` runs
them for one call signature and returns a :class:`Built` holding the compiled
callable and its generated source. ``FUNCGRAD_DEBUG=1`` prints the source
between passes to stderr.
"""
from __future__ import annotations

import ast
import linecache
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError
from ..kernels.base import Backend
from ..ops.registry import by_name, register_kernels
from ..tree import tree_unflatten
from .aliases import check_aliases, rebind_aliases, user_words
from .anf import anf
from .astutil import clone
from .forward import forward
from .infer import infer_kinds, infer_ranks
from .scalarize import scalarize
from .fuse import fuse
from .naming import names_in
from .emit import GENERATED_LINES, REVERSE_MODE_FILES, externals_fingerprint, module_source, render_block, rows_as_kernel, write_module
from .normalize import normalize
from .parse import parse
from .activity import display_name
from .reverse import basic_index, reverse
from .specs import spec_kind
from .weak import weaken_functions
from ..custom import vspace
from .values import Dyn, Static, Struct, VSElement, map_struct
from .astutil import ast_walk

STATS = {"builds": 0}
_KERNELS_READABLE: set = set()


def _debug(title, text):
    if os.environ.get("FUNCGRAD_DEBUG"):
        print(f"---- funcgrad: {title} ----\n{text}", file=sys.stderr)


@dataclass
class Built:
    fn: object                # the compiled callable
    primal_fn: object         # the primal alone (outputs only)
    source: str               # the generated module's source
    name: str
    params: list              # argument leaf names (flatten order)
    captured: list            # (name, getter) for captured runtime values
    out_tree: object          # value tree of the outputs (Struct/Dyn/Static)
    out_atoms: list           # ast atom per output leaf
    mode: str
    static_checks: list       # (getter, expected value) for values fixed into the generated code
    path: str = ""            # the generated file
    line_map: dict = None     # generated line -> the user's (file, line)
    leaf_names: list = None   # the generated parameter of each argument leaf
    diff_names: list = None   # the differentiated ones
    py_fn_thunk: object = None  # makes the generated Python function (funcgrad can read and transform it again)
    origins: dict = None      # generated name -> the user's words for it (messages)
    specialized: bool = False  # compiled for the argument shapes it was built with (scalarize): checks them
    _py_fn: object = None

    @property
    def py_fn(self):
        """The generated function as Python, for any shapes: made at first use (a specialized build generates the
        code for any shapes then: only a second-order transform, or an error to locate, reads it)."""
        if self._py_fn is None and self.py_fn_thunk is not None:
            self._py_fn, self.py_fn_thunk = self.py_fn_thunk(), None
        return self._py_fn

    def user_line(self, filename, lineno):
        """The user's (file, line) that line ``lineno`` of generated file ``filename`` came from, for this build's
        module and for its code for any shapes (:attr:`py_fn`); None for any other file."""
        if filename == self.path:
            return (self.line_map or {}).get(lineno)
        if self._py_fn is not None and filename == self._py_fn.__code__.co_filename:
            return GENERATED_LINES.get(filename, {}).get(lineno)
        return None


def _out_leaves(val, atoms, version):
    if isinstance(val, Struct):
        for v in val.values():
            _out_leaves(v, atoms, version)
    elif isinstance(val, Dyn):
        e = val.expr
        if isinstance(e, ast.Name):
            atoms.append(ast.Name(version.get(e.id, e.id), ast.Load()))
        else:
            atoms.append(e)
    elif isinstance(val, Static):
        atoms.append(ast.Constant(val.obj) if isinstance(val.obj, (int, float, complex, bool, type(None))) else None)
    return atoms


def _returns(atoms):
    return ast.Tuple(elts=[a if a is not None else ast.Constant(None) for a in atoms], ctx=ast.Load())


@dataclass
class Signature:
    """What one specialization depends on: per positional argument its name, pytree structure and
    leaf specs (:mod:`.specs`); the objects of static leaves (strings, None); which are differentiated."""
    names: list
    trees: list
    specs: list               # per argument: tuple of leaf specs
    statics: dict             # (argument, leaf) -> object, for static leaves
    diff: tuple               # differentiated argument indices
    on_device: bool = False   # the arrays are GPU arrays (the cuda backend builds it)
    shapes: dict = None       # (argument, leaf) -> (shape, dtype str) of array leaves at the call that built it:
                              # not part of the key; compiled code specialized on them checks them (scalarize)


def _sanitize(s):
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in str(s))
    while "__" in s:
        s = s.replace("__", "_")
    return s.strip("_")


def _argument_values(sig: Signature, leaf_names: list, diff: list, leaf_shapes: dict = None):
    """``arg_values_for(normalizer)``: the abstract value of every argument, built from its specs."""
    def arg_values_for(normalizer):
        out = []
        for i, (nm, td, specs) in enumerate(zip(sig.names, sig.trees, sig.specs)):
            tree = tree_unflatten(td, list(range(len(specs))))

            def make(path, idx, i=i, nm=nm, specs=specs):
                if idx is None:   # None is a pytree node with no leaves (tree.py): a static None here
                    return Static(None)
                spec = specs[idx]
                if spec[0] == "static":
                    return Static(sig.statics[(i, idx)])
                base = nm + ("_" + "_".join(_sanitize(p) for p in path) if path else "")
                n = normalizer.names.fresh(base)
                normalizer.param_ranks[n] = spec[2] if spec[0] == "a" else 0
                normalizer.param_kinds[n] = spec_kind(spec) if spec[0] != "vs" else "vs"
                normalizer.param_specs[n] = spec
                leaf_names.append(n)
                if leaf_shapes is not None and sig.shapes and (i, idx) in sig.shapes:
                    leaf_shapes[n] = sig.shapes[(i, idx)]
                if i in sig.diff:
                    diff.append(n)
                    normalizer.param_diff.add(n)
                if spec[0] == "vs":   # an object of a user's vector space: its cotangent's zeros and sums are its
                    normalizer.vspace = normalizer.external(vspace).id   # space's (vspace(x).zeros(), .add),
                    normalizer.opaque_calls = True                       # Python calls (auto: run as Python)
                    return VSElement(ast.Name(n, ast.Load()), spec[1])
                return Dyn(ast.Name(n, ast.Load()))

            if td.num_leaves == 1 and td.kind == "leaf":
                out.append((nm, make((), 0)))
            else:
                out.append((nm, map_struct(tree, lambda path, idx: make(path, idx))))
        return out
    return arg_values_for


SPECIALIZATION_MISS = "funcgrad: compiled for other argument shapes"   # what the guard of specialized code raises


def _specialize(a, leaf_shapes, low, atoms, ranks):
    """Scalarize ``a`` (ANF, in place) for the argument shapes of this call; the guard statements the generated
    functions start with (a run-time check of every shape and captured integer the code assumes), or None when
    nothing was scalarized."""
    consts = {}
    for cname, getter in low.captured:
        try:
            v = getter()
        except Exception:   # noqa: BLE001  (read again, and reported, when the function runs)
            continue
        if type(v) is int:
            consts[cname] = v
    kinds = infer_kinds(list(a.body), dict(low.kinds or {}))
    got = scalarize(a, leaf_shapes, consts, [o.id for o in atoms if isinstance(o, ast.Name)], ranks, kinds)
    if got is None:
        return None
    guards, parts = got
    for p, (v, k) in parts.items():
        low.origins[p] = f"{low.origins.get(v) or user_words(v, {})}[{k}]"
    return _guard_stmt(guards, a)


def _guard_stmt(guards, where):
    """``if <any shape or value differs>: raise LookupError(SPECIALIZATION_MISS)`` for ``(name, axis, value)``s."""
    tests = []
    for nm, axis, value in guards:
        lhs = ast.Name(nm, ast.Load())
        if axis is not None:
            lhs = ast.Subscript(value=ast.Attribute(value=lhs, attr="shape", ctx=ast.Load()),
                                slice=ast.Constant(axis), ctx=ast.Load())
        tests.append(ast.Compare(left=lhs, ops=[ast.NotEq()], comparators=[ast.Constant(value)]))
    if not tests:
        return []
    miss = ast.Raise(exc=ast.Call(func=ast.Name("LookupError", ast.Load()), args=[ast.Constant(SPECIALIZATION_MISS)],
                                  keywords=[]), cause=None)
    guard = ast.If(test=tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.Or(), values=tests), body=[miss], orelse=[])
    ast.copy_location(guard, where)
    ast.fix_missing_locations(guard)
    return [guard]


_FLOAT_UFUNCS: dict = {}


def _float_ufuncs(backend):
    """K names of ``backend`` that are NumPy's own ufuncs of one or two inputs with a float64 -> float64 loop."""
    ns = backend.namespace(True)
    got = _FLOAT_UFUNCS.get(id(ns))
    if got is None:
        got = {}
        for k in dir(ns):
            u = getattr(ns, k, None)
            if type(u) is np.ufunc and u.nout == 1 and u.nin in (1, 2) and getattr(np, u.__name__, None) is u \
                    and ("d->d" if u.nin == 1 else "dd->d") in u.types:
                got[k] = u.nin
        _FLOAT_UFUNCS[id(ns)] = got
    return got


def choose_strategy(jit, has_loops, opaque_calls=False):
    """The strategy for ``jit`` ("auto", "njit", "python" or "nojit"): auto compiles functions with
    loops (their own or a helper's) whole, and runs loop-free array code, and code calling functions
    Numba cannot compile (library Python, logging), as Python over compiled kernels."""
    if jit == "auto":
        return "njit" if has_loops and not opaque_calls else "python"
    return jit


def _kernels_called(stmts):
    """The names ``K.<name>`` the code reads."""
    return {n.attr for n in ast_walk(ast.Module(body=list(stmts), type_ignores=[]))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "K"}


def _calls_flagged(kernels, backend, flag):
    """True when the code, calling kernels named ``kernels``, calls one carrying ``flag``: ``python_only`` (a
    SciPy routine Numba cannot compile: auto runs the function as Python) or ``uncacheable`` (its nopython
    version leaves to Python through ``numba.objmode``, whose environment a cached caller cannot find in a new
    process)."""
    K = backend.namespace()
    return any(getattr(getattr(K, k, None), flag, False) for k in kernels)


def _check_supported(src, backend, line_map):
    """Refuse, at the user's line, generated code calling a kernel ``backend`` does not have."""
    for node in ast_walk(ast.parse(src)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "K" \
                and not backend.supports(node.attr):
            where = line_map.get(node.lineno) or (None, None)
            prim = by_name(node.attr)
            # a function users call is named as they call it; a helper kernel of some derivative is not named
            # at all (its name is funcgrad's, not the user's)
            what = (f"{display_name(prim)} (or its derivative)" if prim is not None and not _internal(prim)
                    else "the derivative of this line")
            text = linecache.getline(where[0], where[1]) if where[0] else None
            raise DeviceError(f"{what} is not available on the {backend.name} backend yet; compute this part on "
                              "the host (funcgrad.device_get) or write it with the operations the GPU backend runs "
                              "(README: On the GPU)", where[0], where[1], text)


def _internal(prim):
    """A primitive no user calls by name (a piece of some derivative: unbroadcast, index_add...)."""
    return all(k is None or (getattr(k, "__module__", None) or "").startswith("funcgrad.ops")
               for k in (prim.key, *prim.extra_keys))


def build(fn, sig: Signature, backend, jit="auto", kind="vjp", allow_control_flow=True, checkpoint_loops=None,
          specialize=True):
    """Transform ``fn`` for one signature and compile it on ``backend``.

    ``jit`` is "auto", "njit", "python" or "nojit" (see :func:`choose_strategy`); ``kind`` is
    "vjp" (outputs and cotangents), "jvp" (outputs and tangents: forward mode) or "primal"
    (outputs only, for ``jit``). ``checkpoint_loops`` (bytes, or None): the reverse pass checkpoints a loop whose
    tape would exceed it (see :func:`.reverse.reverse`).
    """
    STATS["builds"] += 1
    leaf_names: list = []
    diff_leaves: list = []
    parsed = parse(fn)
    leaf_shapes: dict = {}
    generic = None   # reverse mode specialized on shapes: the ANF before scalarize (the code for any shapes)
    low = normalize(parsed, _argument_values(sig, leaf_names, diff_leaves, leaf_shapes),
                    allow_control_flow=allow_control_flow)
    _debug("normalize", ast.unparse(low.node))
    params = low.params + [c[0] for c in low.captured]
    a = anf(low.node, params)
    for version, name in a._anf_versions.items():   # messages name an SSA version x_1 as the user's x
        if version not in low.origins:
            low.origins[version] = low.origins.get(name) or user_words(name, {})
    _debug("anf", "\n".join(render_block(a.body)))
    atoms = _out_leaves(low.output, [], a._anf_version)
    name = low.node.name
    header = (f"Generated by funcgrad from {parsed.filename}:{parsed.node.lineno} ({getattr(fn, '__qualname__', name)}).\n"
              "Read it, step through it with pdb; it is regenerated when the function changes.")
    header += f"\nBackend: {backend.fingerprint()}"   # a changed kernel or library never meets stale code
    if low.externals:
        header += f"\nExternal objects: {externals_fingerprint(low.externals)}"
    line_map: dict = {}
    def src_lookup(stmt):
        return (parsed.filename, getattr(stmt, "lineno", None))

    ranks = infer_ranks(list(a.body), dict(low.ranks or {}))
    # x += v into an array another name must hold too: that name is rebound to the result after it
    rebind_aliases(a, [o.id for o in atoms if isinstance(o, ast.Name)], ranks, basic_index)
    if kind != "vjp":   # x += v into an array another name holds: NumPy writes in place, the code rebinds x
        check_aliases(a, [o.id for o in atoms if isinstance(o, ast.Name)], ranks, basic_index,
                      lambda st: parsed.filename, subscripts=False, origins=low.origins)
    cotangents = frozenset()
    rows = (lambda body: rows_as_kernel(body, ranks)) if backend.operators_as_syntax else (lambda body: body)
    # compiled by Numba (as far as can be told before the code exists): small arrays held as scalars
    likely = backend.effective_strategy(choose_strategy(jit, low.has_loops, low.opaque_calls))
    guard = []
    if specialize and kind in ("vjp", "primal") and likely == "njit" and leaf_shapes and \
            backend.operators_as_syntax:
        generic = clone(a)   # the code funcgrad reads back (second order) and runs to find lines
        guard = _specialize(a, leaf_shapes, low, atoms, ranks)
        if guard is None:
            generic, guard = None, []
    # elementwise runs over vectors of known lengths as one loop each (compiled whole; the code for these shapes)
    fusing = specialize and kind in ("vjp", "primal") and likely == "njit" and bool(leaf_shapes) and \
        backend.operators_as_syntax and os.environ.get("FUNCGRAD_FUSE", "1") != "0"
    fused = []
    generic_unfused = clone(a) if fusing and generic is None else None

    def fused_body(stmts, fparams, where, live, cotangents=None):
        """``stmts`` with their elementwise runs fused, and the guard of the shapes that assumes."""
        if not fusing or where is not a:
            return stmts, []
        if _calls_flagged(_kernels_called(stmts), backend, "python_only"):
            return stmts, []   # run as Python: a loop over elements would be slower than NumPy's calls
        scalars = {p: k for p, k in (low.kinds or {}).items() if (low.ranks or {}).get(p) == 0}
        got = fuse(stmts, fparams, leaf_shapes, scalars, _float_ufuncs(backend), SPECIALIZATION_MISS, cotangents,
                   names_in(live))
        if got is None:
            return stmts, []
        fused.append(True)
        return got, []

    def primal_module(fa, guard, line_map):
        ret = ast.Return(value=_returns(atoms))
        stmts, fguard = fused_body(list(fa.body), params, fa, ret)
        body = guard + fguard + rows(stmts) + [ret]
        return body, module_source(header, [(name, params, body)], None, line_map,
                                   operators=backend.operators_as_syntax)

    if kind == "primal":
        body, src = primal_module(a, guard, line_map)
        fname = name
    elif kind == "jvp":
        fw = forward(a, list(diff_leaves), atoms, src_lookup, param_kinds=low.kinds, param_ranks=low.ranks)
        ret = ast.Return(value=ast.Tuple(elts=[_returns(atoms), ast.Tuple(elts=fw.tangents, ctx=ast.Load())],
                                         ctx=ast.Load()))
        fname = f"{name}_jvp"
        primal_body = rows(list(a.body)) + [ast.Return(value=_returns(atoms))]
        body = rows(fw.body) + [ret]
        src = module_source(header, [(fname, params + fw.params, body), (name, params, primal_body)],
                            None, line_map, operators=backend.operators_as_syntax)
    else:
        # loop adjoints preaccumulated where compiled by Numba
        def vjp_module(fa, guard, line_map):
            adj = reverse(fa, list(diff_leaves), atoms, src_lookup, param_ranks=low.ranks, param_kinds=low.kinds,
                          origins=low.origins, preaccumulate_loops=likely == "njit",
                          checkpoint_loops=checkpoint_loops, vspace=low.vspace, replay_loops=likely == "njit")
            ret = ast.Return(value=ast.Tuple(elts=[_returns(adj.outputs), ast.Tuple(elts=adj.grads, ctx=ast.Load())],
                                             ctx=ast.Load()))
            stmts, fguard = fused_body(adj.primal + adj.adjoint, params + adj.g_params, fa, ret,
                                       {g: o.id for g, o in zip(adj.g_params, adj.outputs) if isinstance(o, ast.Name)})
            body = guard + fguard + rows(stmts) + [ret]
            pret = ast.Return(value=_returns(atoms))
            pstmts, pguard = fused_body(list(fa.body), params, fa, pret)
            primal_body = guard + pguard + rows(pstmts) + [pret]
            src = module_source(header, [(f"{name}_vjp", params + adj.g_params, body), (name, params, primal_body)],
                                None, line_map, operators=backend.operators_as_syntax)
            return adj, body, src

        adj, body, src = vjp_module(a, guard, line_map)
        cotangents = adj.cotangents
        fname = f"{name}_vjp"
    if fused and generic is None:
        generic = generic_unfused
    _debug("emit", src)
    mod = write_module(fname, src)
    for k, (f, ln) in list(line_map.items()):   # code funcgrad generated (second order): the user's line it came from
        line_map[k] = GENERATED_LINES.get(f, {}).get(ln, (f, ln))
    GENERATED_LINES[mod.__file__] = line_map
    if kind == "vjp":
        REVERSE_MODE_FILES.add(mod.__file__)
    if type(backend).supports is not Backend.supports:
        _check_supported(src, backend, line_map)
    if backend not in _KERNELS_READABLE:   # generated code calls K.<name>: let funcgrad read it back
        register_kernels(backend.namespace(True))
        register_kernels(backend.namespace(False))
        _KERNELS_READABLE.add(backend)
    kernels = _kernels_called(body)
    mode = choose_strategy(jit, low.has_loops, low.opaque_calls or _calls_flagged(kernels, backend, "python_only"))
    mode = backend.effective_strategy(mode)
    cache = not _calls_flagged(kernels, backend, "uncacheable")
    fns = {fname: getattr(mod, fname), name: getattr(mod, name)}
    if mode == "njit" and hasattr(backend.namespace(True), "weak"):   # Python numbers stay weak under Numba
        fns = dict(zip(fns, weaken_functions(list(fns.values()), src, mod.__file__, low.weak, cotangents)))
    compiled = backend.compile(fns[fname], mode, low.externals, cache=cache)
    primal = backend.compile(fns[name], mode, low.externals, cache=cache) if kind != "primal" else compiled

    def py_fn():
        if generic is None:
            return backend.compile(getattr(mod, fname), "nojit", low.externals)
        generic_lines: dict = {}   # the same function for any shapes, as Python
        generic_src = (vjp_module if kind == "vjp" else primal_module)(generic, [], generic_lines)[-1]
        py_mod = write_module(fname, generic_src)
        for k, (f, ln) in list(generic_lines.items()):
            generic_lines[k] = GENERATED_LINES.get(f, {}).get(ln, (f, ln))
        GENERATED_LINES[py_mod.__file__] = generic_lines
        if kind == "vjp":
            REVERSE_MODE_FILES.add(py_mod.__file__)
        return backend.compile(getattr(py_mod, fname), "nojit", low.externals)
    return Built(origins=low.origins, fn=compiled, primal_fn=primal, source=src, name=fname, params=params,
                 captured=low.captured,
                 out_tree=low.output, out_atoms=atoms, mode=mode, static_checks=list(low.static_key),
                 path=mod.__file__, line_map=line_map, leaf_names=leaf_names, diff_names=diff_leaves,
                 py_fn_thunk=py_fn,
                 specialized=generic is not None)
