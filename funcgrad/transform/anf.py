"""ANF: one primitive call per assignment, single assignment in straight-line code.

Input: a normalized function (see normalize). Output guarantees, for every
simple statement ``target = rhs``:

* ``rhs`` is an atom (a name or a constant), one primitive call
  ``K.<prim>(atoms...)`` (static arguments such as axes may be constant
  tuples; index arguments of ``getitem`` are index expressions over atoms), a
  non-differentiable call or metadata read (``np.zeros(n)``, ``x.shape[0]``),
  or a comparison/boolean expression over atoms;
* nested sub-expressions are hoisted into fresh temporaries ``_t1, _t2, ...``;
* in straight-line code every name is assigned once: a rebinding gets a new
  version (``x``, ``x_1``, ...) and later uses read the newest version.
  Names assigned inside loops keep one name (the reverse pass tapes them);
* ``b = a`` where neither is assigned in a loop or branch binds no new name:
  ``b`` reads ``a`` (Python's semantics: they are one array, so a write
  through either is seen through both).
"""
from __future__ import annotations

import ast
import copy
from . import annotations as A
from .astutil import ast_walk, statements_under

_ATOMS = (ast.Name, ast.Constant)


class ANF:
    def __init__(self, used_names):
        self.used = set(used_names)
        self.count = 0
        self.version: dict = {}     # user name -> current SSA name
        self.versions: dict = {}    # every SSA name made -> the name it is a version of (messages)
        self.loop_depth = 0

    def tmp(self):
        while True:
            self.count += 1
            n = f"_t{self.count}"
            if n not in self.used:
                self.used.add(n)
                return n

    def fresh_version(self, name):
        i = 1
        while f"{name}_{i}" in self.used:
            i += 1
        n = f"{name}_{i}"
        self.used.add(n)
        self.versions[n] = name
        return n

    # -------------------------------------------------------------- expressions
    def rename(self, node):
        """Rewrite loads of names to their current SSA version."""
        if isinstance(node, ast.Name):
            return ast.copy_location(ast.Name(self.version.get(node.id, node.id), ast.Load()), node)
        for field, val in ast.iter_fields(node):
            if isinstance(val, list):
                setattr(node, field, [self.rename(v) if isinstance(v, ast.AST) else v for v in val])
            elif isinstance(val, ast.AST):
                setattr(node, field, self.rename(val))
        return node

    def atom(self, e, out, src):
        """Make ``e`` an atom, hoisting it into a temporary when it is an operation."""
        e = self.flat(e, out, src)
        if isinstance(e, _ATOMS) or _is_static(e):
            return e
        t = self.tmp()
        out.append(_assign(t, e, e if hasattr(e, "lineno") else src))
        return ast.Name(t, ast.Load())

    def flat(self, e, out, src):
        """Flatten the operands of ``e`` (which itself stays one operation)."""
        if isinstance(e, _ATOMS) or _is_static(e):
            return self.rename(copy.copy(e)) if isinstance(e, ast.Name) else e
        if isinstance(e, ast.Call):
            prim = A.get(e, A.PRIM, None)
            new = copy.copy(e)
            if prim is not None and prim.name == "getitem":
                new.args = [self.atom(e.args[0], out, src), self.index(e.args[1], out, src)]
            else:
                new.args = [self.arg(a, out, src) for a in e.args]
            new.keywords = [ast.keyword(arg=k.arg, value=self.arg(k.value, out, src)) for k in e.keywords]
            if isinstance(e.func, ast.Attribute) and not _is_name_chain(e.func.value):
                # a method of a computed value (np.tanh(x).astype(...)): the receiver is an atom too, so the
                # passes see what flows into the call
                new.func = ast.Attribute(value=self.atom(e.func.value, out, src), attr=e.func.attr, ctx=ast.Load())
            elif not (isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name)):
                new.func = self.rename(copy.deepcopy(e.func)) if not isinstance(e.func, ast.Name) else e.func
            elif isinstance(e.func.value, ast.Name) and e.func.value.id not in ("K", "np", "math"):
                new.func = ast.Attribute(value=self.atom(e.func.value, out, src), attr=e.func.attr, ctx=ast.Load())
            return new
        if isinstance(e, ast.Attribute):
            return ast.Attribute(value=self.atom(e.value, out, src), attr=e.attr, ctx=ast.Load())
        if isinstance(e, ast.Subscript):  # metadata: x.shape[0]
            return ast.Subscript(value=self.flat(e.value, out, src), slice=self.index(e.slice, out, src),
                                 ctx=ast.Load())
        if isinstance(e, ast.Compare):
            return ast.Compare(left=self.atom(e.left, out, src), ops=e.ops,
                               comparators=[self.atom(c, out, src) for c in e.comparators])
        if isinstance(e, ast.BoolOp):
            return ast.BoolOp(op=e.op, values=[self.atom(v, out, src) for v in e.values])
        if isinstance(e, ast.UnaryOp):
            return ast.UnaryOp(op=e.op, operand=self.atom(e.operand, out, src))
        if isinstance(e, ast.BinOp):  # non-differentiable integer ops (//, %)
            return ast.BinOp(left=self.atom(e.left, out, src), op=e.op, right=self.atom(e.right, out, src))
        if isinstance(e, ast.Tuple):
            return ast.Tuple(elts=[self.arg(x, out, src) for x in e.elts], ctx=ast.Load())
        return self.rename(copy.deepcopy(e))

    def arg(self, a, out, src):
        if isinstance(a, ast.Starred):   # f(*x.shape): the tuple is the atom
            return ast.Starred(value=self.atom(a.value, out, src), ctx=ast.Load())
        if isinstance(a, ast.Tuple):
            return ast.Tuple(elts=[self.arg(x, out, src) for x in a.elts], ctx=ast.Load())
        if _is_static(a):
            return a
        return self.atom(a, out, src)

    def index(self, idx, out, src):
        if isinstance(idx, ast.Tuple):
            return ast.Tuple(elts=[self.index(x, out, src) for x in idx.elts], ctx=ast.Load())
        if isinstance(idx, ast.Slice):
            return ast.Slice(*(None if p is None else self.atom(p, out, src) for p in (idx.lower, idx.upper, idx.step)))
        if isinstance(idx, ast.Constant):
            return idx
        return self.atom(idx, out, src)

    # -------------------------------------------------------------- statements
    def block(self, stmts):
        out = []
        for s in stmts:
            start = len(out)
            self.stmt(s, out)
            inherit_origin(out[start:], s)
        return out

    def stmt(self, s, out):
        if isinstance(s, ast.Assign):
            (t,) = s.targets
            if isinstance(t, ast.Name):
                rhs = self.flat(s.value, out, s)
                if isinstance(rhs, ast.Name) and t.id not in self.cf_names and rhs.id not in self.cf_names:
                    # b = a with both bound once: b IS a (the same array, as in Python), so b reads a and an
                    # in-place write through either is a write to one name the passes see
                    self.version[t.id] = rhs.id
                    return
                if A.get(s.value, A.SRC, None):
                    A.put(rhs, A.SRC, A.get(s.value, A.SRC))
                if t.id in self.cf_names:  # assigned inside a loop or branch: one name throughout
                    name = t.id
                elif t.id in self.version or t.id in self.used_params:
                    name = self.fresh_version(t.id)
                else:
                    name = t.id
                self.used.add(name)
                out.append(_assign(name, rhs, s))
                if A.get(s, A.AUGMENTED, False):
                    A.put(out[-1], A.AUGMENTED, True)
                self.version[t.id] = name
                return
            if isinstance(t, ast.Subscript):
                val = self.atom(s.value, out, s)
                base = self.rename(copy.copy(t.value))
                idx = self.index(t.slice, out, s)
                a = ast.Assign(targets=[ast.Subscript(value=base, slice=idx, ctx=ast.Store())], value=val)
                out.append(ast.copy_location(a, s))
                return
        if isinstance(s, (ast.For, ast.While, ast.If)):
            return self.control(s, out)
        if isinstance(s, (ast.Expr, ast.Assert)):  # print(...), assert: read the current versions of names
            out.append(ast.copy_location(self.rename(copy.deepcopy(s)), s))
            return
        out.append(s)

    def control(self, s, out):
        """Compound statements: tests become atoms computed before (and, for while, at the end of the body)."""
        if isinstance(s, ast.If):
            test = self.atom(s.test, out, s)
            self.loop_depth += 1
            body, orelse = self.block(s.body), self.block(s.orelse)
            self.loop_depth -= 1
            out.append(ast.copy_location(ast.If(test=test, body=body or [ast.Pass()], orelse=orelse), s))
            return
        if isinstance(s, ast.While):
            pre = []
            test = self.atom(s.test, pre, s)
            if not isinstance(test, ast.Name):  # a constant test: still a name the loop can re-read
                t = self.tmp()
                pre.append(_assign(t, test, s))
                test = ast.Name(t, ast.Load())
            out.extend(pre)
            self.loop_depth += 1
            body = self.block(s.body)
            body.extend(copy.deepcopy(pre))  # re-evaluate the test at the end of every iteration
            self.loop_depth -= 1
            new = ast.While(test=test, body=body, orelse=[])
            if A.get(s, A.CHECKPOINT, None) is not None:
                A.put(new, A.CHECKPOINT, A.get(s, A.CHECKPOINT))
            out.append(ast.copy_location(new, s))
            return
        if isinstance(s, ast.For):
            it = s.iter
            args = [self.atom(a, out, s) for a in it.args]
            self.loop_depth += 1
            body = self.block(s.body)
            self.loop_depth -= 1
            new = ast.For(target=s.target, iter=ast.Call(func=it.func, args=args, keywords=[]), body=body or [ast.Pass()],
                          orelse=[])
            if A.get(s, A.CHECKPOINT, None) is not None:
                A.put(new, A.CHECKPOINT, A.get(s, A.CHECKPOINT))
            out.append(ast.copy_location(new, s))
            return
        out.append(s)


def cf_assigned(stmts):
    """Names assigned inside any loop or branch (they keep one name: no SSA versions)."""
    names = set()

    def walk(ss, inside):
        for s in ss:
            if isinstance(s, (ast.For, ast.While, ast.If)):
                if isinstance(s, ast.For):
                    names.add(s.target.id)
                walk(s.body, True)
                walk(s.orelse, True)
            elif inside and isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
                names.add(s.targets[0].id)

    walk(stmts, False)
    return names


def inherit_origin(new_stmts, origin):
    """Give statements made from ``origin`` its user file and line (where they have none of their own)."""
    f = A.get(origin, A.FILE, None)
    line = getattr(origin, "lineno", None)
    for st in new_stmts:
        for n in statements_under(st):
            if f is not None and not A.has(n, A.FILE):
                A.put(n, A.FILE, f)
            if line is not None and getattr(n, "lineno", None) is None:
                n.lineno = line


def _is_name_chain(e):
    """``a``, ``a.b``, ``a.b.c``: a name or attributes of one (a module path, an object's method)."""
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name)


def _is_static(e):
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.Tuple):
        return all(_is_static(x) for x in e.elts)
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "np":
        return True
    if isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant):
        return True
    return False


def _assign(name, value, src):
    a = ast.Assign(targets=[ast.Name(name, ast.Store())], value=value)
    A.put(a, A.SRC, A.get(value, A.SRC, None) or A.get(src, A.SRC, None))
    return ast.copy_location(a, src)


def anf(fdef: ast.FunctionDef, params) -> ast.FunctionDef:
    """Return a copy of ``fdef`` in A-normal form (see the module docstring)."""
    used = {n.id for n in ast_walk(fdef) if isinstance(n, ast.Name)} | set(params)
    a = ANF(used)
    a.used_params = set(params)
    a.cf_names = cf_assigned(fdef.body)
    body = a.block(fdef.body)
    new = ast.FunctionDef(name=fdef.name, args=fdef.args, body=body, decorator_list=[], returns=None)
    new._anf_version = dict(a.version)
    new._anf_versions = dict(a.versions)
    return ast.copy_location(new, fdef)
