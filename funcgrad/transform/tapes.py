"""Tape planning: which overwritten values the adjoint reads, and how they are saved and restored.

Guarantees: ``save_inplace`` saves the elements an in-place write overwrites;
``_needed`` names every value the adjoint reads (shape-only reads excluded);
names assigned more than once that the adjoint reads are pushed on a tape
after every assignment (``_tape_pushes``; float, integer and bool scalars of top-level range
loops on arrays preallocated by trip count, ``_array_tape_pushes``; the branches of ``checkpoint_loops``' choice
between two copies of a loop count as top level: it runs once), and the
restore markers the reverse pass leaves become reads of the tape at the right
position (``_expand_markers``).
"""
from __future__ import annotations

import ast
import copy

from . import annotations as A
from .astutil import kernel as _K
from .astutil import ast_walk
from .anf import inherit_origin

def tape_of(namer, name, preferred=None):
    """The tape of ``name`` (``_tape_<name>``), chosen against the names in use."""
    return namer.derived("tape", name, preferred or f"_tape_{name}")


def pos_of(namer, name):
    """The write position in the preallocated tape of ``name`` (``_pos_<name>``)."""
    return namer.derived("pos", name, f"_pos_{name}")


def ptr_of(namer, name):
    """The adjoint sweep's read position in the tape of ``name`` (``_p_<name>``)."""
    return namer.derived("ptr", name, f"_p_{name}")


def _marker(name):
    """Where the value ``name`` had before this assignment is restored (filled in once tapes are known)."""
    m = ast.Expr(value=ast.Constant(("restore", name)))
    A.put(m, A.MARKER, name)
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
            keep = ast.copy_location(ast.Assign(
                targets=[ast.Name(saved, ast.Store())],
                value=ast.Call(func=_K("copy"), args=[ast.Subscript(value=ast.Name(t.value.id, ast.Load()),
                                                                   slice=copy.deepcopy(t.slice), ctx=ast.Load())],
                               keywords=[])), s)
            inherit_origin([keep], s)   # an index out of range fails here first: at the write's user line
            out.append(keep)
            A.put(s, A.SAVED, saved)
        out.append(s)
    return out


def _preallocatable(body, taped, ranks, kinds):
    """Taped scalars (float64, integer, bool) assigned only at top level or directly in the body of top-level
    range loops: ``{name: kind}``."""
    ok = {n for n in taped if ranks.get(n) == 0 and kinds.get(n) in TAPE_DTYPES}
    bad = set()

    def walk(ss, where):
        for st in ss:
            if isinstance(st, ast.For):
                inner = "loop" if where == "top" else "deep"
                walk(st.body, inner)
            elif isinstance(st, ast.While):
                walk(st.body, "deep")
            elif isinstance(st, ast.If) and A.has(st, A.AUTO):   # checkpoint_loops' choice: runs once, where it is
                walk(st.body, where)
                walk(st.orelse, where)
            elif isinstance(st, ast.If):
                walk(st.body, "deep")
                walk(st.orelse, "deep")
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and where == "deep":
                bad.add(st.targets[0].id)

    walk(body, "top")
    return {n: kinds[n] for n in ok - bad}


#: The NumPy dtype of a preallocated tape of scalars of each kind (loop indices, flags: int64 and bool arrays
#: instead of a list per value).
TAPE_DTYPES = {"f8": "float64", "i": "int64", "b": "bool_"}


def _array_tape_pushes(stmts, pre, namer, top=True):
    """Pushes onto preallocated tapes: reserve room before each top-level loop (trip count known there)."""
    out = []
    for s in stmts:
        if isinstance(s, ast.For) and top:
            counts = {}
            for st in s.body:
                if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id in pre:
                    counts[st.targets[0].id] = counts.get(st.targets[0].id, 0) + 1
            if counts:
                trip = namer.derived("trip", A.get(s, A.COUNTER), f"_trip{A.get(s, A.COUNTER)[2:]}")
                out.append(ast.Assign(targets=[ast.Name(trip, ast.Store())],
                                      value=ast.Call(func=ast.Name("len", ast.Load()), args=[copy.deepcopy(s.iter)],
                                                     keywords=[])))
                for n, c in sorted(counts.items()):
                    need = ast.BinOp(left=ast.Name(pos_of(namer, n), ast.Load()), op=ast.Add(),
                                     right=ast.Name(trip, ast.Load()) if c == 1 else ast.BinOp(
                                         left=ast.Name(trip, ast.Load()), op=ast.Mult(), right=ast.Constant(c)))
                    out.append(ast.Assign(targets=[ast.Name(tape_of(namer, n), ast.Store())],
                                          value=ast.Call(func=_K("tape_reserve"),
                                                         args=[ast.Name(tape_of(namer, n), ast.Load()), need],
                                                         keywords=[])))
            s.body = _array_tape_pushes(s.body, pre, namer, top=False)
            out.append(s)
            continue
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id in pre:
            n = s.targets[0].id
            if top:
                out.append(ast.Assign(targets=[ast.Name(tape_of(namer, n), ast.Store())],
                                      value=ast.Call(func=_K("tape_reserve"), args=[
                                          ast.Name(tape_of(namer, n), ast.Load()),
                                          ast.BinOp(left=ast.Name(pos_of(namer, n), ast.Load()), op=ast.Add(),
                                                    right=ast.Constant(1))], keywords=[])))
            out.append(s)
            out.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(tape_of(namer, n), ast.Load()),
                                                         slice=ast.Name(pos_of(namer, n), ast.Load()),
                                                         ctx=ast.Store())],
                                  value=ast.Name(n, ast.Load())))
            out.append(ast.AugAssign(target=ast.Name(pos_of(namer, n), ast.Store()), op=ast.Add(),
                                     value=ast.Constant(1)))
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            inner = top and isinstance(s, ast.If) and A.has(s, A.AUTO)   # checkpoint_loops' choice: runs once
            s.body = _array_tape_pushes(s.body, pre, namer, top=inner)
            if isinstance(s, ast.If):
                s.orelse = _array_tape_pushes(s.orelse, pre, namer, top=inner)
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

    def visit(stmts):
        for st in stmts:
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if not isinstance(st, ast.For):
                    need.update(n.id for n in ast_walk(st.test) if isinstance(n, ast.Name))
                visit(st.body)
                visit(st.orelse)
                continue
            skip, loads = set(), []
            for n in ast_walk(st):   # (one walk: the names read, and those read for their shape only)
                if isinstance(n, ast.Name):
                    if isinstance(n.ctx, ast.Load):
                        loads.append(n)
                elif isinstance(n, ast.Call):
                    skip.update(id(a) for a in shape_only(n))
            need.update(n.id for n in loads if id(n) not in skip)

    visit(code)
    return need


def _tape_pushes(stmts, taped, namer):
    out = []
    for s in stmts:
        out.append(s)
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _tape_pushes(s.body, taped, namer)
            if isinstance(s, ast.If):
                s.orelse = _tape_pushes(s.orelse, taped, namer)
        elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id in taped:
            n = s.targets[0].id
            out.append(ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(tape_of(namer, n), ast.Load()),
                                                                  attr="append", ctx=ast.Load()),
                                               args=[ast.Name(n, ast.Load())], keywords=[])))
    return out


def _expand_markers(code, taped, params, namer):
    out = []
    for s in code:
        m = A.get(s, A.MARKER, None)
        if m is not None:
            if m in taped:  # step the tape's read position back; the value before this assignment is below it
                pos = ptr_of(namer, m)
                step = ast.AugAssign(target=ast.Name(pos, ast.Store()), op=ast.Sub(), value=ast.Constant(1))
                restore = ast.Assign(targets=[ast.Name(m, ast.Store())],
                                     value=ast.Subscript(value=ast.Name(tape_of(namer, m), ast.Load()),
                                                         slice=ast.BinOp(left=ast.Name(pos, ast.Load()), op=ast.Sub(),
                                                                         right=ast.Constant(1)), ctx=ast.Load()))
                test = ast.Compare(left=ast.Name(pos, ast.Load()), ops=[ast.Gt()], comparators=[ast.Constant(0)])
                if A.get(s, A.COMMENT, None):
                    A.put(step, A.COMMENT, A.get(s, A.COMMENT))
                out.append(step)
                out.append(ast.If(test=test, body=[restore], orelse=[]))
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _expand_markers(s.body, taped, params, namer) or [ast.Pass()]
            if isinstance(s, ast.If):
                s.orelse = _expand_markers(s.orelse, taped, params, namer)
        out.append(s)
    return out
