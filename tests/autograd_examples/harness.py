"""Run one autograd example program (unedited) under one library and record its gradient calls.

    python tests/autograd_examples/harness.py --lib funcgrad|autograd --script EXAMPLE.py --out STATE.json
                      [--replay FG_STATE.json] [--cap N] [--nrec N] [--maxiter N] [--data-dir DIR]

Started by ``run.py`` (one subprocess per example and library, with a timeout); not meant to be imported.

* The script runs as ``__main__`` (runpy), cwd = the caller's, ``sys.path[0]`` = the script's folder.
* Plots: Agg backend; plt.show/pause/draw are no-ops; os.system is a no-op (imagemagick, rm).
* MNIST: ``data_mnist.mnist`` returns small random uint8 data (300 train / 100 test, 28x28, labels 0..9).
* Iterations: the library's ``misc.optimizers.{adam,sgd,rmsprop}`` run at most ``--maxiter`` iterations,
  ``scipy.optimize.minimize`` gets ``options['maxiter'] <= --maxiter``; once any one transform label has been
  called more than ``--cap`` times at top level the run stops (StopSurvey, counted as a normal stop).
* Gradient calls: the library's grad, value_and_grad, elementwise_grad, jacobian, ... factories are
  wrapped. Each object they return gets a label (``grad(fun_qualname)``, nested: ``grad(grad(fun))``) and,
  at its first top-level call, a serial among the objects of that label. The first ``--nrec`` calls of
  the first few objects of each label are recorded: key (label, serial, call#), args (funcgrad only),
  result or error, seconds. Nothing is pickled: the state is JSON (``--out``), the arguments and results
  are pytrees saved by ``records.save_tree`` as .npz files (``allow_pickle=False``) in ``<out>.arrays/``;
  a value that cannot be saved so (a function, an object array) is noted as not recordable.
  funcgrad: the objects of class _ValueAndGrad / _GradOfGrad are returned unchanged (their class
  ``__call__`` records), so funcgrad's nested-transform handling sees its own objects; function-valued
  operators (elementwise_grad, hessian_vector_product, ...) are wrapped with their attributes copied.
* --replay (autograd run): at a key the funcgrad run recorded, autograd is called on funcgrad's arguments
  (so both gradients are taken at the same point) and ``args_equal`` says whether autograd's own
  arguments were the same.
"""
from __future__ import annotations

import argparse
import functools
import io
import os
import random
import runpy
import sys
import time
import traceback


# the repository root first: this checkout's funcgrad and tests.autograd_examples.records
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.autograd_examples import records as R  # noqa: E402


class StopSurvey(BaseException):
    """The survey's iteration cap was reached (not an error of the example)."""


ap = argparse.ArgumentParser()
ap.add_argument("--lib", required=True, choices=["funcgrad", "autograd"])
ap.add_argument("--script", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--replay")
ap.add_argument("--cap", type=int, default=30)
ap.add_argument("--nrec", type=int, default=2)      # calls recorded per object
ap.add_argument("--nser", type=int, default=3)      # objects recorded per label
ap.add_argument("--maxiter", type=int, default=3)
ap.add_argument("--plain", action="store_true")   # control: no gradient recording (factories untouched)
ap.add_argument("--data-dir")   # .py files the example opens as text are read from here (the original text)
OPT = ap.parse_args()

SCRIPT = os.path.abspath(OPT.script)
SCRIPT_DIR = os.path.dirname(SCRIPT)
LIB = OPT.lib

STATE = {"lib": LIB, "script": SCRIPT, "records": {}, "order": [], "status": None, "error": None,
         "t_import": None, "t_total": None, "stopped_at": None, "calls": {}}


ARRAYS = R.arrays_dir(os.path.abspath(OPT.out))
os.makedirs(ARRAYS, exist_ok=True)


def save():
    R.write_state(STATE, OPT.out)


save()

import numpy as np  # noqa: E402

np.random.seed(0)
random.seed(0)

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _noop(*a, **k):
    return None


plt.show = plt.pause = plt.draw = plt.ion = _noop
os.system = lambda cmd: (print(f"[survey] os.system skipped: {cmd}"), 0)[1]

sys.path.insert(0, SCRIPT_DIR)

# lstm.py, rnn.py and hmm_em.py train on the text of an example file: the funcgrad copy reads the original
# text (imports unrewritten), so that both libraries see the same data. (Imports and funcgrad's source
# reading do not go through builtins.open.)
if OPT.data_dir:
    import builtins

    _open = builtins.open

    def _open_original(file, mode="r", *a, **k):
        if isinstance(file, str) and file.endswith(".py") and mode in ("r", "rt"):
            path = os.path.abspath(file)
            if path.startswith(SCRIPT_DIR + os.sep):
                alt = os.path.join(OPT.data_dir, os.path.relpath(path, SCRIPT_DIR))
                if os.path.exists(alt):
                    file = alt
        return _open(file, mode, *a, **k)

    builtins.open = _open_original

# ---------------------------------------------------------------------------------------------- MNIST
if os.path.exists(os.path.join(SCRIPT_DIR, "data_mnist.py")):
    import data_mnist  # noqa: E402

    def _fake_mnist():
        rs = np.random.RandomState(1234)
        tr = rs.randint(0, 256, size=(300, 28, 28)).astype(np.uint8)
        te = rs.randint(0, 256, size=(100, 28, 28)).astype(np.uint8)
        return tr, rs.randint(0, 10, size=300).astype(np.uint8), te, rs.randint(0, 10, size=100).astype(np.uint8)

    data_mnist.mnist = _fake_mnist

# ---------------------------------------------------------------------------------------------- iterations
import scipy.optimize  # noqa: E402

_minimize = scipy.optimize.minimize


@functools.wraps(_minimize)
def _short_minimize(*a, **kw):
    opts = dict(kw.get("options") or {})
    opts["maxiter"] = min(opts.get("maxiter", 10**9), OPT.maxiter)
    kw["options"] = opts
    return _minimize(*a, **kw)


scipy.optimize.minimize = _short_minimize

if LIB == "funcgrad":
    import funcgrad as L  # noqa: E402
    import funcgrad.misc.optimizers as LO  # noqa: E402
    import funcgrad.api as FA  # noqa: E402
    import funcgrad.forward_mode as FF  # noqa: E402
    STATE["lib_file"] = L.__file__
else:
    import autograd as L  # noqa: E402
    import autograd.misc.optimizers as LO  # noqa: E402
    from autograd.tracer import Box as _Box  # noqa: E402

for _name in ("adam", "sgd", "rmsprop"):
    _orig_opt = getattr(LO, _name)

    def _short(*a, _o=_orig_opt, **kw):
        kw["num_iters"] = min(kw.get("num_iters", 10**9), OPT.maxiter)
        return _o(*a, **kw)

    functools.update_wrapper(_short, _orig_opt)
    setattr(LO, _name, _short)

# ---------------------------------------------------------------------------------------------- recording
REPLAY = {}
if OPT.replay and os.path.exists(OPT.replay):
    REPLAY = R.read_state(OPT.replay).get("records", {})
    REPLAY_ARRAYS = R.arrays_dir(os.path.abspath(OPT.replay))

INFO: dict = {}     # id(object) -> info dict
KEEP: list = []     # the objects (so that ids stay unique)
SERIALS: dict = {}  # label -> objects of that label called so far
LABEL_CALLS: dict = {}
DEPTH = [0]
SEQ = [0]


def _fname(fun):
    info = INFO.get(id(fun))
    if info is not None:
        return info["label"]
    mod = (getattr(fun, "__module__", None) or "").split(".")[0]
    qual = getattr(fun, "__qualname__", None) or ""
    if mod in ("numpy", "scipy") or (mod == "autograd" and qual.startswith("primitive.<locals>")):
        return "lib:" + getattr(fun, "__name__", "?")  # NumPy's sqrt / autograd's wrapper of it: one label, not
        # the example's own function of that name (fixed_points differentiates np.sqrt and its own sqrt)
    name = qual or getattr(fun, "__name__", None) or type(fun).__name__
    code = getattr(fun, "__code__", None)
    if "<lambda>" in name and code is not None and os.path.abspath(code.co_filename).startswith(SCRIPT_DIR + os.sep):
        name += f"@{code.co_firstlineno}"   # (the example's lambdas: their line, the same in both copies)
    return name


def _argdesc(a, kw):
    argnum = a[0] if a else kw.get("argnum", kw.get("argnums", 0))
    return "" if argnum == 0 else f", argnum={argnum!r}"


def _has_box(args, kwargs):
    if LIB != "autograd":
        return False
    return any(isinstance(v, _Box) for v in R.leaves([list(args), dict(kwargs)]))


def _same(a, b):
    la, lb = R.leaves(a), R.leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        try:
            xa, ya = np.asarray(x), np.asarray(y)
            if xa.shape != ya.shape or not np.array_equal(xa, ya, equal_nan=xa.dtype.kind in "fc"):
                return False
        except Exception:
            if x is not y and x != y:
                return False
    return True


def _blob(obj, what, objects=False):
    """(description, note): ``obj`` saved as ``<seq>-<what>.npz``, or None and why not (``objects``: see
    records.encode; for results, which are compared, never for arguments, which autograd is called with)."""
    try:
        return R.save_tree(obj, os.path.join(ARRAYS, f"{SEQ[0]}-{what}.npz"), objects), None
    except R.NotRecordable as e:
        return None, f"not recordable: {e}"


def _structure(x):
    if isinstance(x, dict):
        return type(x).__name__ + "{" + ",".join(f"{k}:{_structure(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        return type(x).__name__ + "[" + ",".join(_structure(v) for v in x) + "]"
    if isinstance(x, np.ndarray):
        return f"ndarray{x.shape}{x.dtype}"
    return type(x).__name__


def describe_error(e):
    """type, first 3 lines of the message, the line a funcgrad error names, and where it was raised."""
    msg = str(e)
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    d = {"type": type(e).__module__ + "." + type(e).__qualname__, "msg3": "\n".join(lines[:3]),
         "first": lines[0] if lines else "", "names": None, "user_frame": None, "last_frame": None,
         "notes": list(getattr(e, "__notes__", []) or [])}
    fn, ln = getattr(e, "filename", None), getattr(e, "lineno", None)
    if fn and ln and isinstance(fn, str):
        d["names"] = {"file": fn, "line": ln, "text": (getattr(e, "text", None) or "").strip()}
    tb = traceback.extract_tb(e.__traceback__)
    if tb:
        last = tb[-1]
        d["last_frame"] = {"file": last.filename, "line": last.lineno, "text": (last.line or "").strip()}
        for fr in reversed(tb):
            if os.path.abspath(fr.filename).startswith(SCRIPT_DIR + os.sep):
                d["user_frame"] = {"file": fr.filename, "line": fr.lineno, "text": (fr.line or "").strip()}
                break
    d["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-6000:]
    return d


def record_call(info, call, args, kwargs):
    label = info["label"]
    LABEL_CALLS[label] = LABEL_CALLS.get(label, 0) + 1
    if OPT.cap and LABEL_CALLS[label] > OPT.cap:
        STATE["stopped_at"] = f"{label}: call {LABEL_CALLS[label]} > cap {OPT.cap}"
        save()
        raise StopSurvey(STATE["stopped_at"])
    if info["serial"] is None:
        info["serial"] = SERIALS.get(label, 0)
        SERIALS[label] = info["serial"] + 1
    k = info["ncalls"]
    info["ncalls"] += 1
    key = (label, info["serial"], k)
    STATE["calls"][label] = LABEL_CALLS[label]
    rec = None
    if k < OPT.nrec and info["serial"] < OPT.nser:
        SEQ[0] += 1
        rec = {"key": key, "seq": SEQ[0], "op": info["op"], "result": None, "error": None,
               "args_equal": None, "replayed": False}
        if LIB == "funcgrad":
            rec["args_blob"], rec["args_note"] = _blob((list(args), kwargs), "args")
        else:
            r = REPLAY.get(key)
            if r is not None and r.get("args_blob") is not None:
                rargs, rkwargs = R.load_tree(r["args_blob"], REPLAY_ARRAYS)
                rec["args_equal"] = _same((list(args), kwargs), (list(rargs), rkwargs))
                args, kwargs = tuple(rargs), rkwargs
                rec["replayed"] = True
    DEPTH[0] += 1
    t0 = time.perf_counter()
    try:
        out = call(*args, **kwargs)
    except BaseException as e:
        if rec is not None and not isinstance(e, StopSurvey):
            rec["seconds"] = time.perf_counter() - t0
            rec["error"] = describe_error(e)
            STATE["records"][key] = rec
            STATE["order"].append(key)
            save()
        raise
    finally:
        DEPTH[0] -= 1
    if rec is not None:
        rec["seconds"] = time.perf_counter() - t0
        rec["structure"] = _structure(out)
        rec["result_blob"], rec["result_note"] = _blob(out, "result", objects=True)
        STATE["records"][key] = rec
        STATE["order"].append(key)
        save()
    return out


def _new_info(op, fun, a, kw):
    return {"op": op, "label": f"{op}({_fname(fun)}{_argdesc(a, kw)})", "serial": None, "ncalls": 0}


OPS = ["grad", "value_and_grad", "elementwise_grad", "jacobian", "hessian_vector_product",
       "hessian_tensor_product", "holomorphic_grad", "deriv", "tensor_jacobian_product", "vector_jacobian_product"]

if LIB == "funcgrad":
    _CLASSES = (FA._ValueAndGrad, FF._GradOfGrad)

    for _cls in (() if OPT.plain else _CLASSES):
        def _make_call(orig):
            def __call__(self, *args, **kwargs):
                info = INFO.get(id(self))
                if info is None or DEPTH[0] > 0:
                    return orig(self, *args, **kwargs)
                return record_call(info, lambda *a, **k: orig(self, *a, **k), args, kwargs)
            functools.update_wrapper(__call__, orig)
            return __call__
        _cls.__call__ = _make_call(_cls.__call__)

    def _make_factory(orig, op):
        @functools.wraps(orig)   # (copies _funcgrad_static_call)
        def factory(fun, *a, **kw):
            T = orig(fun, *a, **kw)
            info = _new_info(op, fun, a, kw)
            if isinstance(T, _CLASSES):
                obj = T
            else:
                def obj(*args, **kwargs):
                    if DEPTH[0] > 0:
                        return T(*args, **kwargs)
                    return record_call(info, T, args, kwargs)
                functools.update_wrapper(obj, T)   # (copies _funcgrad_inline and the name)
            INFO[id(obj)] = info
            KEEP.append(obj)
            return obj
        return factory
else:
    def _make_factory(orig, op):
        @functools.wraps(orig)
        def factory(fun, *a, **kw):
            T = orig(fun, *a, **kw)
            info = _new_info(op, fun, a, kw)

            @functools.wraps(T)
            def obj(*args, **kwargs):
                if DEPTH[0] > 0 or _has_box(args, kwargs):
                    return T(*args, **kwargs)
                return record_call(info, T, args, kwargs)
            INFO[id(obj)] = info
            KEEP.append(obj)
            return obj
        return factory

for _op in OPS:
    if hasattr(L, _op) and not OPT.plain:
        setattr(L, _op, _make_factory(getattr(L, _op), _op))

# ---------------------------------------------------------------------------------------------- run
sys.argv = [SCRIPT]
t0 = time.perf_counter()
try:
    runpy.run_path(SCRIPT, run_name="__main__")
    STATE["status"] = "ok"
except StopSurvey:
    STATE["status"] = "stopped"
except SystemExit as e:
    STATE["status"] = "ok" if not e.code else "error"
    if e.code:
        STATE["error"] = {"type": "SystemExit", "msg3": str(e.code), "first": str(e.code)}
except BaseException as e:  # noqa: BLE001
    STATE["status"] = "error"
    STATE["error"] = describe_error(e)
    traceback.print_exc()
STATE["t_total"] = time.perf_counter() - t0
save()
print(f"[survey] {LIB}: {STATE['status']} in {STATE['t_total']:.1f}s; calls {STATE['calls']}", flush=True)
sys.stdout.flush()
os._exit(0)
