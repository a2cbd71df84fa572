"""Shrink a failing program by editing its source (delta debugging over the AST).

``reduce_source(src, still_fails)`` greedily applies the first edit that keeps
``still_fails(new_src)`` true, and starts again, until no edit helps or the
budget runs out. Edits, biggest first:

* delete a statement (a function's body keeps a ``return``);
* replace an ``if``/``for``/``while`` by its body;
* replace an expression by one of its operands (``a + b`` -> ``a``, ``f(a)`` -> ``a``,
  ``a if c else b`` -> ``a``, ``a[i]`` -> ``a``).

An edit that makes the program invalid (plain Python raises, a shape changes the
value's type) is simply rejected by ``still_fails``: the checker calls such
programs INVALID. The function's signature is never edited, so the same
arguments still apply.
"""
from __future__ import annotations

import ast
import copy
import time

_BODY_FIELDS = ("body", "orelse")


def _stmt_lists(tree):
    """(owner node, field, list) for every statement list in the tree, in walk order."""
    out = []
    for node in ast.walk(tree):
        for f in _BODY_FIELDS:
            lst = getattr(node, f, None)
            if isinstance(lst, list) and lst and isinstance(lst[0], ast.stmt):
                out.append((node, f, lst))
    return out


def _expr_edits(node):
    """Sub-expressions that may replace ``node``."""
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.Call):
        return [a for a in node.args if not isinstance(a, ast.Starred)]
    if isinstance(node, ast.Subscript):
        return [node.value]
    if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Call, ast.BinOp, ast.Subscript)):
        return [node.value]
    return []


def _candidates(src):
    """Edited sources, biggest edits first (generated lazily)."""
    tree = ast.parse(src)
    n_lists = len(_stmt_lists(tree))
    # 1. delete one statement (last ones first: later code depends on earlier code)
    for li in range(n_lists):
        t = copy.deepcopy(tree)
        node, f, lst = _stmt_lists(t)[li]
        for k in range(len(lst) - 1, -1, -1):
            t2 = copy.deepcopy(t)
            node2, f2, lst2 = _stmt_lists(t2)[li]
            st = lst2[k]
            if isinstance(st, ast.Return) and isinstance(node2, ast.FunctionDef) and f2 == "body":
                continue
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                continue
            del lst2[k]
            if not lst2 and f2 == "body":
                lst2.append(ast.Pass())
            yield t2
    # 2. replace a compound statement by its body
    for li in range(n_lists):
        lst = _stmt_lists(tree)[li][2]
        for k in range(len(lst)):
            if isinstance(lst[k], (ast.If, ast.For, ast.While)):
                for fld in ("body", "orelse"):
                    if not getattr(lst[k], fld, None):
                        continue
                    t2 = copy.deepcopy(tree)
                    lst2 = _stmt_lists(t2)[li][2]
                    lst2[k:k + 1] = getattr(lst2[k], fld)
                    yield t2
    # 3. replace an expression by a sub-expression
    n_nodes = sum(1 for _ in ast.walk(tree))
    for i in range(n_nodes):
        nodes = list(ast.walk(tree))
        if i >= len(nodes) or not isinstance(nodes[i], ast.expr):
            continue
        subs = _expr_edits(nodes[i])
        for j in range(len(subs)):
            t2 = copy.deepcopy(tree)
            target = list(ast.walk(t2))[i]
            repl = _expr_edits(target)[j]
            if not _replace(t2, target, repl):
                continue
            yield t2


def _replace(tree, old, new):
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return True
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if v is old:
                        value[k] = new
                        return True
    return False


def reduce_source(src, still_fails, max_tries=300, max_seconds=600.0, log=None):
    """The smallest edit of ``src`` found for which ``still_fails`` stays true."""
    best = src
    tries = 0
    t0 = time.monotonic()
    seen = {src}
    progress = True
    while progress:
        progress = False
        for t in _candidates(best):
            if tries >= max_tries or time.monotonic() - t0 > max_seconds:
                return best
            try:
                cand = ast.unparse(ast.fix_missing_locations(t)) + "\n"
            except Exception:
                continue
            if cand in seen or len(cand) >= len(best) + 1 and cand.count("\n") >= best.count("\n"):
                continue
            seen.add(cand)
            tries += 1
            if still_fails(cand):
                best = cand
                progress = True
                if log:
                    log(f"  reduced to {best.count(chr(10))} lines ({tries} tries)")
                break
    return best
