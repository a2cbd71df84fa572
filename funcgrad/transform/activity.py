"""Activity analysis: which values depend on the differentiated inputs through differentiable operations.

Guarantees: after ``mark(body)``, ``active`` holds every name whose value
depends on a differentiated parameter through operations that have a
derivative (activity is monotone: a name active anywhere is active
everywhere; loop bodies are iterated to a fixpoint). A call with no
derivative rule that receives an active value raises
:class:`funcgrad.errors.NoDerivativeError` at the user's line; calls whose
arguments are all inactive need no rule at all.
"""
from __future__ import annotations

import ast
import linecache

import numpy as np

from . import annotations as A
from ..errors import NoDerivativeError
from ..ops.registry import definitions_calling, is_nondiff, rules_calling
from .public_names import public_name

# numpy functions whose result is piecewise constant in their inputs: zero derivative


class Activity:
    """Mixin of the reverse pass: ``self.active`` and the checks that keep it honest."""

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
            prim = A.get(e, A.PRIM, None)
            args = list(e.args) + [k.value for k in e.keywords]
            if isinstance(e.func, ast.Attribute):   # a method's receiver flows into the call too
                args.append(e.func.value)
            act = any(self.is_active(a) for a in args)
            if prim is not None:
                if prim.template is None and act:
                    raise self.no_second_derivative(prim, stmt)
                if prim.name == "stop_gradient":
                    return False
                if prim.template is not None and not prim.template.diff_params:
                    return False
                return act
            if A.get(e, A.CUSTOM, None) is not None:
                return act
            nd = A.get(e, A.NONDIFF, None)
            if act and nd is not None and not is_nondiff(nd):
                name = public_name(nd)
                raise self.nd_error(stmt, f"{name} has no derivative rule but a differentiated value flows into it",
                                    hint=f"give it one with funcgrad.custom_vjp: f = funcgrad.custom_vjp({name}); "
                                         "f.defvjp(fwd, bwd), and call f here")
            if act and nd is None and isinstance(e.func, ast.Attribute) and e.func.attr == "astype":
                raise self.nd_error(stmt, "'.astype()' of a differentiated value is not supported",
                                    hint="keep the dtype of differentiated values (cast the inputs instead)")
            return False
        return False

    def without_rule(self, prim, bound, forward=False):
        """The parameters of ``prim`` a differentiated value flows into (``bound``: param -> atom) that its
        template has no rule for: no ``d[p]`` line (or no ``t[p]`` in the JVP line), and no ``d[p] = None``
        declaring that none is needed. A template with no ``d[...]`` line declares a zero derivative."""
        tpl = prim.template
        if not tpl.diff_params:
            return []
        return [p for p in prim.params if bound.get(p) is not None and self.is_active(bound[p])
                and tpl.undeclared(p, forward)]

    def no_rule_error(self, prim, p, stmt, what="a differentiated value flows into it"):
        return self.nd_error(stmt, f"'{display_name(prim)}' has no derivative with respect to its argument "
                                   f"'{p}', and {what}",
                             hint=f"keep '{p}' independent of the differentiated inputs "
                                  "(funcgrad.stop_gradient), or give the call a rule with funcgrad.custom_vjp")

    def no_second_derivative(self, prim, stmt):
        """The refusal of a differentiated value flowing into a primitive with no rule. Users never call such a
        primitive: it is a helper kernel inside another primitive's derivative rule, reached when funcgrad
        differentiates code it generated (a second derivative). The refusal names the functions the user called
        whose rules use it (``scipy.linalg.solve_banded``), never the helper."""
        users = users_calling(prim, _line_text(*self._where(stmt)))
        if not users:
            return self.nd_error(stmt, f"'{display_name(prim)}' has no registered derivative rule")
        what = " / ".join(users)
        return self.nd_error(
            stmt, f"{what}: second derivatives are not supported (its derivative has no derivative of its own, "
                  "which hessian, hvp, grad of grad, jvp of jvp, an order-2 check_grads or a gradient taken inside a "
                  "differentiated function need)",
            hint=f"differentiate {users[0]} once only, or give the computation a rule with funcgrad.custom_vjp whose "
                 "backward pass is itself differentiable")

    def _where(self, stmt):
        """The user's ``(file, line)`` of a statement."""
        where = A.get(stmt.value, A.SRC, None) or A.get(stmt, A.SRC, None)
        if not where and A.get(stmt, A.FILE, None) and getattr(stmt, "lineno", None):
            where = (A.get(stmt, A.FILE), stmt.lineno)   # a helper's line: in the helper's file
        return where if where else self.src_lookup(stmt)

    def nd_error(self, stmt, msg, hint="give it a rule with funcgrad.custom_vjp, or register a primitive"):
        fn, line = self._where(stmt)
        return NoDerivativeError(f"{msg}\n  hint: {hint}", fn, line, _line_text(fn, line))


def display_name(prim):
    """A primitive as the user calls it: ``np.clip``, ``scipy.stats.poisson.logpmf``, ``funcgrad.nn.relu``;
    a rule declared without a key of its own (``defvjp(None)``) is named by the keys aliased to it."""
    for key in (prim.key, *prim.extra_keys):
        if key is None or (getattr(key, "__module__", None) or "").startswith("funcgrad.ops"):
            continue
        name = public_name(key)
        return "np." + name[len("numpy."):] if name.startswith("numpy.") else name
    return prim.name


def users_calling(prim, text=None):
    """The functions users call whose derivative rules use the helper primitive ``prim`` (see _user_names); of
    those, the ones the user's line ``text`` calls, when it names any."""
    users = _user_names(prim, set())
    called = [u for u in users if text and u.rsplit(".", 1)[-1] + "(" in text.replace(" ", "")]
    return called or users


def _user_names(prim, seen):
    """The functions users call whose derivative rules use the helper primitive ``prim``: the rule's own key
    (``np.linalg.norm``), the functions defined over it (``scipy.linalg.solve_banded``), and for a rule that is
    itself a helper inside another rule, that rule's users."""
    out = []
    for rule in rules_calling(prim):
        if rule.name in seen:
            continue
        seen.add(rule.name)
        names = [display_name(rule)] if display_name(rule) != rule.name else []
        names += [_np_name(public_name(k)) for k in definitions_calling(rule)]
        if not names:
            names = _user_names(rule, seen)
        if not names and callable(getattr(np, rule.name, None)):   # a call form normalize rewrites (np.einsum)
            names = [f"np.{rule.name}"]
        out += [n for n in names if n not in out]
    return out


def _np_name(name):
    return "np." + name[len("numpy."):] if name.startswith("numpy.") else name


def _line_text(fn, line):
    return linecache.getline(fn, line) if fn and line else None
