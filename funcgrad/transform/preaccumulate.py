"""Preaccumulation of a reversed loop body's local derivatives (scalar loops under njit).

The adjoint of one iteration is linear in the cotangents that flow into it: every cotangent it writes is a
sum of ``coefficient * cotangent`` over the cotangents it reads before writing them (``d_x``, ``d_a``), with
coefficients that depend on the primal values alone. Written statement by statement, as :mod:`.reverse`
emits it, the loop-carried cotangent passes through every statement of the body (``d_t4 = d_x * DT``,
``d_t3 = -d_t4``, ``d_x = d_x + d_t3 * _t2`` ...): a chain of dependent floating-point operations per
iteration that the CPU cannot overlap, so a 10,000-step recurrence's adjoint ran at the chain's latency
(1.6x a hand-written adjoint). Here the same statements compute the coefficients instead (``_c3 = -DT``,
``_c4 = 1.0 + _c3 * _t2`` ...), which depend on no cotangent and so overlap across iterations, and the
cotangents are updated once at the end of the body (``d_x = d_x * _c9``, ``d_a = d_a + d_x * _c7``): one
multiply-add on the carried chain. The result is the same linear map, summed in another order.

Guarantees: a body is rewritten only when every statement is an assignment to a name or a statement that
touches no cotangent (the tape restores), every cotangent it reads or writes is a scalar (rank 0), and
every cotangent-valued expression is linear in the grammar of the emitted adjoint (names, ``+``, ``-``,
unary ``-``, a product or quotient by a cotangent-free factor, ``K.zeros_like`` of a primal or ``0.0``,
``K.copy``);
anything else leaves the loop as it is, and so does a body whose rewrite a simple cost model (the longest
chain through a carried cotangent against the operation count) does not expect to be faster: with many
carried cotangents every coefficient is an entry of a dense Jacobian. Coefficients are
computed where the statement they come from stood, so they read the primal values that statement read.
"""
from __future__ import annotations

import ast

from . import annotations as A
from .astutil import ast_walk

ONE = object()   # the coefficient 1 (kept symbolic: ``d_x`` rather than ``d_x * 1.0``)


class _Bail(Exception):
    pass


def _names(e):
    return {n.id for n in ast_walk(e) if isinstance(n, ast.Name)}


def _is_k_call(e, attr):
    return (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == attr
            and isinstance(e.func.value, ast.Name) and e.func.value.id == "K" and len(e.args) == 1
            and not e.keywords)


class _Body:
    """One reversed loop body being rewritten: ``forms`` maps each cotangent-valued name written so far to its
    linear form ``{cotangent read on entry: coefficient}`` (a coefficient is ``ONE`` or a temporary's name)."""

    def __init__(self, cot, namer, scalar):
        self.cot = cot            # names holding cotangents (grows by the temporaries that copy one)
        self.dnames = set(cot)    # the cotangents of primal names (``d_x``): their ranks are known
        self.namer = namer
        self.scalar = scalar      # name -> True when known to be a scalar
        self.forms: dict = {}
        self.zeros: dict = {}     # cotangent -> the zero it was last set to (``0.0``, ``K.zeros_like(x)``)
        self.out: list = []       # the rewritten statements
        self.live_in: list = []   # cotangents read before written, in order
        self.written: list = []   # cotangent-valued names written, in order
        self.origin = None
        self.comment = None
        self.rebound = set()      # names assigned after this statement: a factor reading one is copied here

    def temp(self, value):
        name = self.namer.fresh("_c")
        st = ast.Assign(targets=[ast.Name(name, ast.Store())], value=value)
        if self.origin is not None:
            ast.copy_location(st, self.origin)
            for ann in (A.FILE, A.SRC):
                if A.has(self.origin, ann):
                    A.put(st, ann, A.get(self.origin, ann))
        if self.comment:   # the first coefficient of a statement names the primal statement it undoes
            A.put(st, A.COMMENT, self.comment)
            self.comment = None
        self.out.append(st)
        return ast.Name(name, ast.Load())

    # coefficient arithmetic (ONE folded)
    def _c(self, c):
        return ast.Constant(1.0) if c is ONE else ast.Name(c.id, ast.Load())

    def mul(self, c, factor, op):
        if c is ONE and isinstance(op, ast.Mult):
            return factor
        return self.temp(ast.BinOp(left=self._c(c), op=op, right=ast.Name(factor.id, ast.Load())))

    def add(self, a, b, op):
        return self.temp(ast.BinOp(left=self._c(a), op=op, right=self._c(b)))

    def neg(self, c):
        return self.temp(ast.UnaryOp(op=ast.USub(), operand=self._c(c)))

    def form(self, e):
        """The linear form of ``e``, or None when ``e`` holds no cotangent."""
        if not (_names(e) & self.cot):
            return None
        if isinstance(e, ast.Name):
            if e.id in self.forms:
                return dict(self.forms[e.id])
            if e.id not in self.dnames or not self.scalar(e.id):
                raise _Bail
            if e.id not in self.live_in:
                self.live_in.append(e.id)
            return {e.id: ONE}
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return {k: self.neg(c) for k, c in self.form(e.operand).items()}
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            fa, fb = self.form(e.left), self.form(e.right)
            if fa is None or fb is None:   # cotangent + primal: not linear (never emitted)
                raise _Bail
            out = dict(fa)
            for k, c in fb.items():
                if k in out:
                    out[k] = self.add(out[k], c, e.op)
                else:
                    out[k] = c if isinstance(e.op, ast.Add) else self.neg(c)
            return out
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.Div)):
            fa, fb = self.form(e.left), self.form(e.right)
            if fa is not None and fb is None:
                lin, factor = fa, e.right
            elif fb is not None and fa is None and isinstance(e.op, ast.Mult):
                lin, factor = fb, e.left
            else:
                raise _Bail
            if not lin:
                return {}
            if isinstance(factor, ast.Name) and factor.id not in self.rebound:
                f = factor               # a loop invariant (a parameter, a constant's name): read as it is
            else:
                f = self.temp(factor)    # evaluated here, once, with the primal values this statement read
            return {k: self.mul(c, f, e.op) for k, c in lin.items()}
        if _is_k_call(e, "copy"):
            return self.form(e.args[0])
        raise _Bail

    def zero_form(self, e):
        """``K.zeros_like(<primal>)`` or ``0.0``: the empty form."""
        if isinstance(e, ast.Constant):
            return type(e.value) is float and e.value == 0.0
        return _is_k_call(e, "zeros_like") and not (_names(e.args[0]) & self.cot)

    def statement(self, s):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            t = s.targets[0].id
            if t in self.cot:
                if self.zero_form(s.value):
                    f = {}
                    self.zeros[t] = s.value
                else:
                    self.origin = s
                    self.comment = A.get(s, A.COMMENT, None) or self.comment
                    f = self.form(s.value)
                    if f is None:
                        raise _Bail
                if t in self.dnames and not self.scalar(t):
                    raise _Bail
                self.forms[t] = f
                if t not in self.written:
                    self.written.append(t)
                return
            if _names(s.value) & self.cot:   # a new name for a cotangent (``_dres1 = d_x``)
                self.cot.add(t)
                self.statement(s)
                return
            self.out.append(s)
            return
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.If, ast.Expr, ast.Pass)):
            if any(isinstance(n, (ast.For, ast.While, ast.Return, ast.Break, ast.Continue)) for n in ast_walk(s)):
                raise _Bail
            if _names(s) & self.cot:
                raise _Bail
            self.out.append(s)
            return
        raise _Bail

    def finish(self, read_elsewhere):
        """``d = d_in * c + ...`` for every cotangent written that is read again (by the next iteration, or by
        code outside the loop), computed from the values read on entry."""
        finals = []
        for t in self.written:
            if t not in self.live_in and t not in read_elsewhere:
                continue
            terms = []
            for k, c in self.forms[t].items():
                terms.append(ast.Name(k, ast.Load()) if c is ONE else
                             ast.BinOp(left=ast.Name(k, ast.Load()), op=ast.Mult(), right=ast.Name(c.id, ast.Load())))
            if not terms:
                value = self.zeros.get(t, ast.Constant(0.0))
            else:
                value = terms[0]
                for term in terms[1:]:
                    value = ast.BinOp(left=value, op=ast.Add(), right=term)
            if isinstance(value, ast.Name) and value.id == t:
                continue   # unchanged
            tmp = self.namer.fresh("_f")
            finals.append((t, tmp))
            self.out.append(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=value))
        for t, tmp in finals:
            self.out.append(ast.Assign(targets=[ast.Name(t, ast.Store())], value=ast.Name(tmp, ast.Load())))


_LATENCY = 4      # cycles of a dependent floating-point operation
_PER_CYCLE = 2    # independent operations a core retires per cycle


def _cost(body, carried):
    """Cycles per iteration, as a model: the longer of the carried cotangents' longest cycle (latency-bound:
    each operation on it waits for the one before) and the operation count (throughput-bound)."""
    ops = 0
    worst = 0
    for c in carried:
        depth = {c: 0}   # longest chain of operations from ``c`` on entry to each name
        for st in body:
            if not (isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name)):
                continue
            t = st.targets[0].id
            d = _chain(st.value, depth)
            if d is not None:
                depth[t] = d
            elif t in depth:
                del depth[t]
        worst = max(worst, depth.get(c, 0))   # the chain to the value ``c`` ends the iteration with
    for st in body:
        if isinstance(st, ast.Assign):
            ops += sum(isinstance(n, (ast.BinOp, ast.UnaryOp)) for n in ast_walk(st.value))
    return max(_LATENCY * worst, ops / _PER_CYCLE)


def _chain(e, depth):
    """The longest chain of operations from the tracked value to ``e`` (None when ``e`` does not depend on it)."""
    if isinstance(e, ast.Name):
        return depth.get(e.id)
    if isinstance(e, ast.BinOp):
        a, b = _chain(e.left, depth), _chain(e.right, depth)
        if a is None and b is None:
            return None
        return max(x for x in (a, b) if x is not None) + 1
    if isinstance(e, ast.UnaryOp):
        a = _chain(e.operand, depth)
        return None if a is None else a + 1
    if _is_k_call(e, "copy"):
        return _chain(e.args[0], depth)
    return None


def _loads(nodes, skip):
    out = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n is skip:
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        stack.extend(ast.iter_child_nodes(n))
    return out


def _assigned(stmts):
    return {t.id for s in stmts for n in ast_walk(s) if isinstance(n, (ast.Assign, ast.AugAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}


def preaccumulate(code, cotangents, namer, is_scalar, whole=None):
    """Rewrite, in place, every reversed loop in ``code`` whose body qualifies (see the module docstring).
    ``cotangents``: the names holding cotangents (``d_<name>``); ``is_scalar(name)``: whether a cotangent
    name is known to hold a scalar. Returns the number of loops rewritten."""
    whole = code if whole is None else whole
    done = 0
    for s in code:
        if isinstance(s, ast.If):
            done += preaccumulate(s.body, cotangents, namer, is_scalar, whole)
            done += preaccumulate(s.orelse, cotangents, namer, is_scalar, whole)
            continue
        if not isinstance(s, ast.For):
            continue
        if any(isinstance(x, (ast.For, ast.While)) for x in s.body):
            done += preaccumulate(s.body, cotangents, namer, is_scalar, whole)
            continue
        comment = A.get(s, A.COMMENT, "") or ""
        if not comment.startswith("reversed:") or s.orelse:
            continue
        save = namer.checkpoint()
        later = [set()]   # later[i]: the names statements after the i-th one assign
        for st in reversed(s.body[1:]):
            later.append(later[-1] | _assigned([st]))
        later.reverse()
        b = _Body(set(cotangents), namer, is_scalar)
        try:
            for st, after in zip(s.body, later):
                b.rebound = after
                b.statement(st)
            if not b.written:
                raise _Bail
            b.finish(_loads(whole, s))
            carried = [t for t in b.written if t in b.live_in]
            if _cost(b.out, carried) >= 0.85 * _cost(s.body, carried):
                raise _Bail   # the shorter chain does not pay for the extra arithmetic (many carried cotangents)
        except _Bail:
            namer.restore(save)
            continue
        s.body = b.out
        A.put(s, A.COMMENT, comment + "  (local derivatives preaccumulated)")
        done += 1
    return done
