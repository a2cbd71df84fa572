"""Elementwise fusion: a run of array statements over float64 vectors of one length as one loop.

Generated code is one operation per statement: ``t = -x``, ``u = K.exp(t)``, ``f = 1.0 / (1.0 + u)``. Compiled
by Numba, each such statement is a NumPy ufunc loop of its own: a heap array, a loop, reference counts, and
about 20 ms of compile time each (the LSTM's gradient had about 150). The first call's shapes (as
:mod:`.scalarize` reads them) show which statements work on 1-D float64 arrays of one length: a run of such
consecutive statements (arithmetic ``+ - * / **``, unary minus, one- and two-argument NumPy ufuncs whose float64
loop gives float64, ``K.unbroadcast`` of a vector to a vector of its own length) becomes one loop over the
elements, every intermediate a scalar; a value read after the run before it is bound again (liveness over the
whole function, loops to a fixpoint: a value the reversed loop computes again is not read back) is written to
an array of its own (as each statement made one before). The shapes are evidence, not a promise: each loop runs over the length its arrays
have when it starts, and arrays of unequal lengths there (another call's shapes, where NumPy would broadcast)
raise the specialization miss, which runs the code for any shape instead.

Input: the statements of a generated function compiled whole by Numba (after the reverse pass: the primal and
its adjoint), the shapes and dtypes of the array parameters, the scalar parameters' kinds. Output: the
statements with the runs fused.

Which names hold such vectors is decided flow-insensitively (every definition of a name, in every branch and
loop, must give the same vector length; a tape list's items are what is appended to it): float64 1-D
arguments, rows ``A[i]`` of 2-D float64 arguments (and of copies of them), slices with bounds known from the
shapes, copies, ``zeros_like``, ``concatenate`` of vectors, arithmetic of vectors and real scalars. A run
may take with it, unchanged and moved before the loop, statements that do not read what the run computes
(integer arithmetic, tape reads, views): a name such a statement binds that an earlier statement of the run
read is renamed, and bound again after the loop. Appends of the run's values to a tape move after the loop.
A name is never fused where it is written in place (``x[i] = v``, ``K.index_add``): only fresh arrays are made.
"""
from __future__ import annotations

import ast
import copy

from . import annotations as A
from .astutil import ast_walk, clone, names_read
from .emit import _BIN
from .naming import Namer

TOP = "top"
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
# calls a hoisted statement may make (no effect on any array: the move before the loop changes nothing)
_PURE_K = frozenset("index_arg copy zeros_like written_cast".split())
_MIN_RUN = 2   # one statement is one loop either way (a loop written out compiles no faster than a ufunc's)


def _is_vec(f):
    return type(f) is tuple and f[0] == "v"


def _is_scalar(f):
    return type(f) is tuple and f[0] in ("s", "int")


def _join(a, b):
    if a is None:
        return b
    if b is None or a == b:
        return a
    if a == TOP or b == TOP:
        return TOP
    if _is_scalar(a) and _is_scalar(b):
        return ("s", "f" if "f" in (a[1], b[1]) else "i")
    return TOP


def _k_call(e):
    """``name`` of a call ``K.name(...)``, else None."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
            and e.func.value.id == "K" and not e.keywords:
        return e.func.attr
    return None


def _np_call(e):
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
            and e.func.value.id == "np" and not e.keywords:
        return e.func.attr
    return None


def _stores(node):
    return {n.id for n in ast_walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


class _Facts:
    """name -> ("v", n) a float64 vector of length n, ("m", m, n) a float64 matrix, ("s", "f"|"i") a real
    scalar, ("int", v) an integer known to be v; TOP: anything else. Lists: what their items are."""

    def __init__(self, seeds, ufuncs, trusted):
        self.f = dict(seeds)
        self.lists: dict = {}
        self.ufuncs = ufuncs   # K names that are NumPy ufuncs: name -> number of inputs (float64 -> float64)
        self.changed = False
        self.trusted = trusted   # lists whose items are what is appended to them (see _scan)
        self.items: dict = {}   # scalar tapes (arrays grown by K.tape_reserve): what is stored in them

    def get(self, n):
        return self.f.get(n)

    def set(self, n, v):
        new = _join(self.f.get(n), v)
        if new != self.f.get(n):
            self.f[n] = new
            self.changed = True

    def ev(self, e):
        if isinstance(e, ast.Constant):
            v = e.value
            if isinstance(v, bool):
                return TOP
            if isinstance(v, int):
                return ("int", v)
            return ("s", "f") if isinstance(v, float) else TOP
        if isinstance(e, ast.Name):
            return self.f.get(e.id)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            v = self.ev(e.operand)
            if type(v) is tuple and v[0] == "int":
                return ("int", -v[1] if isinstance(e.op, ast.USub) else v[1])
            return v if v is None or _is_vec(v) or _is_scalar(v) else TOP
        if isinstance(e, ast.BinOp):
            return self._binop(e.op, self.ev(e.left), self.ev(e.right))
        k = _k_call(e)
        if k is not None:
            return self._kcall(k, e.args)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "empty" and \
                isinstance(e.func.value, ast.Name) and e.func.value.id == "np" and len(e.args) == 1 and \
                [k.arg for k in e.keywords] == ["dtype"] and isinstance(e.args[0], ast.Constant) and \
                e.args[0].value == 0:
            dt = e.keywords[0].value   # a scalar tape: np.empty(0, dtype=np.int64), grown by K.tape_reserve
            if isinstance(dt, ast.Attribute) and isinstance(dt.value, ast.Name) and dt.value.id == "np" and \
                    dt.attr in ("int64", "float64"):
                return ("tape", "i" if dt.attr == "int64" else "f")
            return TOP
        if _np_call(e) == "empty_like" and len(e.args) == 1:
            v = self.ev(e.args[0])
            return v if v is None or (type(v) is tuple and v[0] in ("v", "m")) else TOP
        if isinstance(e, ast.Subscript):
            return self._subscript(e)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
            return ("s", "i")
        return TOP

    def _binop(self, op, a, b):
        if a == TOP or b == TOP:
            return TOP
        if a is None or b is None:
            return None
        if _is_scalar(a) and _is_scalar(b):
            if a[0] == "int" and b[0] == "int" and isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
                x, y = a[1], b[1]
                if isinstance(op, ast.FloorDiv):
                    return ("int", x // y) if y else TOP
                return ("int", x + y if isinstance(op, ast.Add) else x - y if isinstance(op, ast.Sub) else x * y)
            if isinstance(op, ast.Div):
                return ("s", "f")
            if isinstance(op, _ARITH + (ast.FloorDiv, ast.Mod)):
                return ("s", "f" if "f" in (a[1], b[1]) else "i")
            return TOP
        if not isinstance(op, _ARITH):
            return TOP
        if _is_vec(a) and (_is_scalar(b) or a == b):
            return a
        if _is_vec(b) and _is_scalar(a):
            return b
        return TOP

    def _kcall(self, k, args):
        vals = [self.ev(a) for a in args]
        if any(v is None for v in vals) and k != "concatenate":
            return None
        n_in = self.ufuncs.get(k)
        if n_in is not None and len(args) == n_in:
            if n_in == 1:
                v = vals[0]
                return v if _is_vec(v) else ("s", "f") if _is_scalar(v) else TOP
            r = self._binop(ast.Add(), vals[0], vals[1])
            return ("s", "f") if _is_scalar(r) else r
        if k == "unbroadcast" and len(args) == 2:
            g, x = vals
            if _is_vec(g) and g == x:
                return g
            if _is_scalar(g):
                return g
            return ("s", "f") if _is_scalar(x) and type(g) is tuple and g[0] in ("v", "m") else TOP
        if k == "written_cast" and len(args) == 2:   # (g itself where x holds float64s: x is a vector)
            return vals[0] if type(vals[1]) is tuple and vals[1][0] in ("v", "m") else TOP
        if k in ("copy", "zeros_like") and len(args) == 1:
            v = vals[0]
            return v if type(v) is tuple and v[0] in ("v", "m") else TOP
        if k == "index_arg" and len(args) == 1:
            return vals[0] if type(vals[0]) is tuple and vals[0][0] == "int" else ("s", "i")
        if k in ("index_add", "index_put") and len(args) == 3:
            v = vals[0]
            return v if type(v) is tuple and v[0] in ("v", "m") else TOP
        if k == "tape_reserve" and len(args) == 2:
            return vals[0] if type(vals[0]) is tuple and vals[0][0] == "tape" else TOP
        if k in ("sum", "mean") and len(args) == 1:
            v = vals[0]
            return ("s", "f") if type(v) is tuple and v[0] in ("v", "m", "s", "int") else TOP
        if k == "unreduce" and len(args) == 4 and isinstance(args[2], ast.Constant) and args[2].value is None:
            return vals[1] if vals[0] == ("s", "f") and type(vals[1]) is tuple and vals[1][0] in ("v", "m") else TOP
        if k == "unconcatenate" and len(args) == 3 and isinstance(args[1], ast.Tuple) and \
                isinstance(args[2], ast.Constant) and args[2].value == 0:
            parts = [self.ev(a) for a in args[1].elts]
            if any(p is None for p in parts):
                return None
            if _is_vec(vals[0]) and all(_is_vec(p) for p in parts) and sum(p[1] for p in parts) == vals[0][1]:
                return ("seq", tuple(parts))
            return TOP
        if k == "concatenate" and len(args) == 1 and isinstance(args[0], ast.Tuple):
            parts = [self.ev(a) for a in args[0].elts]
            if any(p is None for p in parts):
                return None
            if parts and all(_is_vec(p) for p in parts):
                return ("v", sum(p[1] for p in parts))
            return TOP
        return TOP

    def _int(self, e):
        if e is None:
            return None, True
        v = self.ev(e)
        if type(v) is tuple and v[0] == "int":
            return v[1], True
        return None, False

    def _subscript(self, e):
        if isinstance(e.value, ast.Name) and e.value.id in self.lists:
            return self.lists[e.value.id]
        if isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
            base = self.ev(e.value.value)
            k, ok = self._int(e.slice)
            if base is None:
                return None
            if ok and k is not None and type(base) is tuple:
                dims = (base[1],) if base[0] == "v" else base[1:] if base[0] == "m" else None
                if dims is not None and -len(dims) <= k < len(dims):
                    return ("int", dims[k])
            return ("s", "i")
        base = self.ev(e.value)
        if base is None:
            return None
        if type(base) is tuple and base[0] == "tape":
            i = self.ev(e.slice)
            if i is None:
                return None
            if not (type(i) is tuple and (i[0] == "int" or i == ("s", "i")) and isinstance(e.value, ast.Name)):
                return TOP
            return self.items.get(e.value.id)   # what was stored in it
        if type(base) is tuple and base[0] == "seq":
            k, ok = self._int(e.slice)
            return base[1][k] if ok and k is not None and -len(base[1]) <= k < len(base[1]) else TOP
        if not (type(base) is tuple and base[0] in ("v", "m")):
            return TOP
        sl = e.slice
        if isinstance(sl, ast.Slice):
            if base[0] != "v" or sl.step is not None:
                return TOP
            lo, ok1 = self._int(sl.lower)
            hi, ok2 = self._int(sl.upper)
            if not (ok1 and ok2):
                return TOP
            return ("v", len(range(base[1])[lo:hi]))
        if isinstance(sl, ast.Tuple):
            return TOP
        i = self.ev(sl)
        if i is None:
            return None
        if type(i) is tuple and (i[0] == "int" or i == ("s", "i")):
            return ("s", "f") if base[0] == "v" else ("v", base[2])
        return TOP

    def stmt(self, s):
        if isinstance(s, ast.Assign):
            if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                n = s.targets[0].id
                if isinstance(s.value, ast.List) and not s.value.elts and n in self.trusted:
                    self.lists.setdefault(n, None)
                    self.set(n, TOP)
                    return
                self.set(n, self.ev(s.value))
                return
            for t in s.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and \
                        type(self.f.get(t.value.id)) is tuple and self.f[t.value.id][0] == "tape":
                    v = self.ev(s.value)
                    v = v if v is None or _is_scalar(v) else TOP
                    new = _join(self.items.get(t.value.id), v)
                    if new != self.items.get(t.value.id):
                        self.items[t.value.id] = new
                        self.changed = True
                if not isinstance(t, (ast.Subscript, ast.Attribute)):
                    for n in _stores(t):
                        self.set(n, TOP)
            return
        if isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self.set(s.target.id, self._binop(s.op, self.f.get(s.target.id), self.ev(s.value)))
            return
        if isinstance(s, ast.Expr):
            c = s.value
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" \
                    and isinstance(c.func.value, ast.Name) and c.func.value.id in self.lists and len(c.args) == 1:
                ln = c.func.value.id
                new = _join(self.lists[ln], self.ev(c.args[0]))
                if new != self.lists[ln]:
                    self.lists[ln] = new
                    self.changed = True
            return
        if isinstance(s, ast.For):
            it = s.iter
            rng = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            for n in _stores(s.target):
                self.set(n, ("s", "i") if rng and isinstance(s.target, ast.Name) else TOP)
            self.block(s.body)
            self.block(s.orelse)
            return
        if isinstance(s, (ast.If, ast.While)):
            self.block(s.body)
            self.block(s.orelse)
            return
        for n in _stores(s):   # anything else binding a name (with, try, comprehension): nothing known
            self.set(n, TOP)

    def block(self, stmts):
        for s in stmts:
            self.stmt(s)


class _Run:
    """One run being gathered: its fused statements, those moved before and after the loop."""

    def __init__(self, n):
        self.n = n
        self.fused = []       # (target, value)
        self.defined = set()  # names the fused statements bind
        self.refs = set()     # names the fused statements read or bind
        self.before = []      # statements moved before the loop (renamed)
        self.after = []       # statements moved after the loop (tape appends)
        self.rename = {}      # name -> the name a moved statement binds it as
        self.lists = set()    # tape lists the moved statements use
        self.written = set()  # arrays the loop adds into (K.index_add of a slice)
        self.fresh = set()    # names a moved statement bound to a new array (zeros_like, copy)
        self.end = None
        self.last = None      # the run's last statement (fused, or an append moved after the loop)


class _Fuser:
    def __init__(self, fx, ufuncs, all_refs, in_place, miss, live_out):
        self.fx = fx
        self.live_out = live_out   # id(statement) -> the names read after it before they are bound again
        self.miss = miss
        self.in_place = in_place
        self.ufuncs = ufuncs
        self.refs = all_refs   # name -> number of Name nodes reading or binding it in the whole function
        self.fresh = Namer(all_refs).fresh   # a name no statement of the function uses
        self.fused_runs = 0

    # -- what may be fused
    def _leaf_ok(self, e, n):
        if isinstance(e, ast.Constant):
            return _is_scalar(self.fx.ev(e))
        if isinstance(e, ast.Name):
            f = self.fx.get(e.id)
            return f == ("v", n) or _is_scalar(f)
        return False

    def _expr_ok(self, e, n):
        if isinstance(e, (ast.Constant, ast.Name)):
            return self._leaf_ok(e, n)
        if isinstance(e, ast.BinOp):
            return isinstance(e.op, _ARITH) and self._expr_ok(e.left, n) and self._expr_ok(e.right, n)
        if isinstance(e, ast.UnaryOp):
            return isinstance(e.op, (ast.USub, ast.UAdd)) and self._expr_ok(e.operand, n)
        k = _k_call(e)
        if k is not None and self.ufuncs.get(k) == len(e.args):
            return all(self._expr_ok(a, n) for a in e.args)
        if k == "unbroadcast" and len(e.args) == 2:
            src = e.args[0]
            if isinstance(src, ast.Name) and src.id in self.in_place:
                return False   # the result is that array itself
            return self.fx.ev(e) == ("v", n) and self._expr_ok(src, n)
        return False

    def fusible(self, s):
        """The vector length of a statement that may be fused, else None."""
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
            return None
        if s.targets[0].id in self.in_place or isinstance(s.value, (ast.Name, ast.Constant)):
            return None   # a copy of a name: nothing computed
        f = self.fx.get(s.targets[0].id)
        if not _is_vec(f) or self.fx.ev(s.value) != f:
            return None
        return f[1] if self._expr_ok(s.value, f[1]) else None

    def _movable(self, s):
        """A statement that may run before the loop: names, numbers, views and tape reads; no effect on arrays."""
        if isinstance(s, ast.Assign):
            if not all(isinstance(t, ast.Name) for t in s.targets):
                return False
            return self._pure(s.value)
        if isinstance(s, ast.AugAssign):
            return isinstance(s.target, ast.Name) and _is_scalar(self.fx.get(s.target.id)) and self._pure(s.value)
        if isinstance(s, ast.If):
            return self._pure(s.test) and all(self._movable(b) for b in s.body + s.orelse)
        if isinstance(s, ast.Pass):
            return True
        return False

    def _pure(self, e):
        for node in ast_walk(e):
            if isinstance(node, ast.Call):
                k = _k_call(node)
                if k in _PURE_K or (k is not None and k in self.ufuncs):
                    continue
                if _np_call(node) == "empty_like":
                    continue
                if isinstance(node.func, ast.Name) and node.func.id in ("slice", "len", "range"):
                    continue
                return False
            if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Yield, ast.Await, ast.ListComp, ast.GeneratorExp,
                                 ast.DictComp, ast.SetComp)):
                return False
        return True

    def _append_of_run(self, s, run):
        c = s.value if isinstance(s, ast.Expr) else None
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" \
                and isinstance(c.func.value, ast.Name) and len(c.args) == 1 and isinstance(c.args[0], ast.Name) \
                and c.args[0].id in run.defined and c.func.value.id not in run.lists \
                and c.func.value.id not in run.refs:
            return c.func.value.id
        return None

    # -- gathering a run
    def gather(self, stmts, i, n):
        run = _Run(n)
        j = i
        after_refs = set()
        state = None   # what the run is, as of its last fused statement or moved append
        while j < len(stmts):
            s = stmts[j]
            if self.fusible(s) == n:
                t = s.targets[0].id
                if t in after_refs or (names_read(s.value) | {t}) & run.written:
                    break
                s = self._reads_renamed(s, run)
                run.fused.append((t, s))
                run.defined.add(t)
                run.refs |= names_read(s.value) | {t}
                run.rename.pop(t, None)
                j += 1
                state = (j, len(run.before), dict(run.rename))
                continue
            acc = self._slice_add(s, run)
            if acc is not None:
                s = self._reads_renamed(s, run)
                run.fused.append((None, s))
                run.written.add(acc)
                run.refs |= names_read(s.value.args[1]) | names_read(s.value.args[2])
                j += 1
                state = (j, len(run.before), dict(run.rename))
                continue
            lst = self._append_of_run(s, run)
            if lst is not None:
                run.after.append(s)
                run.lists.add(lst)
                after_refs.add(s.value.args[0].id)
                j += 1
                state = (j, len(run.before), dict(run.rename))
                continue
            if not self._movable(s):
                break
            reads, binds = names_read(s), _stores(s)
            if (reads | binds) & (run.defined | run.lists | run.written) or binds & after_refs:
                break
            run.before.extend(self._renamed(s, binds & run.refs, run))
            run.fresh -= binds | reads   # read by a moved statement: perhaps held by another name now
            if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and \
                    _k_call(s.value) in ("zeros_like", "copy") and s.targets[0].id not in run.rename:
                run.fresh.add(s.targets[0].id)   # a new array no other name holds
            j += 1
        if state is None:
            return None
        # statements after the last fused one (or moved append) stay where they were
        run.end, nb, run.rename = state
        run.last = stmts[run.end - 1]
        del run.before[nb:]
        return run

    def _slice_add(self, s, run):
        """The array ``T`` of ``T = K.index_add(T, slice(lo, hi, None), v)`` adding a vector of the run's length
        into a slice of an array made in the run that nothing in the run reads (else None)."""
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
            return None
        e, T = s.value, s.targets[0].id
        if _k_call(e) != "index_add" or len(e.args) != 3 or not isinstance(e.args[0], ast.Name) or \
                e.args[0].id != T or T not in run.fresh or T in run.refs or T in run.defined:
            return None
        sl = e.args[1]
        if not (isinstance(sl, ast.Call) and isinstance(sl.func, ast.Name) and sl.func.id == "slice" and
                len(sl.args) == 3 and not sl.keywords and isinstance(sl.args[2], ast.Constant) and
                sl.args[2].value is None):
            return None
        f = self.fx.get(T)
        lo, ok1 = self.fx._int(None if isinstance(sl.args[0], ast.Constant) and sl.args[0].value is None
                               else sl.args[0])
        hi, ok2 = self.fx._int(sl.args[1])
        if not (ok1 and ok2 and _is_vec(f) and hi is not None):
            return None
        lo = lo or 0
        if not (0 <= lo and hi - lo == run.n and hi <= f[1]) or not self._expr_ok(e.args[2], run.n):
            return None
        if names_read(e.args[2]) & run.written or (names_read(sl) & (run.defined | run.written)):
            return None
        return T

    def _reads_renamed(self, s, run):
        if not any(isinstance(nd, ast.Name) and nd.id in run.rename for nd in ast_walk(s.value)):
            return s
        s = _copy(s)
        for node in ast_walk(s.value):
            if isinstance(node, ast.Name) and node.id in run.rename:
                node.id = run.rename[node.id]
        return s

    def _renamed(self, s, names, run):
        """``s`` with the names it binds among ``names`` renamed (and every name it reads as currently renamed);
        a name it may leave unbound keeps its value (``x2 = x`` first)."""
        s = _copy(s)
        for node in ast_walk(s):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in run.rename:
                node.id = run.rename[node.id]
        out = []
        for nm in sorted(names):
            new = self.fresh(f"{nm}_next")
            cur = run.rename.get(nm, nm)
            plain = isinstance(s, ast.Assign) and not (names_read(s) & {cur})
            if not plain:
                out.append(_at(ast.Assign(targets=[ast.Name(new, ast.Store())], value=ast.Name(cur, ast.Load())), s))
            for node in ast_walk(s):
                if isinstance(node, ast.Name) and node.id in (nm, cur):
                    node.id = new
            run.rename[nm] = new
            self.fx.f[new] = self.fx.f.get(nm)
        out.append(s)
        return out

    # -- the loop
    def emit(self, run):
        n = run.n
        idx = "_fzj"
        # every name the run binds that is read after it (before it is bound again): an array of its own
        finals = {}
        for k, (t, _s) in enumerate(run.fused):
            if t is not None:
                finals[t] = k
        after = self.live_out.get(id(run.last))
        if after is None:   # (not a statement the liveness saw: every name read elsewhere is kept)
            inside = {}
            for t, s in run.fused:
                for node in ast_walk(s):
                    if isinstance(node, ast.Name):
                        inside[node.id] = inside.get(node.id, 0) + 1
            kept = {t for t in finals if self.refs.get(t, 0) > inside.get(t, 0)}
        else:
            appended = {n for s in run.after for n in names_read(s)}
            kept = {t for t in finals if t in after or t in appended}
        cur = {}          # fused name -> the scalar holding its element in the loop
        arrays_read = []  # the arrays the loop reads element by element, in order
        # names the loop reads as arrays before (or without) binding them: their values are the old ones
        read_first, seen = set(), set()
        for t, s in run.fused:
            read_first |= names_read(s.value) - seen
            if t is not None:
                seen.add(t)
        out_arrays = {t: (self.fresh(f"{t}_out") if t in read_first else t) for t in kept}
        body = []

        def tr(e):
            if isinstance(e, ast.Constant):
                return ast.Constant(e.value)
            if isinstance(e, ast.Name):
                if e.id in cur:
                    return ast.Name(cur[e.id], ast.Load())
                nm = e.id
                if _is_vec(self.fx.get(e.id)):
                    if nm not in arrays_read:
                        arrays_read.append(nm)
                    return ast.Subscript(value=ast.Name(nm, ast.Load()), slice=ast.Name(idx, ast.Load()),
                                         ctx=ast.Load())
                return ast.Name(nm, ast.Load())
            if isinstance(e, ast.BinOp):
                return ast.BinOp(left=tr(e.left), op=e.op, right=tr(e.right))
            if isinstance(e, ast.UnaryOp):
                return ast.UnaryOp(op=e.op, operand=tr(e.operand))
            k = _k_call(e)
            if k == "unbroadcast":
                return tr(e.args[0])
            return ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr=k, ctx=ast.Load()),
                            args=[tr(a) for a in e.args], keywords=[])

        for k, (t, s) in enumerate(run.fused):
            if t is None:   # T = K.index_add(T, slice(lo, hi, None), v): T[lo + j] += v[j]
                T, lo, v = s.value.args[0].id, s.value.args[1].args[0], s.value.args[2]
                at = ast.Name(idx, ast.Load()) if isinstance(lo, ast.Constant) and lo.value in (None, 0) else \
                    ast.BinOp(left=_copy(lo), op=ast.Add(), right=ast.Name(idx, ast.Load()))
                body.append(_at(ast.AugAssign(target=ast.Subscript(value=ast.Name(T, ast.Load()), slice=at,
                                                                   ctx=ast.Store()),
                                              op=ast.Add(), value=tr(v)), s))
                continue
            value = tr(s.value)
            sc = self.fresh(f"{t}_j")
            body.append(_at(ast.Assign(targets=[ast.Name(sc, ast.Store())], value=value), s))
            cur[t] = sc
            if t in kept and finals[t] == k:
                body.append(_at(ast.Assign(
                    targets=[ast.Subscript(value=ast.Name(out_arrays[t], ast.Load()), slice=ast.Name(idx, ast.Load()),
                                           ctx=ast.Store())],
                    value=ast.Name(sc, ast.Load())), s))
        first = next(s for t, s in run.fused if t is not None)
        pre = list(run.before)
        # the lengths are the first call's; another call's may differ: the loop runs over the length the arrays
        # have, and arrays of unequal lengths (NumPy would broadcast) send the call to the code for any shape
        length = self.fresh("_fzn")
        pre.append(_at(ast.Assign(targets=[ast.Name(length, ast.Store())], value=_dim(arrays_read[0])), first))
        tests = [ast.Compare(left=_dim(a), ops=[ast.NotEq()], comparators=[ast.Name(length, ast.Load())])
                 for a in arrays_read[1:]]
        for t, s in run.fused:
            if t is None:   # T[lo:hi] += v: lo + n <= len(T)
                T, lo, hi = s.value.args[0].id, s.value.args[1].args[0], s.value.args[1].args[1]
                lo = ast.Constant(0) if isinstance(lo, ast.Constant) and lo.value is None else _copy(lo)
                tests.append(ast.Compare(left=ast.BinOp(left=_copy(hi), op=ast.Sub(), right=lo), ops=[ast.NotEq()],
                                         comparators=[ast.Name(length, ast.Load())]))
                tests.append(ast.Compare(left=_copy(hi), ops=[ast.Gt()], comparators=[_dim(T)]))
        if tests:
            pre.append(_at(ast.If(test=tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.Or(), values=tests),
                                  body=[ast.Raise(exc=ast.Call(func=ast.Name("LookupError", ast.Load()),
                                                               args=[ast.Constant(self.miss)], keywords=[]),
                                                  cause=None)], orelse=[]), first))
        for t in sorted(kept, key=lambda t: finals[t]):
            pre.append(_at(ast.Assign(
                targets=[ast.Name(out_arrays[t], ast.Store())],
                value=ast.Call(func=ast.Attribute(value=ast.Name("np", ast.Load()), attr="empty", ctx=ast.Load()),
                               args=[ast.Name(length, ast.Load())], keywords=[])), first))
        loop = _at(ast.For(target=ast.Name(idx, ast.Store()),
                           iter=ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Name(length, ast.Load())],
                                         keywords=[]),
                           body=body, orelse=[]), first,
                   f"fused: {len(run.fused)} elementwise statements, one loop ({n} elements at the first call)")
        post = []
        for t in sorted(kept, key=lambda t: finals[t]):
            if out_arrays[t] == t:
                continue
            post.append(_at(ast.Assign(targets=[ast.Name(t, ast.Store())], value=ast.Name(out_arrays[t], ast.Load())),
                            run.fused[finals[t]][1]))
        for nm, new in run.rename.items():
            post.append(_at(ast.Assign(targets=[ast.Name(nm, ast.Store())], value=ast.Name(new, ast.Load())), first))
        post.extend(run.after)
        return pre + [loop] + post

    def block(self, stmts):
        out = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            n = self.fusible(s)
            run = self.gather(stmts, i, n) if n is not None else None
            if run is not None and len(run.fused) >= _MIN_RUN:
                out.extend(self.emit(run))
                self.fused_runs += 1
                i = run.end
                continue
            if isinstance(s, (ast.For, ast.While, ast.If)):
                s = copy.copy(s)   # (statements not rewritten are the caller's own)
                s.body, s.orelse = self.block(s.body), self.block(s.orelse)
            out.append(s)
            i += 1
        return out


def _operators(node):
    """``node`` with operator primitives as the operators they print as (``K.add(a, b)`` -> ``a + b``); a node is
    copied only where something under it changed (``emit.pretty`` copies every node)."""
    fields, changed = {}, False
    for name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            new = _operators(value)
            changed |= new is not value
            fields[name] = new
        elif isinstance(value, list) and value and isinstance(value[0], ast.AST):
            new = [_operators(v) if isinstance(v, ast.AST) else v for v in value]
            changed |= any(x is not y for x, y in zip(new, value))
            fields[name] = new
    if isinstance(node, ast.Call):
        prim = A.get(node, A.PRIM, None)
        op = None if prim is None else prim.operator
        args = fields.get("args", node.args)
        if op == "[]" and len(args) == 2:
            return ast.copy_location(ast.Subscript(value=args[0], slice=args[1], ctx=ast.Load()), node)
        if op == "neg" and len(args) == 1:
            return ast.copy_location(ast.UnaryOp(op=ast.USub(), operand=args[0]), node)
        if op in _BIN and len(args) == 2 and not node.keywords:
            return ast.copy_location(ast.BinOp(left=args[0], op=_BIN[op](), right=args[1]), node)
    if not changed:
        return node
    new = copy.copy(node)   # (its annotations too)
    for name, value in fields.items():
        setattr(new, name, value)
    return new


def _scan(stmts):
    """One walk: every Name node; the lists bound to ``[]`` whose every other use is ``L.append(x)``, ``L[i]``
    or ``len(L)`` (their items are what is appended); the names whose arrays the code may write in place
    (``x[i] = v``, ``x += v``, ``K.index_add(x, ...)``, ``x.method(...)``)."""
    names, made, ok, in_place = [], set(), set(), set()
    for node in ast_walk(ast.Module(body=list(stmts), type_ignores=[])):
        if isinstance(node, ast.Name):
            names.append(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                while isinstance(t, (ast.Subscript, ast.Attribute)):
                    t = t.value
                    if isinstance(t, ast.Name):
                        in_place.add(t.id)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                in_place.add(node.target.id)
            if isinstance(node, ast.Assign) and len(targets) == 1 and isinstance(targets[0], ast.Name) and \
                    isinstance(node.value, ast.List) and not node.value.elts:
                made.add(targets[0].id)
                ok.add(id(targets[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load):
            ok.add(id(node.value))
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if f.value.id == "K":
                    if f.attr.startswith(("index_", "put", "copyto", "fill")) and f.attr != "index_arg" and \
                            node.args and isinstance(node.args[0], ast.Name):
                        in_place.add(node.args[0].id)
                elif f.attr == "append" and len(node.args) == 1:
                    ok.add(id(f.value))
                elif f.value.id != "np":
                    in_place.add(f.value.id)   # a method (x.sort(), x.fill(v)) may write its object
            elif isinstance(f, ast.Name) and f.id == "len" and len(node.args) == 1 and \
                    isinstance(node.args[0], ast.Name):
                ok.add(id(node.args[0]))
    bad = {n.id for n in names if n.id in made and id(n) not in ok}
    return names, made - bad, in_place


def fuse(stmts, params, shapes, param_kinds, ufuncs, miss, cotangents=None, live=()):
    """``stmts`` (a generated function's body, compiled whole) with runs of vector statements fused, or None
    when nothing was fused. Each loop runs over the length its arrays have; where they differ (another call's
    shapes, where NumPy would broadcast) it raises ``LookupError(miss)``: the caller runs the code for any
    shape instead.

    ``params``: the function's parameters; ``shapes``: parameter -> (shape, dtype) of the array arguments;
    ``param_kinds``: parameter -> "f8"/"i" of the scalar ones (rank 0); ``ufuncs``: K names that are NumPy
    ufuncs with a float64 loop (name -> number of inputs); ``cotangents``: cotangent parameter -> the output it
    is the cotangent of (a float64 scalar output's is a float64 scalar); ``live``: names read after
    ``stmts`` (the returned values)."""
    seeds = {}
    for p in params:
        shape, dtype = shapes.get(p, (None, None))
        if dtype == "<f8" and len(shape) == 1:
            seeds[p] = ("v", shape[0])
        elif dtype == "<f8" and len(shape) == 2:
            seeds[p] = ("m", shape[0], shape[1])
        elif p not in shapes and param_kinds.get(p) in ("f8", "i"):
            seeds[p] = ("s", "i" if param_kinds.get(p) == "i" else "f")
        else:
            seeds[p] = TOP
    if not any(type(v) is tuple and v[0] in ("v", "m") for v in seeds.values()):
        return None   # no float64 array argument: no vector of known length
    links = {}
    for g, o in (cotangents or {}).items():   # a float64 scalar output's cotangent is a float64 scalar
        links[g] = o
        seeds[g] = None
    stmts = [_operators(s) for s in stmts]
    names, trusted, in_place = _scan(stmts)
    bound = {node.id for node in names if not isinstance(node.ctx, ast.Load)}
    refs: dict = {n: 1 for n in live}
    for node in names:
        refs[node.id] = refs.get(node.id, 0) + 1
        if node.id not in bound and node.id not in seeds:
            seeds[node.id] = TOP   # globals, K, np: nothing known
    fx = _analyse(stmts, seeds, ufuncs, trusted, links)
    if fx is None:
        return None
    live_out = {}
    if not any(isinstance(node, _JUMPS) for node in ast_walk(ast.Module(body=list(stmts), type_ignores=[]))):
        _live_in(stmts, set(live), live_out)   # (with jumps: every name read elsewhere is kept, as before)
    fu = _Fuser(fx, ufuncs, refs, in_place, miss, live_out)
    new = fu.block(list(stmts))
    return new if fu.fused_runs else None


#: Statements after which control does not simply go on to the next one (the liveness below does not model them).
_JUMPS = (ast.Break, ast.Continue, ast.Return, ast.Try, ast.With, ast.FunctionDef, ast.Lambda, ast.AsyncFunctionDef)


def _live_in(stmts, out, table):
    """The names read by ``stmts`` before they bind them, or read after them (``out``) and not bound by them on
    every path; ``table[id(s)]`` is set to what is live after each statement ``s`` (loops to a fixpoint)."""
    live = set(out)
    for s in reversed(stmts):
        table[id(s)] = live
        live = _stmt_live_in(s, live, table)
    return live


def _stmt_live_in(s, out, table):
    if isinstance(s, (ast.For, ast.While)):
        head = names_read(s.iter) if isinstance(s, ast.For) else names_read(s.test)
        targets = _stores(s.target) if isinstance(s, ast.For) else set()
        x = set(out) | (head if isinstance(s, ast.While) else set())
        while True:   # live at the top of the loop: after it, or in the next iteration
            body = _live_in(s.body, x, table)
            new = set(out) | (body - targets) | (head if isinstance(s, ast.While) else set())
            if s.orelse:
                new |= _live_in(s.orelse, out, table)
            if new <= x:
                break
            x |= new
        return x | head
    if isinstance(s, ast.If):
        return names_read(s.test) | _live_in(s.body, out, table) | _live_in(s.orelse, out, table)
    if isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets):
        return (set(out) - {t.id for t in s.targets}) | names_read(s.value)
    if isinstance(s, ast.AugAssign):
        return set(out) | names_read(s) | _stores(s.target)
    return set(out) | names_read(s)


def _analyse(stmts, seeds, ufuncs, trusted, links):
    """The facts of every name of ``stmts`` (a fixpoint; None if it takes over 30 rounds). ``links``: a cotangent
    parameter -> its output (a float64 scalar output's cotangent is a float64 scalar)."""
    fx = _Facts(seeds, ufuncs, trusted)
    for _ in range(30):
        fx.changed = False
        for g, o in links.items():
            v = fx.get(o)
            fx.set(g, v if v is None or v == ("s", "f") else TOP)
        fx.block(stmts)
        if not fx.changed:
            return fx
    return None


def _dim(name):
    """``name.shape[0]``"""
    return ast.Subscript(value=ast.Attribute(value=ast.Name(name, ast.Load()), attr="shape", ctx=ast.Load()),
                         slice=ast.Constant(0), ctx=ast.Load())


def _at(new, old, comment=None):
    """``new`` at ``old``'s place: its line, and the user's file and line it came from."""
    ast.copy_location(new, old)
    for ann in (A.FILE, A.SRC):
        if A.has(old, ann):
            A.put(new, ann, A.get(old, ann))
    if comment:
        A.put(new, A.COMMENT, comment)
    return new


def _copy(node):
    return clone(node)
