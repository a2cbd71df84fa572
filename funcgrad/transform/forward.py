"""Forward: the primal in A-normal form with its tangents, by filling JVP lines.

Input: an ANF function, which of its parameters carry tangents, and its output
atoms. Output (:class:`Tangent`): one body computing primal values and
tangents side by side, and the tangent atom of every output, where

* only *active* values (those depending on a parameter with a tangent through
  differentiable operations, :mod:`.activity`) get tangents ``t_<name>``; an
  active name assigned an inactive value (``s = 0.0`` before a loop that adds
  to it) gets a zero tangent there;
* each primitive's tangent is its registered JVP line (``t[y] = ...``) with the
  call site's names substituted; the tangent of an inactive input is zero and
  the terms it appears in vanish (linearity), so ``x * c`` with ``c`` inactive
  costs one multiplication;
* loops stay loops and branches stay branches: a tangent is computed right
  after the statement that computes its primal, so every tangent statement sees
  the primal values its JVP line reads (an operand the statement itself
  rebinds, ``s = s * x``, is read from a copy taken before);
* in-place writes ``x[idx] = v`` write ``t_x[idx] = t_v`` (zeros for an
  inactive ``v``) into a tangent that is a fresh array;
* every generated call is a primitive call annotated as the user's code is, so
  the result is itself in the dialect the passes take: forward mode applies to
  it again (``jvp`` of ``jvp``), and so does the reverse pass (``hvp``, ``hessian``).
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from . import annotations as A
from ..errors import TransformError
from ..ops.registry import lookup, by_name
from .activity import Activity
from .anf import inherit_origin
from .infer import infer_ranks
from .aliases import may_share
from .astutil import fold_int_constants, kernel as _K, prim_call
from .realness import expr_maybe_complex, maybe_complex
from .naming import RESERVED, Namer, names_in
from .astutil import ast_walk


@dataclass
class Tangent:
    body: list          # primal and tangent statements, in order
    tangents: list      # tangent expression per output atom
    params: list        # the tangent parameter of each differentiated parameter


def tname(name: str) -> str:
    """The preferred (readable) tangent name of ``name``; :meth:`Forward.tname` picks the actual one."""
    return "t" + name if name.startswith("_") else "t_" + name


_OPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.Pow: "power",
        ast.MatMult: "matmul"}


class _Zero:
    """The tangent of an inactive input inside a JVP line: zero, with the primal it is shaped like."""

    def __init__(self, like):
        self.like = like


class Forward(Activity):
    def __init__(self, src_lookup, namer=None):
        self.src_lookup = src_lookup
        self.active: set = set()
        self.names = namer or Namer()    # every generated name is chosen against the names in use
        self.written: set = set()
        self.cplx: set = set()      # names (and tangents) that may hold complex values (:mod:`.realness`)
        self.ranks: dict = {}       # name -> ndim where known (:func:`.infer.infer_ranks`)

    def tmp(self, base="_f"):
        return self.names.numbered(base)

    def tname(self, name: str) -> str:
        """The tangent of ``name``: ``t_<name>`` unless that name is taken (a user's ``t_x``, the tangent
        of ``_x``), one name per primal name."""
        return self.names.derived("t", name, tname(name))

    # ------------------------------------------------------------------ statements
    def block(self, stmts):
        out = []
        for s in stmts:
            start = len(out)
            self.stmt(s, out)
            inherit_origin(out[start:], s)   # tangent lines are the user's line too (errors, line maps)
        return out

    def stmt(self, s, out):
        if isinstance(s, ast.For):
            out.append(ast.copy_location(ast.For(target=s.target, iter=s.iter, body=self.block(s.body) or [ast.Pass()],
                                                 orelse=[]), s))
            return
        if isinstance(s, ast.While):
            out.append(ast.copy_location(ast.While(test=s.test, body=self.block(s.body) or [ast.Pass()], orelse=[]), s))
            return
        if isinstance(s, ast.If):
            out.append(ast.copy_location(ast.If(test=s.test, body=self.block(s.body) or [ast.Pass()],
                                                orelse=self.block(s.orelse)), s))
            return
        if not isinstance(s, ast.Assign):
            out.append(s)
            return
        tgt = s.targets[0]
        if isinstance(tgt, ast.Subscript):
            out.append(s)
            x = tgt.value.id
            if x in self.active:
                val = ast.Name(self.tname(s.value.id), ast.Load()) if self.is_active(s.value) else ast.Constant(0.0)
                if self.is_active(s.value):   # (a write into integers or booleans casts: no derivative)
                    val = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="written_cast",
                                                      ctx=ast.Load()), args=[val, ast.Name(x, ast.Load())], keywords=[])
                    A.put(val, A.PRIM, by_name("written_cast"))
                w = ast.Assign(targets=[ast.Subscript(value=ast.Name(self.tname(x), ast.Load()), slice=copy.deepcopy(tgt.slice),
                                                      ctx=ast.Store())], value=val)
                out.append(ast.copy_location(w, s))
            return
        name = tgt.id
        if name not in self.active:
            out.append(s)
            return
        e = s.value
        if isinstance(e, ast.Call) and A.get(e, A.PRIM, None) is None and A.get(e, A.CUSTOM, None) is not None \
                and any(self.is_active(a) for a in e.args):
            self.custom_call(s, e, name, out)
            return
        reads_self = any(isinstance(n, ast.Name) and n.id == name for n in ast_walk(e))
        before = []
        after = []
        old = None
        if reads_self:                    # s = s * x: the JVP line reads the old s
            old = self.tmp("_old")
            if name in self.cplx:
                self.cplx.add(old)
            before.append(ast.copy_location(ast.Assign(targets=[ast.Name(old, ast.Store())],
                                                       value=ast.Name(name, ast.Load())), s))
        texpr = self.tangent_of(s, e, name, old, after)
        fresh = name in self.written
        if texpr is None:
            texpr = prim_call("zeros_like", [ast.Name(name, ast.Load())])
        elif fresh and isinstance(texpr, ast.Name) and not isinstance(e, ast.Name):
            texpr = prim_call("copy", [texpr])  # a tangent written in place later must not alias another
        if old is not None and not any(isinstance(n, ast.Name) and n.id == old
                                       for st in after + [texpr] for n in ast_walk(st)):
            before = []                   # the JVP line does not read the old value
        out.extend(before)
        out.append(s)
        out.extend(after)
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(self.tname(name), ast.Store())], value=texpr), s))

    def custom_call(self, s, e, name, out):
        """``y = f(x1, x2)`` of a custom function with a JVP rule: ``y, t_y = f.jvp((x1, x2), (t_x1, t_x2))``
        (JAX's convention; inactive arguments get zero tangents). The rule is the user's Python, called as
        it is; a transform of this code (second order) reads and differentiates the rule itself."""
        cf = A.get(e, A.CUSTOM)
        if getattr(cf, "jvp", None) is None and getattr(cf, "fwd", None) is None:
            label = getattr(cf, "_label", getattr(cf, "__name__", "f"))
            kind = getattr(cf, "kind", "custom_vjp")
            raise self.nd_error(s, f"{kind} function '{label}' has no forward-mode (JVP) rule, and a "
                                   "differentiated value flows into it",
                                hint=f"forward mode (jvp, jacfwd, hessian, hvp) needs one: give it with "
                                     f"{label}.defjvp(rule), rule(primals, tangents) -> (out, tangent_out) as in "
                                     "jax.custom_jvp; or use reverse mode (grad, vjp)")
        tans = []
        for a in e.args:
            if self.is_active(a):
                tans.append(self.tangent_atom(a))
            elif isinstance(a, ast.Name):
                tans.append(prim_call("zeros_like", [ast.Name(a.id, ast.Load())]))
            else:
                tans.append(ast.Constant(0.0))
        tn = self.tname(name)
        rule = ast.Attribute(value=copy.deepcopy(e.func), attr="jvp_rule", ctx=ast.Load())
        call = ast.Call(func=rule, args=[ast.Tuple(elts=[copy.deepcopy(a) for a in e.args], ctx=ast.Load()),
                                         ast.Tuple(elts=tans, ctx=ast.Load())], keywords=[])
        A.put(call, A.SRC, A.get(e, A.SRC, None))
        tgt = ast.Tuple(elts=[ast.Name(name, ast.Store()), ast.Name(tn, ast.Store())], ctx=ast.Store())
        out.append(ast.copy_location(ast.Assign(targets=[tgt], value=call), s))
        if name in self.written:          # written in place later: a tangent of its own
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tn, ast.Store())],
                                                    value=prim_call("copy", [ast.Name(tn, ast.Load())])), s))

    def tangent_of(self, s, e, name, old, pre):
        """The tangent expression of ``name = e`` (``None``: zero), with statements it needs appended to ``pre``."""
        if isinstance(e, ast.Name):
            if e.id in self.active:
                return ast.Name(self.tname(e.id), ast.Load())
            return None
        if not isinstance(e, ast.Call):
            return None
        args = list(e.args) + [k.value for k in e.keywords]
        if not any(self.is_active(a) for a in args):
            return None
        prim = A.get(e, A.PRIM, None)
        if prim is None:
            return None
        tpl = prim.template
        if tpl is None or tpl.jvp_body is None:
            raise self.nd_error(s, f"'{prim.name}' has no forward-mode (JVP) rule",
                                hint="use reverse mode (grad, vjp) for this function")
        if not tpl.jvp_body:
            return None
        return self.fill(prim, e, name, old, pre, s)

    def tangent_atom(self, arg):
        """The tangent of an active atom (a tuple of tangents for a tuple argument, zero for inactive parts)."""
        if isinstance(arg, ast.Tuple):
            return ast.Tuple(elts=[self.tangent_atom(a) for a in arg.elts], ctx=ast.Load())
        if isinstance(arg, ast.Name) and arg.id in self.active:
            return ast.Name(self.tname(arg.id), ast.Load())
        return ast.Constant(0.0)

    # ------------------------------------------------------------------ JVP lines
    def fill(self, prim, call, name, old, pre, stmt):
        tpl = prim.template
        ba = {}
        for p, a in zip(prim.params, call.args):
            ba[p] = a
        for k in call.keywords:
            ba[k.arg] = k.value
        for p in prim.params:
            if p not in ba:
                dflt = prim.signature.parameters[p].default
                ba[p] = ast.Constant(dflt) if not isinstance(dflt, tuple) else ast.Tuple(
                    elts=[ast.Constant(x) for x in dflt], ctx=ast.Load())
        for p in self.without_rule(prim, ba, forward=True):
            # jvp gives every float argument a tangent; a zero one needs no rule (a hyperparameter passed as an
            # argument), any other is refused when the code runs, at the user's line
            err = self.no_rule_error(prim, p, stmt, "a nonzero tangent flows into it")
            check = prim_call("no_tangent", [self.tangent_atom(ba[p]), ast.Constant(str(err))])
            pre.append(ast.copy_location(ast.Expr(value=check), stmt))
        ba_t = dict(ba)                   # tangents: of the operands as written
        if old is not None:               # primal operands that are the name being rebound: the old value
            ba = {p: _rename(a, name, old) for p, a in ba.items()}
        subst = dict(ba)
        subst[tpl.result] = ast.Name(name, ast.Load())
        temps = []
        line = None
        for ts in tpl.jvp_body:
            tgt = ts.targets[0]
            if isinstance(tgt, ast.Name):
                new = self.tmp("_j")
                val = self.subst(ts.value, subst, ba_t, tpl, prim)
                if expr_maybe_complex(val, self.cplx):
                    self.cplx.add(new)
                temps.append((new, val))
                ref = ast.Name(new, ast.Load())
                if _simplify(copy.deepcopy(val))[1] != "primal":   # a temporary holding a tangent term
                    ref._funcgrad_tangent = True
                subst[tgt.id] = ref
            else:
                line = self.subst(ts.value, subst, ba_t, tpl, prim)
        expr, kind = _simplify(line)
        if kind == "zero":
            return None
        expr = _fold(_materialize(expr))
        if getattr(expr, "_funcgrad_dropped", False) and prim.elementwise and \
                not self.full_shape(expr, ba, ba_t, name):
            expr = prim_call("broadcast_like", [expr, ast.Name(name, ast.Load())])
        used = {n.id for n in ast_walk(expr) if isinstance(n, ast.Name)}
        for new, pexpr in reversed(temps):
            if new in used:
                used |= {n.id for n in ast_walk(pexpr) if isinstance(n, ast.Name)}
        for new, pexpr in temps:
            if new in used:
                pre.append(ast.copy_location(ast.Assign(targets=[ast.Name(new, ast.Store())],
                                                        value=_fold(_materialize(_simplify(pexpr)[0]))), stmt))
        return expr

    def full_shape(self, expr, ba, ba_t, name):
        """Whether the tangent ``expr`` of an elementwise primitive already has the result's shape after terms
        were dropped: it reads the result itself, or every operand that may be an array (the operand or its
        tangent; rank-0 names and numbers broadcast nothing). Then ``broadcast_like`` would only copy."""
        used = {n.id for n in ast_walk(expr) if isinstance(n, ast.Name)}
        if name in used:
            return True
        for p, a in ba_t.items():
            if isinstance(a, ast.Constant) and isinstance(a.value, (int, float, bool)):
                continue
            if not isinstance(a, ast.Name):
                return False
            renamed = ba.get(p)
            if self.ranks.get(a.id) == 0 or a.id in used or self.tname(a.id) in used or (
                    isinstance(renamed, ast.Name) and renamed.id in used):
                continue
            return False
        return True

    def subst(self, e, subst, ba, tpl, prim):
        """A JVP-line expression with the call site's atoms: ``t[p]`` -> ``t_<arg>`` (or zero), operators and
        NumPy calls -> primitive calls."""
        e = copy.deepcopy(e)
        G = tpl.globals
        fwd = self

        def tangent(arg):
            if isinstance(arg, ast.Tuple):
                return ast.Tuple(elts=[tangent(a) for a in arg.elts], ctx=ast.Load())
            if isinstance(arg, ast.Name) and arg.id in fwd.active:
                n = ast.Name(fwd.tname(arg.id), ast.Load())
                n._funcgrad_tangent = True
                return n
            return _zero_node(arg)

        class T(ast.NodeTransformer):
            def visit_Subscript(self_, node):
                if isinstance(node.value, ast.Name) and node.value.id == "t" and isinstance(node.slice, ast.Name):
                    p = node.slice.id
                    if p not in ba:
                        raise TransformError(f"JVP line of {prim.name}: t[{p}] names no parameter")
                    return tangent(ba[p])
                self_.generic_visit(node)
                if isinstance(node.ctx, ast.Load):
                    return prim_call("getitem", [node.value, node.slice])
                return node

            def visit_Name(self_, node):
                if node.id in subst:
                    return copy.deepcopy(subst[node.id])
                return node

            def visit_BinOp(self_, node):
                self_.generic_visit(node)
                op = _OPS.get(type(node.op))
                if op is None:
                    raise TransformError(f"JVP line of {prim.name}: operator {type(node.op).__name__} is not a primitive")
                return prim_call(op, [node.left, node.right])

            def visit_UnaryOp(self_, node):
                self_.generic_visit(node)
                if isinstance(node.op, ast.USub):
                    return prim_call("negative", [node.operand])
                return node

            def visit_Call(self_, node):
                node.args = [self_.visit(a) for a in node.args]
                node.keywords = [ast.keyword(arg=k.arg, value=self_.visit(k.value)) for k in node.keywords]
                f = node.func
                obj = _resolve(f, G)
                p = lookup(obj) if obj is not None else None
                real = p is not None and not any(expr_maybe_complex(a, fwd.cplx) for a in node.args) and \
                    not node.keywords
                if real and p.name in ("conj", "match_complex"):
                    return node.args[0]   # of real values: the value itself (real code is as before complex numbers)
                if real and getattr(p, "real_form", None):
                    p = by_name(p.real_form)
                if p is not None:
                    node.func = _K(p.name)
                    A.put(node, A.PRIM, p)
                    return node
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("K", "np"):
                    return node
                raise TransformError(f"JVP line of {prim.name}: call of {ast.unparse(f)} is not a primitive")

        return fold_int_constants(T().visit(e))


def _zero_node(like):
    z = ast.Name("__zero__", ast.Load())
    z._funcgrad_zero = _Zero(like)
    return z


def _is_zero(n):
    return getattr(n, "_funcgrad_zero", None) is not None


_LINEAR_SUM = {"add", "subtract"}


def _simplify(e):
    """Drop the terms of a JVP expression that an inactive input's zero tangent makes vanish.

    Returns ``(expr, kind)`` with kind "zero" (the whole expression is zero), "tan" (it depends on a
    tangent) or "primal" (no tangent in it). A JVP line is linear in the tangents, so a subexpression
    whose every tangent is zero is zero; a sum drops its zero terms (marking the result, whose shape
    may then be an operand's rather than the broadcast one)."""
    if _is_zero(e):
        return e, "zero"
    if isinstance(e, ast.Name):
        return e, ("tan" if getattr(e, "_funcgrad_tangent", False) else "primal")
    if isinstance(e, ast.Tuple):
        parts = [_simplify(x) for x in e.elts]
        kinds = {k for _, k in parts}
        node = ast.Tuple(elts=[p for p, _ in parts], ctx=ast.Load())
        if kinds == {"zero"}:
            return node, "zero"
        return node, ("tan" if "tan" in kinds or "zero" in kinds else "primal")
    if isinstance(e, ast.Call):
        prim = A.get(e, A.PRIM, None)
        args = [_simplify(a) for a in e.args]
        kws = [(k.arg, _simplify(k.value)) for k in e.keywords]
        kinds = [k for _, k in args] + [k for _, (_, k) in kws]
        e.args = [a for a, _ in args]
        e.keywords = [ast.keyword(arg=n, value=v) for n, (v, _) in kws]
        if prim is not None and prim.name in _LINEAR_SUM and len(args) == 2:
            (a, ka), (b, kb) = args
            if ka == "zero" and kb == "zero":
                return e, "zero"
            if kb == "zero" and ka == "tan":
                a._funcgrad_dropped = True
                return a, "tan"
            if ka == "zero" and kb == "tan":
                r = b if prim.name == "add" else prim_call("negative", [b])
                r._funcgrad_dropped = True
                return r, "tan"
        if "tan" in kinds:
            return e, "tan"
        if "zero" in kinds:
            return e, "zero"
        return e, "primal"
    return e, "primal"


_FOLD = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
         "power": lambda a, b: a ** b}
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.Gt: lambda a, b: a > b, ast.LtE: lambda a, b: a <= b, ast.GtE: lambda a, b: a >= b}


def _num(e):
    return isinstance(e, ast.Constant) and type(e.value) in (int, float, bool)


def _fold(e):
    """Constant arithmetic of a JVP line folded where the call site made it constant (``x ** (2 - 1 + (2 == 0))``
    is ``x``): operations on numbers, ``x ** 1`` and ``x * 1``."""
    dropped = getattr(e, "_funcgrad_dropped", False)

    class F(ast.NodeTransformer):
        def visit_Compare(self, node):
            self.generic_visit(node)
            if len(node.ops) == 1 and type(node.ops[0]) in _CMP and _num(node.left) and _num(node.comparators[0]):
                return ast.Constant(_CMP[type(node.ops[0])](node.left.value, node.comparators[0].value))
            return node

        def visit_Call(self, node):
            self.generic_visit(node)
            prim = A.get(node, A.PRIM, None)
            if prim is None or node.keywords or len(node.args) != 2:
                return node
            a, b = node.args
            fn = _FOLD.get(prim.name)
            if fn is not None and _num(a) and _num(b):
                try:
                    v = fn(a.value, b.value)
                except (ArithmeticError, ValueError):
                    return node
                return ast.Constant(int(v) if type(v) is bool else v)
            if prim.name == "power" and _num(b) and b.value == 1 and type(b.value) is not bool:
                return a
            if prim.name == "multiply" and _num(b) and b.value == 1 and type(b.value) is int:
                return a
            if prim.name == "multiply" and _num(a) and a.value == 1 and type(a.value) is int:
                return b
            return node

    out = F().visit(e)
    if dropped:
        out._funcgrad_dropped = True
    return out


def _materialize(e):
    """Zero tangents left inside an expression that depends on others (``np.where(c, t_x, 0)``,
    a tuple for ``concatenate``) become zeros shaped like their primal."""
    class M(ast.NodeTransformer):
        def visit_Name(self, node):
            z = getattr(node, "_funcgrad_zero", None)
            if z is not None:
                if isinstance(z.like, ast.Constant) and z.like.value is None:
                    return ast.Constant(None)   # an absent optional input (bias=None) stays absent
                return prim_call("zeros_like", [copy.deepcopy(z.like)])
            return node
    dropped = getattr(e, "_funcgrad_dropped", False)
    out = M().visit(e)
    if dropped:
        out._funcgrad_dropped = True
    return out


def _rename(node, name, new):
    node = copy.deepcopy(node)
    for n in ast_walk(node):
        if isinstance(n, ast.Name) and n.id == name:
            n.id = new
    return node


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


def _written(stmts):
    """Names whose arrays may be written in place: written by ``x[i] = v``, or sharing memory with such a name
    (a view or a copy of it, or it of them: ``r = A[i]; r[0] = v`` writes ``A``'s memory, and the tangent of
    ``A`` must not be another array's either)."""
    nodes = list(ast_walk(ast.Module(body=list(stmts), type_ignores=[])))
    written = {s.targets[0].value.id for s in nodes
               if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)
               and isinstance(s.targets[0].value, ast.Name)}
    if not written:
        return written
    parent: dict = {}

    def find(n):
        while parent.get(n, n) != n:
            n = parent[n]
        return n
    for s in nodes:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            src = may_share(s.value)
            if src is not None:
                parent.setdefault(src, src)
                parent[find(s.targets[0].id)] = find(src)
    roots = {find(w) for w in written}
    return written | {n for n in list(parent) if find(n) in roots}


def forward(fdef: ast.FunctionDef, diff_params, output_atoms, src_lookup, param_kinds=None,
            param_ranks=None) -> Tangent:
    """Primal and tangents of an ANF function (see the module docstring)."""
    params = [a.arg for a in fdef.args.args]
    all_names = names_in(fdef) | set(params)
    F = Forward(src_lookup, Namer(all_names))
    for n in list(params) + sorted(all_names - set(params) - RESERVED):   # tangent names, in a set order
        F.tname(n)
    F.active = set(diff_params)
    body = copy.deepcopy(list(fdef.body))
    F.cplx = maybe_complex(body, dict(param_kinds or {}), [a.arg for a in fdef.args.args])
    F.cplx |= {F.tname(n) for n in F.cplx}
    F.ranks = infer_ranks(body, dict(param_ranks or {}))
    F.mark(body)
    F.written = _written(body)
    out = []
    for p in diff_params:            # a parameter written in place: its tangent is the caller's; copy it first
        if p in F.written:
            out.append(ast.Assign(targets=[ast.Name(F.tname(p), ast.Store())],
                                  value=prim_call("copy", [ast.Name(F.tname(p), ast.Load())])))
    out.extend(F.block(body))
    tangents = []
    for o in output_atoms:
        if isinstance(o, ast.Name) and o.id in F.active:
            tangents.append(ast.Name(F.tname(o.id), ast.Load()))
        elif o is None:
            tangents.append(ast.Constant(None))
        else:
            tangents.append(prim_call("zeros_like", [copy.deepcopy(o)]))
    return Tangent(body=out, tangents=tangents, params=[F.tname(p) for p in diff_params])
