"""Reverse: the primal in A-normal form followed by its adjoint, by filling VJP templates.

Input: an ANF function, which of its parameters are differentiated, and the
names of its outputs. Output (:class:`Adjoint`): a list of statements (the
primal, then the adjoint sweep) where

* only *active* values (those depending on a differentiated input through
  differentiable operations) get cotangents ``d_<name>``;
* each primitive's cotangent contributions come from its registered template
  with the call site's names substituted; contributions accumulate with ``+``
  (a fresh array: cotangents are never mutated in place, except arrays this
  sweep created itself);
* in-place writes ``x[idx] = v`` save the overwritten values in the primal and
  restore them in the adjoint after moving ``d_x[idx]`` into ``d_v``, so every
  statement's adjoint sees the values its primal saw;
* a differentiated value flowing into a call with no derivative rule raises
  :class:`funcgrad.errors.NoDerivativeError` at the user's line;
* every adjoint statement carries the primal statement it undoes (emitted as a
  trailing comment).
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from ..errors import NoDerivativeError, TransformError
from ..ops.registry import Primitive

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
        """Forward activity over straight-line statements."""
        for s in stmts:
            if isinstance(s, ast.Assign):
                t = s.targets[0]
                if isinstance(t, ast.Name):
                    if self.rhs_active(s.value, s):
                        self.active.add(t.id)
                    else:
                        self.active.discard(t.id)
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
        dt = adname(tname)
        if tname not in self.active or dt not in self.defined:
            return
        e = s.value
        start = len(out)
        if isinstance(e, ast.Name):
            if e.id in self.active:
                self.accumulate(e.id, ast.Name(dt, ast.Load()), out)
        elif isinstance(e, ast.Call):
            prim = getattr(e, "_funcgrad_prim", None)
            if prim is not None:
                self.fill(prim, e, tname, out, s)
            elif getattr(e, "_funcgrad_custom", None) is not None:
                self.custom(e, tname, out)
        if len(out) > start and out[start] is not None:
            out[start]._funcgrad_comment = comment

    def adjoint_setitem(self, s, out, comment):
        t = s.targets[0]
        x = t.value.id
        dx = adname(x)
        saved = getattr(s, "_funcgrad_saved", None)
        start = len(out)
        if x in self.active and dx in self.defined:
            idx = t.slice
            if self.is_active(s.value) and isinstance(s.value, ast.Name):
                piece = ast.Call(func=_K("copy"), args=[ast.Subscript(value=ast.Name(dx, ast.Load()),
                                                                      slice=copy.deepcopy(idx), ctx=ast.Load())],
                                 keywords=[])  # a copy: d_x[idx] is zeroed next
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
                                                   ast.Name(adname(tname), ast.Load())], keywords=[])))
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
        subst[tpl.result] = ast.Name(tname, ast.Load())
        local = {}
        pending = []  # (stmt) template locals, emitted lazily if used
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
            for new, pexpr in pending:
                if new in used and new not in self.defined:
                    out.append(ast.Assign(targets=[ast.Name(new, ast.Store())], value=pexpr))
                    self.defined.add(new)
            if prim.name == "getitem" and p == "x":
                self.scatter(arg.id, call.args[1], ast.Name(adname(tname), ast.Load()), out)
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
        out.append(ast.AugAssign(target=ast.Subscript(value=ast.Name(dx, ast.Load()), slice=copy.deepcopy(idx),
                                                      ctx=ast.Store()), op=ast.Add(), value=g))

    def subst(self, e, subst, tname, tpl, prim):
        """Fill a template expression: names -> call-site atoms, d[result] -> d_<result>, calls -> K.*"""
        e = copy.deepcopy(e)
        G = tpl.globals
        from ..ops.registry import lookup

        class T(ast.NodeTransformer):
            def visit_Subscript(self_, node):
                if isinstance(node.value, ast.Name) and node.value.id == "d" and isinstance(node.slice, ast.Name):
                    if node.slice.id != tpl.result:
                        raise TransformError(f"VJP template of {prim.name}: only d[{tpl.result}] can be read")
                    return ast.Name(adname(tname), ast.Load())
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


def _K(name):
    return ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load())


def _src(s):
    """The primal statement as text, for the adjoint's trailing comment."""
    try:
        return _render(s)
    except Exception:  # pragma: no cover
        return None


def _render(s):
    from .emit import render_stmt
    return render_stmt(s)


def _line_text(fn, line):
    import linecache
    return linecache.getline(fn, line) if fn and line else None


def save_inplace(stmts, tmpgen):
    """Before each in-place write ``x[idx] = v``, save ``x[idx]`` so the adjoint can restore it."""
    out = []
    for s in stmts:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript):
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


def reverse(fdef: ast.FunctionDef, diff_params, output_atoms, src_lookup, float_params=(), int_params=()):
    """Build the primal + adjoint of a straight-line ANF function (see the module docstring)."""
    R = Reverse(src_lookup, float_params, int_params)
    R.active = set(diff_params)
    primal = save_inplace(list(fdef.body), R.tmp)
    R.mark(primal)
    adj = []
    # seed: output cotangents
    for i, o in enumerate(output_atoms):
        if isinstance(o, ast.Name) and o.id in R.active:
            R.accumulate(o.id, ast.Name(f"g_out{i}", ast.Load()), adj, comment=None)
    # activity at each statement must be the activity *at that point*: recompute per statement going back
    snapshots = []
    act = set(diff_params)
    R2 = Reverse(src_lookup, float_params, int_params)
    R2.active = act
    for s in primal:
        snapshots.append(set(R2.active))
        R2.mark([s])
    for s, snap in zip(reversed(primal), reversed(snapshots)):
        after = set(snap)
        R.active = after
        R.mark([s])
        R.adjoint_stmt(s, adj)
    grads = []
    for p in diff_params:
        dp = adname(p)
        if dp in R.defined:
            grads.append(ast.Name(dp, ast.Load()))
        else:
            grads.append(ast.Call(func=_K("zeros_like"), args=[ast.Name(p, ast.Load())], keywords=[]))
    return Adjoint(primal=primal, adjoint=adj, grads=grads, outputs=output_atoms)
