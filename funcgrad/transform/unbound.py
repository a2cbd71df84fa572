"""Unbound: a name read where some path has not bound it raises Python's UnboundLocalError, in every mode.

A name first bound inside a loop over a runtime range (or in one branch) and read after the loop (or the branch)
is unbound when the loop ran no trip (or the other branch was taken): Python raises ``UnboundLocalError``
there. Run as Python, the generated code raised it under a name of its own; compiled by Numba, it read a zero
(Numba gives a variable with no value a zero), a silent wrong value. This pass gives each such name a flag
(``_def_y``), set where the name is bound, and tests it before each read no path before it surely binds:

    _def_y = False              # at the top
    for i in range(n):
        y = x * i
        _def_y = True
    if not _def_y:
        raise UnboundLocalError("cannot access local variable 'y' where it is not associated with a value")
    r = y * 2.0

Reads inside a loop of a value an earlier iteration bound (``if i > 0: s = s + y``, ``y`` bound below) are
tested too: the flag is set by then. Nothing is added where every path binds the name first (the common case).
"""
from __future__ import annotations

import ast

from . import annotations as A
from ..kernels.base import INTERPRETED
from .astutil import ast_walk, clone
from .aliases import user_words

__all__ = ["guard_unbound", "never_bound_reads"]


def _assigned(stmts):
    out = set()
    for s in stmts:
        for n in ast_walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
    return out


def _reads(node):
    return [n.id for n in ast_walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def _stored(s):
    """Names the simple statement ``s`` binds (its targets, and ``:=`` inside it)."""
    return list(dict.fromkeys(n.id for n in ast_walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)))


class _Guard:
    def __init__(self, local, origins, flag_name):
        self.local = local          # names the function binds (others are globals, K, np: never unbound)
        self.origins = origins
        self.flag_name = flag_name
        self.flags: dict = {}       # name -> its flag

    def flag(self, name):
        if name not in self.flags:
            self.flags[name] = self.flag_name(name)
        return self.flags[name]

    def test(self, names, at):
        out = []
        for n in dict.fromkeys(names):
            words, ident = user_words(n, self.origins)
            if ident:
                msg = f"cannot access local variable '{ident}' where it is not associated with a value (it is " \
                      "bound only inside a loop that ran no trip or a branch that was not taken)"
            else:
                msg = "a value is read here that is bound only inside a loop that ran no trip or a branch that " \
                      "was not taken"
            exc = ast.Call(func=ast.Name("UnboundLocalError", ast.Load()), args=[ast.Constant(msg)], keywords=[])
            st = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=ast.Name(self.flag(n), ast.Load())),
                        body=[ast.Raise(exc=exc, cause=None)], orelse=[])
            for node in ast_walk(st):
                ast.copy_location(node, at)
                if isinstance(node, ast.stmt) and A.has(at, A.FILE):   # the file of the statement reading it
                    A.put(node, A.FILE, A.get(at, A.FILE))
            out.append(st)
        return out

    def block(self, stmts, bound):
        """(new statements, names surely bound after them) given ``bound`` before."""
        out = []
        bound = set(bound)
        for s in stmts:
            if isinstance(s, ast.If) and isinstance(s.test, ast.Name) and s.test.id == INTERPRETED:
                # code only Python runs (a list's empty buffer, lists.py): Numba drops it and reads the name
                # unbound on purpose (no rows of it are read then); taken as binding what it binds
                bound |= _assigned(s.body)
                out.append(s)
            elif isinstance(s, ast.If):
                out += self.test([n for n in _reads(s.test) if n in self.local and n not in bound], s)
                s.body, b1 = self.block(s.body, bound)
                s.orelse, b2 = self.block(s.orelse, bound)
                bound |= b1 & b2
                out.append(s)
            elif isinstance(s, (ast.For, ast.While)):
                head = s.iter if isinstance(s, ast.For) else s.test
                out += self.test([n for n in _reads(head) if n in self.local and n not in bound], s)
                inner = bound | (_assigned([s.target]) if isinstance(s, ast.For) else set())
                s.body, _ = self.block(s.body, inner)
                if isinstance(s, ast.For):   # the loop variable is bound in the body: its flag too
                    s.body[:0] = self.sets(_assigned([s.target]), s)
                s.orelse, _ = self.block(s.orelse, bound)
                out.append(s)   # (a loop may run no trip: what it binds is not surely bound after it)
            else:
                out += self.test([n for n in _reads(s) if n in self.local and n not in bound], s)
                out.append(s)
                stored = _stored(s)
                out += self.sets(stored, s)
                bound |= set(stored)
        return out, bound

    def sets(self, names, at):
        """``_def_n = True`` after a binding of a name whose reads are tested (flags are made as needed: a
        second pass fills in bindings seen before the first test)."""
        return [ast.copy_location(ast.Assign(targets=[ast.Name(self.flags[n], ast.Store())],
                                             value=ast.Constant(True)), at) for n in names if n in self.flags]


def guard_unbound(fdef, params, origins, fresh):
    """Add UnboundLocalError tests to ``fdef`` (normalized code) in place; ``fresh(base)``: a new name."""
    local = _assigned(fdef.body) - set(params)
    if not local:
        return
    # first pass: which names need flags (their tests decide); the bodies are rebuilt from the originals
    probe = _Guard(local, origins, lambda n: n)
    probe.block(clone(list(fdef.body)), set(params))
    if not probe.flags:
        return
    g = _Guard(local, origins, lambda n: fresh(f"_def_{n}"))
    for n in probe.flags:
        g.flag(n)
    body, _ = g.block(fdef.body, set(params))
    init = [ast.copy_location(ast.Assign(targets=[ast.Name(f, ast.Store())], value=ast.Constant(False)),
                              fdef.body[0]) for f in g.flags.values()]
    fdef.body = init + body


def never_bound_reads(stmts, names):
    """(name, statement) of the first read of each of ``names`` that no statement of ``stmts`` binds."""
    bound = _assigned(stmts)
    seen = {}
    for st in stmts:
        for s in ast_walk(st):
            if isinstance(s, ast.stmt) and not isinstance(s, (ast.If, ast.For, ast.While)):
                for n in _reads(s):
                    if n in names and n not in bound and n not in seen:
                        seen[n] = s
            elif isinstance(s, (ast.If, ast.While)):
                for n in _reads(s.test):
                    if n in names and n not in bound and n not in seen:
                        seen[n] = s
    return list(seen.items())
