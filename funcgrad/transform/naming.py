"""Naming: every name a pass generates is chosen against every name already in use.

The reverse and forward passes extend code whose names are the user's (after
normalize) and the earlier passes' temporaries. A :class:`Namer` starts from
all of them (:func:`names_in`), plus the names generated code reads without
defining (``K``, ``np``, builtins), and guarantees:

* ``fresh(base)`` returns ``base`` (or ``base_1``, ``base_2``, ...) and
  ``numbered(base)`` returns ``base<k>``, each a name not in use, which is
  then in use: no generated name equals a user's name or another generated
  name;
* ``derived(kind, name, preferred)`` returns the one name of ``kind`` for
  ``name`` (the cotangent of ``x``, its tape), the same on every call:
  ``preferred`` when that is free, else a fresh variant of it. The readable
  convention (``d_x`` for ``x``, ``d_t1`` for ``_t1``) is what the code shows
  unless two names would both get it: the user's ``t1`` and the temporary
  ``_t1`` get ``d_t1`` and ``d_t1_1``, never one cotangent for both.

``checkpoint()``/``restore()`` rewind the numbered temporaries only (a loop's
adjoint is built more than once until its cotangent state settles); derived
names are permanent.
"""
from __future__ import annotations

import ast
import builtins
from .astutil import ast_walk

RESERVED = frozenset(["K", "np", "math"]) | frozenset(dir(builtins))


def names_in(*nodes) -> set:
    """Every identifier bound or read in the given AST nodes (or lists of them)."""
    out = set()
    for node in nodes:
        for top in (node if isinstance(node, list) else [node]):
            for n in ast_walk(top):
                if isinstance(n, ast.Name):
                    out.add(n.id)
                elif isinstance(n, ast.arg):
                    out.add(n.arg)
                elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                    out.add(n.name)
    return out


class Namer:
    def __init__(self, taken=()):
        self.taken = set(taken) | RESERVED
        self.count = 0
        self._memo: dict = {}
        self._log: list = []     # numbered names, in issue order (for restore)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name = f"{base}_{i}"
            i += 1
        self.taken.add(name)
        return name

    def numbered(self, base: str) -> str:
        while True:
            self.count += 1
            name = f"{base}{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                self._log.append(name)
                return name

    def derived(self, kind: str, name: str, preferred: str) -> str:
        key = (kind, name)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.fresh(preferred)
        return got

    def checkpoint(self):
        return self.count, len(self._log)

    def restore(self, cp):
        self.count, n = cp
        for name in self._log[n:]:
            self.taken.discard(name)
        del self._log[n:]
