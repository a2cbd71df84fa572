"""Run one generated program through funcgrad in every mode and classify the result.

``check_program(src, args, argnums) -> Outcome`` writes ``src`` to a real file,
imports it (so funcgrad can read its source), and for each mode in ``MODES``
(``auto``, ``python``, ``njit`` and ``jit=False``) compares funcgrad's value with
the plain Python call and its gradient with central differences in float64
(re-checked with a second step before a mismatch counts), and with autograd
when autograd is installed and can run the program. The outcome is one of

* ``RIGHT``: every mode gave the right value and gradient;
* ``REFUSED``: some mode raised a ``funcgrad.errors.FuncgradError`` whose message
  names the user's ``file:line`` and no internal name; the others were right;
* ``FAILURE``: anything else: a wrong value or gradient, any other exception
  (KeyError, a Numba TypingError, ...), or a refusal that does not point at the
  user's line or leaks internal names;
* ``INVALID``: the program itself is unusable as a test (plain Python raises,
  the value is not finite, or the point is not smooth: two finite-difference
  steps disagree). Callers discard these.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import importlib.util
import os
import re
import signal
import sys
import tempfile
import traceback
import warnings
from contextlib import contextmanager

import numpy as np

import funcgrad
from funcgrad.errors import FuncgradError

MODES = ("auto", "python", "njit", "nojit")

RTOL, ATOL = 1e-4, 1e-6
EPS1, EPS2 = 1e-6, 1e-5
VALUE_RTOL = 1e-9
FLOAT32 = os.environ.get("FUZZ_FLOAT32") == "1"   # also compare njit with python on float32 arrays
JVP = os.environ.get("FUZZ_JVP") == "1"           # also check forward mode (funcgrad.jvp) in every mode

_FUNCGRAD_DIR = os.path.dirname(os.path.abspath(funcgrad.__file__))

# names from funcgrad's generated code or its internals that a user should never read
INTERNAL = re.compile(
    r"\b_v\d+|\b_t\d+|__ret|__brk|_nd_error|_ValueAndGrad|_Transformed|\bK\.|numba[./]|Numba(?! cannot compile)"
    r"|TypingError|\b_impl\b|intrinsic|Function\("
    r"|site-packages|funcgrad/source|funcgrad/ops|funcgrad/kernels|funcgrad/api|\b_tape|\b_it\d+|\b_k\d+"
    r"|\bd_\w+|\b_dres\d+|\b_pos_\w+|Traceback")

RIGHT, REFUSED, FAILURE, INVALID = "RIGHT", "REFUSED", "FAILURE", "INVALID"


def args_from(kinds, seed, n):
    """Arguments of a found program: a float for "f", the loop count ``n`` for "i", else an array of that
    shape, all drawn uniformly in [-1, 1) from ``RandomState(seed)`` (as the fuzzer drew them)."""
    rng = np.random.RandomState(seed)
    out = []
    for k in kinds:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(n)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)


@dataclasses.dataclass
class Outcome:
    status: str                      # RIGHT / REFUSED / FAILURE / INVALID
    mode: str = ""                   # the first mode that refused or failed
    kind: str = ""                   # e.g. "wrong-gradient", "KeyError", "bad-refusal", "UnsupportedSyntaxError"
    message: str = ""                # the exception's message, or what mismatched
    details: str = ""                # traceback tail, numbers
    per_mode: dict = dataclasses.field(default_factory=dict)   # mode -> (status, kind, message)

    @property
    def signature(self):
        """What makes two failures 'the same bug' (for grouping and shrinking)."""
        return (self.status, self.mode, self.kind, _normalize(self.message))

    def __str__(self):
        head = f"{self.status}"
        if self.status != RIGHT:
            head += f" [{self.mode}] {self.kind}: {self.message}"
        lines = [head]
        for m, (st, k, msg) in self.per_mode.items():
            if st != RIGHT:
                lines.append(f"  {m}: {st} {k}: {msg[:300]}")
        if self.details:
            lines.append(self.details)
        return "\n".join(lines)


def _normalize(msg):
    """A message with the user's file, line numbers, names and numbers taken out."""
    lines = [ln.strip() for ln in msg.split("\n") if ln.strip()]
    msg = lines[0] if lines else ""
    if msg.startswith("Failed in nopython mode pipeline") and len(lines) > 1:
        # a Numba error: what failed to type is on the next lines
        sig = next((ln for ln in lines if ln.startswith(">>>")), "")
        msg = lines[1] + (" " + re.sub(r"\(.*", "(...)", sig) if sig else "")
    msg = re.sub(r" at 0x[0-9a-f]+", "", msg)
    msg = re.sub(r"\S*fz_[0-9a-f]+\.py:\d+", "<file>:<line>", msg)
    msg = re.sub(r"'[A-Za-z_]\w*'", "'<name>'", msg)
    msg = re.sub(r"\b[a-z]{1,2}\d+\b", "<name>", msg)
    msg = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "<num>", msg)
    return msg[:160]


class _Timeout(BaseException):
    """The time limit's alarm: not an Exception, so that neither funcgrad (which reads an error raised while
    Numba compiles as Numba's refusal) nor the program catches it."""


@contextmanager
def _time_limit(seconds):
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise _Timeout(f"timed out after {seconds} s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_DIR = None


def _workdir():
    global _DIR
    if _DIR is None:
        _DIR = os.environ.get("FUZZ_PROGRAM_DIR") or tempfile.mkdtemp(prefix="funcgrad-fuzz-")
        os.makedirs(_DIR, exist_ok=True)
    return _DIR


def load_program(src, name="f"):
    """Write ``src`` to a real file under a unique module name and import it; returns (fn, path)."""
    h = hashlib.sha1(src.encode()).hexdigest()[:12]
    modname = f"fz_{h}"
    path = os.path.join(_workdir(), modname + ".py")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write(src)
    mod = sys.modules.get(modname)
    if mod is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    return getattr(mod, name), path


NUDGE = 1e-14   # relative: about 45 ulps


class _Nudge(ast.NodeTransformer):
    def visit_Constant(self, node):
        # (a whole number stays: it counts things, np.arange(4.0) has 4 elements and 4.00000000000004 has 5)
        if type(node.value) is float and node.value != 0.0 and not node.value.is_integer():
            return ast.copy_location(ast.Constant(node.value * (1.0 + NUDGE)), node)
        return node


def _nudged_value(src, args, kwargs=None):
    """The program's value with every float literal and float input moved by ``NUDGE`` (relative), or None
    when that run fails: a program whose value moves beyond VALUE_RTOL is too ill-conditioned to judge."""
    try:
        tree = _Nudge().visit(ast.parse(src))
        fn, _ = load_program(ast.unparse(ast.fix_missing_locations(tree)))
        def move(a):
            if isinstance(a, dict):
                return {k: move(v) for k, v in a.items()}
            if isinstance(a, (tuple, list)):
                return type(a)(move(v) for v in a)
            return (a * (1.0 + NUDGE) if isinstance(a, float) or isinstance(a, np.ndarray) and a.dtype.kind == "f"
                    else a)
        moved = tuple(move(a) for a in args)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(fn(*moved, **_copy_tree(kwargs or {})))
    except Exception:
        return None


def _copy_tree(t):
    if isinstance(t, np.ndarray):
        return t.copy()
    if isinstance(t, dict):
        return {k: _copy_tree(v) for k, v in t.items()}
    if isinstance(t, (tuple, list)):
        return type(t)(_copy_tree(v) for v in t)
    return t


def _copy_args(args):
    return tuple(_copy_tree(a) for a in args)


def _flatten(t):
    """The leaves of an argument or a gradient (dicts in sorted key order, then tuples and lists)."""
    if isinstance(t, dict):
        return [leaf for k in sorted(t) for leaf in _flatten(t[k])]
    if isinstance(t, (tuple, list)):
        return [leaf for v in t for leaf in _flatten(v)]
    return [t]


def _replace_leaf(t, j, new):
    """``t`` with its ``j``-th leaf (in ``_flatten``'s order) replaced by ``new``."""
    count = [0]

    def go(u):
        if isinstance(u, dict):
            done = {k: go(u[k]) for k in sorted(u)}     # number the leaves in _flatten's order
            return {k: done[k] for k in u}               # keep the dict's own order
        if isinstance(u, (tuple, list)):
            return type(u)(go(v) for v in u)
        k = count[0]
        count[0] += 1
        return new if k == j else u
    return go(t)


def _is_pytree(a):
    return isinstance(a, (dict, tuple, list))


def _fd(fn, args, argnums, eps):
    out = []
    for i in argnums:
        a = args[i]
        if _is_pytree(a):
            # one central difference per leaf: d/d leaf j of argument i
            for j, leaf in enumerate(_flatten(a)):
                def part(v, i=i, j=j):
                    return fn(*(args[:i] + (_replace_leaf(args[i], j, v),) + args[i + 1:]))
                out.extend(_fd(part, (leaf,), (0,), eps))
        elif isinstance(a, np.ndarray):
            g = np.zeros_like(a)
            for k in range(a.size):
                ap = a.copy()
                ap.reshape(-1)[k] += eps
                am = a.copy()
                am.reshape(-1)[k] -= eps
                fp = fn(*(args[:i] + (ap,) + args[i + 1:]))
                fm = fn(*(args[:i] + (am,) + args[i + 1:]))
                g.reshape(-1)[k] = (fp - fm) / (2 * eps)
            out.append(g)
        else:
            fp = fn(*(args[:i] + (a + eps,) + args[i + 1:]))
            fm = fn(*(args[:i] + (a - eps,) + args[i + 1:]))
            out.append(np.float64((fp - fm) / (2 * eps)))
    return out


def _close(got, want, scale):
    for g, w in zip(got, want):
        g = np.asarray(g, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return False
        if not np.all(np.isfinite(g)):
            return False
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL * scale):
            return False
    return True


def _worst(got, want):
    worst = (0.0, None)
    for j, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return f"arg {j}: gradient shape {g.shape}, expected {w.shape}"
        err = np.abs(g - w)
        if err.size and np.nanmax(err) >= worst[0]:
            worst = (float(np.nanmax(err)), j)
    if worst[1] is None:
        return "gradient not finite"
    j = worst[1]
    return f"arg {j}: max abs error {worst[0]:.3g}"


def _autograd(path, src, args, argnums, kwargs=None):
    """autograd's gradient of the program, or None when autograd is missing or cannot run it."""
    try:
        import autograd
    except ImportError:
        return None
    asrc = src.replace("import numpy as np", "import autograd.numpy as np")
    h = hashlib.sha1(asrc.encode()).hexdigest()[:12]
    modname = f"fzag_{h}"
    apath = os.path.join(_workdir(), modname + ".py")
    try:
        with open(apath, "w") as fh:
            fh.write(asrc)
        spec = importlib.util.spec_from_file_location(modname, apath)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = []
            for i in argnums:
                g = autograd.grad(mod.f, i)(*_copy_args(args), **(kwargs or {}))
                out.extend(np.asarray(leaf, dtype=np.float64) for leaf in _flatten(g))
        return out
    except Exception:
        return None


def _run_mode(fn, args, argnums, mode, kwargs=None):
    if mode == "nojit":
        vg = funcgrad.value_and_grad(fn, argnums=argnums, jit=False)
    else:
        vg = funcgrad.value_and_grad(fn, argnums=argnums, mode=mode)
    return vg(*_copy_args(args), **_copy_tree(kwargs or {}))


def _flat_grads(grads):
    """funcgrad's gradients (one per argnum, pytrees for pytree arguments) as the list of their leaves."""
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    return [leaf for g in grads for leaf in _flatten(g)]


_BUILTIN_WORDS = set(dir(builtins)) | {"self", "cls", "args", "kwargs"}


def _foreign_names(msg, src):
    """Quoted identifiers in a refusal that the user's source never spells (``'y_1'`` for the user's ``y``):
    names funcgrad made up."""
    words = set(re.findall(r"[A-Za-z_]\w*", src or ""))
    first = msg.split("\n")[0]
    return [w for w in re.findall(r"'([A-Za-z_]\w*)'", first) if w not in words and w not in _BUILTIN_WORDS]


def _classify_exception(e, path, src=None):
    """(status, kind, message) for an exception raised by funcgrad."""
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    msg = str(e)
    if isinstance(e, FuncgradError):
        # the message names the user's file:line, and nothing of funcgrad's insides
        base = os.path.basename(path)
        names_line = re.search(re.escape(path) + r":\d+", msg) or re.search(re.escape(base) + r":\d+", msg)
        scrubbed = msg.replace(path, "<file>")
        leak = INTERNAL.search(scrubbed)
        if not names_line:
            return FAILURE, "bad-refusal", f"{type(e).__name__} without the user's file:line: {msg}"
        if leak:
            return FAILURE, "bad-refusal", f"{type(e).__name__} leaks {leak.group(0)!r}: {msg}"
        foreign = _foreign_names(scrubbed, src)
        if foreign:
            return FAILURE, "bad-refusal", f"{type(e).__name__} names {foreign[0]!r}, not in the program: {msg}"
        return REFUSED, type(e).__name__, msg
    kind = type(e).__name__
    return FAILURE, kind, f"{msg}\n" + "".join(tb[-6:])


def check_program(src, args, argnums, modes=MODES, use_autograd=True, timeout=120, kwargs=None):
    """Classify one program: RIGHT, REFUSED(message), FAILURE(kind, details) or INVALID.

    ``args`` may hold pytrees (dicts, tuples, lists of floats and arrays): their gradients are compared
    leaf by leaf. ``kwargs`` are passed by keyword to every call and never differentiated."""
    args = tuple(args)
    argnums = tuple(argnums)
    kwargs = dict(kwargs or {})
    try:
        fn0, path = load_program(src)
    except Exception as e:  # the generator wrote something Python rejects
        return Outcome(INVALID, kind="load", message=f"{type(e).__name__}: {e}")
    if kwargs:
        def fn(*a):
            return fn0(*a, **_copy_tree(kwargs))
    else:
        fn = fn0
    # the plain Python value: the program must run, return a finite float, and leave its inputs alone
    try:
        with np.errstate(all="raise"), warnings.catch_warnings(), _time_limit(timeout):
            warnings.simplefilter("error")
            before = _copy_args(args)
            value = fn(*_copy_args(args))
            fn(*args)
            for a, b in zip(_flatten(args), _flatten(before)):
                if isinstance(a, np.ndarray) and not np.array_equal(a, b):
                    return Outcome(INVALID, kind="mutates-input")
    except (Exception, _Timeout) as e:
        return Outcome(INVALID, kind="plain", message=f"{type(e).__name__}: {e}")
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind == "f":
        value = value[()]           # a 0-d array result: funcgrad's value is compared with its number
    if not isinstance(value, (float, np.floating)) or not np.isfinite(value) or abs(value) > 1e6:
        return Outcome(INVALID, kind="value", message=repr(value)[:80])
    try:
        with np.errstate(all="ignore"):
            fd1 = _fd(fn, args, argnums, EPS1)
    except Exception as e:
        return Outcome(INVALID, kind="plain-fd", message=f"{type(e).__name__}: {e}")
    if not all(np.all(np.isfinite(g)) and np.all(np.abs(g) < 1e6) for g in fd1):
        return Outcome(INVALID, kind="fd", message="finite differences not finite")
    scale = max(1.0, abs(float(value)), max((float(np.max(np.abs(g))) if np.size(g) else 0.0) for g in fd1))
    nudged = _nudged_value(src, args, kwargs)
    if nudged is None or not np.isclose(nudged, value, rtol=VALUE_RTOL, atol=1e-12 * scale):
        # rounding at the level of a few dozen ulps changes the value beyond what the modes are held to
        # (x ** 3 is x * x * x under Numba, pow() in Python; sin of 1e70 amplifies that last ulp): no mode
        # can be judged on this program
        return Outcome(INVALID, kind="ill-conditioned", message=f"{value!r} becomes {nudged!r} when every float "
                                                                 f"constant and input moves by {NUDGE:g}")
    refs = {"fd1": fd1}

    def reference(name):
        if name not in refs:
            if name == "fd2":
                with np.errstate(all="ignore"):
                    refs[name] = _fd(fn, args, argnums, EPS2)
            elif name == "autograd":
                refs[name] = _autograd(path, src, args, argnums, kwargs) if use_autograd else None
        return refs[name]

    per_mode = {}
    first_bad = None
    first_refused = None
    for mode in modes:
        try:
            with _time_limit(timeout):
                val, grads = _run_mode(fn0, args, argnums, mode, kwargs)
        except _Timeout as e:
            per_mode[mode] = (FAILURE, "timeout", str(e))
            first_bad = first_bad or mode
            continue
        except Exception as e:
            st, kind, msg = _classify_exception(e, path, src)
            per_mode[mode] = (st, kind, msg)
            if st == FAILURE:
                first_bad = first_bad or mode
            else:
                first_refused = first_refused or mode
            continue
        grads = _flat_grads(grads)
        # the value
        if not np.isfinite(val) or not np.isclose(val, value, rtol=VALUE_RTOL, atol=1e-12 * scale):
            per_mode[mode] = (FAILURE, "wrong-value", f"value {val!r}, plain Python gives {value!r}")
            first_bad = first_bad or mode
            continue
        # the gradient: right if it matches either finite-difference step or autograd
        if _close(grads, fd1, scale):
            per_mode[mode] = (RIGHT, "", "")
            continue
        fd2 = reference("fd2")
        if not _close(fd1, fd2, scale):
            # not smooth at this point (a branch or a kink within eps): nothing can be judged here
            return Outcome(INVALID, kind="not-smooth", message="finite differences disagree between steps")
        if _close(grads, fd2, scale):
            per_mode[mode] = (RIGHT, "", "")
            continue
        ag = reference("autograd")
        if ag is not None and _close(grads, ag, scale):
            per_mode[mode] = (RIGHT, "", "")
            continue
        detail = _worst(grads, fd1)
        per_mode[mode] = (FAILURE, "wrong-gradient", detail)
        first_bad = first_bad or mode
    details = ""
    if first_bad:
        # the failure reported (and grouped on) is the worst one: a silently wrong answer
        # outranks a crash, which would otherwise hide it (e.g. njit crashes, python is wrong)
        rank = {"wrong-value": 0, "wrong-gradient": 1, "bad-refusal": 2, "timeout": 9}
        first_bad = min((m for m, v in per_mode.items() if v[0] == FAILURE),
                        key=lambda m: (rank.get(per_mode[m][1], 5), list(per_mode).index(m)))
        st, kind, msg = per_mode[first_bad]
        if kind == "wrong-gradient":
            got = per_mode  # noqa: F841
            details = _grad_details(fn0, args, argnums, first_bad, fd1, refs.get("autograd"), kwargs)
        head, _, rest = msg.partition("\n")
        bad_modes = [m for m, v in per_mode.items() if v[0] == FAILURE]
        return Outcome(FAILURE, ",".join(bad_modes), kind, head, rest or details, per_mode)
    if first_refused:
        st, kind, msg = per_mode[first_refused]
        modes_ref = [m for m, v in per_mode.items() if v[0] == REFUSED]
        return Outcome(REFUSED, ",".join(modes_ref), kind, msg, "", per_mode)
    if JVP:
        bad = _jvp_mismatch(fn0, args, argnums, value, scale, reference, modes, path, timeout, kwargs, src)
        if bad:
            mode, kind, msg = bad
            per_mode[f"jvp-{mode}"] = (FAILURE, kind, msg)
            return Outcome(FAILURE, f"jvp-{mode}", kind, msg.partition("\n")[0], msg.partition("\n")[2], per_mode)
    if FLOAT32 and per_mode.get("python", (None,))[0] == RIGHT and per_mode.get("njit", (None,))[0] == RIGHT:
        bad = _float32_mismatch(fn0, args, argnums, scale, path, timeout, kwargs, src)
        if bad:
            per_mode["njit"] = (FAILURE, "float32", bad)
            return Outcome(FAILURE, "njit", "float32", bad.partition("\n")[0], bad.partition("\n")[2], per_mode)
    return Outcome(RIGHT, per_mode=per_mode)


def _tangents(args, argnums, seed=0):
    """One tangent per argument (a random direction for those in ``argnums``, zeros elsewhere, 0 for ints)
    and the list of the differentiated ones' leaves, in the order of the finite differences' leaves."""
    rng = np.random.RandomState(seed)
    used = []

    def make(a, live):
        if isinstance(a, dict):
            return {k: make(v, live) for k, v in a.items()}
        if isinstance(a, (tuple, list)):
            return type(a)(make(v, live) for v in a)
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc":
            return rng.uniform(-1.0, 1.0, a.shape) if live else np.zeros(a.shape)
        if isinstance(a, (float, np.floating)):
            return float(rng.uniform(-1.0, 1.0)) if live else 0.0
        return 0
    tans = tuple(make(a, i in argnums) for i, a in enumerate(args))
    for i in argnums:
        used.extend(_flatten(tans[i]))
    return tans, used


def _jvp_mismatch(fn, args, argnums, value, scale, reference, modes, path, timeout, kwargs=None, src=None):
    """With FUZZ_JVP=1: ``(mode, kind, message)`` for the first mode whose ``funcgrad.jvp`` (a random direction
    in the differentiated arguments) gives a wrong value or a directional derivative other than the finite
    differences' gradient dotted with the direction, or fails other than by a clear refusal; else None."""
    if kwargs:
        return None
    tans, leaves = _tangents(args, argnums)

    def along(grads):
        return float(sum(np.sum(np.asarray(g, np.float64) * np.asarray(v, np.float64)) for g, v in zip(grads, leaves)))
    norm = max(1.0, float(np.sqrt(sum(np.sum(np.asarray(v, np.float64) ** 2) for v in leaves))))
    want = along(reference("fd1"))
    for mode in modes:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings(), _time_limit(timeout):
                warnings.simplefilter("ignore")
                kw = {"jit": False} if mode == "nojit" else {"mode": mode}
                v, t = funcgrad.jvp(fn, _copy_args(args), tans, **kw)
        except _Timeout as e:
            return mode, "timeout", str(e)
        except Exception as e:
            st, kind, msg = _classify_exception(e, path, src)
            if st == FAILURE:
                return mode, kind, msg
            continue
        if not np.isfinite(v) or not np.isclose(v, value, rtol=VALUE_RTOL, atol=1e-12 * scale):
            return mode, "wrong-value", f"jvp's value {v!r}, plain Python gives {value!r}"
        t = np.asarray(t, dtype=np.float64)
        if t.shape != () and t.size != 1:
            return mode, "wrong-tangent", f"jvp's tangent has shape {t.shape} for a scalar output"
        t = float(t.reshape(()))
        if np.isclose(t, want, rtol=RTOL, atol=ATOL * scale * norm):
            continue
        fd2 = reference("fd2")
        if np.isclose(t, along(fd2), rtol=RTOL, atol=ATOL * scale * norm):
            continue
        return mode, "wrong-tangent", f"jvp's tangent {t!r}, finite differences give {want!r}"
    return None


def _float32_mismatch(fn, args, argnums, scale, path, timeout, kwargs=None, src=None):
    """With the float64 arrays given as float32 (FUZZ_FLOAT32=1): a description of how njit's value or gradient
    differs from the Python mode's (dtype, or beyond float32's precision), or it refuses a program whose value
    NumPy computes in float32, or None. A program the Python mode cannot run in float32, or that njit refuses
    where NumPy's value is float64 (NumPy changed a dtype, which a compiled loop cannot), is not judged."""
    a32 = tuple(a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for a in args)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings(), _time_limit(timeout):
            warnings.simplefilter("ignore")
            ref_v, ref_g = _run_mode(fn, a32, argnums, "python", kwargs)
    except (Exception, _Timeout):
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings(), _time_limit(timeout):
            warnings.simplefilter("ignore")
            v, g = _run_mode(fn, a32, argnums, "njit", kwargs)
    except _Timeout as e:
        return f"njit in float32: {e}"
    except Exception as e:
        st, kind, msg = _classify_exception(e, path, src)
        if st == FAILURE or np.asarray(ref_v).dtype == np.float32:
            # refused although NumPy kept float32 throughout (its value is float32): a weak number turned float64
            return f"njit in float32 raised {kind}: {msg}"
        return None
    ref_g = _flat_grads(ref_g)
    g = _flat_grads(g)
    if not np.isclose(float(v), float(ref_v), rtol=1e-3, atol=1e-4 * scale):
        return f"float32 value {v!r}, the Python mode gives {ref_v!r}"
    for j, (x, w) in enumerate(zip(g, ref_g)):
        if np.asarray(x).dtype != np.asarray(w).dtype:
            return f"float32 gradient of argument {argnums[j]} is {np.asarray(x).dtype}, the Python mode's is " \
                   f"{np.asarray(w).dtype}"
        if not np.allclose(np.asarray(x, float), np.asarray(w, float), rtol=1e-3, atol=1e-4 * scale):
            return f"float32 gradient of argument {argnums[j]}: {np.asarray(x)!r}\n  the Python mode: {np.asarray(w)!r}"
    return None


def _grad_details(fn, args, argnums, mode, fd1, ag, kwargs=None):
    try:
        _, grads = _run_mode(fn, args, argnums, mode, kwargs)
    except Exception:  # pragma: no cover
        return ""
    grads = _flat_grads(grads)
    out = []
    with np.printoptions(precision=6, suppress=True, linewidth=120):
        for j, (g, w) in enumerate(zip(grads, fd1)):
            what = f"arg{argnums[j]}" if len(grads) == len(argnums) else f"leaf {j}"
            out.append(f"  d/d {what}: funcgrad {np.asarray(g)!r}\n"
                       f"  {'':11}finite differences {np.asarray(w)!r}")
    return "\n".join(out)


def check(prog, modes=MODES, use_autograd=True, timeout=120):
    """``check_program`` for a ``gen.Program``."""
    return check_program(prog.source, prog.make_args(), prog.argnums, modes=modes,
                         use_autograd=use_autograd and not prog.uses_inplace, timeout=timeout)
