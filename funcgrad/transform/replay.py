"""Recomputation of a loop body's own values in the reversed loop, instead of taping them.

Taped, every value a loop body computes and the adjoint reads goes on a tape once per iteration: for a body
over small arrays (bundle adjustment: 3-vectors through helpers) that is a list append of a fresh array per
value and iteration, every array kept alive until the sweep ends (T iterations x dozens of arrays: the tape
cost five times the primal, grew faster than T, and typed lists of arrays cost seconds of compile). A value
that depends only on what the iteration starts from can instead be computed again, at the start of its
reversed iteration, by the statements that computed it in the primal: the adjoint of iteration ``k`` then
reads exactly the values iteration ``k`` computed, and nothing about them is stored.

What may be recomputed (``plan``), for a loop ``L`` (not a checkpointed loop, nor one inside one; no
``break``/``continue``/``return`` anywhere in it; where it calls something for its effect, only integer
arithmetic of ints, sizes and shapes, which nothing such a call does changes: an LSTM's ``2 * i`` row indices;
where it writes an array in place, ``x[i] = v``, that integer arithmetic and the statements that read no name
that may hold, or view, an array the function writes in place anywhere (``_written``): an LSTM's rows of its
weights and its gates, not the rows of the state it writes):

* a statement ``n = rhs`` of ``L``'s body (or of branches of it, replayed under the same condition; never of
  a nested loop) whose ``rhs`` is cheap: per element a few operations (arithmetic, comparisons, indexing,
  basic transcendental functions, reductions, ``cross``, ``dot``/``matmul`` of vectors), never a matrix
  product, a decomposition, a special function or a call of the user's;
* ``n`` is bound nowhere but there (once on every path through the body, in one statement), read nowhere
  outside ``L``'s body, and never read in the body before this iteration binds it (not carried from the
  previous iteration);
* every name ``rhs`` (and every enclosing branch's condition) reads holds, at the start of the reversed
  iteration, the value it had when the primal iteration read it: a name ``L`` never binds, one recomputed
  before it, or one ``L``'s body binds once on every path before the read (then it is taped, and the tape's
  restores leave it at iteration ``k``'s value when reversed iteration ``k`` starts).

``select`` picks, once a reversed body is built, the recomputable statements whose values that body (or a
statement picked) reads, in primal order with their branches; ``reverse`` puts them first in the reversed
body and tapes none of the names they bind (their restore markers drop). Loops whose values depend on what
they carry (a recurrence, an LSTM's state) recompute nothing and stay as taped as before.
"""
from __future__ import annotations

import ast
import copy

from . import annotations as A
from .aliases import call_name
from .astutil import clone, names_read as _loads
from .astutil import ast_walk

#: Elementwise primitives cheap enough to compute again (a few instructions per element; special functions
#: such as gammainc or jv cost hundreds and stay taped).
CHEAP_ELEMENTWISE = frozenset("""absolute add angle arccos arcsin arctan arctan2 cbrt conj cos cosh csign deg2rad
divide elu exp exp2 expit expm1 fabs fmax fmin fmod hypot imag leaky_relu log log10 log1p log2 logaddexp logit
maximum minimum multiply negative power rad2deg real reciprocal relu remainder sigmoid sign sin sinh softplus
sqrt square subtract tan tanh xlog1py xlogy""".split())

#: Other primitives linear in the size of what they read and write.
CHEAP_OTHER = frozenset("""getitem sum mean max min prod cross copy astype reshape transpose squeeze expand_dims
atleast_1d concatenate stack hstack vstack where clip matrix_transpose""".split())

#: Products cheap only between vectors (and numbers): a dot of matrices is a matrix product.
VECTOR_ONLY = frozenset(["dot", "matmul", "inner"])

_BUILTINS = frozenset(["int", "float", "len", "min", "max", "abs", "bool"])


def _cheap(e, ranks):
    """Whether expression ``e`` (the right side of an A-normal-form assignment) is cheap to compute again."""
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
        return True
    if isinstance(e, ast.BinOp):
        return not isinstance(e.op, ast.MatMult)
    if isinstance(e, (ast.Subscript, ast.Attribute)):
        return not any(isinstance(n, ast.Call) for n in ast_walk(e))
    if isinstance(e, ast.Tuple):
        return all(isinstance(x, (ast.Name, ast.Constant)) for x in e.elts)
    if isinstance(e, ast.Call):
        if A.get(e, A.CUSTOM, None) is not None:
            return False
        prim = A.get(e, A.PRIM, None)
        if prim is None:
            return isinstance(e.func, ast.Name) and e.func.id in _BUILTINS and all(
                isinstance(a, (ast.Name, ast.Constant)) for a in e.args)
        if prim.name in CHEAP_ELEMENTWISE or prim.name in CHEAP_OTHER:
            return True
        if prim.name in VECTOR_ONLY:
            return all(isinstance(a, ast.Constant) or (isinstance(a, ast.Name) and ranks.get(a.id) in (0, 1))
                       for a in e.args[:2])
    return False


def _bindings(stmts, acc):
    """Names bound in ``stmts`` (assignments, loop targets, augmented and in-place writes' arrays)."""
    for s in stmts:
        for n in ast_walk(s):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    acc.add(t.id if isinstance(t, ast.Name) else getattr(getattr(t, "value", None), "id", None))
            elif isinstance(n, (ast.For, ast.AugAssign)) and isinstance(n.target, ast.Name):
                acc.add(n.target.id)
    return acc


def _path_count(stmts):
    """How many times each name is bound along the path through ``stmts`` that binds it most (a nested
    loop's bindings count as many)."""
    out = {}
    for s in stmts:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            out[s.targets[0].id] = out.get(s.targets[0].id, 0) + 1
        elif isinstance(s, ast.If):
            a, b = _path_count(s.body), _path_count(s.orelse)
            for n in set(a) | set(b):
                out[n] = out.get(n, 0) + max(a.get(n, 0), b.get(n, 0))
        elif isinstance(s, (ast.For, ast.While)):
            for n in _bindings([s], set()):
                out[n] = 2
    return out


def _eligible(loop):
    """"all" when every cheap value of ``loop`` may be recomputed, "writes" when those that read no array the
    function writes in place may (it writes arrays in place: an array it reads may have changed since), "ints"
    when only its integer arithmetic may (it calls something for its effect, which might change any array),
    None when nothing may (it jumps out, or it is checkpointed)."""
    kind = "all"
    for n in ast_walk(ast.Module(body=loop.body, type_ignores=[])):
        if isinstance(n, (ast.Break, ast.Continue, ast.Return)):
            return None
        if kind == "all" and (isinstance(n, ast.Assign) and not isinstance(n.targets[0], ast.Name) or
                              isinstance(n, ast.AugAssign)):
            kind = "writes"
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and not A.has(n, A.TRIPS):
            kind = "ints"   # a call for its effect (it might change an array the recomputed lines read)
        if isinstance(n, (ast.For, ast.While)) and A.get(n, A.CHECKPOINT, None) is not None:
            return None
    return kind if A.get(loop, A.CHECKPOINT, None) is None else None


#: Calls whose result is a new array or a number, never memory of an argument (everything else may share it).
_FRESH = CHEAP_ELEMENTWISE | frozenset("""sum mean max min prod cross copy concatenate stack hstack vstack where clip
dot matmul inner outer zeros ones empty full zeros_like ones_like empty_like full_like array tape_reserve
""".split())

#: Kernels that write into their first argument.
_WRITERS = frozenset("""index_put index_add index_sub put copyto fill place putmask put_along_axis""".split())


_MODULES = ("K", "np", "math")


def _call_reads(e):
    """The names a call reads, but for the module or function it calls (``K``, ``np``, ``range``)."""
    out = set()
    for a in [*e.args, *(k.value for k in e.keywords)]:
        out |= _loads(a)
    f = e.func
    if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and f.value.id in _MODULES):
        out |= _loads(f.value)
    return out


def _base(e):
    while isinstance(e, (ast.Subscript, ast.Attribute, ast.Starred)):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None


def _written(fbody, ints):
    """Every name that may hold, or view, an array some statement of the function writes in place (``x[i] = v``,
    ``x += v``, a kernel or method writing into an argument, ``out=``). Conservative: names are joined into one
    class by any binding that may share memory (a name, indexing, a call not known to allocate: ``_FRESH``), and a
    class with a written name in it is written whole. ``ints`` (names that only ever hold ints) are left out."""
    parent = {}

    def find(a):
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def join(names):
        names = [n for n in names if n is not None and n not in ints]   # (an int is never memory)
        for a in names[1:]:
            parent[find(a)] = find(names[0])

    roots = set()

    def shares(e):
        """Names whose memory the value of ``e`` may share."""
        if isinstance(e, ast.Name):
            return {e.id}
        if isinstance(e, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare)):
            return set()
        if isinstance(e, (ast.Subscript, ast.Attribute)):
            return {_base(e)} - {None}
        if isinstance(e, ast.Call):
            name = call_name(e)
            if isinstance(e.func, ast.Name) and name in ("int", "float", "len", "bool", "abs") or \
                    isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) and \
                    e.func.value.id in _MODULES and name in _FRESH:
                return set()
            return _call_reads(e)
        return _loads(e)

    for n in ast_walk(ast.Module(body=list(fbody), type_ignores=[])):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    join([t.id, *shares(n.value)])
                elif isinstance(t, (ast.Tuple, ast.List)):
                    join([*(x.id for x in ast_walk(t) if isinstance(x, ast.Name)), *_loads(n.value)])
                else:
                    roots.add(_base(t))
        elif isinstance(n, ast.AugAssign):
            roots.add(_base(n.target))
        elif isinstance(n, ast.For) and not (isinstance(n.iter, ast.Call) and call_name(n.iter) == "range"):
            join([*(x.id for x in ast_walk(n.target) if isinstance(x, ast.Name)), *shares(n.iter)])
        elif isinstance(n, ast.Call):
            name = call_name(n)
            for k in n.keywords:
                if k.arg == "out":
                    roots.update(_loads(k.value))
            if name in _WRITERS and n.args:
                roots.update(_loads(n.args[0]))
            if isinstance(n.func, ast.Attribute) and not (isinstance(n.func.value, ast.Name) and
                                                          n.func.value.id in _MODULES):
                roots.update(_loads(n.func.value))   # a method (append, fill, sort, ...): may write its object
                join(list(_call_reads(n)))
    written = {find(r) for r in roots if r is not None}
    return ({a for a in list(parent) if find(a) in written} | {r for r in roots if r is not None}) - ints


_SIZES = frozenset(["ndim", "size"])
_INT_OPS = {"add": 2, "subtract": 2, "multiply": 2, "floor_divide": 2, "remainder": 2, "negative": 1}


def _int_form(e, ints):
    """Whether ``e`` is integer arithmetic over names in ``ints``, int constants and arrays' shapes and sizes
    (values no in-place write can change)."""
    if isinstance(e, ast.Constant):
        return type(e.value) is int
    if isinstance(e, ast.Name):
        return e.id in ints
    if isinstance(e, ast.BinOp):
        return isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)) and \
            _int_form(e.left, ints) and _int_form(e.right, ints)
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, ast.USub) and _int_form(e.operand, ints)
    if isinstance(e, ast.Call):   # (the A-normal form spells operators as kernels: K.multiply(2, i))
        return isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) and e.func.value.id == "K" \
            and e.func.attr in _INT_OPS and not e.keywords and len(e.args) == _INT_OPS[e.func.attr] and \
            all(_int_form(a, ints) for a in e.args)
    if isinstance(e, ast.Attribute):
        return e.attr in _SIZES and isinstance(e.value, ast.Name)
    if isinstance(e, ast.Subscript):
        return isinstance(e.value, ast.Attribute) and e.value.attr == "shape" and \
            isinstance(e.value.value, ast.Name) and isinstance(e.slice, ast.Constant) and type(e.slice.value) is int
    return False


def _int_test(e, ints):
    """Whether condition ``e`` compares integer arithmetic (``_int_form``) only."""
    if isinstance(e, ast.Compare):
        return _int_form(e.left, ints) and all(_int_form(c, ints) for c in e.comparators)
    if isinstance(e, ast.BoolOp):
        return all(_int_test(v, ints) for v in e.values)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return _int_test(e.operand, ints)
    return isinstance(e, ast.Name) and e.id in ints


def _int_names(fbody):
    """Names that hold ints wherever they are bound: targets of ``for ... in range(...)`` and names every
    assignment of which is integer arithmetic of such names (``_int_form``); a name bound any other way
    (unpacked, augmented, in a comprehension) is not one."""
    binds, plain = {}, set()
    for n in ast_walk(ast.Module(body=list(fbody), type_ignores=[])):
        if isinstance(n, ast.For) and isinstance(n.target, ast.Name):
            rng = isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name) and n.iter.func.id == "range"
            binds.setdefault(n.target.id, []).append(None if rng else False)
            plain.add(id(n.target))
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    binds.setdefault(t.id, []).append(n.value)
                    plain.add(id(t))
    for n in ast_walk(ast.Module(body=list(fbody), type_ignores=[])):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and id(n) not in plain:
            binds.setdefault(n.id, []).append(False)
    ints = {k for k, vs in binds.items() if all(v is not False for v in vs)}
    while True:   # drop names one of whose bindings is not int arithmetic of what remains
        keep = {k for k in ints if all(v is None or _int_form(v, ints) for v in binds[k])}
        if keep == ints:
            return ints
        ints = keep


def plan(body, ranks, special):
    """``{id(loop): candidate statements}`` for every loop of ``body`` with something to recompute: the
    recomputable statements of its body, copied, in order, inside copies of their branches."""
    plans = {}
    ints, written = [], []   # (the function's int names and written arrays: found once, when a loop needs them)

    def visit(stmts):
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)):
                if A.get(s, A.CHECKPOINT, None) is None:   # (nor the loops inside a checkpointed one)
                    kind = _eligible(s)
                    if kind in ("ints", "writes") and not ints:
                        ints.append(_int_names(body))
                    if kind == "writes" and not written:
                        written.append(_written(body, ints[0]))
                    if kind:
                        cand = _candidates(s, body, ranks, special, None if kind == "all" else ints[0],
                                           written[0] if kind == "writes" else None)
                        if cand:
                            plans[id(s)] = cand
                    visit(s.body)
            elif isinstance(s, ast.If):
                visit(s.body)
                visit(s.orelse)

    visit(body)
    return plans


def _candidates(loop, fbody, ranks, special, ints=None, written=None):
    """The recomputable statements of ``loop`` (with ``ints``, only integer arithmetic over those names; with
    ``written`` as well, cheap statements that read none of those names and bind none)."""
    in_loop = _bindings(loop.body, set())
    if isinstance(loop, ast.For):
        in_loop.add(loop.target.id)
    counts = _path_count(loop.body)
    # bound elsewhere, read outside the loop: never recomputed (their values outside are the tape's business)
    outside_bound, outside_read = set(), set()

    def scan(stmts):
        for s in stmts:
            if s is loop:
                outside_read.update(_loads(s.iter) if isinstance(s, ast.For) else _loads(s.test))
                continue
            if isinstance(s, (ast.For, ast.While, ast.If)):
                outside_read.update(_loads(s.iter) if isinstance(s, ast.For) else _loads(s.test))
                if isinstance(s, ast.For):
                    outside_bound.add(s.target.id)
                scan(s.body)
                scan(s.orelse)
            else:
                outside_read.update(_loads(s))
                _bindings([s], outside_bound)

    scan(fbody)
    once = {n for n, c in counts.items() if c == 1 and n not in special}
    carried = set()

    def reads_ok(names, defined):
        return all(n not in in_loop or (n in defined and n in once) for n in names)

    targets, rejected = set(), set()

    def walk(stmts, defined, build):
        # build: whether the statements here may be recomputed (False under a branch whose condition may not)
        out = []
        for s in stmts:
            if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
                reads = _loads(s.value)
                carried.update(r for r in reads if r in in_loop and r not in defined)
                n = s.targets[0].id
                if n in targets:
                    cheap = _cheap(s.value, ranks) if ints is None else (n in ints and _int_form(s.value, ints))
                    if not cheap and written is not None:   # (a statement away from every array written in place)
                        cheap = _cheap(s.value, ranks) and n not in written and not (reads & written)
                    if build and cheap and reads_ok(reads, defined):
                        out.append(clone(s))
                    else:
                        rejected.add(n)
                defined = defined | {n}
            elif isinstance(s, ast.If):
                reads = _loads(s.test)
                carried.update(r for r in reads if r in in_loop and r not in defined)
                sub = build and reads_ok(reads, defined) and (ints is None or _int_test(s.test, ints) or
                                                              written is not None and not (reads & written))
                b, db = walk(s.body, defined, sub)
                o, do = walk(s.orelse, defined, sub)
                if b or o:
                    out.append(ast.If(test=copy.deepcopy(s.test), body=b or [ast.Pass()], orelse=o))
                defined = defined | (db & do)
            else:
                carried.update(r for r in _loads(s) if r in in_loop and r not in defined)
        return out, defined

    walk(loop.body, set(), False)   # first: which names are carried
    # (recomputed names must be bound only here; a name some iteration reads before binding is carried)
    targets |= once - carried - outside_bound - outside_read
    while True:   # a name recomputed on one path but not on another (not cheap there) is taped on all
        rejected.clear()
        cand, _ = walk(loop.body, set(), True)
        if not rejected:
            return cand
        targets -= rejected


def select(cand, need):
    """The statements of ``cand`` that bind a name in ``need`` or one a selected statement reads, with the
    branches around them (``need`` grows by what they read); returns ``(statements, names bound)``."""
    bound = set()

    def pick(stmts):
        out = []
        for s in reversed(stmts):
            if isinstance(s, ast.If):
                b, o = pick(s.body), pick(s.orelse)
                if b or o:
                    need.update(_loads(s.test))
                    out.append(ast.If(test=copy.deepcopy(s.test), body=b or [ast.Pass()], orelse=o))
            elif isinstance(s, ast.Assign) and s.targets[0].id in need:
                need.update(_loads(s.value))
                bound.add(s.targets[0].id)
                out.append(clone(s))
        return out[::-1]

    return pick(cand), bound
