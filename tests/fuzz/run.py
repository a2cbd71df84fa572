"""The long fuzz run: ``make fuzz`` (``python -m tests.fuzz.run``).

Draws ``FUZZ_N`` programs (default 2000) from a seeded ``random.Random``
(``FUZZ_SEED``, default 0; program ``i`` uses seed ``FUZZ_SEED + i``, so any
program can be regenerated alone with ``--only i``), checks each one in a worker
process (restarted after a timeout or a crash), and keeps going after failures.
The first programs showing each distinct failure are shrunk (``FUZZ_SHRINK``
tries each, default 150; 0 turns shrinking off): their choices, then their source
(``reduce.py``) and written, with how they fail
and the arguments they fail at, to ``FUZZ_OUT`` (default ``fuzz-failures/``).
It ends with a summary: right / refused by message / invalid / failures by class.

Options (environment or command line): ``--n``, ``--seed``, ``--out``,
``--shrink``, ``--timeout`` (seconds per program), ``--jobs`` (programs checked at once, each in its own
worker process; default 1), ``--recycle`` (restart a worker process after this many programs; default
150), ``--modes`` (comma list),
``--features`` (comma list to keep) / ``--without`` (comma list to drop).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import multiprocessing as mp
import os
import queue
import re
import sys
import tempfile
import time
import traceback

from .draw import RandomDrawer, ReplayDrawer, shrink_choices
from .gen import ALL_FEATURES, Config, generate


# ----------------------------------------------------------------------------- worker side
def _worker(conn, cfg, modes):
    import warnings
    warnings.simplefilter("ignore")
    from .check import check
    while True:
        msg = conn.recv()
        if msg is None:
            return
        prog, only_modes = msg
        try:
            out = check(prog, modes=only_modes or modes)
            conn.send(("ok", out))
        except BaseException:  # a bug in the harness: report it, keep the worker
            conn.send(("error", traceback.format_exc()))


class Worker:
    """A checking process, restarted after ``recycle`` programs: each program leaves compiled code behind
    (about 7 MB), and a long run otherwise grows a worker past the machine's memory (9 GB each after 670
    programs), where an out-of-memory kill would read as a crash of the program being checked."""

    def __init__(self, cfg, modes, timeout, recycle=150):
        self.cfg, self.modes, self.timeout, self.recycle = cfg, modes, timeout, recycle
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None
        self.checked = 0

    def start(self):
        a, b = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(b, self.cfg, self.modes), daemon=True)
        self.proc.start()
        self.conn = a

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5)
            self.proc = None

    def check(self, prog, modes=None):
        """An Outcome, or an Outcome-like FAILURE for a timeout or a dead worker."""
        from .check import FAILURE, Outcome
        if self.proc is not None and self.recycle and self.checked >= self.recycle:
            self.stop()
        if self.proc is None or not self.proc.is_alive():
            self.start()
            self.checked = 0
        self.checked += 1
        self.conn.send((prog, modes))
        if not self.conn.poll(self.timeout):
            self.stop()
            return Outcome(FAILURE, "?", "timeout", f"no answer in {self.timeout} s (hang or endless compile)")
        try:
            kind, val = self.conn.recv()
        except EOFError:
            code = self.proc.exitcode if self.proc else None
            self.stop()
            return Outcome(FAILURE, "?", "crash", f"the checking process died (exit code {code})")
        if kind == "error":
            raise RuntimeError("the fuzz harness itself failed:\n" + val)
        return val


# ----------------------------------------------------------------------------- main side
def _slug(sig):
    s = "-".join(str(x) for x in sig[1:] if x)
    s = re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-")
    return s[:60] or "failure"


def failure_class(out):
    """How failures are grouped: the kind, plus the modes (values/gradients) or the message (exceptions)."""
    if out.kind in ("wrong-gradient", "wrong-value", "timeout", "crash"):
        return (out.status, out.kind, out.mode)
    from .check import _normalize
    return (out.status, out.kind, _normalize(out.message + "\n" + (out.details or "")))


def write_program(path, prog, out, note=""):
    lines = [f"# funcgrad fuzz: {out.status} in mode(s) {out.mode}: {out.kind}"]
    for ln in (out.message or "").splitlines()[:6]:
        lines.append(f"#   {ln}")
    for m, (st, k, msg) in out.per_mode.items():
        lines.append(f"#   {m}: {st} {k} {msg.splitlines()[0][:150] if msg else ''}")
    for ln in (out.details or "").splitlines()[:16]:
        lines.append(f"#   {ln}")
    if note:
        lines.append(f"# {note}")
    lines.append(f"# features drawn (before shrinking): {', '.join(sorted(prog.features))}")
    lines.append(f"# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)")
    body = prog.source.rstrip("\n")
    tail = [
        "",
        "",
        "# ---- the arguments it fails at ----",
        f"ARGNUMS = {prog.argnums!r}",
        "",
        "",
        "def make_args():",
        f"    rng = np.random.RandomState({prog.seed})",
        "    out = []",
        f"    for k in {prog.arg_kinds!r}:",
        "        if k == \"f\":",
        "            out.append(float(rng.uniform(-1.0, 1.0)))",
        "        elif k == \"i\":",
        f"            out.append({prog.n_value})",
        "        else:",
        "            out.append(rng.uniform(-1.0, 1.0, size=k))",
        "    return tuple(out)",
        "",
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n" + body + "\n" + "\n".join(tail))


def main(argv=None):
    env = os.environ
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=int(env.get("FUZZ_N", 2000)))
    ap.add_argument("--seed", type=int, default=int(env.get("FUZZ_SEED", 0)))
    ap.add_argument("--out", default=env.get("FUZZ_OUT", "fuzz-failures"))
    ap.add_argument("--shrink", type=int, default=int(env.get("FUZZ_SHRINK", 150)))
    ap.add_argument("--shrink-per-class", type=int, default=int(env.get("FUZZ_SHRINK_PER_CLASS", 2)))
    ap.add_argument("--timeout", type=float, default=float(env.get("FUZZ_TIMEOUT", 180)))
    ap.add_argument("--modes", default=env.get("FUZZ_MODES", "auto,python,njit,nojit"))
    ap.add_argument("--features", default=env.get("FUZZ_FEATURES", ""))
    ap.add_argument("--without", default=env.get("FUZZ_WITHOUT", ""))
    ap.add_argument("--max-stmts", type=int, default=int(env.get("FUZZ_MAX_STMTS", 3)))
    ap.add_argument("--only", type=int, default=None, help="check program number ONLY alone, verbosely")
    ap.add_argument("--jobs", type=int, default=int(env.get("FUZZ_JOBS", 1)))
    ap.add_argument("--recycle", type=int, default=int(env.get("FUZZ_RECYCLE", 150)),
                    help="restart each checking process after this many programs (0: never)")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")

    feats = frozenset(a.features.split(",")) if a.features else ALL_FEATURES
    unknown = (feats | frozenset(filter(None, a.without.split(",")))) - ALL_FEATURES
    if unknown:
        ap.error(f"unknown features {sorted(unknown)}; known: {sorted(ALL_FEATURES)}")
    cfg = Config(features=feats - frozenset(filter(None, a.without.split(","))), max_stmts=a.max_stmts)
    modes = tuple(a.modes.split(","))
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("FUNCGRAD_CACHE_DIR", os.path.join(tempfile.gettempdir(), "funcgrad-fuzz-cache"))
    worker = Worker(cfg, modes, a.timeout)      # shrinks failures (its process starts on first use)
    checkers = [Worker(cfg, modes, a.timeout, a.recycle) for _ in range(a.jobs)]
    pool = queue.Queue()
    for w in checkers:
        pool.put(w)

    seeds = [a.only] if a.only is not None else range(a.n)
    counts = collections.Counter()
    refused = collections.Counter()
    refused_at = collections.defaultdict(list)    # message -> the first program numbers refused with it
    invalid = collections.Counter()
    classes: dict = {}
    shrunk_per_class = collections.Counter()
    t0 = time.monotonic()
    summary_path = os.path.join(a.out, "SUMMARY.txt")

    def check_one(i):
        drawer = RandomDrawer(a.seed + i)
        prog = generate(drawer, cfg)
        w = pool.get()
        try:
            return i, prog, drawer.choices, w.check(prog)
        finally:
            pool.put(w)

    ex = concurrent.futures.ThreadPoolExecutor(a.jobs)
    try:
        futures = [ex.submit(check_one, i) for i in seeds]
        for fut in concurrent.futures.as_completed(futures):
            i, prog, choices, out = fut.result()
            counts[out.status] += 1
            if a.only is not None:
                print(prog.source)
                print(out)
            if out.status == "REFUSED":
                from .check import _normalize
                key = f"{out.kind}: {_normalize(out.message)}"
                refused[key] += 1
                if len(refused_at[key]) < 3:
                    refused_at[key].append(a.seed + i)
            elif out.status == "INVALID":
                invalid[out.kind] += 1
            elif out.status == "FAILURE":
                cls = failure_class(out)
                entry = classes.setdefault(cls, {"count": 0, "files": [], "example": out})
                entry["count"] += 1
                idx = len(entry["files"])
                if idx < 5:
                    path = os.path.join(a.out, f"{_slug(cls)}-p{a.seed + i}.py")
                    if a.shrink and shrunk_per_class[cls] < a.shrink_per_class:
                        shrunk_per_class[cls] += 1
                        prog, out = _shrink(worker, cfg, choices, cls, out, a.shrink)
                        path = os.path.join(a.out, f"{_slug(cls)}-p{a.seed + i}-min.py")
                    write_program(path, prog, out, note=f"program {a.seed + i} of FUZZ_SEED={a.seed}")
                    entry["files"].append(path)
            done = sum(counts.values())
            if done % 10 == 0 or a.only is not None:
                el = time.monotonic() - t0
                print(f"[{done}/{len(seeds)}] {el:.0f}s  " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                      + f"  classes={len(classes)}", flush=True)
                _write_summary(summary_path, counts, refused, invalid, classes, el, refused_at)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        for f in futures:
            f.cancel()
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        for w in [worker] + checkers:
            w.stop()
    el = time.monotonic() - t0
    text = _write_summary(summary_path, counts, refused, invalid, classes, el, refused_at)
    print(text)
    return 1 if classes else 0


def _same_failure(cls, out):
    first = out.mode.split(",")[0]

    def same(o):
        if o.status != "FAILURE" or o.kind != out.kind:
            return False
        if o.kind in ("wrong-gradient", "wrong-value", "timeout", "crash"):
            return first in o.mode.split(",") or first == "?"
        return failure_class(o) == cls
    return same


def _shrink(worker, cfg, choices, cls, out, tries):
    """Shrink the program's choices a little, then its source (tests/fuzz/reduce.py)."""
    import dataclasses
    from .reduce import reduce_source
    same = _same_failure(cls, out)
    modes = tuple(m for m in out.mode.split(",") if m and m != "?") or None
    best = shrink_choices(choices, lambda c: same(worker.check(generate(ReplayDrawer(c), cfg), modes=modes)),
                          max_tries=max(tries // 4, 1), max_seconds=tries * 1.5)
    prog = generate(ReplayDrawer(best), cfg)
    src = reduce_source(prog.source, lambda s: same(worker.check(dataclasses.replace(prog, source=s), modes=modes)),
                        max_tries=tries, max_seconds=tries * 5.0)
    prog = dataclasses.replace(prog, source=src)
    final = worker.check(prog)
    return prog, final


def _write_summary(path, counts, refused, invalid, classes, elapsed, refused_at=None):
    total = sum(counts.values())
    lines = [f"funcgrad fuzz: {total} programs in {elapsed:.0f} s: "
             + ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items()))]
    if refused:
        lines.append("refused, by message:")
        for k, v in refused.most_common():
            lines.append(f"  {v:5d}  {k}")
            if refused_at and refused_at.get(k):    # to see one: --seed N --n 1, or --only i
                lines.append(f"         programs {', '.join(map(str, refused_at[k]))}")
    if invalid:
        lines.append("invalid (discarded), by reason: " + ", ".join(f"{k} {v}" for k, v in invalid.most_common()))
    if classes:
        lines.append(f"FAILURES: {len(classes)} distinct classes")
        for cls, e in sorted(classes.items(), key=lambda kv: -kv[1]["count"]):
            lines.append(f"  {e['count']:5d}  {cls[1]} [{e['example'].mode}] {cls[2] if len(cls) > 2 else ''}"[:220])
            for f in e["files"][:3]:
                lines.append(f"           {f}")
    else:
        lines.append("no failures")
    text = "\n".join(lines)
    with open(path, "w") as fh:
        fh.write(text + "\n")
    return text


if __name__ == "__main__":
    sys.exit(main())
