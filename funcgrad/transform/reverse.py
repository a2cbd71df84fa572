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
  trip count; other tapes are growable lists. In compiled code a loop body's own cheap values (those
  that do not depend on what the loop carries) are instead computed again at the start of each reversed
  iteration and never taped (:mod:`.replay`). Branches are reversed on their
  recorded conditions; the cotangent state of both branches (and of every loop
  iteration) is made to agree where they meet;
* in-place writes ``x[idx] = v`` save the overwritten values in the primal and
  restore them after moving ``d_x[idx]`` into ``d_v``;
* a differentiated value flowing into a call with no derivative rule raises
  :class:`funcgrad.errors.NoDerivativeError` at the user's line;
* every adjoint statement carries the primal statement it undoes (emitted as a
  trailing comment).

The seams: activity analysis (:mod:`.activity`), rank and kind inference
(:mod:`.infer`), tape planning (:mod:`.tapes`), dead-code removal
(:mod:`.deadcode`); this module is the reverse pass proper (template filling,
accumulation, and the adjoints of loops and branches).
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from . import annotations as A
from ..errors import TransformError
from ..ops.registry import Primitive, by_name, lookup
from .activity import Activity
from .aliases import check_aliases
from .anf import inherit_origin
from .astutil import clone, definitely_bound, drop_statements, fold_int_constants, kernel as _K
from .deadcode import _drop_unused_new
from .emit import render_stmt
from .infer import infer_kinds, infer_ranks
from .realness import expr_maybe_complex, maybe_complex
from .naming import RESERVED, Namer, names_in
from .preaccumulate import preaccumulate
from . import checkpointing, replay
from .astutil import ast_walk
from .tapes import (TAPE_DTYPES, _array_tape_pushes, _expand_markers, _marker, _needed, _preallocatable, _tape_pushes,
                    pos_of, ptr_of, save_inplace, tape_of)

@dataclass
class Adjoint:
    primal: list
    adjoint: list
    grads: list        # expression per differentiated parameter
    outputs: list      # atom per output leaf
    g_params: list     # the parameter holding each output's cotangent
    cotangents: frozenset = frozenset()   # the names of cotangents (accumulated as d_x = d_x + contribution)


def adname(name: str) -> str:
    """The preferred (readable) cotangent name of ``name``; :meth:`Reverse.adname` picks the actual one."""
    return "d" + name if name.startswith("_") else "d_" + name


def _comment(stmt, text):
    A.put(stmt, A.COMMENT, text)
    return stmt


class Reverse(Activity):
    def __init__(self, src_lookup, float_params, int_params, namer=None):
        self.src_lookup = src_lookup     # (filename, lineno) -> text, for errors
        self.names = namer or Namer()    # every generated name is chosen against the names in use
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
        self.cplx: set = set()           # names that may hold complex values (:mod:`.realness`)
        self.maybe_unbound: set = set()  # names some path through the primal never binds
        self.bound_flags: dict = {}      # such a name -> the primal flag saying it was bound
        self.ckpt_plans: dict = {}       # checkpointed loops: counter -> checkpointing.Plan
        self.rerun_reads: set = set()    # names the re-runs of checkpointed loops read
        self.replay_plans: dict = {}     # id(loop) -> statements its reversed iterations may recompute
        self.replayed: set = set()       # names recomputed in reversed iterations (never taped)
        self.vspace = None               # the generated code's name of custom.vspace (see vspace_call)
        self.vspace_names: set = set()   # names holding an object of a user's vector space (and so d_<name>)


    def tmp(self, base="_v"):
        return self.names.numbered(base)

    def adname(self, name: str) -> str:
        """The cotangent of ``name``: ``d_<name>`` unless that name is taken (by the user, or by the
        cotangent of another name: ``t1`` and ``_t1``), one name per primal name."""
        return self.names.derived("d", name, adname(name))

    def may_be_complex(self, e) -> bool:
        """Whether expression ``e`` of the sweep may be complex (``cplx`` holds primal names, their
        cotangents and the sweep's temporaries that may be)."""
        return expr_maybe_complex(e, self.cplx)

    def float_array(self, x):
        """Whether ``x`` is known to hold floats: a float parameter never bound again (else a write into it may
        cast to integers, which the generated code checks when it runs)."""
        return x not in self.nonssa and self.param_kinds.get(x) in ("f8", "f4")

    def kind_matched(self, contrib, target, mixed):
        """``contrib`` as the cotangent of ``target``: its real part for a real target, complex for a complex
        one (autograd's convention). Emitted only where either may be complex (``mixed``): real code is
        unchanged."""
        if not mixed:
            return contrib
        c = ast.Call(func=_K("match_complex"), args=[contrib, ast.Name(target, ast.Load())], keywords=[])
        A.put(c, A.PRIM, by_name("match_complex"))
        return c

    # ------------------------------------------------------------------ accumulation
    def vspace_call(self, name, method, args):
        """``vspace(name).method(*args)``: an operation of the user's vector space ``name`` belongs to."""
        space = ast.Call(func=ast.Name(self.vspace, ast.Load()), args=[ast.Name(name, ast.Load())], keywords=[])
        return ast.Call(func=ast.Attribute(value=space, attr=method, ctx=ast.Load()), args=list(args), keywords=[])

    def zero_of(self, name):
        """The zero cotangent of ``name``: ``K.zeros_like(name)``, or its vector space's ``zeros()``."""
        if name in self.vspace_names:
            return self.vspace_call(name, "zeros", [])
        return ast.Call(func=_K("zeros_like"), args=[ast.Name(name, ast.Load())], keywords=[])

    def accumulate(self, name, contrib, out, comment=None):
        """``d_name += contrib`` (first contribution binds; a user's vector space adds with its ``add``)."""
        dn = self.adname(name)
        if dn in self.defined and name in self.vspace_names:
            s = ast.Assign(targets=[ast.Name(dn, ast.Store())],
                           value=self.vspace_call(name, "add", [ast.Name(dn, ast.Load()), contrib]))
        elif dn in self.defined:
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
                A.put(out[start], A.COMMENT, comment)
            return
        dt = self.adname(tname)
        if tname not in self.active or dt not in self.defined:
            return
        start = len(out)
        self.rhs_adjoint(s, tname, dt, out)
        if len(out) > start and out[start] is not None:
            A.put(out[start], A.COMMENT, comment)

    def rhs_adjoint(self, s, tname, dres, out):
        """Cotangent contributions of ``tname = rhs`` given the result's cotangent ``dres``."""
        e = s.value
        if isinstance(e, ast.Name):
            if e.id in self.active:
                self.accumulate(e.id, ast.Name(dres, ast.Load()), out)
        elif isinstance(e, ast.Call):
            prim = A.get(e, A.PRIM, None)
            if prim is not None:
                self.fill(prim, e, tname, out, s)
            elif A.get(e, A.CUSTOM, None) is not None:
                self.custom(e, tname, out, s)

    def adjoint_overwrite(self, s, out):
        """Adjoint of ``v = rhs`` where ``v`` is assigned more than once (in loops/branches).

        ``d_v`` (the cotangent of the value assigned here) is consumed: afterwards ``d_v`` is
        undefined again, so uses of the previous value start a fresh cotangent.
        """
        tname = s.targets[0].id
        dv = self.adname(tname)
        if dv not in self.defined:
            return False
        e = s.value
        reads_self = any(isinstance(n, ast.Name) and n.id == tname for n in ast_walk(e))
        if reads_self:  # the operand is the old value: keep the new one aside and restore the old one first
            res = self.tmp("_dres")
            val = self.tmp("_new")
            if tname in self.cplx:
                self.cplx |= {res, val}
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
        dx = self.adname(x)
        saved = A.get(s, A.SAVED, None)
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
                if not self.float_array(x):   # (a write into integers or booleans casts: no derivative)
                    piece = ast.Call(func=_K("written_cast"), args=[piece, ast.Name(x, ast.Load())], keywords=[])
                    A.put(piece, A.PRIM, by_name("written_cast"))
                contrib = ast.Call(func=_K("unbroadcast"), args=[piece, s.value], keywords=[])
                mixed = x in self.cplx or s.value.id in self.cplx
                self.accumulate(s.value.id, self.kind_matched(contrib, s.value.id, mixed), out)
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
            A.put(out[start], A.COMMENT, comment)

    def custom(self, e, tname, out, stmt):
        cf = A.get(e, A.CUSTOM)
        if getattr(cf, "fwd", None) is None and getattr(cf, "jvp", None) is None:
            label = getattr(cf, "_label", "f")
            raise self.nd_error(stmt, f"{getattr(cf, 'kind', 'custom')} function '{label}' has no derivative rule, "
                                      "and a differentiated value flows into it",
                                hint=f"give it one: {label}.defjvp(rule) (custom_jvp) or {label}.defvjp(fwd, bwd) "
                                     "(custom_vjp)")
        spaces = [a for a in e.args if isinstance(a, ast.Name) and a.id in self.vspace_names and self.is_active(a)]
        if spaces and getattr(cf, "fwd", None) is None:
            label = getattr(cf, "_label", "f")
            raise self.nd_error(stmt, f"'{label}' has a JVP rule only, and a differentiated value of a user's vector "
                                      "space (VSpace.register) is given to it: its gradient needs a VJP",
                                hint=f"give {label} a VJP: defvjp({label}, ...) or {label}.defvjp(fwd, bwd)")
        res = self.tmp("_res")
        out.append(ast.Assign(targets=[ast.Name(res, ast.Store())],
                              value=ast.Call(func=ast.Attribute(value=copy.deepcopy(e.func), attr="bwd_from_args",
                                                                ctx=ast.Load()),
                                             args=[ast.Tuple(elts=list(e.args), ctx=ast.Load()),
                                                   ast.Name(self.result_adjoint or self.adname(tname), ast.Load())],
                                             keywords=[])))
        def acc(a, ct):   # a container argument (a list of (W, b) pairs) gets the same structure back
            if isinstance(a, ast.Tuple):
                for j, el in enumerate(a.elts):
                    acc(el, ast.Subscript(value=ct, slice=ast.Constant(j), ctx=ast.Load()))
            elif isinstance(a, ast.Name) and self.is_active(a):
                self.accumulate(a.id, ct, out)

        for i, a in enumerate(e.args):
            acc(a, ast.Subscript(value=ast.Name(res, ast.Load()), slice=ast.Constant(i), ctx=ast.Load()))

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
        for p in self.without_rule(prim, ba):   # its cotangent would be silently zero: refuse
            raise self.no_rule_error(prim, p, stmt)
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
                if self.may_be_complex(expr):
                    self.cplx.add(new)
                local[tgt.id] = new
                subst[tgt.id] = ast.Name(new, ast.Load())
                pending.append((new, expr))
                continue
            p = tgt.slice.id
            arg = ba.get(p)
            if arg is None or not self.is_active(arg):
                continue
            if getattr(prim, "zero_on_real", False) and isinstance(arg, ast.Name) and arg.id not in self.cplx:
                continue  # np.imag, np.angle of a real value: piecewise constant
            expr = self.subst(ts.value, subst, tname, tpl, prim)
            used = {n.id for n in ast_walk(expr) if isinstance(n, ast.Name)}
            for new, pexpr in reversed(pending):  # temporaries read by the temporaries this one reads
                if new in used:
                    used |= {n.id for n in ast_walk(pexpr) if isinstance(n, ast.Name)}
            for new, pexpr in pending:  # template temporaries (not cotangents): emitted once, when first used
                if new in used and new not in emitted:
                    out.append(ast.Assign(targets=[ast.Name(new, ast.Store())], value=pexpr))
                    emitted.add(new)
            if prim.name == "getitem" and p == "x":
                self.scatter(arg.id, call.args[1], ast.Name(self.result_adjoint or self.adname(tname), ast.Load()), out)
                continue
            if isinstance(arg, ast.Tuple):  # a sequence parameter (concatenate, stack)
                seq = self.tmp("_seq")
                out.append(ast.Assign(targets=[ast.Name(seq, ast.Store())], value=expr))
                for i, el in enumerate(arg.elts):
                    if self.is_active(el):
                        if not isinstance(el, ast.Name):   # normalize stacks nested sequences first
                            raise self.nd_error(stmt, f"a nested sequence inside '{prim.name}' is not supported",
                                                hint="build the inner arrays first (np.stack)")
                        self.accumulate(el.id, self.kind_matched(
                            ast.Subscript(value=ast.Name(seq, ast.Load()), slice=ast.Constant(i), ctx=ast.Load()),
                            el.id, el.id in self.cplx or self.may_be_complex(expr)), out)
                continue
            self.accumulate(arg.id, self.kind_matched(expr, arg.id, arg.id in self.cplx or self.may_be_complex(expr)),
                            out)

    def scatter(self, x, idx, g, out):
        """``d_x[idx] += g`` on an array this sweep owns."""
        if self.ranks.get(x) == 0:   # x[None], x[..., None] of a number: g holds its one element (a number's
            # cotangent is a number, not an array to write into)
            self.accumulate(x, ast.Call(func=_K("sum"), args=[g], keywords=[]), out)
            return
        dx = self.adname(x)
        if dx not in self.defined:
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("zeros_like"), args=[ast.Name(x, ast.Load())], keywords=[])))
            self.defined.add(dx)
            self.owned.add(dx)
        elif dx not in self.owned:
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("copy"), args=[ast.Name(dx, ast.Load())], keywords=[])))
            self.owned.add(dx)
        if _basic_index(idx, self.ranks) and not _selects_array(idx, self.ranks.get(x)):
            out.append(ast.AugAssign(target=ast.Subscript(value=ast.Name(dx, ast.Load()), slice=copy.deepcopy(idx),
                                                          ctx=ast.Store()), op=ast.Add(), value=g))
        else:  # an integer-array or mask index may repeat elements: every occurrence accumulates; a basic index
            # selecting a part of an array (a slice, a row) is a kernel too: Numba compiles ``d_x[a:b] += g`` into
            # the function as NumPy's general slice assignment, seconds per program (kernels/cpu.py: index_add)
            out.append(ast.Assign(targets=[ast.Name(dx, ast.Store())],
                                  value=ast.Call(func=_K("index_add"),
                                                 args=[ast.Name(dx, ast.Load()), _index_value(idx), g], keywords=[])))

    def subst(self, e, subst, tname, tpl, prim):
        """Fill a template expression: names -> call-site atoms, d[result] -> d_<result>, calls -> K.*"""
        e = clone(e)
        G = tpl.globals

        class T(ast.NodeTransformer):
            def visit_Subscript(self_, node):
                if isinstance(node.value, ast.Name) and node.value.id == "d" and isinstance(node.slice, ast.Name):
                    if node.slice.id != tpl.result:
                        raise TransformError(f"VJP template of {prim.name}: only d[{tpl.result}] can be read")
                    return ast.Name(self.result_adjoint or self.adname(tname), ast.Load())
                self_.generic_visit(node)
                return node

            def visit_Name(self_, node):
                if node.id in subst:
                    return clone(subst[node.id])
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
                if p is not None and p.name in ("conj", "match_complex") and not node.keywords and \
                        not any(self.may_be_complex(a) for a in node.args):
                    return node.args[0]  # the conjugate of a real value is itself, and so is its kind
                if p is not None and getattr(p, "real_form", None) and not any(
                        self.may_be_complex(a) for a in list(node.args) + [k.value for k in node.keywords]):
                    p = by_name(p.real_form)  # csign of real values: np.sign, as before complex numbers
                if p is not None:
                    node.func = _K(p.name)
                    A.put(node, A.PRIM, p)
                    if p.operator and p.operator not in ("[]", "neg") and len(node.args) == 2 and not node.keywords:
                        return ast.BinOp(left=node.args[0], op=_BINOPS[p.operator](), right=node.args[1])
                    return node
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("K", "np"):
                    return node
                raise TransformError(f"VJP template of {prim.name}: call of {ast.unparse(f)} is not a primitive")

        return fold_int_constants(T().visit(e))


def _copies_of(names, body):
    """``names`` and every name bound to one of them (``g = f``), anywhere in ``body``."""
    names = set(names)
    copies = [(s.targets[0].id, s.value.id) for s in ast_walk(ast.Module(body=list(body), type_ignores=[]))
              if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name)]
    grew = bool(names)
    while grew:
        grew = False
        for t, v in copies:
            if v in names and t not in names:
                names.add(t)
                grew = True
    return names


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


basic_index = _basic_index


def _selects_array(idx, rank):
    """True when basic index ``idx`` into an array of ``rank`` (None: unknown) selects an array, not one element
    (an index with None or Ellipsis: False, it stays written as an index)."""
    parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
    if any(isinstance(p, ast.Slice) for p in parts):
        return True
    if any(isinstance(p, ast.Constant) and (p.value is None or p.value is Ellipsis) for p in parts):
        return False
    return rank is not None and len(parts) < rank


def _index_value(idx):
    """An index expression as a value (slices become ``slice(...)`` calls) to pass to a kernel."""
    if isinstance(idx, ast.Tuple):
        return ast.Tuple(elts=[_index_value(e) for e in idx.elts], ctx=ast.Load())
    if isinstance(idx, ast.Slice):
        return ast.Call(func=ast.Name("slice", ast.Load()),
                        args=[copy.deepcopy(p) if p is not None else ast.Constant(None)
                              for p in (idx.lower, idx.upper, idx.step)], keywords=[])
    return copy.deepcopy(idx)


def _src(s):
    """The primal statement as text, for the adjoint's trailing comment."""
    try:
        return _render(s)
    except Exception:  # pragma: no cover
        return None


def _render(s):
    return render_stmt(s)


def _assigned_in(stmts, inside=False, acc=None, bound=()):
    """Names assigned inside loops or branches, or more than once in straight-line code, a parameter
    (``bound``) counting as assigned once (ANF gives each straight-line assignment a name of its own, except
    the rebinding of :func:`.aliases.rebind_aliases`)."""
    acc = set() if acc is None else acc
    once = set(bound)
    for s in stmts:
        if isinstance(s, (ast.For, ast.While, ast.If)):
            if isinstance(s, ast.For):
                acc.add(s.target.id)
            _assigned_in(s.body, True, acc)
            _assigned_in(s.orelse, True, acc)
        elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            name = s.targets[0].id
            if inside or name in once:
                acc.add(name)
            once.add(name)
    return acc


class _Loops:
    """Adds trip counters to loops: ``_n<k> = 0`` before, ``_n<k> = _n<k> + 1`` first in the body."""

    def __init__(self, namer):
        self.k = 0
        self.names = namer
        self.counters = []
        self.iters = []

    def add(self, stmts, in_loop):
        out = []
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)):
                self.k += 1
                n = self.names.fresh(f"_n{self.k}")
                self.counters.append(n)
                A.put(s, A.COUNTER, n)
                A.put(s, A.IN_LOOP, in_loop)
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(0)), s))
                inc = ast.Assign(targets=[ast.Name(n, ast.Store())],
                                 value=ast.BinOp(left=ast.Name(n, ast.Load()), op=ast.Add(), right=ast.Constant(1)))
                pre = [ast.copy_location(inc, s)]
                if isinstance(s, ast.For):  # the loop variable as a plain assignment (taped if needed)
                    it = self.names.fresh(f"_it{self.k}")
                    self.iters.append(it)
                    pre.append(ast.copy_location(ast.Assign(targets=[ast.Name(s.target.id, ast.Store())],
                                                            value=ast.Name(it, ast.Load())), s))
                    s.target = ast.Name(it, ast.Store())
                s.body = pre + self.add(s.body, True)
                out.append(s)
                if in_loop:  # each run of an inner loop has its own trip count: keep them on a tape
                    out.append(A.put(ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(
                        tape_of(self.names, n, f"_tape{n}"), ast.Load()), attr="append", ctx=ast.Load()),
                        args=[ast.Name(n, ast.Load())], keywords=[])), A.TRIPS, n))
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
            if A.get(s, A.CHECKPOINT, None) is not None:
                checkpointing.rev_checkpointed(R, s, out, _rev_loop)
            else:
                _rev_loop(R, s, out)
        elif isinstance(s, ast.If):
            if not A.has(s, A.SNAPSHOT):   # a checkpointed loop's snapshot: nothing to reverse
                _rev_if(R, s, out)
        elif isinstance(s, ast.Assign):
            R.adjoint_stmt(s, out)
        inherit_origin(out[start:], s)  # an adjoint line's errors are reported at its primal line


def _zero(R, dn, out):
    """``d_v = zeros_like(v)``; guarded by ``v``'s bound flag where ``v`` may never be bound (see ``_guarded``)."""
    out.append(_guarded(R, dn, ast.Assign(targets=[ast.Name(dn, ast.Store())], value=R.zero_of(R.d_to_name[dn]))))


def _guarded(R, dn, stmt):
    """``stmt`` (which reads ``v`` or ``d_v``) as ``if <v was bound>: stmt`` when ``v`` is not bound on every
    path through the primal (a name bound only inside a loop that ran no trip, or a branch not taken): the
    sweep's zero of ``d_v`` at a merge would read a name Python never bound. When ``v`` was never bound no
    executed adjoint statement reads ``d_v``, so leaving it unbound is right."""
    v = R.d_to_name.get(dn)
    if v is None or v not in R.maybe_unbound:
        return stmt
    flag = R.names.derived("bound", v, f"_bound_{v.lstrip('_')}")
    R.bound_flags[v] = flag
    return ast.If(test=ast.Name(flag, ast.Load()), body=[stmt], orelse=[])


def _flag_bindings(stmts, flags):
    """``<flag> = True`` after every binding of a name that has a bound flag."""
    out = []
    for s in stmts:
        out.append(s)
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id in flags:
            out.append(ast.Assign(targets=[ast.Name(flags[s.targets[0].id], ast.Store())], value=ast.Constant(True)))
        elif isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _flag_bindings(s.body, flags)
            s.orelse = _flag_bindings(s.orelse, flags)
    return out


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
    A.put(new, A.COMMENT, A.get(s, A.COMMENT) if A.has(s, A.AUTO) else f"if {ast.unparse(s.test)}:")
    out.append(new)


def _rev_loop(R, s, out):
    """The reversed loop: the cotangent state at the start of every reversed iteration is the same."""
    n = A.get(s, A.COUNTER)
    pre = []
    hoisted = False
    for _ in range(6):  # fixpoint of (defined, owned) at the iteration boundary; nesting depth bounds it
        d0, o0 = set(R.defined), set(R.owned)
        save_count = R.names.checkpoint()
        R.depth += 1
        body = []
        _rev_block(R, s.body, body)
        R.depth -= 1
        d1, o1 = R.defined, R.owned
        grow = d1 - d0
        lose_owned = (o0 - o1) & d1
        gain = (o1 - o0) & d0
        if not grow and not lose_owned and gain and not hoisted:
            # the body copies a cotangent before writing into it in place (d_y[i] = 0 for y[i] = v) and ends
            # owning it: copy it once before the loop instead of once per iteration (a copy of the whole
            # array per iteration made a loop of in-place writes quadratic)
            hoisted = True
            R.names.restore(save_count)
            for dn in sorted(gain):
                pre.append(_guarded(R, dn, ast.Assign(targets=[ast.Name(dn, ast.Store())],
                                                      value=ast.Call(func=_K("copy"), args=[ast.Name(dn, ast.Load())],
                                                                     keywords=[]))))
            R.defined, R.owned = d0, o0 | gain
            continue
        if not grow and not lose_owned:
            for dn in sorted(d0 - d1):  # consumed and not re-created: the next iteration needs them back
                _zero(R, dn, body)
                R.owned.add(dn)
            R.defined = d0 | d1
            R.owned = o0 & (o1 | (d0 - d1))
            break
        R.names.restore(save_count)
        for dn in sorted(grow):  # created inside: must exist (and accumulate) across iterations
            _zero(R, dn, pre)
        for dn in sorted(lose_owned):
            pre.append(_guarded(R, dn, ast.Assign(targets=[ast.Name(dn, ast.Store())],
                                                  value=ast.Call(func=_K("copy"), args=[ast.Name(dn, ast.Load())],
                                                                 keywords=[]))))
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
    cand = R.replay_plans.get(id(s))
    if cand:   # this iteration's own values computed again rather than read back from tapes (see .replay)
        again, bound = replay.select(cand, _needed(body, R.ranks))
        if again:
            A.put(again[0], A.COMMENT, "recomputed: this iteration's values, cheaper than taped")
            R.replayed |= bound
            body = again + body
    if A.get(s, A.IN_LOOP):
        out.append(ast.Assign(targets=[ast.Name(n, ast.Store())],
                              value=ast.Call(func=ast.Attribute(value=ast.Name(tape_of(R.names, n, f"_tape{n}"), ast.Load()),
                                                                attr="pop",
                                                                ctx=ast.Load()), args=[], keywords=[])))
    k = R.names.derived("reversed", n, "_k" + n[2:])
    rng = ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Name(n, ast.Load())], keywords=[])
    loop = ast.For(target=ast.Name(k, ast.Store()), iter=rng, body=body, orelse=[])
    head = f"for {ast.unparse(s.target)} in {ast.unparse(s.iter)}:" if isinstance(s, ast.For) \
        else f"while {ast.unparse(s.test)}:"
    A.put(loop, A.COMMENT, f"reversed: {head}")
    out.append(loop)


class _ScalarLiterals(ast.NodeTransformer):
    """``K.zeros_like(v)`` -> ``0.0`` and ``K.copy(d_v)`` -> ``d_v`` where ``v`` is a float64 scalar: a kernel
    call Numba must type (and a first call must compile or load) for what is a constant or the value itself."""

    def __init__(self, R, kinds):
        self.R, self.kinds = R, kinds

    def _f8(self, name):
        v = self.R.d_to_name.get(name, name)   # (R.cplx holds a complex name's cotangent too)
        return self.R.ranks.get(v) == 0 and self.kinds.get(v) == "f8" and v not in self.R.cplx

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "K" and \
                len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Name):
            a = node.args[0].id
            if f.attr == "zeros_like" and a not in self.R.d_to_name and self._f8(a):
                return ast.copy_location(ast.Constant(0.0), node)
            if f.attr == "copy" and a in self.R.d_to_name and self._f8(a):
                return ast.copy_location(ast.Name(a, ast.Load()), node)
        return node

    def run(self, code):
        return _drop_self_assignments([self.visit(s) for s in code])


def _drop_self_assignments(code):
    """``d_x = d_x`` (left by a scalar's copy) removed, in nested blocks too."""
    return drop_statements(code, lambda s: isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and
                           isinstance(s.value, ast.Name) and s.value.id == s.targets[0].id)


def reverse(fdef: ast.FunctionDef, diff_params, output_atoms, src_lookup, float_params=(), int_params=(),
            param_ranks=None, param_kinds=None, origins=None, preaccumulate_loops=False, checkpoint_loops=None,
            vspace=None, replay_loops=False):
    """Build the primal + adjoint of an ANF function (see the module docstring); ``origins`` names generated
    variables in the user's words in messages. ``checkpoint_loops`` (bytes, or None): each top-level loop that
    can be checkpointed gets a checkpointed copy beside the taped one, run when the loop's tape would exceed
    that many bytes (:func:`.checkpointing.automatic`). ``vspace``: the generated code's name of
    ``custom.vspace`` where parameters of kind "vs" (objects of a user's vector space) are differentiated.
    ``replay_loops``: reversed loop iterations recompute the cheap values of their own body instead of reading
    them from tapes (:mod:`.replay`; compiled code)."""
    params = [a.arg for a in fdef.args.args]
    all_names = names_in(fdef) | set(params)
    namer = Namer(all_names)
    R = Reverse(src_lookup, float_params, int_params, namer)
    R.active = set(diff_params)
    R.vspace = vspace
    R.param_kinds = dict(param_kinds or {})
    R.vspace_names = _copies_of({p for p in params if (param_kinds or {}).get(p) == "vs"}, fdef.body)
    # cotangent names, fixed up front in a set order (parameters first): readable and collision-free
    for n in list(params) + sorted(all_names - set(params) - RESERVED):
        R.adname(n)
    g_params = [namer.fresh(f"g_out{i}") for i in range(len(output_atoms))]
    loops = _Loops(namer)
    body = save_inplace(clone(list(fdef.body)), R.tmp)
    autos = []
    if checkpoint_loops is not None:
        body, autos = checkpointing.automatic(body, namer, params)
    body = loops.add(body, False)
    body, R.ckpt_plans = checkpointing.plan(body, namer, params, src_lookup)
    R.special = set(loops.counters) | set(loops.iters) | checkpointing.special(R.ckpt_plans) | \
        {a.decide.targets[0].id for a in autos}   # (a choice runs once: its decision is never overwritten)
    R.nonssa = _assigned_in(body, bound=params) - R.special
    R.maybe_unbound = _assigned_in(body) - definitely_bound(body, params) - R.special
    R.ranks = infer_ranks(body, dict(param_ranks or {}))
    R.cplx = maybe_complex(body, dict(param_kinds or {}), params)
    R.cplx |= {R.adname(n) for n in R.cplx}
    check_aliases(fdef, [o.id for o in output_atoms if isinstance(o, ast.Name)], R.ranks, _basic_index,
                  lambda st: src_lookup(st)[0], origins=origins)
    R.mark(body)
    if replay_loops:
        R.replay_plans = replay.plan(body, R.ranks, R.special)
    R.d_to_name = {R.adname(n): n for n in all_names | set(loops.counters) | set(loops.iters)}
    adj = []
    # outputs: snapshot names the sweep will restore or arrays it will undo writes in
    pre = []
    written = {s.targets[0].value.id for s in ast_walk(ast.Module(body=body, type_ignores=[]))
               if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)}
    outs = []
    for i, o in enumerate(output_atoms):
        if isinstance(o, ast.Name) and (o.id in R.nonssa or o.id in written):
            snap = namer.fresh(f"_out{i}")
            val = ast.Call(func=_K("copy"), args=[o], keywords=[]) if o.id in written else o
            pre.append(ast.Assign(targets=[ast.Name(snap, ast.Store())], value=val))
            outs.append(ast.Name(snap, ast.Load()))
        else:
            outs.append(o)
    for i, o in enumerate(output_atoms):
        # (an object of a user's space returned is has_aux's aux, whose seed is zero: api refuses it elsewhere)
        if isinstance(o, ast.Name) and o.id in R.active and o.id not in R.vspace_names:
            R.accumulate(o.id, ast.Name(g_params[i], ast.Load()), adj, comment=None)
    _rev_block(R, body, adj)
    adj = _drop_unused_new(adj)
    need = _needed(adj, R.ranks) | R.rerun_reads   # (what a checkpointed loop's re-run reads)
    taped = (R.nonssa & need) - R.replayed
    kinds = infer_kinds(body, dict(param_kinds or {}))
    prealloc = _preallocatable(body, taped, R.ranks, kinds)
    for p in params:
        prealloc.pop(p, None)
    if R.bound_flags:
        body = _flag_bindings(body, R.bound_flags)
        tapes = [ast.Assign(targets=[ast.Name(f, ast.Store())], value=ast.Constant(False))
                 for _, f in sorted(R.bound_flags.items())]
    else:
        tapes = []
    hidden = {}   # checkpointed loops run untaped in the primal
    body = _array_tape_pushes(checkpointing.hide(body, hidden), prealloc, namer)
    body = checkpointing.unhide(_tape_pushes(body, taped - set(prealloc), namer), hidden)
    if autos:   # each choice's decision, from the tape pushes of its taped copy
        nested = [A.get(s, A.COUNTER) for s in ast_walk(ast.Module(body=body, type_ignores=[]))
                  if isinstance(s, (ast.For, ast.While)) and A.get(s, A.IN_LOOP)]
        tapes_of = {tape_of(namer, n): (n, prealloc.get(n)) for n in taped}
        tapes_of.update({tape_of(namer, c, f"_tape{c}"): (c, None) for c in nested})
        checkpointing.decide(autos, checkpoint_loops, tapes_of, R.ranks, R.cplx, set(loops.counters))
    adj = _expand_markers(adj, taped, params, namer)
    adj = _ScalarLiterals(R, kinds).run(adj)
    if preaccumulate_loops:   # compiled code: scalar loop bodies' adjoints as one update per iteration
        preaccumulate(adj, set(R.d_to_name), namer,
                      lambda dn: R.ranks.get(R.d_to_name[dn]) == 0 and dn not in R.cplx)
    if R.ckpt_plans:
        adj = checkpointing.expand_reruns(adj, taped, prealloc, namer, ptr_of, pos_of, tape_of, _array_tape_pushes,
                                          _tape_pushes)
    adj = [ast.Assign(targets=[ast.Name(ptr_of(namer, n), ast.Store())],
                      value=ast.Name(pos_of(namer, n), ast.Load()) if n in prealloc else
                      ast.Call(func=ast.Name("len", ast.Load()), args=[ast.Name(tape_of(namer, n), ast.Load())],
                               keywords=[])) for n in sorted(taped)] + adj
    for n in sorted(taped):
        if n in prealloc:  # an array of float64, int64 or bool grown before each loop by its trip count
            dt = TAPE_DTYPES[prealloc[n]]
            tapes.append(ast.Assign(targets=[ast.Name(tape_of(namer, n), ast.Store())],
                                    value=ast.Call(func=ast.Attribute(value=ast.Name("np", ast.Load()), attr="empty",
                                                                      ctx=ast.Load()),
                                                   args=[ast.Constant(0)], keywords=[] if dt == "float64" else [
                                                       ast.keyword(arg="dtype", value=ast.Attribute(
                                                           value=ast.Name("np", ast.Load()), attr=dt,
                                                           ctx=ast.Load()))])))
            tapes.append(ast.Assign(targets=[ast.Name(pos_of(namer, n), ast.Store())], value=ast.Constant(0)))
            continue
        init = ast.List(elts=[ast.Name(n, ast.Load())] if n in params else [], ctx=ast.Load())
        tapes.append(ast.Assign(targets=[ast.Name(tape_of(namer, n), ast.Store())], value=init))
    for n in loops.counters:
        if any(A.get(s, A.COUNTER, None) == n and A.get(s, A.IN_LOOP)
               for s in ast_walk(ast.Module(body=body, type_ignores=[]))):
            tapes.append(ast.Assign(targets=[ast.Name(tape_of(namer, n, f"_tape{n}"), ast.Store())],
                                    value=ast.List(elts=[], ctx=ast.Load())))
    grads = []
    for p in diff_params:
        dp = R.adname(p)
        if dp in R.defined:
            grads.append(ast.Name(dp, ast.Load()))
        else:
            grads.append(R.zero_of(p))
    return Adjoint(primal=tapes + body + pre, adjoint=adj, grads=grads, outputs=outs, g_params=g_params,
                   cotangents=frozenset(R.d_to_name))
