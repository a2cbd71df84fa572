"""Run HIPS autograd's own test suite against funcgrad and count what passes.

    python tests/autograd_suite/run.py [-k EXPR] [--files numpy,linalg] [-- extra pytest args]
    make autograd-suite [SUITE_FILES=numpy,linalg] [K=EXPR]

Fetches autograd's sdist (``pip download --no-deps --no-binary :all:
autograd==1.9.1``, checked against its pinned sha256) into a cache folder
(``SUITE_CACHE``, default ``~/.cache/funcgrad-autograd-suite``), reusing it when
present; a local copy with the same sha256 (``AUTOGRAD_SDIST``, default
``/tmp/agdl/autograd-1.9.1.tar.gz``) saves the download. It extracts the test
files below with ``numpy_utils.py`` and ``conftest.py`` into a temporary
folder, rewrites their imports mechanically (``autograd.numpy`` -> ``numpy``,
``autograd.scipy`` -> ``scipy``, every other ``autograd`` -> ``funcgrad``) and
runs pytest on each file in turn, with a per-test timeout
(``SUITE_TEST_TIMEOUT`` s, default 300) and a per-file one (``SUITE_TIMEOUT`` s,
default 1800). It prints each file's passed/total and the overall count and
writes a JSON summary (counts, each failing test id and the first line of its
failure, pytest's own summary line) to ``SUITE_OUT`` (default
``<cache>/summary.json``). ``--diagnose-rev1`` (``SUITE_DIAGNOSE=rev1``) is a
diagnostic, labelled as such and never the suite's count: every
``check_grads`` is reduced to reverse mode, first order, to show what fails
besides forward mode and nested transforms; ``--both-modes`` (``SUITE_DIAGNOSE=both2``) is
stricter than the suite: every ``check_grads`` checks forward and reverse mode to at least second
order, also where autograd's tests ask for less (its SciPy tests check reverse mode only). The counts are pytest's: a test counts as passed only
when pytest reports it passed, and for every file that ran to the end the
script checks its counts against pytest's summary line.

Nothing of autograd is kept in this repository; the rewritten files live only
in the temporary folder (``SUITE_KEEP=1`` keeps it and prints where).
"""
from __future__ import annotations

import argparse
import hashlib
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

VERSION = "1.9.1"
SDIST = f"autograd-{VERSION}.tar.gz"
SHA256 = "7818c5c69ddf9efb7da74097bd741a4c7920133f41966f68537223a15ef798bc"
FILES = ["scalar_ops", "binary_ops", "numpy", "systematic", "truediv", "linalg", "scipy", "fft", "complex",
         "jacobian", "direct", "dict", "list", "tuple", "builtins"]
HELPERS = ["numpy_utils.py", "conftest.py"]

# a pytest plugin loaded into each run: every test's outcome, as it finishes, one JSON line each (so a file
# that runs out of time still reports the tests it finished), and the number of tests collected
PLUGIN = r'''
import json, os, re

_OUT = os.environ["SUITE_RESULTS"]


def pytest_configure(config):
    if os.environ.get("SUITE_DIAGNOSE") == "rev1":  # a diagnostic, not the suite: reverse mode, first order only
        import funcgrad.testing as T
        original = T._ag_check_grads

        def rev1(fun, argnum=0, modes=None, order=None):
            return original(fun, argnum, modes=("rev",), order=1)

        T._ag_check_grads = rev1
    elif os.environ.get("SUITE_DIAGNOSE") == "both2":  # stricter than the suite: both modes, order >= 2
        import funcgrad.testing as T
        original = T._ag_check_grads

        depth = [0]

        def both2(fun, argnum=0, modes=None, order=2):
            # only the test's own call is raised to order 2: check_grads recurses through this same module name
            # for the lower orders, and raising those again never ends (order 2 -> 1 -> 2 -> ...)
            if depth[0]:
                return original(fun, argnum, modes=modes, order=order)
            check = original(fun, argnum, modes=("fwd", "rev"), order=max(order or 2, 2))

            def run(*args, **kwargs):
                depth[0] += 1
                try:
                    return check(*args, **kwargs)
                finally:
                    depth[0] -= 1
            return run

        T._ag_check_grads = both2


def _write(rec):
    with open(_OUT, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def pytest_collection_finish(session):
    _write({"collected": len(session.items)})


def _first_line(report):
    """The failure's first line: the line naming the exception (``ExcType: message``) when there is one."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if crash is None:  # a collection error: pytest's "E   ..." lines hold the exception
        lines = [ln[1:].strip() for ln in lines if ln.startswith("E ")] or lines
    for ln in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", ln):
            return ln[:500]
    return lines[0][:500] if lines else ""


def pytest_collectreport(report):
    if report.failed:  # a file or class that does not even collect (an import error): one error, as pytest counts
        _write({"id": report.nodeid or "<collection>", "when": "collect", "outcome": "error",
                "message": _first_line(report)})


def pytest_runtest_logreport(report):
    if report.when != "call" and report.passed:
        return
    xfail = hasattr(report, "wasxfail")
    if report.passed:
        outcome = "xpassed" if xfail else "passed"
    elif report.skipped:
        outcome = "xfailed" if xfail else "skipped"
    else:
        outcome = "failed" if report.when == "call" else "error"
    _write({"id": report.nodeid, "when": report.when, "outcome": outcome,
            "message": _first_line(report) if outcome in ("failed", "error") else ""})
'''


def _cache_dir():
    return os.path.abspath(os.path.expanduser(os.environ.get("SUITE_CACHE", "~/.cache/funcgrad-autograd-suite")))


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_sdist(cache):
    """The path of autograd's sdist in ``cache``: already there, copied from a local copy with the pinned
    sha256, or downloaded with pip."""
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, SDIST)
    if os.path.exists(path) and _sha256(path) == SHA256:
        return path
    local = os.environ.get("AUTOGRAD_SDIST", f"/tmp/agdl/{SDIST}")
    if os.path.exists(local) and _sha256(local) == SHA256:
        shutil.copyfile(local, path)
        print(f"autograd sdist: copied {local} (sha256 checked)")
        return path
    print(f"autograd sdist: pip download autograd=={VERSION} into {cache}")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                    f"autograd=={VERSION}", "-d", cache], check=True)
    got = _sha256(path)
    if got != SHA256:
        raise SystemExit(f"{path}: sha256 {got} is not the pinned {SHA256}")
    return path


_RULES = [(re.compile(r"\bautograd\.numpy\b"), "numpy"),
          (re.compile(r"\bautograd\.scipy\b"), "scipy"),
          (re.compile(r"\bautograd\b"), "funcgrad"),
          # autograd makes scipy.stats.multivariate_normal a module; in SciPy it is an object. The from-form
          # imports either (and is the same import for a module)
          (re.compile(r"^(\s*)import ((?:numpy|scipy)(?:\.\w+)*)\.(\w+) as (\w+)\s*$", re.M),
           r"\1from \2 import \3 as \4")]


def rewrite(text):
    """autograd's imports and names, mechanically: ``autograd.numpy`` -> ``numpy``, ``autograd.scipy`` ->
    ``scipy``, every other ``autograd`` -> ``funcgrad``; then ``import scipy.a.b as n`` -> ``from scipy.a
    import b as n`` (NumPy's and SciPy's dotted imports with an alias)."""
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


def extract(sdist, dest, names):
    """Write the rewritten test files ``names`` (and the helpers) from the sdist's tests/ into ``dest``."""
    prefix = f"autograd-{VERSION}/tests/"
    with tarfile.open(sdist) as tar:
        for fn in names + HELPERS:
            member = tar.getmember(prefix + fn)
            text = tar.extractfile(member).read().decode("utf-8")
            with open(os.path.join(dest, fn), "w") as fh:
                fh.write(rewrite(text))
    with open(os.path.join(dest, "_suite_plugin.py"), "w") as fh:
        fh.write(PLUGIN)
    with open(os.path.join(dest, "pytest.ini"), "w") as fh:  # this folder is the rootdir: no outer config
        fh.write("[pytest]\naddopts =\n")


def _summary_counts(line):
    """pytest's final summary line ("3 failed, 10 passed, 1 skipped in 2.0s") as counts."""
    counts = {}
    for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", line):
        counts["error" if word.startswith("error") else word] = int(n)
    return counts


def run_file(dest, fn, k, extra, file_timeout, test_timeout):
    results = os.path.join(dest, fn + ".results.jsonl")
    if os.path.exists(results):
        os.remove(results)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_suite_plugin",
           "-o", "console_output_style=classic", f"--timeout={test_timeout}", fn]
    if k:
        cmd += ["-k", k]
    cmd += extra
    env = dict(os.environ, SUITE_RESULTS=results, PYTHONPATH=dest + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()
    timed_out = False
    proc = subprocess.Popen(cmd, cwd=dest, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=file_timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    seconds = time.time() - t0
    collected, reports = None, []
    if os.path.exists(results):
        with open(results) as fh:
            for line in fh:
                r = json.loads(line)
                if "collected" in r:
                    collected = r["collected"]
                else:
                    reports.append(r)
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    summary = lines[-1].strip("= ") if lines and not timed_out else ""
    counts = {key: 0 for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}
    for r in reports:  # every report pytest counts (a teardown error after a pass counts twice, as in pytest)
        counts[r["outcome"]] += 1
    total = collected or 0
    finished = len({r["id"] for r in reports if r["when"] != "collect"})
    rec = {"file": fn, "total": total, **counts, "not_run": max(0, total - finished), "timed_out": timed_out,
           "returncode": proc.returncode, "seconds": round(seconds, 1), "pytest_summary": summary,
           "failures": [{"id": r["id"], "when": r["when"], "outcome": r["outcome"], "message": r["message"]}
                        for r in reports if r["outcome"] in ("failed", "error")]}
    if not timed_out:
        want = {key: v for key, v in _summary_counts(summary).items() if key != "deselected"}
        got = {key: v for key, v in counts.items() if v}
        if want != got:
            raise SystemExit(f"{fn}: the plugin counted {got} but pytest reports {summary!r}")
    return rec, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default=os.environ.get("SUITE_K") or None, help="pytest -k expression")
    ap.add_argument("--files", default=os.environ.get("SUITE_FILES", ""),
                    help="comma- or space-separated subset of: " + ", ".join(FILES))
    ap.add_argument("--out", default=os.environ.get("SUITE_OUT"), help="where to write the JSON summary")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each file's pytest output")
    ap.add_argument("--diagnose-rev1", action="store_true", default=os.environ.get("SUITE_DIAGNOSE") == "rev1",
                    help="a diagnostic, NOT the suite's count: every check_grads checks reverse mode, first order "
                         "only (shows what fails besides forward mode and nested transforms)")
    ap.add_argument("--both-modes", action="store_true", default=os.environ.get("SUITE_DIAGNOSE") == "both2",
                    help="stricter than the suite: every check_grads checks forward and reverse mode, to at least "
                         "second order")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    a = ap.parse_args(argv)
    names = [n for n in re.split(r"[,\s]+", a.files) if n] or FILES
    names = [n.removeprefix("test_").removesuffix(".py") for n in names]
    unknown = [n for n in names if n not in FILES]
    if unknown:
        raise SystemExit(f"unknown suite files {unknown}; choose from {FILES}")
    files = [f"test_{n}.py" for n in names]
    cache = _cache_dir()
    sdist = fetch_sdist(cache)
    out_path = a.out or os.path.join(cache, "summary.json")
    file_timeout = float(os.environ.get("SUITE_TIMEOUT", "1800"))
    test_timeout = int(os.environ.get("SUITE_TEST_TIMEOUT", "300"))
    if a.diagnose_rev1 and a.both_modes:
        raise SystemExit("--diagnose-rev1 and --both-modes exclude each other")
    if a.diagnose_rev1:
        os.environ["SUITE_DIAGNOSE"] = "rev1"
        print("DIAGNOSTIC RUN, not the suite's count: check_grads checks reverse mode to first order only")
    if a.both_modes:
        os.environ["SUITE_DIAGNOSE"] = "both2"
        print("STRICT RUN: every check_grads checks forward and reverse mode to at least second order")
    dest = tempfile.mkdtemp(prefix="funcgrad-autograd-suite-")
    records = []
    try:
        extract(sdist, dest, [f"test_{n}.py" for n in FILES])  # all of them: test_truediv imports test_binary_ops
        print(f"autograd {VERSION} test suite against funcgrad ({len(files)} files"
              f"{', -k ' + repr(a.k) if a.k else ''})")
        for fn in files:
            rec, out = run_file(dest, fn, a.k, a.pytest_args, file_timeout, test_timeout)
            records.append(rec)
            if a.verbose:
                print(out)
            extra = "".join(f", {rec[key]} {key}" for key in ("failed", "error", "skipped", "xfailed", "xpassed",
                                                               "not_run") if rec[key])
            print(f"  {fn:<22} {rec['passed']:>4}/{rec['total']:<4} passed{extra}"
                  f"{'  (TIMED OUT)' if rec['timed_out'] else ''}  [{rec['seconds']:.0f}s]", flush=True)
    finally:
        if os.environ.get("SUITE_KEEP"):
            print(f"rewritten tests kept in {dest}")
        else:
            shutil.rmtree(dest, ignore_errors=True)
    totals = {key: sum(r[key] for r in records) for key in
              ("total", "passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_run")}
    summary = {"autograd_version": VERSION, "sdist_sha256": SHA256, "k": a.k,
               "diagnostic": ("rev1: check_grads reduced to reverse mode, first order" if a.diagnose_rev1 else
                              "both2: check_grads in forward and reverse mode, order >= 2" if a.both_modes else None),
               "files": records, "totals": totals,
               "timed_out_files": [r["file"] for r in records if r["timed_out"]]}
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(summary, fh, indent=1)
    print(f"{'DIAGNOSTIC (rev1) ' if a.diagnose_rev1 else 'STRICT (both modes, order 2) ' if a.both_modes else ''}overall: {totals['passed']}/{totals['total']} passed"
          + "".join(f", {totals[key]} {key}" for key in ("failed", "error", "skipped", "xfailed", "xpassed",
                                                         "not_run") if totals[key]))
    print(f"summary: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
