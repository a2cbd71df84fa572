"""Records of the examples survey, without pickle: pytrees saved as JSON + ``.npz``, and their comparison.

A recorded value (a gradient call's arguments or its result) is a pytree of tuples, lists, dicts, None,
bools, strings, Python and NumPy numbers and arrays. :func:`encode` turns it into a JSON description whose
numeric leaves are keys into a dict of arrays (saved with ``np.savez``, read back with
``allow_pickle=False``); :func:`decode` rebuilds the same tree, the same types. Anything else (a function,
an object array, a user class) is not recordable: :class:`NotRecordable`, and the record says so. A result
(``objects=True``) may also be an object of a class the example program defines (a gradient that is an element
of the program's own vector space, rkhs.py's RKHSFun): it is recorded by its attributes, the functions among
them by name, and read back as a dict ``{"__class__": name, attribute: value...}``: compared, never replayed.

:func:`compare` and :func:`judge` are the survey's verdicts (used by ``run.py``; kept here so that they can
be tested on synthetic records).
"""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

RTOL, ATOL = 1e-6, 1e-9


class NotRecordable(TypeError):
    """A value the pickle-free record cannot hold."""


def encode(x, arrays, objects=False, _depth=0, _attribute=False):
    """The JSON description of the pytree ``x``; its arrays and numbers go into ``arrays`` (name -> ndarray).
    ``objects``: an object of the program's own classes is described by its attributes (see the module)."""
    if _depth > 20:
        raise NotRecordable("a value nested more than 20 deep")

    def enc(v):
        return encode(v, arrays, objects, _depth + 1)

    def arr(a, tag):
        name = f"a{len(arrays)}"
        arrays[name] = a
        return {tag: name}

    if x is None or isinstance(x, (bool, str)):
        return {"v": x}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        raise NotRecordable(f"a namedtuple ({type(x).__name__})")
    if type(x) in (tuple, list):
        return {type(x).__name__: [enc(v) for v in x]}
    if type(x) is dict:
        keys = list(x)
        if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in keys):
            raise NotRecordable(f"a dict with keys {[type(k).__name__ for k in keys]}")
        return {"dict": [[{"s": k} if isinstance(k, str) else {"i": k}, enc(x[k])] for k in keys]}
    if type(x) in (int, float, complex):
        return arr(np.asarray(x), "py_" + type(x).__name__)
    if isinstance(x, np.generic):
        if x.dtype.kind not in "biufc":
            raise NotRecordable(f"a NumPy scalar of dtype {x.dtype}")
        return arr(np.asarray(x), "np_scalar")
    if type(x) is np.ndarray:
        if x.dtype.kind not in "biufc":
            raise NotRecordable(f"an array of dtype {x.dtype}")
        return arr(x, "ndarray")
    if objects and getattr(type(x), "__module__", None) == "__main__" and hasattr(x, "__dict__") \
            and not isinstance(x, type):
        return {"object": [type(x).__qualname__, {"dict": [[{"s": k}, encode(v, arrays, objects, _depth + 1, True)]
                                                           for k, v in vars(x).items()]}]}
    if _attribute and callable(x) and hasattr(x, "__qualname__"):   # a function an object holds (a kernel)
        return {"fn": x.__qualname__}
    raise NotRecordable(f"a {type(x).__module__}.{type(x).__qualname__}")


def decode(d, arrays):
    """The pytree :func:`encode` described (``arrays``: name -> ndarray, e.g. an opened ``.npz``)."""
    (tag, v), = d.items()
    if tag == "v":
        return v
    if tag == "tuple":
        return tuple(decode(e, arrays) for e in v)
    if tag == "list":
        return [decode(e, arrays) for e in v]
    if tag == "dict":
        return {(k["s"] if "s" in k else k["i"]): decode(e, arrays) for k, e in v}
    if tag == "object":
        return {"__class__": v[0], **decode(v[1], arrays)}
    if tag == "fn":
        return f"<function {v}>"
    a = np.asarray(arrays[v])
    if tag == "ndarray":
        return a
    if tag == "np_scalar":
        return a[()]
    if tag in ("py_int", "py_float", "py_complex"):
        return {"py_int": int, "py_float": float, "py_complex": complex}[tag](a.item())
    raise ValueError(f"unknown record tag {tag!r}")


def save_tree(x, path, objects=False):
    """Write ``x`` as ``path`` (.npz of its arrays) and return its JSON description; raises NotRecordable."""
    arrays = {}
    desc = encode(x, arrays, objects)
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return {"tree": desc, "npz": os.path.basename(path)}


def load_tree(blob, folder):
    """The pytree :func:`save_tree` wrote (``blob``: its description; ``folder``: where its .npz is)."""
    with np.load(os.path.join(folder, blob["npz"]), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return decode(blob["tree"], arrays)


def write_state(state, path):
    """The harness's state as JSON (records keyed by (label, serial, call#) become a list)."""
    out = dict(state)
    out["records"] = [dict(r, key=list(k)) for k, r in state["records"].items()]
    out["order"] = [list(k) for k in state["order"]]
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1, default=str)
    os.replace(tmp, path)


def read_state(path):
    """What :func:`write_state` wrote, records keyed by tuple again."""
    with open(path) as fh:
        state = json.load(fh)
    state["records"] = {tuple(r["key"]): r for r in state["records"]}
    state["order"] = [tuple(k) for k in state["order"]]
    return state


def arrays_dir(state_path):
    """The folder of a state file's .npz files."""
    return state_path + ".arrays"


def leaves(x, out=None):
    """The leaves of a pytree, a dict's by sorted key (funcgrad orders a dict's keys; autograd keeps
    insertion order)."""
    out = [] if out is None else out
    if isinstance(x, dict):
        try:
            keys = sorted(x)
        except TypeError:
            keys = sorted(x, key=repr)
        for k in keys:
            leaves(x[k], out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            leaves(v, out)
    else:
        out.append(x)
    return out


def _keys(x):
    """The dict keys of a tree, all the way down, in :func:`leaves`' order."""
    if isinstance(x, dict):
        try:
            keys = sorted(x)
        except TypeError:
            keys = sorted(x, key=repr)
        return [(k, _keys(x[k])) for k in keys]
    if isinstance(x, (list, tuple)):
        return [_keys(v) for v in x]
    return None


def compare(a, b):
    """(ok, max_abs_diff, max_rel_diff, note) of two results: the same dict keys and number of leaves, the same
    shapes (or sizes), NaN and inf at the same places, the finite parts allclose (rtol RTOL, atol ATOL * max|b|);
    a string leaf (a recorded object's class or function name) equal to the other's."""
    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False, None, None, f"{len(la)} leaves vs {len(lb)}"
    if _keys(a) != _keys(b):
        return False, None, None, "different dict keys"
    mad, mrd, ok = 0.0, 0.0, True
    for x, y in zip(la, lb):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False, None, None, f"{x!r} vs {y!r}"
            continue
        try:
            cplx = np.iscomplexobj(x) or np.iscomplexobj(y)
            xa, ya = np.asarray(x, dtype=complex if cplx else float), np.asarray(y, dtype=complex if cplx else float)
        except Exception as e:  # noqa: BLE001
            return False, None, None, f"not numeric: {type(x).__name__} vs {type(y).__name__} ({e})"
        if xa.shape != ya.shape:  # (a shape (3,) against (1, 3) is the same values; (2, 3) against (3, 2) not)
            try:
                np.broadcast_shapes(xa.shape, ya.shape)
            except ValueError:
                return False, None, None, f"shape {xa.shape} vs {ya.shape}"
            if xa.size != ya.size:
                return False, None, None, f"shape {xa.shape} vs {ya.shape}"
            xa = xa.reshape(ya.shape)
        if xa.size == 0:
            continue
        if not np.array_equal(np.isnan(xa), np.isnan(ya)) or not np.array_equal(np.isinf(xa), np.isinf(ya)):
            ok = False
        d = np.abs(xa - ya)
        fin = np.isfinite(d)
        if fin.any():
            mad = max(mad, float(d[fin].max()))
            scale = float(np.abs(ya[np.isfinite(ya)]).max()) if np.isfinite(ya).any() else 1.0
            mrd = max(mrd, float(d[fin].max()) / max(scale, 1e-300))
            if not np.allclose(xa[fin], ya[fin], rtol=RTOL, atol=ATOL * max(1.0, scale)):
                ok = False
    return ok, mad, mrd, None


def _strip(e):
    return None if e is None else {k: v for k, v in e.items() if k != "traceback"}


def judge(name, fg, ag, load=None):
    """The verdict on one example from the funcgrad run's state ``fg`` and the autograd run's ``ag``
    (records keyed by tuple). ``load(which, record)`` returns a record's result (default: the ``result``
    already in the record). Statuses:

    MATCH: every gradient call recorded in both runs gave the same result, at least one was compared, and
    nothing failed. MISMATCH <d>: some compared call differs (d: the largest absolute difference).
    FUNCGRAD ERROR: the funcgrad run or one of its recorded calls raised (autograd ran). AUTOGRAD ALSO
    FAILS: both raised. TIMEOUT: the funcgrad run ran out of time. AUTOGRAD FAILS (funcgrad ran): nothing
    compared, autograd raised. NO GRADIENT COMPARED: both ran but no call could be compared.
    """
    load = load or (lambda which, rec: rec["result"])
    recs_fg, recs_ag = fg["records"], ag["records"]
    calls = []
    for key in sorted(recs_fg, key=lambda k: recs_fg[k]["seq"]):
        r = recs_fg[key]
        c = {"key": list(key), "fg_seconds": r.get("seconds"), "structure_fg": r.get("structure")}
        s = recs_ag.get(key)
        if r.get("error"):
            c["status"] = "funcgrad error"
            c["error"] = _strip(r["error"])
        elif s is None:
            c["status"] = "no autograd call"
        elif s.get("error"):
            c["status"] = "autograd error"
            c["error_ag"] = _strip(s["error"])
        elif r.get("result_blob") is None or s.get("result_blob") is None:
            c["status"] = "not comparable"
            c["note"] = r.get("result_note") or s.get("result_note")
        else:
            try:
                ok, mad, mrd, note = compare(load("fg", r), load("ag", s))
            except Exception as e:  # noqa: BLE001
                ok, mad, mrd, note = False, None, None, f"compare failed: {type(e).__name__}: {e}"
            c.update(status="match" if ok else "mismatch", max_abs_diff=mad, max_rel_diff=mrd, note=note,
                     args_equal=s.get("args_equal"), replayed=s.get("replayed"), structure_ag=s.get("structure"))
            if c["structure_fg"] != c["structure_ag"]:
                c["note"] = ((c["note"] + "; ") if c["note"] else "") + \
                    f"result structure differs: funcgrad {str(c['structure_fg'])[:300]} vs " \
                    f"autograd {str(c['structure_ag'])[:300]}"
        calls.append(c)
    first = min(recs_fg.values(), key=lambda r: r["seq"], default=None)
    fg_first = first.get("seconds") if first else None
    compared = [c for c in calls if c["status"] in ("match", "mismatch")]
    mism = [c for c in compared if c["status"] == "mismatch"]
    fg_err = fg.get("error") if fg["status"] in ("error", "crash") else None
    call_err = next((c for c in calls if c["status"] == "funcgrad error"), None)
    ag_failed = ag["status"] in ("error", "crash", "timeout")
    if fg["status"] == "timeout":
        status = "TIMEOUT"
    elif fg_err or call_err:
        status = "AUTOGRAD ALSO FAILS" if ag_failed else "FUNCGRAD ERROR"
    elif mism:
        status = f"MISMATCH {max((c['max_abs_diff'] or 0) for c in mism):.3g}"
    elif compared:
        status = "MATCH"
    elif ag_failed:
        status = "AUTOGRAD FAILS (funcgrad ran)"
    else:
        status = "NO GRADIENT COMPARED"
    return {"name": name, "status": status, "fg_first_call_s": fg_first, "calls": calls,
            "n_compared": len(compared), "n_mismatch": len(mism),
            "fg": {"status": fg["status"], "wall": fg.get("wall"), "t_total": fg.get("t_total"),
                   "error": _strip(fg.get("error")), "stopped_at": fg.get("stopped_at"), "calls": fg.get("calls"),
                   "traceback": (fg.get("error") or {}).get("traceback"), "funcgrad_file": fg.get("lib_file")},
            "ag": {"status": ag["status"], "wall": ag.get("wall"), "t_total": ag.get("t_total"),
                   "error": _strip(ag.get("error")), "stopped_at": ag.get("stopped_at"), "calls": ag.get("calls")},
            "when": datetime.datetime.now().isoformat(timespec="seconds")}
