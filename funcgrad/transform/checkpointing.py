"""Checkpointed loops: the tape of one segment at a time instead of the tape of every iteration.

A loop the user marks (``for t in funcgrad.checkpoint_range(n)``, ``while funcgrad.checkpointed(cond)``,
``funcgrad.checkpoint`` helpers), or one ``checkpoint_loops`` chooses, is reversed the way Tapenade and JAX's
``scan`` under ``remat`` reverse one: the primal runs it *untaped*, saving only its carried state (the names
the body reads before rebinding them, and the contents of arrays it writes in place) every ``S`` iterations;
the adjoint sweep takes the segments last first, and for each one restores the state, re-runs the segment's
iterations with the ordinary tape pushes, and runs the ordinary reversed body over them. The tape then holds
one segment (``S`` iterations) instead of the trip count ``T``; the snapshots hold ``T / S`` copies of the
carried state; the price is one more forward run of the loop. That two-level scheme is what a ``while`` loop
gets (``S`` = :data:`WHILE_SEGMENT` unless given: its ``T`` is unknown when it starts) and a ``for`` loop given
``segment=S`` alone.

Every other checkpointed ``for`` loop runs Griewank's binomial schedule (revolve) over steps of ``S`` iterations
with at most ``s`` snapshots (``Plan.binomial``): ``checkpoint_range(n, snapshots=s[, segment=S])`` (``S`` = 1
by default), ``checkpoint_range(n)`` (``S = isqrt(T)``, ``s = ceil(T / S)``: a snapshot a step, the two-level
schedule), ``checkpoint_loops`` (``S``, ``s`` from ``K.revolve_plan`` of the trip count, the bytes a trip tapes,
the bytes a snapshot holds and the budget, written by :func:`decide`). The kernels hold the schedule's state
(O(s) integers) and give it out as it runs, in compiled code as well: the primal's untaped run snapshots at the
steps ``K.revolve_shot`` names; the sweep (``K.revolve_sweep``) is a for loop over the steps, last first (each
is reversed once): ``K.revolve_next``'s actions (flags, several a call) up to the step's turn -- drop a
snapshot, restore one (a copy of an array written in place: it is restored again), advance untaped (a copy of
the loop, expanded from an :data:`A.RERUN` placeholder with no pushes), snapshot -- then the same taped re-run
and reversed body as a segment above (a for loop's body, as the two-level sweep's: preaccumulation reaches the
reversed loop). Snapshot lists stay stacks, so a checkpointed loop inside another is reversed by the re-run of
the outer step that holds it (which keeps the inner loop's own snapshots).

``checkpoint_loops`` (a budget in bytes): ``automatic`` gives every top-level ``for`` loop that could be
checkpointed two copies, ``if not _ckpt<k>: <taped> else: <checkpointed>``, and once tapes are planned ``decide``
writes ``_ckpt<k> = len(range(...)) * <bytes one trip of the taped copy pushes> > budget`` before the choice:
the trip count is known only when the loop starts. A loop that cannot be checkpointed stays taped, silently.

Guarantees (``plan``): every marked loop gets a snapshot ``if`` (annotated :data:`A.SNAPSHOT`) first in
its body and its set-up assignments before it, or is refused at the user's line (``break``/``continue`` in
its body, or a carried name not bound on every path to the loop); ``rev_checkpointed`` wraps the ordinary
reversed loop in the segment loop, leaving a :data:`A.RERUN` placeholder that ``expand_reruns`` fills with
the taped re-run once tapes are planned: tape write positions rewound to (list tapes popped down to) the sweep's read positions
before it, read positions moved to its end after it (every tape is a stack, so the re-run's entries sit exactly
where the adjoint reads them). ``hide``/``unhide`` keep the primal's copy of the loop out of the tape
passes (it pushes nothing), and drop from that untaped run the pushes of inner loops' trip counts (each
re-run pushes them again).
"""
from __future__ import annotations

import ast
import copy
import linecache

from . import annotations as A
from ..errors import UnsupportedSyntaxError
from .astutil import definitely_bound, drop_statements, kernel as _K, names_read as _loads
from .astutil import ast_walk

#: The segment length of a checkpointed ``while`` loop when the user gives none (its trip count is unknown
#: when the loop starts): snapshots grow as T / 1000.
WHILE_SEGMENT = 1000


def _n(name):
    return ast.Name(name, ast.Load())


def _st(name):
    return ast.Name(name, ast.Store())


def _assign(name, value):
    return ast.Assign(targets=[_st(name)], value=value)


def _call(fn, *args):
    return ast.Call(func=fn if isinstance(fn, ast.AST) else _n(fn), args=list(args), keywords=[])


def _add(a, b):
    if isinstance(a, ast.Constant) and a.value == 0:
        return b
    if isinstance(b, ast.Constant) and b.value == 0:
        return a
    return ast.BinOp(left=a, op=ast.Add(), right=b)


def _mul(a, b):
    if isinstance(b, ast.Constant) and b.value == 1:
        return a
    return ast.BinOp(left=a, op=ast.Mult(), right=b)


def _runs(loop):
    """Whether ``for`` loop ``loop`` surely runs a trip: a range of constants that is not empty."""
    args = loop.iter.args if isinstance(loop.iter, ast.Call) else None
    return bool(args) and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in args) and \
        len(range(*[a.value for a in args])) > 0


def exposed(stmts, defined=()):
    """The names ``stmts`` may read before assigning them (upward-exposed uses; loops may run no trip)."""
    reads = set()

    def visit(ss, defined):
        defined = set(defined)
        for s in ss:
            if isinstance(s, ast.If):
                if A.has(s, A.SNAPSHOT):
                    continue
                reads.update(_loads(s.test) - defined)
                defined |= visit(s.body, defined) & visit(s.orelse, defined)
            elif isinstance(s, ast.For):
                reads.update(_loads(s.iter) - defined)
                inner = visit(s.body, defined | {s.target.id})
                if _runs(s):   # (a checkpointed helper's one-trip loop)
                    defined |= inner
            elif isinstance(s, ast.While):
                reads.update(_loads(s.test) - defined)
                visit(s.body, defined)
            elif isinstance(s, ast.Assign):
                reads.update(_loads(s.value) - defined)
                t = s.targets[0]
                if isinstance(t, ast.Name):
                    defined.add(t.id)
                else:
                    reads.update(_loads(t) - defined)
            else:
                reads.update(_loads(s) - defined)
        return defined

    visit(stmts, defined)
    return reads


def assigned(stmts):
    """Names bound anywhere in ``stmts`` (loop targets included)."""
    out = set()
    for s in ast_walk(ast.Module(body=list(stmts), type_ignores=[])):
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            out.add(s.targets[0].id)
        elif isinstance(s, ast.For):
            out.add(s.target.id)
    return out


def written(stmts):
    """Arrays written in place (``x[i] = v``) anywhere in ``stmts``."""
    return {s.targets[0].value.id for s in ast_walk(ast.Module(body=list(stmts), type_ignores=[]))
            if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)}


class Plan:
    """What the primal and the sweep of one checkpointed loop share (names chosen against those in use)."""

    def __init__(self, loop, namer, carried, copied):
        c = A.get(loop, A.COUNTER)
        k = c[2:]
        self.loop = loop
        self.counter = c
        self.carried = sorted(carried)
        self.copied = copied                       # carried arrays written in place: snapshot a copy
        self.seg = namer.fresh(f"_seg{k}")         # iterations per segment
        self.seg_len = None                        # ... when it is a constant
        self.next = namer.fresh(f"_snapat{k}")     # the iteration of the next snapshot
        self.snaps = {v: namer.fresh(f"_snap_{v.lstrip('_')}") for v in self.carried}
        self.is_for = isinstance(loop, ast.For)
        self.lo = self.step = None
        self.trips = namer.fresh(f"_trips{k}")     # (the sweep) the loop's trip count
        self.start = namer.fresh(f"_sg{k}")        # (the sweep) the first iteration of a segment
        spec = A.get(loop, A.CHECKPOINT)
        # a for loop: a binomial schedule over steps of ``seg`` iterations, unless given a segment length alone
        self.binomial = self.is_for and not (isinstance(spec, int) and spec > 0)
        self.nsnap = namer.fresh(f"_nsnap{k}")     # (binomial) the snapshots
        self.nsnap_len = None                      # ... when it is a constant
        self.rv = namer.fresh(f"_rv{k}")           # (binomial) the schedule's state in the forward run
        self.rvs = namer.fresh(f"_rvs{k}")         # ... in the sweep
        self.act = namer.fresh(f"_act{k}")         # ... the sweep's action
        self.steps_name = namer.fresh(f"_steps{k}")   # ... the steps

    def S(self):
        return copy.deepcopy(self.seg_len) if self.seg_len is not None else _n(self.seg)

    def NS(self):
        return copy.deepcopy(self.nsnap_len) if self.nsnap_len is not None else _n(self.nsnap)

    def steps(self, trips):
        """The schedule's steps (segments) of a loop of ``trips`` iterations."""
        if isinstance(self.seg_len, ast.Constant) and self.seg_len.value == 1:
            return trips
        return ast.BinOp(left=_add(trips, ast.BinOp(left=self.S(), op=ast.Sub(), right=ast.Constant(1))),
                         op=ast.FloorDiv(), right=self.S())


class Budget:
    """The ``A.CHECKPOINT`` of a loop :func:`automatic` copied: :func:`plan` leaves here the assignments of its
    segment length and snapshots (and its :class:`Plan`), :func:`decide` writes them from the budget."""

    def __init__(self):
        self.sizing = None
        self.plan = None


def _refuse(src_lookup, stmt, msg, hint):
    f, line = src_lookup(stmt)
    text = linecache.getline(f, line) if f and line else None
    return UnsupportedSyntaxError(msg, f, line, None, text, hint)


def _carried(s):
    """``(carried, inplace)`` of loop ``s``: the names its body reads before rebinding them (or writes in place),
    and the arrays it writes in place."""
    own = {A.get(s, A.COUNTER)} | ({s.target.id} if isinstance(s, ast.For) else set())
    inplace = written(s.body)
    return (exposed(s.body) & (assigned(s.body) | inplace)) - own, inplace


def refusal(s, bound):
    """Why loop ``s`` cannot be checkpointed, given the names ``bound`` on every path to it: ``(message, hint)``,
    or None when it can be. (An explicit request is refused with it; ``checkpoint_loops`` leaves such a loop
    taped.)"""
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for n in ast_walk(ast.Module(body=s.body,
                                                                                           type_ignores=[]))):
        plain = "loop over plain range(...)" if isinstance(s, ast.For) else "use a plain while loop"
        return ("a checkpointed loop cannot contain 'break', 'continue' or 'return'",
                f"{plain} (taped), or move the early exit into a condition")
    if isinstance(s, ast.For) and not (isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name)
                                       and s.iter.func.id == "range"):   # pragma: no cover (normalize)
        return "only a loop over a range can be checkpointed", None
    carried, inplace = _carried(s)
    unbound = sorted(v for v in carried - bound if v not in inplace)
    if unbound:
        return (f"a checkpointed loop reads '{unbound[0]}' before assigning it, and it is not bound before the loop",
                f"give '{unbound[0]}' a value before the loop")
    return None


def plan(body, namer, params, src_lookup):
    """Set up every marked loop of ``body`` (see the module docstring): ``(body, {counter: Plan})``. The set-up
    of the checkpointed copy of a loop ``checkpoint_loops`` chose (:func:`automatic`) runs before the choice,
    once (not a name of the choice's branches: nothing to tape)."""
    plans = {}
    whole = list(body)

    def walk(stmts, bound, hoist=None, scope=None):
        out = []
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)) and A.get(s, A.CHECKPOINT, None) is not None:
                (hoist if hoist is not None else out).extend(setup(s, bound))
                out.append(s)
                out.extend(handover(s, bound, scope or s))
                bound = definitely_bound([s], bound)
                continue
            elif isinstance(s, (ast.For, ast.While)):
                s.body = walk(s.body, bound | ({s.target.id} if isinstance(s, ast.For) else set()))
            elif isinstance(s, ast.If) and A.has(s, A.AUTO):
                s.body = walk(s.body, bound)
                s.orelse = walk(s.orelse, bound, out, s)
            elif isinstance(s, ast.If):
                s.body = walk(s.body, bound)
                s.orelse = walk(s.orelse, bound)
            out.append(s)
            bound = definitely_bound([s], bound)
        return out

    def handover(s, bound, scope):
        """``v = v`` after the loop for each name it binds that is read elsewhere (outside ``scope``: the loop,
        or the choice holding its taped copy too): the primal's one tape point for the loop's final values (the
        loop itself pushes nothing), restored by the ordinary sweep of the statements after it. A name the loop
        may leave unbound (no trip) only where it ran."""
        inside = {id(n) for n in ast_walk(scope)}
        read = {n.id for st in whole for n in ast_walk(st)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside}
        own = {A.get(s, A.COUNTER)} | ({s.target.id} if isinstance(s, ast.For) else set())
        p = plans[A.get(s, A.COUNTER)]
        out = (assigned(s.body) & (read | set(p.carried))) - own - {p.next}
        if not out:
            return []
        if isinstance(s, ast.For) and _runs(s):
            bound = bound | out   # range(k), k > 0 (a checkpointed helper's loop): it runs
        sure = [_assign(v, _n(v)) for v in sorted(out & bound)]
        maybe = [_assign(v, _n(v)) for v in sorted(out - bound)]
        if maybe:
            ran = namer.fresh(f"_ran{p.counter[2:]}")
            sure += [_assign(ran, ast.Compare(left=_n(p.counter), ops=[ast.Gt()], comparators=[ast.Constant(0)])),
                     ast.If(test=_n(ran), body=maybe, orelse=[])]
        for st in sure:
            ast.copy_location(st, s)
            for n in ast_walk(st):
                if isinstance(n, ast.stmt):
                    ast.copy_location(n, s)
        return sure

    def setup(s, bound):
        why = refusal(s, bound)
        if why is not None:
            raise _refuse(src_lookup, s, *why)
        body = s.body
        counter = A.get(s, A.COUNTER)
        own = {counter} | ({s.target.id} if isinstance(s, ast.For) else set())
        carried, inplace = _carried(s)
        p = Plan(s, namer, carried, {v for v in carried if v in inplace})
        plans[counter] = p
        pre = []
        seg = A.get(s, A.CHECKPOINT)
        if isinstance(seg, tuple):   # checkpoint_range(n, snapshots=s[, segment=k]): k iterations a step
            seg, p.nsnap_len = seg[0], ast.Constant(int(seg[1]))
        elif not isinstance(seg, int):   # checkpoint_loops (a Budget): sized as the default until decide
            seg = 0
        if p.is_for:
            args = s.iter.args
            lo = args[0] if len(args) >= 2 else ast.Constant(0)
            step = args[2] if len(args) == 3 else ast.Constant(1)
            k = counter[2:]
            for attr, e, base in (("lo", lo, f"_lo{k}"), ("step", step, f"_step{k}")):
                if isinstance(e, ast.Constant):
                    setattr(p, attr, e)
                else:   # the range's arguments as the loop started (the names may be rebound later)
                    nm = namer.fresh(base)
                    pre.append(_assign(nm, copy.deepcopy(e)))
                    setattr(p, attr, _n(nm))
            if seg:
                size = ast.Constant(int(seg))
            else:   # about sqrt(T) iterations per segment: sqrt(T) snapshots, a tape of sqrt(T) iterations
                size = _call("max", ast.Constant(1), _call("int", _call(ast.Attribute(
                    value=_n("np"), attr="sqrt", ctx=ast.Load()), _call("len", copy.deepcopy(s.iter)))))
        else:
            size = ast.Constant(int(seg) if seg else WHILE_SEGMENT)
        if isinstance(size, ast.Constant):   # a constant segment length is written as it is
            p.seg_len = size
        else:
            pre.append(_assign(p.seg, size))
        if p.binomial:
            # a snapshot at the steps the schedule's forward run takes them (revolve_shot: the next one, -1 none)
            trips = _call("len", copy.deepcopy(s.iter))
            if p.nsnap_len is None:   # by default one a segment: the two-level scheme
                pre.append(_assign(p.nsnap, p.steps(trips)))
            spec = A.get(s, A.CHECKPOINT)
            if isinstance(spec, Budget):
                spec.sizing, spec.plan = pre[-2:], p
            pre.append(_assign(p.rv, _call(_K("revolve_init"), p.steps(copy.deepcopy(trips)), p.NS())))
            pre.append(_assign(p.next, _mul(_call(_K("revolve_shot"), _n(p.rv)), p.S())))
            nxt = _mul(_call(_K("revolve_shot"), _n(p.rv)), p.S())
        else:
            pre.append(_assign(p.next, ast.Constant(0)))
            nxt = _add(_n(p.next), p.S())
        for v in p.carried:
            pre.append(_assign(p.snaps[v], ast.List(elts=[], ctx=ast.Load())))
        snap = ast.If(test=ast.Compare(left=_n(counter), ops=[ast.Eq()], comparators=[_n(p.next)]),
                      body=[_assign(p.next, nxt)] + [
                          ast.Expr(value=_call(ast.Attribute(value=_n(p.snaps[v]), attr="append", ctx=ast.Load()),
                                               _call(_K("copy"), _n(v)) if v in p.copied else _n(v)))
                          for v in p.carried], orelse=[])
        A.put(snap, A.SNAPSHOT, True)
        s.body = [snap] + walk(body, bound | own)
        for st in pre:
            ast.copy_location(st, s)
        return pre

    return walk(body, set(params)), plans


def special(plans):
    """Names the loop code handles (kept out of taping): the snapshot positions."""
    return {p.next for p in plans.values()} | {p.rv for p in plans.values() if p.binomial}


def _strip_snapshots(stmts):
    out = []
    for s in stmts:
        if isinstance(s, ast.If) and A.has(s, A.SNAPSHOT):
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = _strip_snapshots(s.body) or [ast.Pass()]
            s.orelse = _strip_snapshots(s.orelse)
        out.append(s)
    return out


def rev_checkpointed(R, s, out, rev_loop):
    """The sweep of checkpointed loop ``s``: the ordinary reversed loop, run per segment, last first, after the
    segment's state is restored and its iterations re-run taped (a :data:`A.RERUN` placeholder)."""
    p = R.ckpt_plans[A.get(s, A.COUNTER)]
    tmp = []
    rev_loop(R, s, tmp)
    if not tmp or not isinstance(tmp[-1], ast.For):   # nothing of the loop is reversed: nothing to recompute
        out.extend(tmp)
        return
    pre, rev = tmp[:-1], tmp[-1]
    rerun = copy.deepcopy(s)
    # (its own snapshot out; a checkpointed loop inside keeps its own: this re-run is what the inner sweep reverses)
    rerun.body = rerun.body[1:]
    end = _call("min", _add(_n(p.start), p.S()), _n(p.trips))
    if p.is_for:
        rerun.iter = _call("range", _add(p.lo, _mul(_n(p.start), p.step)), _add(p.lo, _mul(end, p.step)),
                           copy.deepcopy(p.step))
    else:
        rerun = ast.For(target=_st(R.names.fresh(f"_w{p.counter[2:]}")), iter=_call(
            "range", ast.BinOp(left=end, op=ast.Sub(), right=_n(p.start))), body=rerun.body, orelse=[])
        A.put(rerun, A.COUNTER, p.counter)
    placeholder = ast.Expr(value=ast.Constant("re-run this segment, taped"))
    A.put(placeholder, A.RERUN, (rerun, p, True))
    done = ast.Expr(value=ast.Constant("drop the segment's first state from the tapes"))
    A.put(done, A.RERUN, (rerun, p, False))
    R.rerun_reads |= (exposed([rerun]) - set(p.carried)) | ({p.seg} if p.seg_len is None else set())
    if p.binomial:
        _binomial_sweep(R, s, p, out, pre, [placeholder, rev, done])
        return
    restore = [_assign(v, _call(ast.Attribute(value=_n(p.snaps[v]), attr="pop", ctx=ast.Load())))
               for v in p.carried]
    first_of_last = ast.BinOp(left=ast.BinOp(left=ast.BinOp(left=_n(p.trips), op=ast.Sub(), right=ast.Constant(1)),
                                             op=ast.FloorDiv(), right=p.S()), op=ast.Mult(), right=p.S())
    segs = ast.For(target=_st(p.start), iter=_call("range", first_of_last, ast.Constant(-1),
                                                   ast.UnaryOp(op=ast.USub(), operand=p.S())),
                   body=restore + [placeholder, rev, done], orelse=[])
    head = f"for {ast.unparse(s.target)} in {ast.unparse(s.iter)}:" if p.is_for else f"while {ast.unparse(s.test)}:"
    A.put(segs, A.COMMENT, f"checkpointed: {head}  (segments of {ast.unparse(p.S())} iterations, last first: restore the "
                           "snapshot, re-run taped, reverse)")
    out.extend(pre)
    out.append(_assign(p.trips, _n(p.counter)))
    out.append(segs)


def _binomial_sweep(R, s, p, out, pre, turn):
    """The sweep of a checkpointed for loop under a binomial schedule (``K.revolve_next``'s actions, a few at a
    time, until 0): advance (the loop's iterations from one step to another, untaped), take a snapshot, restore the
    last one, drop it, or reverse a step (``turn``: re-run its iterations taped, run their adjoint)."""
    if p.nsnap_len is None:
        R.rerun_reads.add(p.nsnap)
    adv = copy.deepcopy(s)   # the untaped forward run (as the primal's: no snapshots, no inner trip counts)
    adv.body = drop_statements(_strip_snapshots(adv.body[1:]), lambda st: A.has(st, A.TRIPS)) or [ast.Pass()]
    at = [ast.Subscript(value=_n(p.rvs), slice=ast.Constant(i), ctx=ast.Load()) for i in (0, 1)]
    end = _call("min", _mul(at[1], p.S()), _n(p.trips))
    adv.iter = _call("range", _add(p.lo, _mul(_mul(at[0], p.S()), p.step)), _add(p.lo, _mul(end, p.step)),
                     copy.deepcopy(p.step))
    advance = ast.Expr(value=ast.Constant("advance, untaped"))
    A.put(advance, A.RERUN, (adv, p, None))

    def snap(v):
        top = ast.Subscript(value=_n(p.snaps[v]), slice=ast.Constant(-1), ctx=ast.Load())
        return _call(_K("copy"), top) if v in p.copied else top

    shots = [ast.Expr(value=_call(ast.Attribute(value=_n(p.snaps[v]), attr="append", ctx=ast.Load()),
                                  _call(_K("copy"), _n(v)) if v in p.copied else _n(v))) for v in p.carried]
    restores = [_assign(v, snap(v)) for v in p.carried]
    drops = [ast.Expr(value=_call(ast.Attribute(value=_n(p.snaps[v]), attr="pop", ctx=ast.Load())))
             for v in p.carried]

    def when(flag, body):
        test = ast.BinOp(left=_n(p.act), op=ast.BitAnd(), right=ast.Constant(flag))
        return ast.If(test=ast.Compare(left=test, ops=[ast.NotEq()], comparators=[ast.Constant(0)]),
                      body=body or [ast.Pass()], orelse=[])

    # one trip a step, last first (a step is reversed once): the schedule's actions up to its turn (K.revolve_next
    # gives several a call, as flags), then its re-run and adjoint (a for loop over the steps, as the two-level
    # sweep's: the reversed loop inside it is preaccumulated)
    nxt = _assign(p.act, _call(_K("revolve_next"), _n(p.rvs)))
    until = ast.While(test=ast.Compare(left=_n(p.act), ops=[ast.Lt()], comparators=[ast.Constant(16)]),
                      body=[copy.deepcopy(nxt), when(8, drops), when(4, restores), when(1, [advance]), when(2, shots)],
                      orelse=[])
    turned = ast.Subscript(value=_n(p.rvs), slice=ast.Constant(3), ctx=ast.Load())
    loop = ast.For(target=_st(R.names.fresh(f"_turn{p.counter[2:]}")), iter=_call("range", _n(p.steps_name)),
                   body=[_assign(p.act, ast.Constant(0)), until, _assign(p.start, _mul(turned, p.S()))] + turn,
                   orelse=[])
    rest = ast.While(test=ast.Compare(left=_n(p.act), ops=[ast.NotEq()], comparators=[ast.Constant(0)]),
                     body=drops + [copy.deepcopy(nxt)], orelse=[])   # (the first snapshot is dropped last)
    head = f"for {ast.unparse(s.target)} in {ast.unparse(s.iter)}:"
    A.put(loop, A.COMMENT, f"checkpointed: {head}  (binomial schedule: steps of {ast.unparse(p.S())} iterations, "
                           f"{ast.unparse(p.NS())} snapshots, last first: drop a snapshot (8), restore (4), advance "
                           "untaped (1), snapshot (2), until 16: re-run the step taped, reverse it)")
    out.extend(pre)
    out.append(_assign(p.trips, _n(p.counter)))
    out.append(_assign(p.steps_name, p.steps(_n(p.trips))))
    out.append(_assign(p.rvs, _call(_K("revolve_sweep"), _n(p.steps_name), p.NS())))
    out.append(loop)
    out.append(copy.deepcopy(nxt))
    out.append(rest)


def hide(stmts, store):
    """``stmts`` with every checkpointed loop replaced by a placeholder (the tape passes leave its primal run
    untaped); ``unhide`` puts them back. ``store``: a dict the two share."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.For, ast.While)) and A.get(s, A.CHECKPOINT, None) is not None:
            ph = ast.Expr(value=ast.Constant("checkpointed loop"))
            store[id(ph)] = (ph, s)
            out.append(ph)
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = hide(s.body, store)
            s.orelse = hide(s.orelse, store)
        out.append(s)
    return out


def unhide(stmts, store):
    out = []
    for s in stmts:
        held = store.get(id(s))
        if held is not None and held[0] is s:
            loop = held[1]
            # loops checkpointed inside this one snapshot only when re-run (the sweep pops what the re-run pushed);
            # the trip counts of inner loops go on their tapes only then too (the untaped run kept them: 8 bytes
            # per trip, never read)
            loop.body = loop.body[:1] + drop_statements(_strip_snapshots(loop.body[1:]),
                                                        lambda st: A.has(st, A.TRIPS))
            out.append(loop)
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = unhide(s.body, store)
            s.orelse = unhide(s.orelse, store)
        out.append(s)
    return out


def expand_reruns(code, taped, prealloc, namer, ptr_of, pos_of, tape_of, array_pushes, list_pushes):
    """Each :data:`A.RERUN` placeholder of the sweep -> the segment's taped re-run (see the module docstring)."""
    out = []
    for s in code:
        r = A.get(s, A.RERUN, None) if isinstance(s, ast.Expr) else None
        if r is None:
            if isinstance(s, (ast.For, ast.While, ast.If)):
                s.body = expand_reruns(s.body, taped, prealloc, namer, ptr_of, pos_of, tape_of, array_pushes,
                                       list_pushes)
                s.orelse = expand_reruns(s.orelse, taped, prealloc, namer, ptr_of, pos_of, tape_of, array_pushes,
                                         list_pushes)
            out.append(s)
            continue
        rerun, p, start = r
        if start is None:   # a binomial schedule's untaped advance
            out.append(ast.copy_location(rerun, s))
            continue
        pushed = sorted(assigned([rerun]) & set(taped))
        arr = {n: prealloc[n] for n in pushed if n in prealloc}
        # the carried names' values at the segment's start go on their tapes first: the restore after the
        # adjoint of the segment's first assignment of one reads it (below the re-run's entries)
        entry = [n for n in pushed if n in p.carried]
        if not start:   # after the segment's adjoint: its read positions back below that entry
            out.extend(ast.copy_location(ast.AugAssign(target=_st(ptr_of(namer, n)), op=ast.Sub(),
                                                       value=ast.Constant(1)), s) for n in entry)
            continue
        first = []
        last = []
        for n in pushed:
            if n in arr:   # write from the sweep's read position on
                first.append(_assign(pos_of(namer, n), _n(ptr_of(namer, n))))
                last.append(_assign(ptr_of(namer, n), _n(pos_of(namer, n))))
            else:
                # (pop, not del tape[p:]: Numba's del of a slice of a list of arrays corrupts the heap)
                first.append(ast.While(test=ast.Compare(left=_call("len", _n(tape_of(namer, n))), ops=[ast.Gt()],
                                                        comparators=[_n(ptr_of(namer, n))]),
                                       body=[ast.Expr(value=_call(ast.Attribute(value=_n(tape_of(namer, n)),
                                                                                attr="pop", ctx=ast.Load())))],
                                       orelse=[]))
                last.append(_assign(ptr_of(namer, n), _call("len", _n(tape_of(namer, n)))))
        for n in entry:
            tape = tape_of(namer, n)
            if n in arr:
                pos = pos_of(namer, n)
                first.append(_assign(tape, _call(_K("tape_reserve"), _n(tape), _add(_n(pos), ast.Constant(1)))))
                first.append(ast.Assign(targets=[ast.Subscript(value=_n(tape), slice=_n(pos), ctx=ast.Store())],
                                        value=_n(n)))
                first.append(ast.AugAssign(target=_st(pos), op=ast.Add(), value=ast.Constant(1)))
            else:
                first.append(ast.Expr(value=_call(ast.Attribute(value=_n(tape), attr="append", ctx=ast.Load()),
                                                  _n(n))))
        first.append(_assign(p.counter, ast.Constant(0)))
        inner = {}   # loops checkpointed inside this one re-run untaped too (their own segments are re-run)
        rerun.body = hide(rerun.body, inner)
        body = array_pushes([rerun], arr, namer) if arr else [rerun]
        body = unhide(list_pushes(body, set(pushed) - set(arr), namer), inner)
        for st in first:
            ast.copy_location(st, s)
        out.extend(first + body + last)
    return out


# ---------------------------------------------------------------------------------------------- checkpoint_loops
class Auto:
    """A loop ``checkpoint_loops`` may checkpoint: both copies are generated, the choice made when it runs."""

    def __init__(self, decide, choice, taped, bound, spec=None):
        self.spec = spec       # the checkpointed copy's :class:`Budget`
        self.decide = decide   # ``_ckpt<k> = ...``: its value is written by :func:`decide` once tapes are known
        self.choice = choice   # ``if not _ckpt<k>: <taped copy> else: <checkpointed copy>``
        self.taped = taped     # the taped copy
        self.bound = bound     # the names bound on every path to the loop


def automatic(body, namer, params):
    """Every top-level ``for`` loop of ``body`` (not inside another loop; branches are entered) that could be
    checkpointed (:func:`refusal` says nothing) -> ``_ckpt<k> = <decision>`` and ``if not _ckpt<k>: <the loop>
    else: <the loop, checkpointed>`` (annotated :data:`A.AUTO`); ``(body, [Auto])``. A loop inside another loop
    is left alone: its tape is one run's times the outer trip count, and the outer loop is the one to
    checkpoint (so it is, when it can be). The taped copy comes first: measured under njit on
    benchmarks/checkpoint_loop.py, the taped sweep placed after the checkpointed one ran 2x slower (same code,
    LLVM's layout of the function), the checkpointed one runs as fast in either place."""
    autos = []

    def walk(stmts, bound):
        out = []
        for s in stmts:
            if isinstance(s, ast.For) and A.get(s, A.CHECKPOINT, None) is None and refusal(s, bound) is None:
                flag = namer.fresh(f"_ckpt{len(autos) + 1}")
                ck = copy.deepcopy(s)
                spec = Budget()
                A.put(ck, A.CHECKPOINT, spec)
                decide_ = ast.copy_location(_assign(flag, ast.Constant(False)), s)
                choice = ast.copy_location(ast.If(test=ast.UnaryOp(op=ast.Not(), operand=_n(flag)), body=[s],
                                                  orelse=[ck]), s)
                A.put(choice, A.AUTO, flag)
                A.put(choice, A.COMMENT, "checkpoint_loops: the loop taped (under else: checkpointed)")
                autos.append(Auto(decide_, choice, s, set(bound), spec))
                out += [decide_, choice]
                continue
            if isinstance(s, ast.If):
                s.body = walk(s.body, bound)
                s.orelse = walk(s.orelse, bound)
            out.append(s)
            bound = definitely_bound([s], bound)
        return out

    return walk(list(body), set(params)), autos


#: Bytes per entry of a preallocated tape of each kind (:data:`.tapes.TAPE_DTYPES`).
_ITEMSIZE = {"f8": 8, "i": 8, "b": 1}


class _Bytes:
    """``const + sum(terms)`` bytes (terms: expressions evaluated when the decision runs)."""

    def __init__(self, const=0, terms=()):
        self.const, self.terms = const, list(terms)

    def __add__(self, o):
        return _Bytes(self.const + o.const, self.terms + o.terms)

    def zero(self):
        return self.const == 0 and not self.terms

    def expr(self):
        e = None
        counts = {}
        for t in self.terms:   # the same term n times: n * term
            key = ast.dump(t)
            counts[key] = (counts[key][0] + 1, t) if key in counts else (1, t)
        for k, t in counts.values():
            t = t if k == 1 else ast.BinOp(left=ast.Constant(k), op=ast.Mult(), right=t)
            e = t if e is None else ast.BinOp(left=e, op=ast.Add(), right=t)
        if e is None:
            return ast.Constant(self.const)
        return _add(e, ast.Constant(self.const))

    def times(self, m):
        if isinstance(m, int):
            return _Bytes(self.const * m, [_mul(t, ast.Constant(m)) for t in self.terms])
        return _Bytes(0, [_mul(m, self.expr()) if self.terms else _mul(m, ast.Constant(self.const))])

    def larger(self, o):
        if not self.terms and not o.terms:
            return _Bytes(max(self.const, o.const))
        return _Bytes(0, [_call("max", self.expr(), o.expr())])


def _nbytes(v, rank):
    e = _n(v) if rank else _call(ast.Attribute(value=_n("np"), attr="asarray", ctx=ast.Load()), _n(v))
    return ast.Attribute(value=e, attr="nbytes", ctx=ast.Load())


def per_trip(auto, tapes, ranks, cplx, counters):
    """The bytes one trip of ``auto``'s taped loop pushes on its tapes (``tapes``: tape name -> (value name, kind
    of a preallocated tape or None for a list)): exact for scalars (8 bytes a float or int, 16 a complex, 1 a
    bool); an array pushed counts its size when the loop starts if it is bound then (the carried state), else the
    size of the largest array the loop carries (or reads); an inner loop counts its trip count where it is known
    when the loop starts (its range reads names the loop does not assign), else one trip; of two branches, the
    larger."""
    loop = auto.taped
    inside = assigned(loop.body) | {A.get(loop, A.COUNTER), loop.target.id}
    before = auto.bound - inside
    arrays = sorted(v for v in auto.bound & inside if (ranks.get(v) or 0) > 0) or \
        sorted(v for v in before & _loads(loop) if (ranks.get(v) or 0) > 0)
    largest = (_Bytes(8) if not arrays else _Bytes(0, [_nbytes(arrays[0], 1)]) if len(arrays) == 1 else
               _Bytes(0, [_call("max", *[_nbytes(v, 1) for v in arrays])]))

    defs = {st.targets[0].id: st.value for st in ast_walk(loop) if isinstance(st, ast.Assign)
            and isinstance(st.targets[0], ast.Name)}

    def rank(v):   # (and of an element read in the loop, x[i] or a copy of it, which rank inference leaves open)
        r = ranks.get(v)
        e = defs.get(v)
        if r is None and isinstance(e, ast.Call) and len(e.args) == 1 and ast.unparse(e.func) == "K.copy":
            e = e.args[0]
        if r is None and isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and \
                ranks.get(e.value.id) is not None:
            idx = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            if all((isinstance(i, ast.Constant) and isinstance(i.value, int) and not isinstance(i.value, bool)) or
                   (isinstance(i, ast.Name) and ranks.get(i.id) == 0) for i in idx):
                r = max(ranks[e.value.id] - len(idx), 0)
        return r

    def entry(v):
        r = rank(v)
        if v in counters or r == 0:
            return _Bytes(16 if v in cplx else 8)
        if v in auto.bound:   # bound when the loop starts: its size then
            return _Bytes(0, [_nbytes(v, r)])
        return largest

    def trips(s):
        if isinstance(s, ast.For) and set().union(*[_loads(a) for a in s.iter.args]) <= before:
            if all(isinstance(a, ast.Constant) for a in s.iter.args):
                return len(range(*[a.value for a in s.iter.args]))
            return _call("len", copy.deepcopy(s.iter))
        return 1

    def walk(stmts):
        acc = _Bytes()
        for st in stmts:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Subscript) and \
                    isinstance(st.targets[0].value, ast.Name) and st.targets[0].value.id in tapes:
                v, kind = tapes[st.targets[0].value.id]
                acc = acc + (_Bytes(_ITEMSIZE[kind]) if kind else entry(v))
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and \
                    isinstance(st.value.func, ast.Attribute) and st.value.func.attr == "append" and \
                    isinstance(st.value.func.value, ast.Name) and st.value.func.value.id in tapes:
                acc = acc + entry(tapes[st.value.func.value.id][0])
            elif isinstance(st, (ast.For, ast.While)):
                inner = walk(st.body)
                if not inner.zero():
                    acc = acc + inner.times(trips(st))
            elif isinstance(st, ast.If):
                acc = acc + walk(st.body).larger(walk(st.orelse))
        return acc

    return walk(loop.body)


def snapshot_bytes(p, ranks, cplx):
    """The bytes of one snapshot of loop plan ``p``'s carried state, when the loop starts (8 a float or int, 16 a
    complex, an array its ``nbytes``)."""
    acc = _Bytes()
    for v in p.carried:
        r = ranks.get(v)
        acc = acc + (_Bytes(16 if v in cplx else 8) if r == 0 else _Bytes(0, [_nbytes(v, r)]))
    return acc


def decide(autos, budget, tapes, ranks, cplx, counters):
    """Write each choice's decision: checkpointed when the trip count times :func:`per_trip` exceeds ``budget``
    bytes (never when a trip pushes nothing); and, with a budget (not ``True``), the checkpointed copy's segment
    length and snapshots: ``K.revolve_plan`` of the trip count, the bytes a trip tapes, the bytes of a snapshot
    and the budget (the two-level scheme when it fits, else the binomial schedule that recomputes least)."""
    for a in autos:
        b = per_trip(a, tapes, ranks, cplx, counters)
        if b.zero():
            a.decide.value = ast.Constant(False)
            what = "its taped copy pushes nothing"
        else:
            trips = _call("len", copy.deepcopy(a.taped.iter))
            a.decide.value = ast.Compare(left=_mul(trips, b.expr()),
                                         ops=[ast.Gt()], comparators=[ast.Constant(int(budget))])
            what = f"tape of {ast.unparse(b.expr())} bytes a trip"
            if budget > 0 and a.spec is not None and a.spec.sizing:
                c = snapshot_bytes(a.spec.plan, ranks, cplx)
                for i, st in enumerate(a.spec.sizing):
                    st.value = ast.Subscript(value=_call(_K("revolve_plan"), copy.deepcopy(trips), b.expr(), c.expr(),
                                                         ast.Constant(int(budget))), slice=ast.Constant(i),
                                             ctx=ast.Load())
                seg, ns = (st.targets[0].id for st in a.spec.sizing)
                A.put(a.spec.sizing[0], A.COMMENT, f"checkpointed: {seg} iterations a step, {ns} snapshots of "
                                                   f"{ast.unparse(c.expr())} bytes, within the budget")
        A.put(a.decide, A.COMMENT, f"checkpoint_loops={int(budget)} bytes: {what}")
