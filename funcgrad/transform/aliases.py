"""Aliases: in-place writes that another name would see are refused, at the user's line.

In Python two names can hold one array: ``b = a`` inside a loop or branch,
or a view (``b = a[1:]``, ``a.reshape(...)``, ``a.T``). A write
``a[i] = v`` then changes what ``b`` holds too. The generated primal does
the same (its kernels return views where NumPy does), but the reverse pass
keeps one cotangent per name: the write would cut the cotangent of ``a``'s
overwritten elements and not of ``b``'s, and undoing it during the sweep
would change an output that is a view. (``b = a`` in straight-line code is
no alias: :mod:`.anf` makes ``b`` read ``a``.)

Guarantee: ``check_aliases`` raises :class:`funcgrad.errors.UnsupportedSyntaxError`
at the user's line of an in-place write when another name that may share the
written array's memory (a flow-sensitive may-alias analysis: plain
assignments and view-producing calls share, every other call allocates; an
allocation site in a loop is a different array each iteration) is read after
the write (liveness, loops iterated to a fixpoint) or is an output; ``x += v``
on an array counts as a write into ``x``'s array, as NumPy does it. Writes no
other live name can see pass unchanged.

``rebind_aliases`` runs first and removes the refusals it can: a write (``x += v``
or ``x[i] = v``) into an array (rank known, 1 or more) that another live name must
hold as the very same array (``y = c``, a helper's parameter bound to the caller's
array; along every path, tracked as one more flow-sensitive fact beside the
may-alias sets) gets ``c = x`` right after it. The generated code binds a new
array for ``x += v`` and the reverse pass keeps one cotangent per name; rebinding
every other name of the array gives each the values NumPy's write in place
showed it, and its cotangent the path through the write. A view (``y = c[1:]``)
is never the same array, nor is an array an earlier run of a loop made.
Views by indexing and transposes are settled too: a write through
``v = B[idx]`` (``B``, ``v`` and every name ``idx`` reads unchanged since, on
every path) is written back, ``B[idx] = v`` (NumPy's no-op; the write is
annotated WRITE_BACK so the check lets ``B`` see it); through ``v = B.T``,
``B`` is made ``v.T`` again; and ``v`` is made again after a write into ``B``.
Other views (``np.flip``, ``np.diagonal``), views chosen on a branch, and
reshapes (NumPy's ``reshape``/``ravel`` copy where the memory layout does not
allow a view, so whether a write is seen is decided at run time) stay refused.
"""
from __future__ import annotations

import ast
import linecache

from . import annotations as A
from ..errors import UnsupportedSyntaxError
from .astutil import ast_walk, clone, prim_call

# calls whose result may share memory with their first argument (NumPy returns views, or the argument)
VIEWS = frozenset("""
    getitem reshape transpose squeeze expand_dims broadcast_to stop_gradient ravel flip fliplr flipud rot90
    swapaxes moveaxis rollaxis diagonal real imag atleast_1d atleast_2d atleast_3d asarray asanyarray
    ascontiguousarray asfortranarray asarray_dtype view broadcast_like unbroadcast untranspose matrix_transpose permute_dims
""".split())


def _reads(node):
    return {n.id for n in ast_walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stmt_reads(s):
    if isinstance(s, ast.Assign):
        t = s.targets[0]
        r = _reads(s.value)
        if isinstance(t, ast.Subscript):
            r |= _reads(t.slice) | _reads(t.value)
        return r
    return _reads(s)


class _Liveness:
    """Names live after each in-place write (read later before being rebound, or an output)."""

    def __init__(self):
        self.after: dict = {}    # id(write statement) -> names live right after it

    def block(self, stmts, live):
        for s in reversed(stmts):
            live = self.stmt(s, live)
        return live

    def stmt(self, s, live):
        if isinstance(s, ast.If):
            return _reads(s.test) | self.block(s.body, live) | self.block(s.orelse, live)
        if isinstance(s, (ast.For, ast.While)):
            head = _reads(s.iter) if isinstance(s, ast.For) else _reads(s.test)
            loop = set()
            while True:   # live at the top of the body: the next iteration's, or after the loop's
                new = self.block(s.body, live | head | loop)
                if new <= loop:
                    break
                loop |= new
            return live | head | loop
        if isinstance(s, ast.Assign):
            t = s.targets[0]
            if isinstance(t, ast.Name):
                if A.get(s, A.AUGMENTED, False):
                    self.after[id(s)] = self.after.get(id(s), set()) | live
                return (live - {t.id}) | _reads(s.value)
            self.after[id(s)] = self.after.get(id(s), set()) | live
            return live | _stmt_reads(s)
        return live | _stmt_reads(s)


def call_name(e):
    f = e.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def may_share(e):
    """The name whose memory the value of ``e`` may share (itself, a view-producing call of it, or such a method of
    it kept as a call: ``a.view()``), or None when ``e`` makes a new array (or a number). Conservative: indexing
    counts as a view whatever the index."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Call) and e.args and isinstance(e.args[0], ast.Name) and call_name(e) in VIEWS:
        return e.args[0].id
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
            and e.func.value.id not in ("K", "np", "math") and e.func.attr in VIEWS:
        return e.func.value.id
    return None


class _PointsTo:
    """May-alias: the arrays (allocation sites) each name may hold, statement by statement."""

    def __init__(self, live_after, outputs, ranks, basic_index, error, subscripts=True, rebinds=None):
        self.subscripts = subscripts     # check x[i] = v too (the reverse pass); else only x += v
        self.rebinds = rebinds           # dict: collect (statement -> names to rebind after it) instead of refusing
        self.live_after = live_after
        self.outputs = outputs
        self.ranks = ranks
        self.basic_index = basic_index
        self.error = error

    def block(self, stmts, pts):
        for s in stmts:
            pts = self.stmt(s, pts)
        return pts

    @staticmethod
    def merge(a, b):
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, frozenset()) | v
        return out

    def stmt(self, s, pts):
        exact = self.rebinds is not None   # rebind_aliases: which array each name is exactly, and its views
        if isinstance(s, ast.If):
            return self.merge(self.block(s.body, dict(pts)), self.block(s.orelse, dict(pts)))
        if isinstance(s, (ast.For, ast.While)):
            if isinstance(s, ast.For):
                pts = dict(pts)
                pts[s.target.id] = frozenset()   # a loop counter
                if exact:
                    pts[_same(s.target.id)] = frozenset({(id(s), False)})
                    _rebound(pts, s.target.id, frozenset({(None, id(s))}))

            def body(state):
                state = dict(state)
                if exact and isinstance(s, ast.For):   # each trip's counter is a value of its own
                    _stale(state, id(s))
                    state[_same(s.target.id)] = frozenset({(id(s), True)})
                return self.block(s.body, state)
            state = pts
            while True:
                out = self.merge(state, body(state))
                if out == state:
                    return state
                state = out
        if not isinstance(s, ast.Assign):
            return pts
        t = s.targets[0]
        if isinstance(t, ast.Subscript):
            if self.subscripts or exact:
                self.write(s, t.value.id, pts)
            return pts
        pts = dict(pts)
        old = _augmented_operand(s)
        if old is not None and self.ranks.get(t.id) != 0:
            # x += v on an array writes into x's array in Python (the generated code binds a new one): fine
            # unless another live name holds that array
            self.write(s, old, pts, exclude=t.id)
            pts[t.id] = pts.get(old, frozenset({("name", old)}))
            if exact:
                pts[_same(t.id)] = _same_of(pts, old)
                if t.id != old:
                    pts[_view(t.id)] = frozenset()
                    _rebound(pts, t.id, frozenset({(old, id(s))}))
            return pts
        src = self.shares(s.value, t.id)
        site = id(s)   # a new array (or view): arrays an earlier run of this statement made are older ones now
        if not (src is not None and isinstance(s.value, ast.Name)):
            _stale(pts, site)
        pts[t.id] = frozenset({(site, True)}) if src is None else pts.get(src, frozenset({("name", src)}))
        if exact:
            self.exactly(s, t.id, src, pts)
        return pts

    def exactly(self, s, t, src, pts):
        """Record, for ``t = s.value``, which array ``t`` is exactly (``src``'s own after a plain assignment, a new
        one otherwise), the copy fact, and where ``t`` is a view ``src[idx]`` (``src.T``), what it reads."""
        plain = isinstance(s.value, ast.Name)
        _rebound(pts, t, frozenset({(s.value.id if plain else None, id(s))}))
        pts[_same(t)] = _same_of(pts, src) if plain else frozenset({(id(s), True)})
        pts[_view(t)] = pts.get(_view(src), frozenset()) if plain else frozenset()
        args = pts.get(_view_args(src), frozenset()) if plain else frozenset()
        for n in args:   # a copy of a view is that view: it reads what the view read
            pts[("viewarg", t, n)] = pts[("viewarg", src, n)]
        if src is not None and not plain and _view_kind(s.value) is not None:
            # t is the view src[idx] (or src.T): what a write through it (or into src) must write back (make
            # again); valid while src and every name it reads are unchanged
            self.view_rhs[id(s)] = s.value
            pts[_view(t)] = frozenset({(src, id(s))})
            args = frozenset({src} | (_reads(s.value) - {"K"}))
            for n in args:
                pts[("viewarg", t, n)] = _same_of(pts, n)
        pts[_view_args(t)] = args

    def view_of(self, pts, v):
        """``(base, site)`` when ``v`` holds, on every path here, the view ``base[idx]`` its statement ``site``
        made, with ``base`` and every name ``idx`` reads unchanged since; else None."""
        rel = pts.get(_view(v), frozenset())
        if len(rel) != 1:
            return None
        base, site = next(iter(rel))
        args = pts.get(_view_args(v), frozenset())
        if _same_of(pts, v) != frozenset({(site, True)}) or base not in args:
            return None
        for n in args:
            tokens = pts.get(("viewarg", v, n), frozenset())
            if len(tokens) != 1 or _same_of(pts, n) != tokens or next(iter(tokens))[1] is False:
                return None
        return base, site

    def shares(self, e, target):
        """The name whose memory ``target = e`` may share, or None when ``e`` makes a new array (or a number)."""
        if isinstance(e, ast.Call) and call_name(e) == "getitem" and e.args and isinstance(e.args[0], ast.Name) \
                and (self.ranks.get(target) == 0 or (len(e.args) > 1 and not self.basic_index(e.args[1], self.ranks))):
            return None   # an element, or advanced indexing: a copy
        return may_share(e)

    def write(self, s, base, pts, exclude=None):
        if self.rebinds is not None:
            # decided afresh at each visit: inside a loop only the last visit sees the state at the fixpoint (an
            # earlier one may see one array or view where later trips bring others)
            self.rebinds[id(s)] = []
        mine = pts.get(base, frozenset({("name", base)}))
        live = self.live_after.get(id(s), set())   # outputs: live at the end (liveness starts from them)
        for other in sorted(live - {base if exclude is None else exclude}):
            theirs = pts.get(other, frozenset({("name", other)}))
            if mine & theirs:
                if other in A.get(s, A.WRITE_BACK, ()):
                    continue   # written back into other right after (B[idx] = x): other sees it as NumPy does
                if self.rebinds is None:
                    raise self.error(s, base, other)
                written = base if exclude is None else exclude   # x[i] = v writes x; x += v rebinds x
                if not _is_rank(self.ranks.get(written)):
                    continue   # refused by check_aliases
                todo = self.rebinds.setdefault(id(s), [])
                if _must_be_same(pts, base, other):
                    todo.append(("rebind", other, written))
                    continue
                through = self.view_of(pts, base)
                if through is not None and (other == through[0] or _must_be_same(pts, other, through[0])):
                    # a write through the view base = B[idx]: write it back, B[idx] = base (NumPy's no-op); or
                    # through base = B.T: B is base.T again
                    if ("write back", through[0], written, through[1]) not in todo:
                        todo.append(("write back", through[0], written, through[1]))
                        if written != base and _view_kind(self.view_rhs[through[1]]) == "getitem":
                            todo.append(("view again", written, through[1]))   # x += v bound a new array
                    if other != through[0]:   # another name of B: B again after B is written back
                        todo.append(("rebind", other, through[0]))
                    continue
                theirs = self.view_of(pts, other)
                if theirs is not None and exclude in (None, base) and _must_be_same(pts, theirs[0], base):
                    # a write into B while other = B[idx] is live: other is B[idx] again, made afresh
                    todo.append(("view again", other, theirs[1]))
                # else: refused by check_aliases


_ORDER = {"write back": 0, "rebind": 1, "view again": 2}


def _view_kind(e):
    """``"getitem"`` (basic indexing) or ``"transpose"`` for a view ``rhs`` a write can be written back
    through (NumPy's result is a view whatever the memory layout), else None."""
    if not isinstance(e, ast.Call) or not e.args or not isinstance(e.args[0], ast.Name):
        return None
    name = call_name(e)
    if name == "getitem" and len(e.args) == 2 and not e.keywords:
        return name
    if name == "transpose" and len(e.args) == 1 and all(k.arg == "axes" for k in e.keywords):
        if not e.keywords or _literal_axes(e) is not None:
            return name
    # not a reshape (or ravel): NumPy's is a view only where the array's memory layout allows, a copy elsewhere
    # (a transposed or strided array, an F-ordered result): whether a write is seen is decided at run time
    return None


def _literal_axes(e):
    """The ``axes=`` tuple of a transpose call as ints, or None (none given, or not literal)."""
    for k in e.keywords:
        if k.arg == "axes" and isinstance(k.value, ast.Tuple) and all(
                isinstance(x, ast.Constant) and type(x.value) is int and x.value >= 0 for x in k.value.elts):
            axes = [x.value for x in k.value.elts]
            return axes if sorted(axes) == list(range(len(axes))) else None
    return None


def _inverse(axes):
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return inv


def _stale(pts, site):
    """Arrays (or values) an earlier run of statement ``site`` made are older ones now."""
    for k, v in pts.items():
        if (site, True) in v:
            pts[k] = (v - {(site, True)}) | {(site, False)}


def _view(name):
    return ("view", name)


def _view_args(name):
    """The key of the names view ``name`` read when it was made (each with its tokens then under
    ``("viewarg", name, n)``)."""
    return ("viewargs", name)


def _same(name):
    """The key under which the points-to state records which array ``name`` is exactly (not a view of)."""
    return ("=", name)


def _same_of(pts, name):
    return pts.get(_same(name), frozenset({("name", name)}))


def _must_be_same(pts, a, b):
    """Whether ``a`` and ``b`` hold the very same array on every path here: one current allocation, the same
    parameter, or the same outside name (an older array of a statement in a loop is never known); or, whatever
    array it is, one was assigned from the other (or both from a third) with neither rebound since."""
    x, y = _same_of(pts, a), _same_of(pts, b)
    if len(x) == 1 and x == y and next(iter(x))[1] is not False:
        return True
    return _copy_root(pts, a) == _copy_root(pts, b)


def _copy_of(name):
    """The key of the copy facts of ``name``: ``{(src, site)}`` where every path here last bound it by
    ``name = src`` at ``site`` (``src`` unchanged since); ``(None, site)`` where a path bound it otherwise."""
    return ("copyof", name)


def _rebound(pts, name, fact):
    """``name`` is bound anew (``fact``: its copy fact now): facts naming it as the source hold no more. The
    names copied from each name are kept under ``("copies", name)`` (a superset after merges), so only their
    facts are looked at."""
    for b in pts.get(("copies", name), ()):
        v = pts.get(_copy_of(b), frozenset())
        if any(src == name for src, _ in v):
            pts[_copy_of(b)] = frozenset((None if src == name else src, site) for src, site in v)
    pts[("copies", name)] = frozenset()
    pts[_copy_of(name)] = fact
    for src, _ in fact:
        if src is not None:
            pts[("copies", src)] = pts.get(("copies", src), frozenset()) | {name}


def _copy_root(pts, name):
    """The name ``name`` is a copy of (``name = src``, following such copies), or ``name`` itself."""
    seen = {name}
    while True:
        facts = pts.get(_copy_of(name), frozenset())
        if len(facts) != 1:
            return name
        src, _ = next(iter(facts))
        if src is None or src in seen:
            return name
        seen.add(src)
        name = src


def _is_rank(r):
    return isinstance(r, int) and not isinstance(r, bool) and r >= 1


def _augmented_operand(s):
    """``x`` of ``x_1 = K.add(x, v)`` made from ``x += v``, else None."""
    if not A.get(s, A.AUGMENTED, False):
        return None
    e = s.value
    if isinstance(e, ast.Call) and e.args and isinstance(e.args[0], ast.Name):
        return e.args[0].id
    if isinstance(e, ast.BinOp) and isinstance(e.left, ast.Name):
        return e.left.id
    return None


def check_aliases(fdef: ast.FunctionDef, outputs, ranks, basic_index, filename_of, subscripts=True, origins=None):
    """Refuse in-place writes of ``fdef`` (ANF) that another live name may see (see the module docstring).

    ``outputs``: the names returned; ``ranks``: name -> ndim (a scalar read by indexing is a copy);
    ``basic_index(idx, ranks)``: whether an index selects a view; ``filename_of(stmt)``: the user's file
    when the statement does not record it. ``subscripts=False`` checks ``x += v`` only: code that mirrors
    NumPy's views (the primal, the forward pass) is right under ``x[i] = v`` through an alias. ``origins``:
    generated name -> the user's words for it (normalize's record), so a message names what the user wrote.
    """
    origins = origins or {}

    params = [a.arg for a in fdef.args.args]
    live = _Liveness()
    live.block(list(fdef.body), set(outputs))

    def error(stmt, base, other):
        fn = A.get(stmt, A.FILE, None) or filename_of(stmt)
        line = getattr(stmt, "lineno", None)
        text = linecache.getline(fn, line) if fn and line else None
        (b, b_id), (o, _) = user_words(base, origins), user_words(other, origins)
        if A.get(stmt, A.AUGMENTED, False):
            (b, b_id) = user_words(stmt.targets[0].id, origins)   # the name the user wrote before the operator
            msg = (f"'+=' (and the like) on {b} writes into the array it holds, and another name holding that "
                   f"array {'' if o == b else f'({o}) '}is used afterwards: funcgrad does not differentiate "
                   "writes seen through another name")
            b_id = b_id or "y"
            hint = f"write {b_id} = {b_id} + ... (a new array), or copy the array before the other name takes it"
        else:
            msg = (f"this in-place write to {b} also changes {o}, which shares its memory and is used "
                   "afterwards: funcgrad does not differentiate writes seen through another name")
            b_id = b_id or "y"
            hint = (f"copy before writing ({b_id} = {b_id}.copy()), or build a new array (np.where, "
                    "np.concatenate) instead of writing in place")
        return UnsupportedSyntaxError(msg, fn, line, None, text or None, hint=hint)

    pts = {p: frozenset({("param", p)}) for p in params}
    _PointsTo(live.after, [o for o in outputs], ranks, basic_index, error, subscripts).block(list(fdef.body), pts)


def rebind_aliases(fdef: ast.FunctionDef, outputs, ranks, basic_index):
    """Settle the writes other names see (see the module docstring), in rounds until none is left: after a
    write (``x += v``, ANF, marked AUGMENTED; or ``x[i] = v``) into an array that another live name must hold
    as the same array, add ``other = x``; after a write through a view ``x = B[idx]``, add ``B[idx] = x``
    (NumPy's no-op, which the next round settles in turn); after a write into ``B`` while a view
    ``v = B[idx]`` is live, add ``v = B[idx]`` again. Returns the number of statements added. Writes it cannot
    settle are left for :func:`check_aliases`."""
    if not any(isinstance(n, ast.Assign) and (isinstance(n.targets[0], ast.Subscript) or A.get(n, A.AUGMENTED, False))
               for n in ast_walk(fdef)):
        return 0   # no write into an array: nothing to settle (most functions; the analysis is linear but not free)
    params = [a.arg for a in fdef.args.args]
    added = 0
    done = set()   # (write statement, action) already added: a round never adds one twice
    roots: dict = {}   # id(write-back statement, in the tree from then on) -> the writes it is written back for
    for _round in range(6):
        live = _Liveness()
        live.block(list(fdef.body), set(outputs))
        rebinds: dict = {}
        walker = _PointsTo(live.after, list(outputs), ranks, basic_index, None, subscripts=False, rebinds=rebinds)
        walker.view_rhs = {}
        start = {p: frozenset({("param", p)}) for p in params}
        start.update({_copy_of(p): frozenset({(None, "param")}) for p in params})   # bound: no copy of another
        walker.block(list(fdef.body), start)
        todo = {k: [a for a in v if (k, a) not in done] for k, v in rebinds.items()}
        todo = {k: v for k, v in todo.items() if v}
        if not todo:
            break
        for k, v in todo.items():
            done.update((k, a) for a in v)

        def assign(name, value):
            return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)

        def made(action, st):
            """The statements ``action`` adds after ``st``."""
            if action[0] == "rebind":
                return [assign(action[1], ast.Name(id=action[2], ctx=ast.Load()))]
            rhs = walker.view_rhs[action[3] if action[0] == "write back" else action[2]]
            if action[0] == "view again":
                return [assign(action[1], clone(rhs))]
            base, written = action[1], ast.Name(id=action[2], ctx=ast.Load())
            for w in (st,) + roots.get(id(st), ()):   # a write through a view of a view: seen by all
                A.put(w, A.WRITE_BACK, A.get(w, A.WRITE_BACK, frozenset()) | {base})
            kind = _view_kind(rhs)
            if kind == "transpose":   # B = written.T, or transposed by the inverse of the view's axes
                axes = _literal_axes(rhs)
                kw = [] if axes is None else [ast.keyword(arg="axes", value=ast.Tuple(
                    elts=[ast.Constant(value=i) for i in _inverse(axes)], ctx=ast.Load()))]
                return [assign(base, prim_call("transpose", [written], kw))]
            target = ast.Subscript(value=ast.Name(id=base, ctx=ast.Load()), slice=clone(rhs.args[1]),
                                   ctx=ast.Store())
            new = ast.Assign(targets=[target], value=written)
            roots[id(new)] = (st,) + roots.get(id(st), ())
            return [new]

        def fix(stmts):
            nonlocal added
            out = []
            for st in stmts:
                for field in ("body", "orelse"):
                    if isinstance(getattr(st, field, None), list) and not isinstance(st, ast.FunctionDef):
                        setattr(st, field, fix(getattr(st, field)))
                out.append(st)
                # a view written back first, then the other names of its array, then views made again
                for action in sorted(todo.get(id(st), ()), key=lambda a: _ORDER[a[0]]):
                    for new in made(action, st):
                        ast.copy_location(new, st)
                        if A.get(st, A.FILE, None) is not None:
                            A.put(new, A.FILE, A.get(st, A.FILE))
                        out.append(new)
                        added += 1
            return out

        fdef.body = fix(list(fdef.body))
    return added


def user_words(name, origins):
    """``(words, identifier)`` naming variable ``name`` of the generated code as the user wrote it (``origins``:
    normalize's record; see ``normalize.common.shown_as``)."""
    if name in origins:
        return origins[name]
    if name in ("_ret", "__ret"):
        return "the returned value", None
    if "_iterated" in name:   # normalize's hold of a for loop's iterable (evaluated once, as Python does)
        return "the array the loop iterates over", None
    if name.startswith("_") or "__" in name:   # a temporary of the generated code: no name of the user's
        return "a value computed earlier", None
    return f"'{name}'", name
