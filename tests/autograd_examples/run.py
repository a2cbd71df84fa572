"""Run HIPS autograd's example programs, unedited, under funcgrad and under autograd, and compare gradients.

    make autograd-examples [EXAMPLES=gmm,lstm]
    python tests/autograd_examples/run.py [--examples gmm,lstm] [--timeout S]

What it does. It takes the example programs (``examples/*.py`` and ``examples/fluidsim/*.py``, less the
helpers ``data.py``, ``data_mnist.py`` and the tracer demos ``dot_graph.py``, ``print_trace.py``: 29 of
them) from autograd's sdist, the same ``autograd-1.9.1.tar.gz`` with the same pinned sha256 that
``make autograd-suite`` uses (``tests/autograd_suite/run.py`` fetches and caches it). For each example it

 1. writes the original file (for autograd) and a copy with the imports rewritten mechanically
    (``tests.autograd_suite.run.rewrite``: ``autograd.numpy`` -> ``numpy``, ``autograd`` -> ``funcgrad``),
    with the helper modules and data files (images) alongside;
 2. runs the funcgrad copy under ``harness.py`` in a subprocess (timeout ``--timeout``, default 300 s, and a
    fresh empty ``FUNCGRAD_CACHE_DIR``, so the first call's time is a cold compile), recording the first
    calls of every gradient function the program makes (arguments, result or error, seconds);
 3. runs the original under autograd (installed separately; it is the oracle) with the same harness,
    calling autograd at the same calls on funcgrad's recorded arguments, so both gradients are taken at the
    same point;
 4. compares the results (allclose, rtol 1e-6, atol 1e-9 * max|autograd|).

The harness changes nothing in the example's text. Around it: matplotlib's Agg backend, plt.show, pause and
draw are no-ops (and os.system); MNIST is replaced by small random data (300/100 28x28 images, no
network); ``misc.optimizers`` adam/sgd/rmsprop run at most 3 iterations and ``scipy.optimize.minimize`` at
most maxiter 3; a run stops (normally) once one gradient function has been called more than a cap (30;
convnet 3, hmm_em 5, rkhs 5, sinusoid none); lstm, rnn and hmm_em train on the text of their own source
file, and the funcgrad copy reads the ORIGINAL text, so both libraries see the same data.

Where it writes. Everything goes to ``EXAMPLES_OUT`` (default ``<SUITE_CACHE>/examples``, SUITE_CACHE
defaulting to ``~/.cache/funcgrad-autograd-suite``): ``src/`` (both copies), ``runs/<name>/`` (each run's
log, JSON state and the .npz of recorded arrays; nothing is pickled), ``results/<name>.json`` (the verdict
and every compared call), ``summary.json`` (a row for every example with a result there, so a run of a subset updates its rows; each row says the funcgrad commit it ran at) and ``REPORT.md`` (the table, then each
failure's error and the line it names). The table is also printed.

Statuses. MATCH: every gradient call recorded in both runs gave the same result, at least one was
compared, and neither run failed. MISMATCH <d>: some compared call differs (d: the largest absolute
difference). FUNCGRAD ERROR: the funcgrad run, or one of its recorded gradient calls, raised while autograd
ran (a call that raised counts even if the program caught it). AUTOGRAD ALSO FAILS: both raised. TIMEOUT:
the funcgrad run ran out of time. AUTOGRAD FAILS (funcgrad ran): nothing was compared and autograd raised.
NO GRADIENT COMPARED: both ran, no call could be compared. ``first call (s)`` is funcgrad's wall time
for the program's first gradient call, compile included (the shared machine's times are rough). The exit
status is 0 whatever the statuses (this is a survey, not a test).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.autograd_examples import records as R  # noqa: E402
from tests.autograd_suite.run import VERSION, _cache_dir, fetch_sdist, rewrite  # noqa: E402

SKIP = {"data.py", "data_mnist.py", "__init__.py", "dot_graph.py", "print_trace.py"}
# per-example cap on the top-level calls of one gradient function (0: none); the default is 30
CAP = {"convnet": 3, "hmm_em": 5, "rkhs": 5, "sinusoid": 0}
DEFAULT_CAP = 30
PREFIX = f"autograd-{VERSION}/examples/"


def out_dir():
    return os.path.abspath(os.path.expanduser(os.environ.get("EXAMPLES_OUT") or os.path.join(_cache_dir(),
                                                                                             "examples")))


def prepare(sdist, src):
    """Write both copies of every file under the sdist's examples/ into ``src``/orig and ``src``/fg (the
    .py files of the latter rewritten); return {example name: path relative to examples/}."""
    examples = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            if not (m.isfile() and m.name.startswith(PREFIX)):
                continue
            rel = m.name[len(PREFIX):]
            data = tar.extractfile(m).read()
            for kind in ("orig", "fg"):
                path = os.path.join(src, kind, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                out = rewrite(data.decode("utf-8")).encode("utf-8") if kind == "fg" and rel.endswith(".py") else data
                with open(path, "wb") as fh:
                    fh.write(out)
            if rel.endswith(".py") and os.path.basename(rel) not in SKIP:
                examples[os.path.splitext(os.path.basename(rel))[0]] = rel
    return examples


def run_one(name, rel, kind, timeout, work, replay=None):
    """Run one example under one library (``kind`` fg or orig) in a subprocess; its state (records keyed
    by tuple), with ``status`` timeout/crash when the harness did not finish."""
    lib = "funcgrad" if kind == "fg" else "autograd"
    src = os.path.join(work, "src")
    run_dir = os.path.join(work, "runs", name)
    cwd = os.path.join(run_dir, kind)
    shutil.rmtree(cwd, ignore_errors=True)
    os.makedirs(cwd)
    state_path = os.path.join(run_dir, f"{kind}.json")
    for p in (state_path, R.arrays_dir(state_path)):
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
    cache = tempfile.mkdtemp(prefix=f"fgcache-{name}-")
    env = dict(os.environ, MPLBACKEND="Agg", FUNCGRAD_CACHE_DIR=cache, PYTHONDONTWRITEBYTECODE="1",
               NUMBA_CACHE_DIR=os.path.join(work, "numba_cache"), PYTHONUNBUFFERED="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.join(HERE, "harness.py"), "--lib", lib, "--script",
           os.path.join(src, kind, rel), "--out", state_path, "--cap", str(CAP.get(name, DEFAULT_CAP))]
    if replay:
        cmd += ["--replay", replay]
    if kind == "fg":  # lstm, rnn, hmm_em read a .py file's text: the original's
        cmd += ["--data-dir", os.path.dirname(os.path.join(src, "orig", rel))]
    log = os.path.join(run_dir, f"{kind}.log")
    t0 = time.time()
    timed_out = False
    try:
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the process group this call started
                proc.wait()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.time() - t0
    try:
        state = R.read_state(state_path)
    except (OSError, ValueError):
        state = {"records": {}, "order": [], "status": None, "error": None}
    if timed_out:
        state["status"] = "timeout"
    elif state.get("status") is None:
        state["status"] = "crash"
        with open(log) as fh:
            state["error"] = {"type": "crash", "first": f"exit code {proc.returncode}", "msg3": fh.read()[-600:]}
    state["wall"] = wall
    state["log"] = log
    return state_path, state


def survey_one(name, rel, timeout, work):
    fg_path, fg = run_one(name, rel, "fg", timeout, work)
    ag_path, ag = run_one(name, rel, "orig", timeout, work, replay=fg_path)
    folders = {"fg": R.arrays_dir(fg_path), "ag": R.arrays_dir(ag_path)}
    res = R.judge(name, fg, ag, load=lambda which, rec: R.load_tree(rec["result_blob"], folders[which]))
    res["fg"]["log"], res["ag"]["log"] = fg.get("log"), ag.get("log")
    return res


def _git_head():
    try:
        head = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--short", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return head[:100] + (" (with uncommitted edits)" if dirty else "")


def _where(d, src):
    if not d:
        return ""
    f = d.get("file") or "?"
    for kind in ("fg", "orig"):
        root = os.path.join(src, kind) + os.sep
        if f.startswith(root):
            f = f[len(root):]
    return f"`{f}:{d.get('line')}` `{d.get('text') or ''}`"


def _row(r):
    comp = [c for c in r["calls"] if c["status"] in ("match", "mismatch")]
    mad = max((c.get("max_abs_diff") or 0) for c in comp) if comp else None
    first = "" if r["fg_first_call_s"] is None else f"{r['fg_first_call_s']:.1f}"
    return comp, mad, first


def table(rows):
    lines = [f"{'example':<32} {'status':<30} {'first call (s)':>14}  compared (mismatched)"]
    for r in rows:
        comp, _, first = _row(r)
        lines.append(f"{r['name']:<32} {r['status']:<30} {first:>14}  {len(comp)} ({r['n_mismatch']})")
    return "\n".join(lines)


def report(rows, work, head):
    src = os.path.join(work, "src")
    n_match = sum(r["status"] == "MATCH" for r in rows)
    L = ["# autograd's examples through funcgrad", "",
         f"funcgrad: `{head}`; autograd {VERSION} examples from its sdist; the oracle: the installed autograd.",
         f"{n_match} of {len(rows)} examples MATCH. How and what the statuses mean: the docstring of "
         "`tests/autograd_examples/run.py`. `args same`: autograd's own arguments at that call were identical "
         "to funcgrad's (no: the trajectories or random draws differed before; both are then called on "
         "funcgrad's).", "",
         "| example | status | fg first call (s) | calls compared (mismatched) | max abs diff | args same | "
         "fg run | autograd run |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        comp, mad, first = _row(r)
        same = {c.get("args_equal") for c in comp}
        same_s = "" if not comp else ("yes" if same == {True} else "no" if same == {False} else "mixed")
        runs = []
        for k in ("fg", "ag"):
            runs.append(r[k]["status"] + (f" {r[k]['t_total']:.0f}s" if r[k].get("t_total") else ""))
        L.append(f"| {r['name']} | {r['status']} | {first} | {len(comp)} ({r['n_mismatch']}) | "
                 f"{'' if mad is None else f'{mad:.2g}'} | {same_s} | {runs[0]} | {runs[1]} |")
    L += ["", "## Failures and mismatches", ""]
    for r in rows:
        if r["status"] == "MATCH":
            continue
        L += [f"### {r['name']}: {r['status']}", ""]
        err = r["fg"]["error"]
        cerr = next((c for c in r["calls"] if c["status"] == "funcgrad error"), None)
        errors = []
        if cerr:
            e = dict(cerr["error"])
            if not e.get("user_frame") and err and err.get("user_frame"):
                e["user_frame"] = err["user_frame"]
            errors.append((f"in the call of `{cerr['key'][0]}` ({cerr['fg_seconds']:.1f}s)", e))
        if err and not (cerr and err.get("first") == cerr["error"].get("first")):
            errors.append(("the funcgrad run", err))
        for what, e in errors:
            L.append(f"- {what}: `{e.get('type')}`: {e.get('first', '')}")
            for ln in [ln for ln in (e.get("msg3") or "").split("\n")[1:] if ln.strip()]:
                L.append(f"  > {ln.strip()}")
            if e.get("names"):
                L.append(f"- names: {_where(e['names'], src)}")
            if e.get("user_frame"):
                L.append(f"- raised from user line: {_where(e['user_frame'], src)}")
            if e.get("last_frame") and not e.get("names"):
                L.append(f"- innermost frame: {_where(e['last_frame'], src)}")
        if r["fg"]["status"] == "timeout":
            L.append(f"- funcgrad run timed out after {r['fg']['wall']:.0f}s; gradient calls made: {r['fg']['calls']}")
        for c in r["calls"]:
            if c["status"] == "mismatch" or c.get("note"):
                L.append(f"- `{c['key'][0]}` #{c['key'][1]}.{c['key'][2]}: {c['status']}, max abs diff "
                         f"{c.get('max_abs_diff')}, max rel diff {c.get('max_rel_diff')}, args same: "
                         f"{c.get('args_equal')}" + (f", note: {c['note']}" if c.get("note") else ""))
        if r["ag"]["status"] in ("error", "crash", "timeout"):
            e = r["ag"]["error"] or {}
            L.append(f"- autograd run: {r['ag']['status']}: `{e.get('type')}`: {e.get('first', '')}"
                     + (f" at {_where(e.get('user_frame'), src)}" if e.get("user_frame") else ""))
        L.append("")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", default=os.environ.get("EXAMPLES", ""),
                    help="comma- or space-separated example names (default: all)")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("EXAMPLES_TIMEOUT", "300")),
                    help="seconds each run (one example, one library) may take")
    a = ap.parse_args(argv)
    work = out_dir()
    sdist = fetch_sdist(_cache_dir())
    src = os.path.join(work, "src")
    shutil.rmtree(src, ignore_errors=True)
    examples = prepare(sdist, src)
    names = [n for n in re.split(r"[,\s]+", a.examples) if n] or sorted(examples)
    unknown = [n for n in names if n not in examples]
    if unknown:
        raise SystemExit(f"unknown examples {unknown}; choose from {sorted(examples)}")
    head = _git_head()
    os.makedirs(os.path.join(work, "results"), exist_ok=True)
    print(f"autograd {VERSION} examples under funcgrad ({len(names)} of {len(examples)}); writing to {work}",
          flush=True)
    rows = []
    t_all = time.time()
    for name in names:
        res = survey_one(name, examples[name], a.timeout, work)
        res["funcgrad_commit"] = head
        lib_file = res["fg"].get("funcgrad_file")
        if lib_file and not os.path.abspath(lib_file).startswith(os.path.join(ROOT, "funcgrad") + os.sep):
            raise SystemExit(f"the harness imported funcgrad from {lib_file}, not from this checkout {ROOT}")
        with open(os.path.join(work, "results", name + ".json"), "w") as fh:
            json.dump(res, fh, indent=1, default=str)
        rows.append(res)
        first = "" if res["fg_first_call_s"] is None else f" first call {res['fg_first_call_s']:.1f}s"
        msg = f" | {res['fg']['error'].get('first', '')[:150]}" if res["fg"]["error"] else ""
        print(f"  {name:<32} {res['status']:<26}{first} (funcgrad {res['fg']['wall']:.0f}s, autograd "
              f"{res['ag']['wall']:.0f}s){msg}", flush=True)
    ran = [r["name"] for r in rows]
    for name in sorted(examples):  # the report and summary: every example with a result (a subset updates its rows)
        p = os.path.join(work, "results", name + ".json")
        if name not in ran and os.path.exists(p):
            with open(p) as fh:
                rows.append(json.load(fh))
    rows.sort(key=lambda r: r["name"])
    n_match = sum(r["status"] == "MATCH" for r in rows)
    print()
    print(table(rows))
    print(f"\n{n_match} of {len(rows)} examples MATCH  [{time.time() - t_all:.0f}s]")
    summary = {"autograd_version": VERSION, "funcgrad": head,
               "when": datetime.datetime.now().isoformat(timespec="seconds"),
               "n_examples": len(rows), "n_match": n_match, "ran_now": ran,
               "examples": [{"name": r["name"], "status": r["status"], "funcgrad": r.get("funcgrad_commit"), "fg_first_call_s": r["fg_first_call_s"],
                             "n_compared": r["n_compared"], "n_mismatch": r["n_mismatch"],
                             "fg_status": r["fg"]["status"], "ag_status": r["ag"]["status"],
                             "fg_error": (r["fg"]["error"] or {}).get("first")} for r in rows]}
    with open(os.path.join(work, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(os.path.join(work, "REPORT.md"), "w") as fh:
        fh.write(report(rows, work, head))
    print(f"summary: {os.path.join(work, 'summary.json')}\nreport: {os.path.join(work, 'REPORT.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
