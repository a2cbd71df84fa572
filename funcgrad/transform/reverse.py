"""Reverse: the primal in A-normal form followed by its adjoint, by filling VJP templates.

Input: an ANF function, which of its parameters are differentiated, and the
names of its outputs. Output (:class:`Adjoint`): the primal (with tapes) and
the adjoint sweep, where

* only *active* values (those depending on a differentiated input through
  differentiable operations) get cotangents ``d_<name>``;
* each primitive's cotangent contributions come from its registered template
  with the call site's names substituted; contributions accumulate with ``+``
  (fresh arrays: cotangents are mutated in place only when this sweep owns them);
* loops stay loops: every loop counts its trips, the adjoint runs the body's
  adjoint that many times in reverse; a name assigned more than once (in a loop
  or branch) whose value the adjoint reads is pushed on a tape after every
  assignment and restored right after that assignment's adjoint, so every
  adjoint statement sees exactly the values its primal statement saw. Float64
  scalars of top-level range loops get preallocated array tapes sized by the
  trip count; other tapes are growable lists. Branches are reversed on their
  recorded conditions; the cotangent state of both branches (and of every loop
  iteration) is made to agree where they meet;
* in-place writes ``x[idx] = v`` save the overwritten values in the primal and
  restore them after moving ``d_x[idx]`` into ``d_v``;
* a differentiated value flowing into a call with no derivative rule raises
  :class:`funcgrad.errors.NoDerivativeError` at the user's line;
* every adjoint statement carries the primal statement it undoes (emitted as a
  trailing comment).
"""
from __future__ import annotations

import ast
import copy
import linecache
from dataclasses import dataclass

from ..errors import NoDerivativeError, TransformError
from ..ops.registry import Primitive, lookup
from .anf import inherit_origin
from .emit import render_stmt

# numpy functions whose result is piecewise constant in their inputs: zero derivative
ZERO_DERIVATIVE = {
    "argmax", "argmin", "argsort", "floor", "ceil", "round", "rint", "trunc", "isnan", "isfinite", "isinf",
    "any", "all", "nonzero", "shape", "size", "ndim", "zeros_like", "ones_like", "empty_like", "count_nonzero",
    "searchsorted", "digitize", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "sign", "heaviside", "isclose", "floor_divide", "len",
}


@dataclass
class Adjoint:
    primal: list
    adjoint: list
    grads: list        # expression per differentiated parameter
    outputs: list      # atom per output leaf


def adname(name: str) -> str:
    return "d" + name if name.startswith("_") else "d_" + name


def _comment(stmt, text):
    stmt._funcgrad_comment = text
    return stmt


class Reverse:
    def __init__(self, src_lookup, float_params, int_params):
        self.src_lookup = src_lookup     # (filename, lineno) -> text, for errors
        self.active: set = set()
        self.defined: set = set()        # adjoint names defined so far in the sweep
        self.owned: set = set()          # adjoint names holding arrays this sweep created
        self.count = 0
        self.float_params = float_params
        self.int_params = int_params
        self.depth = 0                   # nesting of loops/branches being reversed
        self.nonssa: set = set()         # names assigned more than once (in loops/branches)
        self.special: set = set()        # trip counters and loop flags handled by the loop code
        self.result_adjoint = None
        self.result_value = None
        self.ranks: dict = {}


    def tmp(self, base="_v"):
        self.count += 1
        return f"{base}{self.count}"

    # ------------------------------------------------------------------ activity
    def is_active(self, e) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.active
        if isinstance(e, ast.Tuple):
            return any(self.is_active(x) for x in e.elts)
        return False

    def mark(self, stmts):
        """Forward activity (monotone: a name active anywhere is active everywhere; loops to a fixpoint)."""
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)):
                while True:
                    before = set(self.active)
                    self.mark(s.body)
                    if self.active == before:
                        break
                continue
            if isinstance(s, ast.If):
                self.mark(s.body)
                self.mark(s.orelse)
                continue
            if isinstance(s, ast.Assign):
                t = s.targets[0]
                if isinstance(t, ast.Name):
                    if self.rhs_active(s.value, s):
                        self.active.add(t.id)
                elif isinstance(t, ast.Subscript) and self.is_active(s.value):
                    self.active.add(t.value.id)

    def rhs_active(self, e, stmt) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.active
        if isinstance(e, ast.Call):
            prim = getattr(e, "_funcgrad_prim", None)
            args = list(e.args) + [k.value for k in e.keywords]
            act = any(self.is_active(a) for a in args)
            if prim is not None:
                if prim.template is None and act:
                    raise self.nd_error(stmt, f"'{prim.name}' has no registered derivative rule")
                if prim.name == "stop_gradient":
                    return False
                if prim.template is not None and not prim.template.diff_params:
                    return False
                return act
            if getattr(e, "_funcgrad_custom", None) is not None:
                return act
            nd = getattr(e, "_funcgrad_nondiff", None)
            if act and nd is not None and nd not in ZERO_DERIVATIVE:
                raise self.nd_error(stmt, f"'{nd}' has no derivative rule but a differentiated value flows into it")
            if act and isinstance(e.func, ast.Attribute) and e.func.attr == "astype":
                raise self.nd_error(stmt, "'.astype()' of a differentiated value is not supported",
                                    hint="keep the dtype of differentiated values (cast the inputs instead)")
            return False
        return False

    def nd_error(self, stmt, msg, hint="give it a rule with funcgrad.custom_vjp, or register a primitive"):
        where = getattr(stmt.value, "_funcgrad_src", None) or getattr(stmt, "_funcgrad_src", None)
        fn, line = where if where else self.src_lookup(stmt)
        return NoDerivativeError(f"{msg}\n  hint: {hint}", fn, line, _line_text(fn, line))

    # ------------------------------------------------------------------ accumulation
    def accumulate(self, name, contrib, out, comment=None):
        """``d_name += contrib`` (first contribution binds)."""
        dn = adname(name)
        if dn in self.defined:
            s = ast.Assign(targets=[ast.Name(dn, ast.Store())],
                           value=ast.BinOp(left=ast.Name(dn, ast.Load()), op=ast.Add(), right=contrib))
            self.owned.add(dn)
        else:
            s = ast.Assign(targets=[ast.Name(dn, ast.Store())], value=contrib)
            self.defined.add(dn)
            self.owned.discard(dn)
        out.append(_comment(s, comment))

    # ------------------------------------------------------------------ adjoint of one statement
    def adjoint_stmt(self, s, out):
        if not isinstance(s, ast.Assign):
            return
        t = s.targets[0]
        comment = _src(s)
        if isinstance(t, ast.Subscript):
            return self.adjoint_setitem(s, out, comment)
        tname = t.id
        if tname in self.special:
            return
        if tname in self.nonssa:
            start = len(out)
            restored = self.adjoint_overwrite(s, out) if tname in self.active else False
            if not restored:
                out.append(_marker(tname))
            if len(out) > start:
                out[start]._funcgrad_comment = comment
            return
        dt = adname(tname)
        if tname not in self.active or dt not in self.defined:
            return
        start = len(out)
        self.rhs_adjoint(s, tname, dt, out)
        if len(out) > start and out[start] is not None:
            out[start]._funcgrad_comment = comment

    def rhs_adjoint(self, s, tname, dres, out):
        """Cotangent contributions of ``tname = rhs`` given the result's cotangent ``dres``."""
        e = s.value
        if isinstance(e, ast.Name):
            if e.id in self.active:
                self.accumulate(e.id, ast.Name(dres, ast.Load()), out)
        elif isinstance(e, ast.Call):
            prim = getattr(e, "_funcgrad_prim", None)
            if prim is not None:
                self.fill(prim, e, tname, out, s)
            elif getattr(e, "_funcgrad_custom", None) is not None:
                self.custom(e, tname, out)

    def adjoint_overwrite(self, s, out):
        """Adjoint of ``v = rhs`` where ``v`` is assigned more than once (in loops/branches).

        ``d_v`` (the cotangent of the value assigned here) is consumed: afterwards ``d_v`` is
        undefined again, so uses of the previous value start a fresh cotangent.
        """
        tname = s.targets[0].id
        dv = adname(tname)
        if dv not in self.defined:
            return False
        e = s.value
        reads_self = any(isinstance(n, ast.Name) and n.id == tname for n in ast.walk(e))
        if reads_self:  # the operand is the old value: keep the new one aside and restore the old one first
            res = self.tmp("_dres")
            val = self.tmp("_new")
            out.append(ast.Assign(targets=[ast.Name(res, ast.Store())], value=ast.Name(dv, ast.Load())))
            out.append(ast.Assign(targets=[ast.Name(val, ast.Store())], value=ast.Name(tname, ast.Load())))
            out.append(_marker(tname))
            self.result_value = val
        else:
            res = dv
        self.defined.discard(dv)
        self.owned.discard(dv)
        self.result_adjoint = res
        try:
            self.rhs_adjoint(s, tname, res, out)
        finally:
            self.result_adjoint = None
            self.result_value = None
        return reads_self

    def adjoint_setitem(self, s, out, comment):
        t = s.targets[0]
        x = t.value.id
        dx = adname(x)
        saved = getattr(s, "_funcgrad_saved", None)
        start = len(out)
        if x in self.active and dx in self.defined:
            idx = t.slice
            if self.is_active(s.value) and isinstance(s.value, ast.Name):
                if _basic_index(idx, self.ranks):
                    piece = ast.Call(func=_K("copy"), args=[ast.Subscript(value=ast.Name(dx, ast.Load()),
                                                                          slice=copy.deepcopy(idx), ctx=ast.Load())],
                                     keywords=[])  # a copy: d_x[idx] is zeroed next
                else:  # with a repeated index only the last write of an element survived
                    piece = ast.Call(func=_K("written"), args=[ast.Name(dx, ast.Load()), _index_value(idx)],
                                     keywords=[])
                contrib = ast.Call(func=_K("unbroadcast"), args=[piece, s.value], keywords=[])
                self.accumulate(s.value.id, contrib, out)
            if dx not in self.owned:
                out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                      value=ast.Call(func=_K("copy"), args=[ast.Name(dx, ast.Load())], keywords=[])))
                self.owned.add(dx)
            out.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(dx, ast.Load()), slice=copy.deepcopy(idx),
                                                         ctx=ast.Store())], value=ast.Constant(0.0)))
        if saved is not None:
            out.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(x, ast.Load()), slice=copy.deepcopy(t.slice),
                                                         ctx=ast.Store())], value=ast.Name(saved, ast.Load())))
        if len(out) > start:
            out[start]._funcgrad_comment = comment

    def custom(self, e, tname, out):
        cv = e._funcgrad_custom
        res = self.tmp("_res")
        out.append(ast.Assign(targets=[ast.Name(res, ast.Store())],
                              value=ast.Call(func=ast.Attribute(value=copy.deepcopy(e.func), attr="bwd_from_args",
                                                                ctx=ast.Load()),
                                             args=[ast.Tuple(elts=list(e.args), ctx=ast.Load()),
                                                   ast.Name(self.result_adjoint or adname(tname), ast.Load())],
                                             keywords=[])))
        for i, a in enumerate(e.args):
            if self.is_active(a):
                self.accumulate(a.id, ast.Subscript(value=ast.Name(res, ast.Load()), slice=ast.Constant(i),
                                                    ctx=ast.Load()), out)

    def fill(self, prim: Primitive, call: ast.Call, tname, out, stmt):
        tpl = prim.template
        ba = {}
        params = prim.params
        for p, a in zip(params, call.args):
            ba[p] = a
        for k in call.keywords:
            ba[k.arg] = k.value
        for p in params:
            if p not in ba:
                dflt = prim.signature.parameters[p].default
                ba[p] = ast.Constant(dflt) if not isinstance(dflt, tuple) else ast.Tuple(
                    elts=[ast.Constant(x) for x in dflt], ctx=ast.Load())
        subst = dict(ba)
        subst[tpl.result] = ast.Name(self.result_value or tname, ast.Load())
        local = {}
        pending = []  # (stmt) template locals, emitted lazily if used
        emitted = set()
        for ts in tpl.body:
            if isinstance(ts, ast.Pass):
                continue
            if not isinstance(ts, ast.Assign) or len(ts.targets) != 1:
                raise TransformError(f"VJP template of {prim.name}: only assignments are allowed")
            tgt = ts.targets[0]
            if isinstance(tgt, ast.Name):  # a template temporary
                new = self.tmp("_v")
                expr = self.subst(ts.value, subst, tname, tpl, prim)
                local[tgt.id] = new
                subst[tgt.id] = ast.Name(new, ast.Load())
                pending.append((new, expr))
                continue
            p = tgt.slice.id
            arg = ba.get(p)
            if arg is None or not self.is_active(arg):
                continue
            expr = self.subst(ts.value, subst, tname, tpl, prim)
            used = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
            for new, pexpr in reversed(pending):  # temporaries read by the temporaries this one reads
                if new in used:
                    used |= {n.id for n in ast.walk(pexpr) if isinstance(n, ast.Name)}
            for new, pexpr in pending:  # template temporaries (not cotangents): emitted once, when first used
                if new in used and new not in emitted:
                    out.append(ast.Assign(targets=[ast.Name(new, ast.Store())], value=pexpr))
                    emitted.add(new)
            if prim.name == "getitem" and p == "x":
                self.scatter(arg.id, call.args[1], ast.Name(self.result_adjoint or adname(tname), ast.Load()), out)
                continue
            if isinstance(arg, ast.Tuple):  # a sequence parameter (concatenate, stack)
                seq = self.tmp("_seq")
                out.append(ast.Assign(targets=[ast.Name(seq, ast.Store())], value=expr))
                for i, el in enumerate(arg.elts):
                    if self.is_active(el):
                        self.accumulate(el.id, ast.Subscript(value=ast.Name(seq, ast.Load()), slice=ast.Constant(i),
                                                             ctx=ast.Load()), out)
                continue
            self.accumulate(arg.id, expr, out)

    def scatter(self, x, idx, g, out):
        """``d_x[idx] += g`` on an array this sweep owns."""
        dx = adname(x)
        if dx not in self.defined:
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("zeros_like"), args=[ast.Name(x, ast.Load())], keywords=[])))
            self.defined.add(dx)
            self.owned.add(dx)
        elif dx not in self.owned:
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("copy"), args=[ast.Name(dx, ast.Load())], keywords=[])))
            self.owned.add(dx)
        if _basic_index(idx, self.ranks):
            out.append(ast.AugAssign(target=ast.Subscript(value=ast.Name(dx, ast.Load()), slice=copy.deepcopy(idx),
                                                          ctx=ast.Store()), op=ast.Add(), value=g))
        else:  # an integer-array or mask index may repeat elements: every occurrence accumulates
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("index_add"),
                                                 args=[ast.Name(dx, ast.Load()), _index_value(idx), g], keywords=[])))

    def subst(self, e, subst, tname, tpl, prim):
        """Fill a template expression: names -> call-site atoms, d[result] -> d_<result>, calls -> K.*"""
        e = copy.deepcopy(e)
        G = tpl.globals

        class T(ast.NodeTransformer):
            def visit_Subscript(self_, node):
                if isinstance(node.value, ast.Name) and node.value.id == "d" and isinstance(node.slice, ast.Name):
                    if node.slice.id != tpl.result:
                        raise TransformError(f"VJP template of {prim.name}: only d[{tpl.result}] can be read")
                    return ast.Name(self.result_adjoint or adname(tname), ast.Load())
                self_.generic_visit(node)
                return node

            def visit_Name(self_, node):
                if node.id in subst:
                    return copy.deepcopy(subst[node.id])
                return node

            def visit_Call(self_, node):
                node.args = [self_.visit(a) for a in node.args]
                node.keywords = [ast.keyword(arg=k.arg, value=self_.visit(k.value)) for k in node.keywords]
                f = node.func
                obj = _resolve(f, G)
                p = lookup(obj) if obj is not None else None
                if p is not None and p.name == "unbroadcast" and len(node.args) == 2:
                    target = node.args[1]
                    if isinstance(target, ast.Name) and self.ranks.get(target.id) == 0 and \
                            self.ranks.get(tname) == 0:
                        return node.args[0]  # a scalar operand of a scalar result: nothing was broadcast
                if p is not None:
                    node.func = _K(p.name)
                    node._funcgrad_prim = p
                    if p.operator and p.operator not in ("[]", "neg") and len(node.args) == 2 and not node.keywords:
                        return ast.BinOp(left=node.args[0], op=_BINOPS[p.operator](), right=node.args[1])
                    return node
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("K", "np"):
                    return node
                raise TransformError(f"VJP template of {prim.name}: call of {ast.unparse(f)} is not a primitive")

        return T().visit(e)


_BINOPS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "**": ast.Pow, "@": ast.MatMult}


def _resolve(f, G):
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name) or f.id not in G:
        return None
    obj = G[f.id]
    for p in reversed(parts):
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


def _basic_index(idx, ranks):
    """True when the index is ints, slices and None only (no element can be selected twice)."""
    parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
    for p in parts:
        if isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and (p.value is None or p.value is Ellipsis or (
                isinstance(p.value, int) and not isinstance(p.value, bool)))):
            continue
        if isinstance(p, ast.UnaryOp) and isinstance(p.operand, ast.Constant):
            continue
        if isinstance(p, ast.Name) and ranks.get(p.id) == 0:
            continue
        return False
    return True


def _index_value(idx):
    """An index expression as a value (slices become ``slice(...)`` calls) to pass to a kernel."""
    if isinstance(idx, ast.Tuple):
        return ast.Tuple(elts=[_index_value(e) for e in idx.elts], ctx=ast.Load())
    if isinstance(idx, ast.Slice):
        return ast.Call(func=ast.Name("slice", ast.Load()),
                        args=[copy.deepcopy(p) if p is not None else ast.Constant(None)
                              for p in (idx.lower, idx.upper, idx.step)], keywords=[])
    return copy.deepcopy(idx)


def _K(name):
    return ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load())


def _src(s):
    """The primal statement as text, for the adjoint's trailing comment."""
    try:
        return _render(s)
    except Exception:  # pragma: no cover
        return None


def _render(s):
    return render_stmt(s)


def _line_text(fn, line):
    return linecache.getline(fn, line) if fn and line else None


def _marker(name):
    """Where the value ``name`` had before this assignment is restored (filled in once tapes are known)."""
    m = ast.Expr(value=ast.Constant(("restore", name)))
    m._funcgrad_marker = name
    return m


def save_inplace(stmts, tmpgen):
    """Before each in-place write ``x[idx] = v``, save ``x[idx]`` so the adjoint can restore it."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = save_inplace(s.body, tmpgen)
            if isinstance(s, ast.If):
                s.orelse = save_inplace(s.orelse, tmpgen)
        elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript):
            t = s.targets[0]
            saved = tmpgen("_saved")
            out.append(ast.copy_location(ast.Assign(
                targets=[ast.Name(saved, ast.Store())],
                value=ast.Call(func=_K("copy"), args=[ast.Subscript(value=ast.Name(t.value.id, ast.Load()),
                                                                   slice=copy.deepcopy(t.slice), ctx=ast.Load())],
                               keywords=[])), s))
            s._funcgrad_saved = saved
        out.append(s)
    return out


def _assigned_in(stmts, inside=False, acc=None):
    acc = set() if acc is None else acc
    for s in stmts:
        if isinstance(s, (ast.For, ast.While, ast.If)):
            if isinstance(s, ast.For):
                acc.add(s.target.id)
            _assigned_in(s.body, True, acc)
            _assigned_in(s.orelse, True, acc)
        elif inside and isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            acc.add(s.targets[0].id)
    return acc


class _Loops:
    """Adds trip counters to loops: ``_n<k> = 0`` before, ``_n<k> = _n<k> + 1`` first in the body."""

    def __init__(self):
        self.k = 0
        self.counters = []

    def add(self, stmts, in_loop):
        out = []
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)):
                self.k += 1
                n = f"_n{self.k}"
                self.counters.append(n)
                s._funcgrad_counter = n
                s._funcgrad_in_loop = in_loop
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(0)), s))
                inc = ast.Assign(targets=[ast.Name(n, ast.Store())],
                                 value=ast.BinOp(left=ast.Name(n, ast.Load()), op=ast.Add(), right=ast.Constant(1)))
                pre = [ast.copy_location(inc, s)]
                if isinstance(s, ast.For):  # the loop variable as a plain assignment (taped if needed)
                    it = f"_it{self.k}"
                    pre.append(ast.copy_location(ast.Assign(targets=[ast.Name(s.target.id, ast.Store())],
                                                            value=ast.Name(it, ast.Load())), s))
                    s.target = ast.Name(it, ast.Store())
                s.body = pre + self.add(s.body, True)
                out.append(s)
                if in_loop:  # each run of an inner loop has its own trip count: keep them on a tape
                    out.append(ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(f"_tape{n}", ast.Load()),
                                                                          attr="append", ctx=ast.Load()),
                                                       args=[ast.Name(n, ast.Load())], keywords=[])))
                continue
            if isinstance(s, ast.If):
                s.body = self.add(s.body, in_loop)
                s.orelse = self.add(s.orelse, in_loop)
            out.append(s)
        return out


def _rev_block(R, stmts, out):
    """The adjoint of a block, statements in reverse order (compound statements recursively)."""
    for s in reversed(stmts):
        start = len(out)
        if isinstance(s, (ast.For, ast.While)):
            _rev_loop(R, s, out)
        elif isinstance(s, ast.If):
            _rev_if(R, s, out)
        elif isinstance(s, ast.Assign):
            R.adjoint_stmt(s, out)
        inherit_origin(out[start:], s)  # an adjoint line's errors are reported at its primal line


def _zero(R, dn, out):
    out.append(ast.Assign(targets=[ast.Name(dn, ast.Store())],
                          value=ast.Call(func=_K("zeros_like"), args=[ast.Name(R.d_to_name[dn], ast.Load())],
                                         keywords=[])))


def _rev_if(R, s, out):
    """Both branches reversed from the same cotangent state; they are made to agree at the merge."""
    d0, o0 = set(R.defined), set(R.owned)
    R.depth += 1
    rb = []
    _rev_block(R, s.body, rb)
    db, ob = R.defined, R.owned
    R.defined, R.owned = set(d0), set(o0)
    ro = []
    _rev_block(R, s.orelse, ro)
    do, oo = R.defined, R.owned
    R.depth -= 1
    for dn in sorted(db - do):
        _zero(R, dn, ro)
        oo.add(dn)
    for dn in sorted(do - db):
        _zero(R, dn, rb)
        ob.add(dn)
    R.defined = db | do
    R.owned = ob & oo
    if not (rb or ro):
        return
    new = ast.If(test=s.test, body=rb or [ast.Pass()], orelse=ro)
    new._funcgrad_comment = f"if {ast.unparse(s.test)}:"
    out.append(new)


def _rev_loop(R, s, out):
    """The reversed loop: the cotangent state at the start of every reversed iteration is the same."""
    n = s._funcgrad_counter
    pre = []
    for _ in range(4):  # fixpoint of (defined, owned) at the iteration boundary; nesting depth bounds it
        d0, o0 = set(R.defined), set(R.owned)
        save_count = R.count
        R.depth += 1
        body = []
        _rev_block(R, s.body, body)
        R.depth -= 1
        d1, o1 = R.defined, R.owned
        grow = d1 - d0
        lose_owned = (o0 - o1) & d1
        if not grow and not lose_owned:
            for dn in sorted(d0 - d1):  # consumed and not re-created: the next iteration needs them back
                _zero(R, dn, body)
                R.owned.add(dn)
            R.defined = d0 | d1
            R.owned = o0 & (o1 | (d0 - d1))
            break
        R.count = save_count
        for dn in sorted(grow):  # created inside: must exist (and accumulate) across iterations
            _zero(R, dn, pre)
        for dn in sorted(lose_owned):
            pre.append(ast.Assign(targets=[ast.Name(dn, ast.Store())],
                                  value=ast.Call(func=_K("copy"), args=[ast.Name(dn, ast.Load())], keywords=[])))
        R.defined = d0 | grow
        R.owned = (o0 - lose_owned) | grow | lose_owned
        R.owned -= set()
        # owned names that a body binding aliases cannot be scattered into in place: drop ownership
        R.owned &= o1 | grow
    else:  # pragma: no cover
        raise TransformError("reverse: the cotangent state of a loop did not settle")
    out.extend(pre)
    if not body:
        return
    if s._funcgrad_in_loop:
        out.append(ast.Assign(targets=[ast.Name(n, ast.Store())],
                              value=ast.Call(func=ast.Attribute(value=ast.Name(f"_tape{n}", ast.Load()), attr="pop",
                                                                ctx=ast.Load()), args=[], keywords=[])))
    k = "_k" + n[2:]
    rng = ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Name(n, ast.Load())], keywords=[])
    loop = ast.For(target=ast.Name(k, ast.Store()), iter=rng, body=body, orelse=[])
    head = f"for {ast.unparse(s.target)} in {ast.unparse(s.iter)}:" if isinstance(s, ast.For) \
        else f"while {ast.unparse(s.test)}:"
    loop._funcgrad_comment = f"reversed: {head}"
    out.append(loop)


_REDUCTIONS = {"sum", "mean", "max", "min", "prod"}


def infer_ranks(stmts, ranks):
    """ndim of every name where it can be known (None where not); loops iterate to a fixpoint."""
    def rk(e):
        if isinstance(e, ast.Constant):
            return 0 if isinstance(e.value, (int, float, bool)) else None
        if isinstance(e, ast.Name):
            return ranks.get(e.id)
        return None

    def rhs(e):
        if isinstance(e, (ast.Name, ast.Constant)):
            return rk(e)
        if isinstance(e, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
            vals = [rk(x) for x in ast.iter_child_nodes(e) if isinstance(x, (ast.Name, ast.Constant))]
            return None if any(v is None for v in vals) else max(vals, default=0)
        if isinstance(e, ast.BinOp):  # integer arithmetic kept as operators
            a, b = rk(e.left), rk(e.right)
            return None if a is None or b is None else max(a, b)
        if isinstance(e, ast.Subscript) or isinstance(e, ast.Attribute):
            node = e
            while isinstance(node, ast.Subscript):
                node = node.value
            if isinstance(node, ast.Attribute) and node.attr in ("ndim", "size"):
                return 0
            if isinstance(node, ast.Attribute) and node.attr == "shape":
                return 0 if isinstance(e, ast.Subscript) else None
            return None
        if isinstance(e, ast.Call):
            prim = getattr(e, "_funcgrad_prim", None)
            if prim is None:
                if isinstance(e.func, ast.Name) and e.func.id in ("int", "float", "len", "min", "max", "abs"):
                    return 0
                return None
            args = [rk(a) for a in e.args]
            kw = {k.arg: k.value for k in e.keywords}
            if prim.elementwise:
                return None if any(a is None for a in args) else max(args, default=0)
            if prim.name in _REDUCTIONS:
                r = args[0]
                if r is None:
                    return None
                axis = kw.get("axis", ast.Constant(None))
                keep = kw.get("keepdims", ast.Constant(False))
                if not isinstance(keep, ast.Constant):
                    return None
                if keep.value:
                    return r
                if isinstance(axis, ast.Constant):
                    return 0 if axis.value is None else r - 1
                if isinstance(axis, ast.Tuple):
                    return r - len(axis.elts)
                return None
            if prim.name in ("matmul", "dot"):
                a, b = args
                if a is None or b is None:
                    return None
                return max(a + b - 2, 0)
            if prim.name == "getitem":
                r = args[0]
                idx = e.args[1]
                parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
                if r is None:
                    return None
                n_int = 0
                for p in parts:
                    if isinstance(p, ast.Slice):
                        continue
                    if isinstance(p, ast.Constant) and isinstance(p.value, int):
                        n_int += 1
                    elif isinstance(p, ast.Name) and ranks.get(p.id) == 0:
                        n_int += 1
                    else:
                        return None
                return r - n_int
            if prim.name in ("copy", "stop_gradient", "negative"):
                return args[0]
            return None
        return None

    def walk(ss):
        changed = False
        for st in ss:
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if isinstance(st, ast.For) and ranks.get(st.target.id) != 0:
                    ranks[st.target.id] = 0
                    changed = True
                changed |= walk(st.body)
                changed |= walk(st.orelse)
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                n = st.targets[0].id
                r = rhs(st.value)
                if n in ranks and ranks[n] != r:
                    if ranks[n] is not None:
                        ranks[n] = None
                        changed = True
                elif n not in ranks:
                    ranks[n] = r
                    changed = True
        return changed

    for _ in range(10):
        if not walk(stmts):
            break
    return ranks


_UNARY_SAME = {"negative", "absolute", "square", "copy", "stop_gradient", "sign"}


def _promote(ks):
    if any(k is None for k in ks):
        return None
    if any(k == "f4" for k in ks):
        return None  # float32 scalars promote differently in NumPy and Numba: no fast path
    if any(k in ("f8", "f8w") for k in ks):
        return "f8"
    if all(k in ("i", "iw", "b") for k in ks):
        return "i"
    return None


def infer_kinds(stmts, kinds):
    """Scalar kind of each name: "f8" (float64), "i" (integer), "b" (bool), or None (unknown/array dtype)."""
    def kd(e):
        if isinstance(e, ast.Constant):
            v = e.value
            return "b" if isinstance(v, bool) else "iw" if isinstance(v, int) else "f8w" if isinstance(v, float) else None
        if isinstance(e, ast.Name):
            return kinds.get(e.id)
        return None

    def rhs(e):
        if isinstance(e, (ast.Name, ast.Constant)):
            k = kd(e)
            return {"iw": "i", "f8w": "f8"}.get(k, k)
        if isinstance(e, (ast.Compare, ast.BoolOp)) or (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not)):
            return "b"
        if isinstance(e, ast.BinOp):
            k = _promote([kd(e.left), kd(e.right)])
            return k if k == "i" else None
        if isinstance(e, (ast.Subscript, ast.Attribute)):
            node = e
            while isinstance(node, ast.Subscript):
                node = node.value
            if isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim", "size"):
                return "i"
            return None
        if isinstance(e, ast.Call):
            prim = getattr(e, "_funcgrad_prim", None)
            if prim is None:
                if isinstance(e.func, ast.Name) and e.func.id in ("int", "len"):
                    return "i"
                if isinstance(e.func, ast.Name) and e.func.id == "float":
                    return "f8"
                return None
            ks = [kd(a) for a in e.args]
            if prim.name == "getitem":
                return kinds.get(e.args[0].id) if isinstance(e.args[0], ast.Name) else None
            if prim.name in ("sum", "max", "min", "prod"):
                return {"iw": "i", "f8w": "f8"}.get(ks[0], ks[0])
            if prim.name == "mean":
                return "f8" if _promote(ks[:1]) in ("f8", "i") else None
            if prim.name in _UNARY_SAME:
                k = ks[0]
                return {"iw": "i", "f8w": "f8"}.get(k, k)
            if prim.name in ("add", "subtract", "multiply", "maximum", "minimum", "matmul", "dot", "where"):
                return _promote(ks[-2:] if prim.name == "where" else ks)
            if prim.elementwise:  # transcendental and true division: float results
                k = _promote(ks)
                return "f8" if k in ("f8", "i") else None
            return None
        return None

    def merge(a, b):
        if a == b:
            return a
        if {a, b} == {"i", "f8"}:
            return "f8"  # Numba and Python both widen an int rebound to a float
        return None

    def walk(ss):
        changed = False
        for st in ss:
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if isinstance(st, ast.For) and kinds.get(st.target.id) != "i":
                    kinds[st.target.id] = "i"
                    changed = True
                changed |= walk(st.body)
                changed |= walk(st.orelse)
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                n = st.targets[0].id
                k = rhs(st.value)
                new = k if n not in kinds else merge(kinds[n], k)
                if n not in kinds or new != kinds[n]:
                    kinds[n] = new
                    changed = True
        return changed

    for _ in range(10):
        if not walk(stmts):
            break
    return kinds


def _preallocatable(body, taped, ranks, kinds):
    """Taped float64 scalars assigned only at top level or directly in the body of top-level range loops."""
    ok = {n for n in taped if ranks.get(n) == 0 and kinds.get(n) == "f8"}
    bad = set()

    def walk(ss, where):
        for st in ss:
            if isinstance(st, ast.For):
                inner = "loop" if where == "top" else "deep"
                walk(st.body, inner)
            elif isinstance(st, ast.While):
                walk(st.body, "deep")
            elif isinstance(st, ast.If):
                walk(st.body, "deep")
                walk(st.orelse, "deep")
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and where == "deep":
                bad.add(st.targets[0].id)

    walk(body, "top")
    return ok - bad


def _array_tape_pushes(stmts, pre, top=True):
    """Pushes onto preallocated tapes: reserve room before each top-level loop (trip count known there)."""
    out = []
    for s in stmts:
        if isinstance(s, ast.For) and top:
            counts = {}
            for st in s.body:
                if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id in pre:
                    counts[st.targets[0].id] = counts.get(st.targets[0].id, 0) + 1
            if counts:
                trip = f"_trip{s._funcgrad_counter[2:]}"
                out.append(ast.Assign(targets=[ast.Name(trip, ast.Store())],
                                      value=ast.Call(func=ast.Name("len", ast.Load()), args=[copy.deepcopy(s.iter)],
                                                     keywords=[])))
                for n, c in sorted(counts.items()):
                    need = ast.BinOp(left=ast.Name(f"_pos_{n}", ast.Load()), op=ast.Add(),
                                     right=ast.Name(trip, ast.Load()) if c == 1 else ast.BinOp(
                                         left=ast.Name(trip, ast.Load()), op=ast.Mult(), right=ast.Constant(c)))
                    out.append(ast.Assign(targets=[ast.Name(f"_tape_{n}", ast.Store())],
                                          value=ast.Call(func=_K("tape_reserve"),
                                                         args=[ast.Name(f"_tape_{n}", ast.Load()), need], keywords=[])))
            s.body = _array_tape_pushes(s.body, pre, top=False)
            out.append(s)
            continue
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id in pre:
            n = s.targets[0].id
            if top:
                out.append(ast.Assign(targets=[ast.Name(f"_tape_{n}", ast.Store())],
                                      value=ast.Call(func=_K("tape_reserve"), args=[
                                          ast.Name(f"_tape_{n}", ast.Load()),
                                          ast.BinOp(left=ast.Name(f"_pos_{n}", ast.Load()), op=ast.Add(),
                                                    right=ast.Constant(1))], keywords=[])))
            out.append(s)
            out.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(f"_tape_{n}", ast.Load()),
                                                         slice=ast.Name(f"_pos_{n}", ast.Load()), ctx=ast.Store())],
                                  value=ast.Name(n, ast.Load())))
            out.append(ast.AugAssign(target=ast.Name(f"_pos_{n}", ast.Store()), op=ast.Add(), value=ast.Constant(1)))
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _array_tape_pushes(s.body, pre, top=False)
            if isinstance(s, ast.If):
                s.orelse = _array_tape_pushes(s.orelse, pre, top=False)
        out.append(s)
    return out


_SHAPE_ONLY = {"zeros_like": (0,), "unbroadcast": (1,), "unreduce": (1,), "reduced_count": (0,)}




def _needed(code, ranks=None):
    """Names whose values the adjoint reads (so their overwritten values go on a tape).

    Reading a scalar only for its shape (``zeros_like(v)``, ``unbroadcast(g, v)``) does not count.
    """
    ranks = ranks or {}
    need = set()

    def shape_only(call):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(
                call.func.value, ast.Name) and call.func.value.id == "K" and call.func.attr in _SHAPE_ONLY:
            return [a for i, a in enumerate(call.args) if i in _SHAPE_ONLY[call.func.attr]
                    and isinstance(a, ast.Name) and ranks.get(a.id) == 0]
        return []

    for st in ast.walk(ast.Module(body=code, type_ignores=[])):
        if getattr(st, "_funcgrad_init", False):
            continue
        if isinstance(st, ast.stmt) and not isinstance(st, (ast.For, ast.While, ast.If)):
            skip = set()
            for n in ast.walk(st):
                skip.update(id(a) for a in shape_only(n))
            for n in ast.walk(st):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in skip:
                    need.add(n.id)
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and getattr(st, "_funcgrad_init", False):
                pass
        elif isinstance(st, (ast.If, ast.While)):
            for n in ast.walk(st.test):
                if isinstance(n, ast.Name):
                    need.add(n.id)
    # zeros_like(v) only needs v's shape: it does not make v needed
    return need


def _drop_unused_new(code):
    """Remove ``_newN = v`` copies of a result value that no template read."""
    used = {n.id for n in ast.walk(ast.Module(body=code, type_ignores=[])) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}

    def clean(ss):
        out = []
        for st in ss:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and \
                    st.targets[0].id.startswith("_new") and st.targets[0].id not in used:
                continue
            if isinstance(st, (ast.For, ast.While, ast.If)):
                st.body = clean(st.body) or [ast.Pass()]
                st.orelse = clean(st.orelse)
            out.append(st)
        return out

    return clean(code)


def _tape_pushes(stmts, taped):
    out = []
    for s in stmts:
        out.append(s)
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _tape_pushes(s.body, taped)
            if isinstance(s, ast.If):
                s.orelse = _tape_pushes(s.orelse, taped)
        elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id in taped:
            n = s.targets[0].id
            out.append(ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(f"_tape_{n}", ast.Load()),
                                                                  attr="append", ctx=ast.Load()),
                                               args=[ast.Name(n, ast.Load())], keywords=[])))
    return out


def _expand_markers(code, taped, params):
    out = []
    for s in code:
        m = getattr(s, "_funcgrad_marker", None)
        if m is not None:
            if m in taped:  # step the tape's read position back; the value before this assignment is below it
                pos = f"_p_{m}"
                step = ast.AugAssign(target=ast.Name(pos, ast.Store()), op=ast.Sub(), value=ast.Constant(1))
                restore = ast.Assign(targets=[ast.Name(m, ast.Store())],
                                     value=ast.Subscript(value=ast.Name(f"_tape_{m}", ast.Load()),
                                                         slice=ast.BinOp(left=ast.Name(pos, ast.Load()), op=ast.Sub(),
                                                                         right=ast.Constant(1)), ctx=ast.Load()))
                test = ast.Compare(left=ast.Name(pos, ast.Load()), ops=[ast.Gt()], comparators=[ast.Constant(0)])
                if getattr(s, "_funcgrad_comment", None):
                    step._funcgrad_comment = s._funcgrad_comment
                out.append(step)
                out.append(ast.If(test=test, body=[restore], orelse=[]))
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _expand_markers(s.body, taped, params) or [ast.Pass()]
            if isinstance(s, ast.If):
                s.orelse = _expand_markers(s.orelse, taped, params)
        out.append(s)
    return out


def reverse(fdef: ast.FunctionDef, diff_params, output_atoms, src_lookup, float_params=(), int_params=(),
            param_ranks=None, param_kinds=None):
    """Build the primal + adjoint of an ANF function (see the module docstring)."""
    R = Reverse(src_lookup, float_params, int_params)
    R.active = set(diff_params)
    params = [a.arg for a in fdef.args.args]
    loops = _Loops()
    body = loops.add(save_inplace(copy.deepcopy(list(fdef.body)), R.tmp), False)
    R.special = set(loops.counters) | {f"_it{k}" for k in range(1, loops.k + 1)}
    R.nonssa = _assigned_in(body) - R.special
    R.ranks = infer_ranks(body, dict(param_ranks or {}))
    R.mark(body)
    all_names = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)} | set(params)
    R.d_to_name = {adname(n): n for n in all_names}
    adj = []
    # outputs: snapshot names the sweep will restore or arrays it will undo writes in
    pre = []
    written = {s.targets[0].value.id for s in ast.walk(ast.Module(body=body, type_ignores=[]))
               if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)}
    outs = []
    for i, o in enumerate(output_atoms):
        if isinstance(o, ast.Name) and (o.id in R.nonssa or o.id in written):
            snap = f"_out{i}"
            val = ast.Call(func=_K("copy"), args=[o], keywords=[]) if o.id in written else o
            pre.append(ast.Assign(targets=[ast.Name(snap, ast.Store())], value=val))
            outs.append(ast.Name(snap, ast.Load()))
        else:
            outs.append(o)
    for i, o in enumerate(output_atoms):
        if isinstance(o, ast.Name) and o.id in R.active:
            R.accumulate(o.id, ast.Name(f"g_out{i}", ast.Load()), adj, comment=None)
    _rev_block(R, body, adj)
    adj = _drop_unused_new(adj)
    need = _needed(adj, R.ranks)
    taped = R.nonssa & need
    kinds = infer_kinds(body, dict(param_kinds or {}))
    prealloc = _preallocatable(body, taped, R.ranks, kinds) - set(params)
    body = _array_tape_pushes(body, prealloc)
    body = _tape_pushes(body, taped - prealloc)
    adj = _expand_markers(adj, taped, params)
    adj = [ast.Assign(targets=[ast.Name(f"_p_{n}", ast.Store())],
                      value=ast.Name(f"_pos_{n}", ast.Load()) if n in prealloc else
                      ast.Call(func=ast.Name("len", ast.Load()), args=[ast.Name(f"_tape_{n}", ast.Load())],
                               keywords=[])) for n in sorted(taped)] + adj
    tapes = []
    for n in sorted(taped):
        if n in prealloc:  # a float64 array grown before each loop by its trip count
            tapes.append(ast.Assign(targets=[ast.Name(f"_tape_{n}", ast.Store())],
                                    value=ast.Call(func=ast.Attribute(value=ast.Name("np", ast.Load()), attr="empty",
                                                                      ctx=ast.Load()),
                                                   args=[ast.Constant(0)], keywords=[])))
            tapes.append(ast.Assign(targets=[ast.Name(f"_pos_{n}", ast.Store())], value=ast.Constant(0)))
            continue
        init = ast.List(elts=[ast.Name(n, ast.Load())] if n in params else [], ctx=ast.Load())
        tapes.append(ast.Assign(targets=[ast.Name(f"_tape_{n}", ast.Store())], value=init))
    for n in loops.counters:
        if any(getattr(s, "_funcgrad_counter", None) == n and s._funcgrad_in_loop
               for s in ast.walk(ast.Module(body=body, type_ignores=[]))):
            tapes.append(ast.Assign(targets=[ast.Name(f"_tape{n}", ast.Store())],
                                    value=ast.List(elts=[], ctx=ast.Load())))
    grads = []
    for p in diff_params:
        dp = adname(p)
        if dp in R.defined:
            grads.append(ast.Name(dp, ast.Load()))
        else:
            grads.append(ast.Call(func=_K("zeros_like"), args=[ast.Name(p, ast.Load())], keywords=[]))
    return Adjoint(primal=tapes + body + pre, adjoint=adj, grads=grads, outputs=outs)
