"""Shared pieces of normalize: the scope and name bookkeeping, marker values, and small AST helpers."""
from __future__ import annotations

import ast
import itertools
import builtins
import copy
import inspect
import os
import re
import site
import sysconfig
import types
from dataclasses import dataclass, field

import numpy as np

from .. import annotations as A
from ...custom import CustomFunction
from ...ops.core import getitem as _getitem
from ...ops.registry import lookup
from ..parse import MISSING, Parsed
from ..emit import GENERATED_LINES, REVERSE_MODE_FILES, cache_dir
from ..naming import RESERVED
from ..values import Dyn, Static, Struct
from ..astutil import ast_walk


@dataclass
class LocalFunction:
    """A nested ``def`` (closing over its defining scope)."""
    node: ast.FunctionDef
    scope: "Scope"
    parsed: Parsed
    defaults: dict | None = None   # parameter -> its default's value, evaluated where the def ran (Python's rule)


@dataclass
class CustomVJP:
    """Marker for funcgrad.custom_vjp functions (see api.custom_vjp)."""
    fn: object


@dataclass
class Lowered:
    node: ast.FunctionDef
    params: list                 # output names of argument leaves (in flatten order)
    captured: list               # (output name, python object) of captured runtime values
    output: object               # value tree of the return (Struct / Dyn / Static)
    externals: dict              # extra globals the generated module needs
    static_key: tuple            # captured static values that the compiled code depends on
    has_loops: bool
    filename: str
    ranks: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)
    opaque_calls: bool = False   # calls whole-function Numba cannot compile
    origins: dict = field(default_factory=dict)   # generated name -> the user's words for it (messages)
    weak: frozenset = frozenset()   # parameters that hold a Python number (NEP 50: weak beside arrays)
    vspace: str | None = None    # the generated code's name of custom.vspace, when an argument is a user space's


# ---------------------------------------------------------------- method map
_METHODS = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
    "copy": np.copy, "dot": np.dot, "clip": np.clip, "squeeze": np.squeeze,
    "transpose": np.transpose, "reshape": np.reshape, "ravel": None, "flatten": None,
    "astype": None, "any": np.any, "all": np.all, "argmax": np.argmax, "argmin": np.argmin,
    "cumsum": np.cumsum, "cumprod": np.cumprod, "var": np.var, "std": np.std,
    "swapaxes": np.swapaxes, "repeat": np.repeat, "diagonal": np.diagonal, "trace": np.trace,
    "conj": np.conjugate, "conjugate": np.conjugate,
}


_OPS = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide,
        ast.Pow: np.power, ast.MatMult: np.matmul, ast.Mod: np.remainder}


_NONDIFF_OPS = (ast.FloorDiv, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)


_BUILTIN_MAP = {abs: np.absolute, max: np.maximum, min: np.minimum}
# builtins evaluated while transforming when every argument is known then
_STATIC_BUILTINS = {isinstance, issubclass, type, hasattr, getattr, callable, len, abs, round, min, max, sorted,
                    reversed, tuple, list, str, int, float, bool, any, all, divmod, pow, repr, zip, enumerate, dict,
                    sum}
# builtins that whole-function Numba code can call
_NJIT_BUILTINS = {print, len, abs, min, max, round, int, float, bool, range}


class Names:
    def __init__(self):
        self.used = set()
        self.origins: dict = {}   # a generated name -> the user's words for it (for messages)

    def fresh(self, base, shown=None):
        base = "".join(c if (c.isalnum() or c == "_") else "_" for c in str(base)) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base.startswith("__"):  # the structure pass's flags (__ret, __brk1): generated code never has them
            base = "_" + base.lstrip("_") if base.strip("_") else "v"
        if base in RESERVED or base.startswith("d_") or base.startswith("_t"):  # K, np, builtins: never shadowed
            base = base + "_"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        if shown is not None and shown[1] != name:
            self.origins[name] = shown
        return name


class Scope:
    def __init__(self, parsed: Parsed, parent: "Scope | None" = None, prefix="", fdef=None):
        self.parsed = parsed
        self.parent = parent
        self.vars: dict = {}
        self.prefix = prefix
        # the function whose body this scope is (None for a comprehension's scope): the names it assigns are
        # its locals, which Python never reads from an enclosing scope or the module, even before assignment
        self.fdef = fdef
        self.serial = next(_SCOPE_SERIAL)   # scopes made later have larger numbers (enter_cf compares them)


_SCOPE_SERIAL = itertools.count()


class _Return(Exception):
    pass


@dataclass
class _BoundMethod:
    base: Dyn
    name: str
    node: ast.AST


@dataclass
class _Range:
    args: list
    checkpoint: object = None   # from funcgrad.checkpoint_range: the segment length (0: automatic)


@dataclass
class _DictView:
    """``d.items`` / ``d.keys`` / ``d.values`` / ``d.get`` of a dict known now (and ``nt._replace``)."""
    struct: object
    attr: str

    def items(self):
        from_ = self.struct.items
        if self.attr == "keys":
            return [Static(k) for k in from_]
        if self.attr == "values":
            return list(from_.values())
        return [Struct("tuple", [Static(k), v]) for k, v in from_.items()]


@dataclass
class _Partial:
    """``functools.partial(f, *args, **kwargs)`` made inside the function."""
    fn: object
    args: list
    kwargs: dict


@dataclass
class _Iter:
    fn: object
    args: list
    start: object = None   # enumerate's first count (a value; None: 0)


def lookup_getitem():
    return lookup(_getitem)


def _np_attr(name):
    return ast.Attribute(value=ast.Name("np", ast.Load()), attr=name, ctx=ast.Load())


def primitive_method(cls, name):
    """The custom function (``@primitive``, ``custom_vjp``) defined as method ``name`` of ``cls`` (one that binds
    its object as the first argument: not a staticmethod or classmethod), or None."""
    meth = inspect.getattr_static(cls, name, None)
    return meth if isinstance(meth, CustomFunction) else None


def _is_user_code(fn):
    """True for Python functions funcgrad reads and transforms: the user's own code (and funcgrad's).

    Installed libraries are opaque (called as they are, never read): anything under site-packages,
    dist-packages or the standard library, frozen modules, the known numeric roots (numpy, scipy,
    numba, ...), and everything that is not a Python function (builtins, C and Cython functions)."""
    mod = getattr(fn, "__module__", None) or ""
    if mod == "funcgrad" or mod.startswith("funcgrad."):
        return True
    if mod.split(".")[0] in _LIBRARY_ROOTS:
        return False
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    return not is_library_file(code.co_filename)


def is_library_file(filename):
    """True for a file of an installed library or of the standard library (or a frozen module)."""
    if filename.startswith("<frozen"):
        return True
    if filename.startswith("<"):   # exec'd source (a notebook cell, funcgrad's own wrappers): the user's
        return False
    path = os.path.abspath(filename)
    return any(part in path for part in _LIBRARY_PARTS) or path.startswith(_LIBRARY_DIRS)


def _library_dirs():
    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_paths()[key])
        except KeyError:  # pragma: no cover - every CPython has them
            pass
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except AttributeError:  # pragma: no cover - virtualenvs of old Pythons lack them
        pass
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_LIBRARY_ROOTS = {"numpy", "scipy", "numba", "math", "functools", "builtins", "logging"}


def _is_numpy_callable(fn):
    mod = getattr(fn, "__module__", None) or ""
    return mod.startswith("numpy") or (   # (scipy.special's ufuncs are not NumPy's: called as they are)
        getattr(np, getattr(fn, "__name__", "_"), None) is fn)


def _is_metadata(e):
    while isinstance(e, ast.Subscript):
        e = e.value
    return isinstance(e, ast.Attribute) and e.attr in ("shape", "ndim", "dtype", "size")


def _is_array_producing(e):
    return isinstance(e, (ast.Name, ast.Call)) and not _is_metadata(e)


def _default_value(fn, name):
    try:
        p = inspect.signature(fn).parameters[name]
    except (KeyError, ValueError):
        return MISSING
    return MISSING if p.default is p.empty else p.default


def _describe(v):
    return f"a {v.kind} of {len(v.values())}" if isinstance(v, Struct) else "a single value"


def _user_name(name):
    """A variable name as the user wrote it (``__ret`` is the function's result)."""
    return "the returned value" if name == "__ret" else name


def shown_as(name, scope, path=()):
    """How a message names variable ``name`` of ``scope`` (item ``path`` of it): ``(words, identifier)``, the
    user's words with the helper it lives in (``'p' (in h)``, ``item 1 of the value h returns``) and the
    identifier the user can write (None for a returned value)."""
    helper = scope.prefix[:-1] if scope.prefix else None
    if helper and generated_file(getattr(scope.parsed, "filename", None)):
        # code funcgrad generated (a gradient taken inside, read again): its function and temporaries are
        # not the user's; name the derivative by what the user differentiated
        made = re.sub(r"_(vjp|jvp)(_\d+)?$", "", helper)
        helper = f"the gradient funcgrad made of {made}"
        if name.startswith("_") or name.startswith("d_") or name.startswith("g_"):
            return f"a value {helper} keeps", None
    if name == "__ret":
        whole = f"the value {helper} returns" if helper else "the returned value"
        return (f"item {']['.join(str(k) for k in path)} of {whole}" if path else whole), None
    shown = name + "".join(f"[{k!r}]" for k in path)
    return (f"'{shown}' (in {helper})" if helper else f"'{shown}'"), shown


def generated_file(filename):
    """True for a module funcgrad generated (its cache directory): code read back, a gradient taken inside a
    differentiated function, whose list tapes are popped in the order they were pushed."""
    return isinstance(filename, str) and os.path.dirname(os.path.abspath(filename)) == os.path.abspath(cache_dir())


def reverse_mode_file(filename):
    """True for a module of reverse-mode code funcgrad generated: read back, a slice it keeps is the value the slice
    had when read (the code restores an array before it reads such a slice again). Not forward-mode code, whose
    views are the user's (a write through one shows in the other)."""
    return filename in REVERSE_MODE_FILES


def place_at_call(stmts, filename, node):
    """Statements inlined from code funcgrad generated (a gradient taken inside the function, read back) that came
    from no line of the user's (its tapes, its loop counters) placed at the user's call of it: an error raised
    while they run is reported at that line, not in funcgrad's file. The others keep their generated line, which
    reports at the user's line it came from (``GENERATED_LINES``)."""
    at = (node.lineno, getattr(node, "end_lineno", node.lineno))
    for st in stmts:
        for n in ast_walk(st):
            f = A.get(n, A.FILE, None) if isinstance(n, ast.stmt) else None
            if f is not None and generated_file(f) and GENERATED_LINES.get(f, {}).get(n.lineno) is None:
                A.put(n, A.FILE, filename)
                n.lineno, n.end_lineno = at
                for sub in _own_expressions(n):   # passes that split it copy its expressions' lines
                    sub.lineno, sub.end_lineno = at


def _own_expressions(stmt):
    """The expressions of ``stmt`` itself, not those of the statements in its body."""
    todo = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, ast.stmt)]
    while todo:
        n = todo.pop()
        if hasattr(n, "lineno"):
            yield n
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, ast.stmt))


def tag_file(stmts, filename):
    """Record the user's file on statements that do not know theirs yet (for errors at file:line)."""
    for st in stmts:
        for n in ast_walk(st):
            if isinstance(n, ast.stmt) and not A.has(n, A.FILE):
                A.put(n, A.FILE, filename)


def _static_value(val):
    """The Python object of a container whose leaves are all static."""
    if isinstance(val, Struct):
        if val.kind == "dict":
            return {k: _static_value(v) for k, v in val.items.items()}
        return type([])([_static_value(v) for v in val.values()]) if val.kind == "list" else tuple(
            _static_value(v) for v in val.values())
    return val.obj


def _is_static_tree(obj):
    if isinstance(obj, (tuple, list)):
        return all(_is_static_tree(x) for x in obj)
    if isinstance(obj, dict):
        return all(_is_static_tree(x) for x in obj.values())
    return isinstance(obj, (bool, int, float, str, type(None), slice))


def _free_getter(fn, name):
    """Read the current value of free variable ``name`` of ``fn`` (closure cell, global, builtin)."""
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__closure__ and name in code.co_freevars:
        cell = fn.__closure__[code.co_freevars.index(name)]
        return lambda: cell.cell_contents
    g = getattr(fn, "__globals__", {})
    return lambda: g[name] if name in g else getattr(builtins, name)


def _attr_getter(obj, attr):
    def get():
        return getattr(obj, attr)
    get._key = ("attr", id(obj), attr)   # which object's attribute: ``c1.lr`` and ``c2.lr`` are two captures
    return get


def _path_getter(getter, path):
    def get():
        v = getter()
        for k in path:
            v = v[k]
        return v
    get._path = tuple(path)
    get._key = (getattr(getter, "_key", None), get._path)
    return get


def _load(target):
    t = copy.deepcopy(target)
    for n in ast_walk(t):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return t


def _safe(name):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name or "f"


def _arguments(names):
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


def _target_names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _assigned(stmts):
    """Names assigned (rebound) anywhere in ``stmts``, in first-seen order (not in nested defs)."""
    names = []

    def walk(node):   # ast.walk without the bodies of nested functions (their names are their own)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return
        yield node
        for c in ast.iter_child_nodes(node):
            yield from walk(c)

    for s in stmts:
        for n in walk(s):
            tgts = []
            if isinstance(n, ast.Assign):
                tgts = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                tgts = [n.target]
            elif isinstance(n, ast.For):
                tgts = [n.target]
            for t in tgts:
                for nm in _target_names(t):
                    if nm not in names:
                        names.append(nm)
    return names


def _local_names(fdef):
    """The names Python makes local to ``fdef`` other than its parameters: every name an assignment, loop or
    nested ``def`` in its body binds, whether or not that code runs (a branch that never runs still makes
    them local), and ``:=`` targets inside its comprehensions; not names bound only inside nested functions,
    lambdas or comprehensions, which have scopes of their own."""
    names = set()

    def visit(node):
        for c in ast.iter_child_nodes(node):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(c.name)
            elif isinstance(c, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                names.update(w.target.id for w in ast_walk(c)
                             if isinstance(w, ast.NamedExpr) and isinstance(w.target, ast.Name))
            elif isinstance(c, ast.Lambda):
                pass
            else:
                if isinstance(c, ast.Name) and isinstance(c.ctx, (ast.Store, ast.Del)):
                    names.add(c.id)
                visit(c)

    for stmt in fdef.body:
        visit(ast.Module(body=[stmt], type_ignores=[]))
    return names - declared_outer(fdef)


def declared_outer(fdef):
    """The names ``fdef`` declares ``nonlocal`` or ``global`` (its own statements, not a nested function's):
    they are the enclosing function's (the module's) variables, not its locals."""
    out, todo = set(), list(fdef.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Nonlocal, ast.Global)):
            out.update(n.names)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    return out


def _binding_counts(fdef):
    """How many places in ``fdef``'s body bind each name (assignment targets, loop and ``with`` targets, ``:=``,
    ``del``, nested ``def``/``class``, imports, ``except ... as``), counted in the source whatever runs; a name
    a nested function declares ``nonlocal`` or ``global`` counts twice (it may change there). Names bound
    only inside comprehensions count too (over-counting keeps a name a run-time one, never wrong)."""
    counts = {}

    def bump(name, k=1):
        counts[name] = counts.get(name, 0) + k

    def visit(node, nested):
        for c in ast.iter_child_nodes(node):
            if isinstance(c, (ast.Nonlocal, ast.Global)):
                for n in c.names:
                    bump(n, 2)
            if nested:
                visit(c, True)
                continue
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bump(c.name)
                visit(c, True)
            elif isinstance(c, ast.Lambda):
                visit(c, True)
            else:
                if isinstance(c, ast.Name) and isinstance(c.ctx, (ast.Store, ast.Del)):
                    bump(c.id)
                elif isinstance(c, ast.ExceptHandler) and c.name:
                    bump(c.name)
                elif isinstance(c, ast.alias):
                    bump((c.asname or c.name).split(".")[0])
                elif type(c).__name__ in ("MatchAs", "MatchStar") and getattr(c, "name", None):
                    bump(c.name)
                elif type(c).__name__ == "MatchMapping" and getattr(c, "rest", None):
                    bump(c.rest)
                visit(c, False)

    for stmt in getattr(fdef, "body", ()) if isinstance(getattr(fdef, "body", None), list) else ():
        visit(ast.Module(body=[stmt], type_ignores=[]), False)
    return counts


def _item_assigned(stmts):
    """Names whose items are assigned (``d[k] = v``, ``d.update(...)``) anywhere in ``stmts``."""
    names = []
    for s in stmts:
        for n in ast_walk(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update" and \
                    isinstance(n.func.value, ast.Name) and n.func.value.id not in names:
                names.append(n.func.value.id)
            tgts = list(n.targets) if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
            while tgts:
                t = tgts.pop(0)
                if isinstance(t, (ast.Tuple, ast.List)):   # L[0], L[1] = ...
                    tgts[:0] = t.elts
                    continue
                if isinstance(t, ast.Starred):
                    tgts.insert(0, t.value)
                    continue
                if not isinstance(t, ast.Subscript):
                    continue
                while isinstance(t, ast.Subscript):         # d["a"]["b"] = ...: d's items
                    t = t.value
                if isinstance(t, ast.Name) and t.id not in names:
                    names.append(t.id)
    return names


def _contains(stmts, kinds):
    return any(isinstance(n, kinds) for s in stmts for n in ast_walk(s))
