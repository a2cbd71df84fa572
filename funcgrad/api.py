"""The functional transforms: grad, value_and_grad, vjp, jit, custom_vjp, source.

Owns argument checking (argnums, has_aux, differentiated dtypes, output
shapes): it happens here and only here. Each transform returns a callable that
on the first call with a new *signature* (pytree structure, dtypes, ndims of
every leaf; not the values) runs the source pipeline once and caches the
compiled result; later calls with that signature only flatten, call and
unflatten.

Modes: ``mode="auto"`` compiles the whole function with ``numba.njit`` when it
has loops, and otherwise runs the generated Python over the kernel namespace
(NumPy and compiled kernels: no compile wait). ``mode="njit"`` or
``mode="python"`` force either. ``jit=False`` (or ``FUNCGRAD_DISABLE_JIT=1``)
runs the same generated source with every Numba kernel replaced by its Python.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import linecache
import os
import re
import sys
import traceback
import types
import warnings

import numpy as np
from numba.core import errors as _numba_errors

from .custom import CustomFunction, custom_jvp, custom_vjp, is_user_vspace_value, stop_gradient
from .errors import (ArgumentTypeError, CompileError, DeviceError, FuncgradError, FuncgradWarning, NoDerivativeError,
                     REFUSAL_MARK, RunValueError, TransformError, TreeStructureError, UNSUPPORTED_MARK,
                     UnsupportedSyntaxError)
from .kernels.base import FAST_DEVICE_TYPES as _FAST_DEVICE_TYPES, get_backend, is_device_array
from .kernels import cpu_backend as _cpu_backend  # noqa: F401  registers the "cpu" backend
from .kernels.cuda_backend import CUDA as _CUDA
from .ops.registry import by_name, lookup
from .transform.aliases import user_words
from .transform.public_names import public_name
from .transform.normalize.calls import StaticArgumentNeeded
from .transform.normalize.common import _is_user_code
from .transform.pipeline import GENERATED_LINES, SPECIALIZATION_MISS, Signature, build
from .transform.specs import is_float_leaf, leaf_spec
from .transform.values import ContentsOf, Static, Struct
from .tree import _REGISTRY as _tree_registry, _dict_keys, tree_flatten, tree_flatten_with_path, tree_unflatten

__all__ = ["grad", "value_and_grad", "vjp", "jit", "custom_vjp", "custom_jvp", "stop_gradient", "source"]

# jit= values and the strategy each selects (see funcgrad.kernels.base); mode= is the older spelling
_JIT = {True: "auto", "auto": "auto", "whole": "njit", "kernels": "python", False: "nojit",
        "njit": "njit", "python": "python"}   # the last two: the strategies' own names, as mode= spells them
_MODE = {"auto": "auto", "njit": "njit", "python": "python"}


def _jit_disabled():
    return os.environ.get("FUNCGRAD_DISABLE_JIT", "").strip() not in ("", "0", "false", "False")


def _resolve_jit(jit, mode):
    """The strategy policy ("auto", "njit", "python" or "nojit") from ``jit=`` and its alias ``mode=``."""
    if jit not in _JIT:
        raise ValueError(f"jit must be one of True, False, 'auto', 'whole' (or 'njit'), 'kernels' (or 'python'); "
                         f"received {jit!r}")
    if mode is None:
        return _JIT[jit]
    if mode not in _MODE:
        raise ValueError(f"mode must be one of {tuple(_MODE)}; received {mode!r}")
    if jit is False:
        return "nojit"  # jit=False (the uncompiled oracle) wins over any mode
    if _JIT[jit] != "auto" and _JIT[jit] != _MODE[mode]:
        raise ValueError(f"jit={jit!r} and mode={mode!r} ask for different things; give one of them")
    return _MODE[mode]


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
               "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def _checkpoint_budget(value):
    """``checkpoint_loops=`` as a number of bytes (None: off). ``True`` is 0: every loop that can be is
    checkpointed (one whose trips push nothing on a tape excepted)."""
    if value is None or value is False:
        return None
    if value is True:
        return 0
    if isinstance(value, (int, np.integer, float, np.floating)) and np.isfinite(value) and value >= 0:
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    raise ValueError("checkpoint_loops must be False, True, a number of bytes or a size such as '100MB' or '1GiB'; "
                     f"received {value!r}")


def _arg_names(fn, nargs):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    var = [p.name for p in params if p.kind == p.VAR_POSITIONAL]
    varkw = [p.name for p in params if p.kind == p.VAR_KEYWORD]
    if var or varkw:
        # the order _Transformed._bind passes them in: positional, *args one by one, keyword-only, the
        # **kwargs dict; "*name" and "**name" tell normalize to pack them back into a tuple and a dict
        pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        kwonly = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
        extra = nargs - len(pos) - len(kwonly) - len(varkw)
        if extra >= 0 and (extra == 0 or var):
            return pos + ["*" + v for v in var[:1] for _ in range(extra)] + kwonly + ["**" + n for n in varkw], params
    if len(names) < nargs:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}() takes {len(names)} positional arguments but "
                        f"{nargs} were given")
    return names, params


def _python_call_error(fn, signature, args, kwargs):
    """Python's own message for calling ``fn`` with these arguments (``f() missing 1 required positional
    argument: 'x'``): a function with the same parameters (defaults replaced, no annotations) is called."""
    params = [p.replace(annotation=p.empty, default=None if p.default is not p.empty else p.empty)
              for p in signature.parameters.values()]
    try:
        src = f"def _f{signature.replace(parameters=params, return_annotation=signature.empty)}:\n    pass\n"
        ns: dict = {}
        exec(src, ns)
        stub = ns["_f"]
        name = getattr(fn, "__name__", "f")
        stub.__code__ = stub.__code__.replace(co_name=name, **(
            {"co_qualname": getattr(fn, "__qualname__", name)} if hasattr(stub.__code__, "co_qualname") else {}))
        stub.__name__, stub.__qualname__ = name, getattr(fn, "__qualname__", name)
        stub(*args, **kwargs)
    except TypeError as e:
        return str(e)
    except Exception:
        return None
    return None


def _check_argnums(argnums, nargs, fname):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    if not nums or not all(isinstance(i, int) for i in nums):
        raise TypeError(f"argnums must be an int or a tuple of ints; received {argnums!r}")
    norm = []
    for i in nums:
        j = i + nargs if i < 0 else i
        if not 0 <= j < nargs:
            raise ValueError(f"argnums={argnums!r} is out of range: {fname}() was called with {nargs} positional "
                             f"argument(s); use argnums between {-nargs} and {nargs - 1}")
        norm.append(j)
    if len(set(norm)) != len(norm):
        raise ValueError(f"argnums={argnums!r} names the same argument twice")
    return single, tuple(norm)


def _user_facing(method):
    """Errors about the user's code leave funcgrad with the transformer's frames trimmed from their
    traceback (as JAX filters its own): the user sees their call and the line the error names. An
    error at the line of a wrapper funcgrad generated (``grad(scipy.special.gammaln)``) is reported at
    the user's call instead."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except FuncgradError as e:
            e = _at_users_line(e)
            fn = getattr(e, "filename", None)
            if fn in _WRAPPER_FILES or (isinstance(fn, str) and fn.startswith("<funcgrad ")):
                # a line of a wrapper funcgrad wrote (check_grads' bound arguments, a jacobian's column): the
                # user's call of it is the line to name
                e = _at_caller(e, _user_frame())
            e.__cause__ = None
            e.__suppress_context__ = True
            raise e.with_traceback(None) from None
    return wrapper


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_frame():
    """The innermost frame outside funcgrad: the user's call of a transformed function."""
    f = sys._getframe(1)
    while f.f_back is not None and os.path.abspath(f.f_code.co_filename).startswith(_HERE):
        f = f.f_back
    return f


def _at_caller(err, frame):
    """``err`` (raised at a generated wrapper's line) placed at the line of ``frame`` instead."""
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(filename, lineno) or None
    if isinstance(err, UnsupportedSyntaxError):
        new = type(err)(err.msg, filename, lineno, None, text)
    elif isinstance(err, (NoDerivativeError, TransformError)):
        msg = str(err)
        prefix = f"{err.filename}:{err.lineno}: "
        msg = msg[len(prefix):] if msg.startswith(prefix) else msg
        if err.text and msg.endswith(f"\n    {err.text.strip()}"):
            msg = msg[:-len(f"\n    {err.text.strip()}")]
        new = type(err)(msg, filename, lineno, text)
    else:  # pragma: no cover - every located error is one of the above
        return err
    if hasattr(err, "__notes__"):
        new.__notes__ = list(err.__notes__)
    return new


def _at_users_line(e):
    """An error funcgrad found in code it generated (second order transforms generated code) moved to the
    user's line that generated line came from."""
    fn = getattr(e, "filename", None)
    where = GENERATED_LINES.get(fn, {}).get(getattr(e, "lineno", None)) if fn else None
    if not where:
        return e
    text = _line_text(*where)
    if isinstance(e, UnsupportedSyntaxError):
        new = UnsupportedSyntaxError(e.msg, where[0], where[1], None, text)
    elif isinstance(e, (NoDerivativeError, TransformError)) and hasattr(e, "msg"):
        new = type(e)(e.msg, where[0], where[1], text)
    else:
        return e
    return new


class _Transformed:
    """A transformed function: caches one compiled specialization per signature."""

    _funcgrad_transform = True   # normalize calls a jit(f) inside another transform as f

    def __init__(self, fn, kind, argnums=0, has_aux=False, mode=None, jit=True, backend=None, checkpoint_loops=None):
        if not callable(fn):
            raise TypeError(f"expected a function to transform; received {fn!r}")
        self.policy = _resolve_jit(jit, mode)
        self.checkpoint_loops = _checkpoint_budget(checkpoint_loops)   # bytes, or None
        self.backend = get_backend(backend)
        self.fn, self._by_arity = _as_python_function(fn)
        self._static_leaves: set = set()   # (argument, its treedef, leaf) of ints used as constants (axis=n)
        self.kind = kind
        self.argnums = argnums
        self.has_aux = has_aux
        self.mode = mode if mode is not None else {"njit": "njit", "python": "python"}.get(self.policy, "auto")
        self.jit = jit
        self.cache: dict = {}
        self._memo: dict = {}
        self._pending: dict = {}      # key -> Signature (kept for an auto fallback rebuild; holds no arrays)
        self._fast: dict = {}         # _fast_key(args) -> _FastPlan for calls of plain arrays and floats
        try:
            self._signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            self._signature = None
        self._n_params = -1 if self._signature is None else sum(
            1 for p in self._signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                         p.KEYWORD_ONLY))
        if self._signature is not None and any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY)
                                               for p in self._signature.parameters.values()):
            # *args, **kwargs (its dict is one argument) and keyword-only parameters (f(x, 1.0, 2.0) must not
            # fill one positionally): every call is bound
            self._n_params = -1
        functools.update_wrapper(self, fn, updated=())

    def _bind(self, args, kwargs):
        """Call arguments as every parameter's value in order (keywords and defaults resolved), or
        Python's own error for a call that does not fit the function."""
        if self._signature is None:
            if kwargs:
                raise TypeError(f"{getattr(self.fn, '__qualname__', self.fn)}() takes no keyword arguments here")
            return args
        try:
            ba = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(_python_call_error(self.fn, self._signature, args, kwargs) or
                            f"{getattr(self.fn, '__qualname__', 'f')}(): {e}") from None
        ba.apply_defaults()
        out = []
        for p in self._signature.parameters.values():
            if p.kind == p.VAR_POSITIONAL:
                out.extend(ba.arguments.get(p.name, ()))
            elif p.kind == p.VAR_KEYWORD:
                out.append(dict(ba.arguments.get(p.name, {})))
            else:
                out.append(ba.arguments[p.name])
        return tuple(out)

    @property
    def specializations(self):
        return len(self.cache)

    def _prepare(self, args):
        nargs = len(args)
        if self._by_arity is not None:  # a callable without a signature: a wrapper of this many arguments
            self.fn = self._by_arity(nargs)
        fname = getattr(self.fn, "__qualname__", "f")
        memo = self._memo.get(nargs)
        if memo is None or memo[0] != self.argnums:
            names, _ = _arg_names(self.fn, nargs)
            if self.kind == "primal":
                single, nums = True, ()
            else:
                single, nums = _check_argnums(self.argnums, nargs - sum(n.startswith("**") for n in names), fname)
            memo = (self.argnums, names, single, nums)
            self._memo[nargs] = memo
        _, names, single, nums = memo
        flat = []
        trees = []
        key = []
        for i, a in enumerate(args):
            leaves, td = tree_flatten(a)
            diff = i in nums
            specs = tuple(self._spec(x, (i, td, j), diff) for j, x in enumerate(leaves))
            trees.append(td)
            flat.append(leaves)
            key.append((td, specs, diff))
        if any(is_device_array(x) for leaves in flat for x in leaves):
            _check_one_place(args, names, flat, fname)
            key.append(_ON_DEVICE)   # the same code, generated for (and run by) the GPU backend
        key = tuple(key)
        if key not in self.cache:
            self._check_differentiable(args, names, nums, flat, trees, fname)
        return names, single, nums, flat, trees, key

    def _spec(self, x, where, diff):
        """A leaf's part of the signature: its spec; the value itself for a bool that is not
        differentiated (a flag: it selects code, as a captured flag does) and for an int the function
        uses as a constant (an axis)."""
        if not diff and (isinstance(x, (bool, np.bool_)) or
                         (where in self._static_leaves and isinstance(x, (int, np.integer)))):
            return ("static", repr(x))
        if diff and is_user_vspace_value(x):   # an element of a user's vector space: a runtime value
            return ("vs", type(x))
        return leaf_spec(x)

    @staticmethod
    def _runtime_leaves(flat, key):
        """The leaves passed to the generated code (the others are fixed into it)."""
        return [x for leaves, (_, specs, _) in zip(flat, _host_key(key)) for x, sp in zip(leaves, specs)
                if sp[0] != "static"]

    def _backend_for(self, sig):
        """The GPU backend for arguments on the device (unless a backend was named), else this transform's."""
        if getattr(sig, "on_device", False) and self.backend.name == "cpu":
            return _CUDA
        return self.backend

    def _check_differentiable(self, args, names, nums, flat, trees, fname):
        for i in nums:
            for (path, _), x in zip(tree_flatten_with_path(args[i])[0], flat[i]):
                if is_float_leaf(x):
                    continue
                where = f"argument {i} ({names[i]})" + (f" at {path}" if path else "")
                if is_user_vspace_value(x):
                    if self.kind != "vjp":
                        raise ArgumentTypeError(
                            f"{fname}: {where} is a {type(x).__name__}, a value of a vector space registered with "
                            "VSpace.register; forward mode (jvp, jacfwd, hessian) cannot differentiate with respect "
                            "to it. Use grad or vjp (reverse mode), which take its derivative from the rules "
                            "(defvjp) of the primitives it is given to.")
                    if self.policy == "njit" and not _jit_disabled():
                        raise ArgumentTypeError(
                            f"{fname}: {where} is a {type(x).__name__}, a value of a vector space registered with "
                            "VSpace.register; its gradient comes from Python rules (defvjp), which whole-function "
                            "compiled code cannot run. Use jit=\"auto\" or jit=\"kernels\" (or jit=False).")
                    continue
                if isinstance(x, np.ndarray):
                    what, fix = f"an array of dtype {x.dtype}", f"cast it with {names[i]}.astype(np.float64)"
                elif isinstance(x, (bool, np.bool_)):
                    what, fix = "a bool", "pass a float"
                elif isinstance(x, (int, np.integer)):
                    what, fix = f"an int ({x!r})", f"pass a float ({float(x)!r})"
                else:
                    what, fix = f"a {type(x).__name__}", "pass a float"
                raise ArgumentTypeError(
                    f"{fname}: {where} is {what}; only floating-point inputs can be differentiated "
                    f"(argnums={self.argnums!r} names it). To differentiate it, {fix}; otherwise leave it out of "
                    f"argnums (ints and bools that are not differentiated are fine).")

    def _signature_of(self, names, nums, flat, trees, key):
        """What a specialization depends on: specs and static leaves only (never the arrays themselves)."""
        on_device = bool(key) and key[-1] is _ON_DEVICE
        if on_device:
            key = key[:-1]
        specs = [s for (_, s, _) in key]
        return Signature(names=list(names), trees=list(trees), specs=specs,
                         statics={(i, j): x for i, leaves in enumerate(flat) for j, x in enumerate(leaves)
                                  if specs[i][j][0] == "static"},
                         diff=tuple(nums), on_device=on_device,
                         shapes={(i, j): (x.shape, x.dtype.str) for i, leaves in enumerate(flat)
                                 for j, x in enumerate(leaves) if type(x) is np.ndarray})

    def _build(self, sig, force_mode=None, specialize=True):
        policy = force_mode or ("nojit" if _jit_disabled() else self.policy)
        fn = self._by_arity(len(sig.names)) if self._by_arity is not None else self.fn
        return build(fn, sig, self._backend_for(sig), policy, kind="primal" if self.kind == "primal" else "vjp",
                     checkpoint_loops=self.checkpoint_loops, specialize=specialize)

    def _promote(self, position, flat, key):
        """Make the ``position``-th runtime argument leaf a specialization key (see StaticArgumentNeeded)."""
        k = 0
        for i, (leaves, (td, specs, _)) in enumerate(zip(flat, _host_key(key))):
            for j, sp in enumerate(specs):
                if sp[0] != "static":
                    if k == position:
                        self._static_leaves.add((i, td, j))
                        return
                    k += 1
        raise AssertionError(f"no runtime argument leaf {position}")  # pragma: no cover

    def _invoke(self, built, key, which, call_args, n_leaves):
        """Run the generated function; returns ``(built, result)``.

        A Numba typing failure (nopython mode cannot express something the Python path can) is turned
        into the user's terms: with ``mode="auto"`` the function is rebuilt once as Python over the
        compiled kernels (with a warning naming the user's line); with ``mode="njit"`` it is refused
        at that line. An error raised while the generated code runs gets a note naming the user's line.
        """
        fn = built.fn if which == "fn" else built.primal_fn
        try:
            return built, fn(*call_args)
        except Exception as e:
            if built.specialized and isinstance(e, LookupError) and e.args == (SPECIALIZATION_MISS,):
                # compiled for other shapes (scalarize): the code for any shapes, from now on for this signature
                mode = built.mode if built.mode != "njit" else None
                return self._rebuild(key, which, call_args, n_leaves, force_mode=mode, specialize=False)
            return self._invoke_failed(e, built, key, which, call_args, n_leaves)

    def _rebuild(self, key, which, call_args, n_leaves, **how):
        """Build this signature again (``how``: :meth:`_build`'s options), keep it for the signature and run it."""
        built = self._build(self._pending[key], **how)
        cap = [g() for _, g in built.captured]
        built.cap_specs = tuple(leaf_spec(c) for c in cap)
        self.cache[key] = built
        self._fast.clear()
        return self._invoke(built, key, which, call_args, n_leaves)   # (its errors in the user's terms too)

    def _invoke_failed(self, e, built, key, which, call_args, n_leaves):
        """The generated code raised ``e`` (handled as :meth:`_invoke` says)."""
        if built.mode != "njit" or not (_compile_failure(e) or _nopython_runtime_gap(e, built)):
            if isinstance(e, (_numba_errors.NumbaError, NotImplementedError)):
                raise
            where = _raised_at(e, built) if isinstance(e, NoDerivativeError) and not e.filename else None
            if where:   # a rule refused while it ran (a custom function's derived JVP): at the user's line
                raise NoDerivativeError(e.msg, where[0], where[1], _line_text(*where)) from None
            refused = _definition_refusal(e, built, call_args, which)
            if refused is not None:   # an assert of a definition over primitives (errors.REFUSAL_MARK)
                raise refused from None
            if not _note_user_line(e, built) and built.mode == "njit" and built.py_fn is not None:
                if which != "fn":   # the primal alone: the generated Python vjp runs the same forward lines
                    call_args = (*call_args, *_seeds(built, len(built.out_atoms), np.float64))
                _locate_in_python(e, built, call_args)   # Numba's frames name no line: run it as Python
            raise
        built.user_fn = self.fn
        where, reason = _numba_failure(e, built)
        loc = f"{where[0]}:{where[1]}" if where else getattr(self.fn, "__qualname__", "the function")
        if self.mode == "auto":
            text = (f"Numba cannot compile this function in nopython mode ({reason}); "
                    "funcgrad runs it as Python over compiled kernels instead")
            if where:
                warnings.warn_explicit(text, FuncgradWarning, where[0], where[1])
            else:
                warnings.warn(f"{loc}: {text}", FuncgradWarning, stacklevel=4)
            _remember_fallback(built, text, where, loc)
            return self._rebuild(key, which, call_args, n_leaves, force_mode="python")
        text = _line_text(*where) if where else None
        raise CompileError(f"Numba cannot compile this function in nopython mode ({reason})\n"
                           "  hint: use jit=\"auto\" (falls back to Python over compiled kernels) or "
                           "jit=\"kernels\"", where[0] if where else None, where[1] if where else None,
                           text) from None

    def _lookup(self, args):
        while True:
            names, single, nums, flat, trees, key = self._prepare(args)
            built = self.cache.get(key)
            if built is not None:
                cap = [g() for _, g in built.captured]
                if built.cap_specs != tuple(leaf_spec(c) for c in cap) or not _statics_unchanged(built.static_checks):
                    built = None
            if built is not None:
                break
            sig = self._signature_of(names, nums, flat, trees, key)
            try:
                built = self._build(sig)
                if built.mode == "njit" and self.mode == "auto" and _recall_fallback(built):
                    built = self._build(sig, force_mode="python")   # failed to compile before: not tried again
            except StaticArgumentNeeded as need:  # an int argument used as an axis: specialize on its value
                self._promote(need.position, flat, key)
                continue
            self._pending[key] = sig
            cap = [g() for _, g in built.captured]
            built.cap_specs = tuple(leaf_spec(c) for c in cap)
            self.cache[key] = built
            self._fast.clear()
            break
        return built, single, nums, flat, trees, cap, key

    def _outputs(self, built, outs, tangents=False):
        """The user's output structure around ``outs``; with ``tangents``, around a forward sweep's tangents,
        where a constant output (known when the code was generated) has the generated code's zero tangent."""
        it = iter(outs)

        def rebuild(v):
            if isinstance(v, Struct):
                items = [rebuild(x) for x in v.values()]
                if v.kind == "dict":
                    return dict(zip(v.items.keys(), items))
                if v.kind == "namedtuple":
                    return v.cls(*items)
                return tuple(items) if v.kind == "tuple" else list(items)
            if isinstance(v, Static):
                t = next(it)
                return t if tangents and _is_number_like(v.obj) else v.obj
            return next(it)

        return rebuild(built.out_tree)

    def _call_vjp(self, args, cotangent_fn):
        built, single, nums, flat, trees, cap, key = self._lookup(args)
        return built, single, nums, flat, trees, self._runtime_leaves(flat, key), cap, key


def _is_number_like(obj):
    """A number or an array: its tangent is a zero of its kind, as for a number the code computes (a bool, a
    string or None stands for itself)."""
    return isinstance(obj, (int, float, complex, np.ndarray, np.number)) and not isinstance(obj, (bool, np.bool_))


class _OnDevice:
    """The last item of a cache key whose arguments live on the GPU."""

    def __repr__(self):
        return "<on device>"


_ON_DEVICE = _OnDevice()


def _host_key(key):
    return key[:-1] if key and key[-1] is _ON_DEVICE else key


def _device_cotangent(c, o):
    """A cotangent for GPU output ``o``: a device array of its shape (a host number is broadcast on the device);
    a NumPy array is refused (no implicit copy)."""
    K = _CUDA.namespace()
    if not is_device_array(o):
        raise DeviceError(f"vjp: the output is a host value ({type(o).__name__}); give a host cotangent")
    if not is_device_array(c):
        if isinstance(c, np.ndarray) and c.ndim:
            raise DeviceError("vjp: the cotangent is a NumPy array in host memory for a GPU output; move it with "
                              "funcgrad.device_put(...)")
        return K.full(tuple(o.shape), c, o.dtype)
    c = K.as_device(c)
    if tuple(c.shape) != tuple(o.shape):
        raise ValueError(f"vjp: a cotangent of shape {tuple(c.shape)} was given for an output of shape "
                         f"{tuple(o.shape)}")
    return c if c.dtype == o.dtype else K.astype(c, o.dtype)


def refuse_device_args(args, what):
    """A transform that runs on the host only (``what`` names it) refuses GPU arrays among ``args``, in words."""
    if any(is_device_array(x) for x in tree_flatten(tuple(args))[0]):
        raise DeviceError(f"{what} of GPU arrays is not available on the GPU backend yet; grad, value_and_grad, "
                          "vjp, jvp, linearize and hvp are. Copy the arguments to the host (funcgrad.device_get) "
                          "for it.")


def _check_one_place(args, names, flat, fname):
    """Arguments on the GPU and NumPy arrays (host memory) in one call: refused, naming the host argument."""
    for i, leaves in enumerate(flat):
        for j, x in enumerate(leaves):
            if isinstance(x, np.ndarray) and x.ndim > 0:
                where = f"argument {i} ({names[i]})" if i < len(names) else f"argument {i}"
                raise DeviceError(
                    f"{fname}: {where} is a NumPy array in host memory (shape {x.shape}) while other arguments "
                    "are GPU arrays; funcgrad does not copy between host and device behind your back. Move it "
                    "with funcgrad.device_put(...) or pass every array on the host (funcgrad.device_get(...)).")


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
_NUMBA_FN = re.compile(r"Function\(<(?:function|built-in function|ufunc) '?([A-Za-z_][\w.]*)'?[^>]*>\)")


def _compile_failure(err):
    """A Numba error, Numba's lowering refusing an operation it typed (``x[...]``), or any exception
    raised while Numba compiles (its own typing code has crashed on operands it does not support)."""
    return (isinstance(err, _numba_errors.NumbaError) or "No definition for lowering" in str(err)
            or _raised_while_compiling(err))


def _nopython_runtime_gap(err, built):
    """Numba's compiled code refusing, as it runs, an operation the Python path does (a ``NotImplementedError``
    such as a reshape of a non-contiguous array): for ``"auto"`` a reason to run the Python path instead."""
    return isinstance(err, NotImplementedError) and built.py_fn is not None


def _raised_while_compiling(err):
    """Whether ``err`` was raised inside Numba's compiler (not by the compiled code as it ran)."""
    return any(frame.f_code.co_name == "_compile_for_args" and "numba" in frame.f_code.co_filename
               for frame, _ in traceback.walk_tb(err.__traceback__))


def _numba_failure(err, built):
    """(the user's (file, line) of the first generated line Numba names, a one-line reason in plain words)."""
    msg = str(err)
    where = None
    for path, line in _FILE_LINE.findall(msg):
        if os.path.abspath(path) == os.path.abspath(built.path):
            where = (built.line_map or {}).get(int(line))
            if where:
                break
    if where is None and not isinstance(err, _numba_errors.NumbaError):   # the statement is in Numba's frames
        for frame, _ in traceback.walk_tb(err.__traceback__):
            for holder in (frame.f_locals.get("inst"), frame.f_locals.get("self")):
                loc = getattr(holder, "loc", None)
                if loc is not None and os.path.abspath(str(getattr(loc, "filename", ""))) == \
                        os.path.abspath(built.path):
                    where = (built.line_map or {}).get(getattr(loc, "line", None)) or where
    reason = "a value of a type nopython mode does not support"
    if _nopython_runtime_gap(err, built) and not _raised_while_compiling(err):
        reason = f"its compiled code refused an operation as it ran: {msg}"
    elif "No definition for lowering" in msg:
        reason = "this operation has no nopython implementation for these operands"
    m = re.search(r"No implementation of function (.+?) found for signature:\s*\n\s*\n?\s*>>> (.+)", msg)
    if m:
        fname = _NUMBA_FN.sub(lambda mm: mm.group(1).split(".")[-1], m.group(1))
        prim = by_name(fname)   # a kernel of funcgrad's: named as the user calls it (np.convolve, not np_convolve)
        if prim is not None and not (getattr(prim.key, "__module__", None) or "funcgrad").startswith("funcgrad"):
            fname = public_name(prim.key)
        sig = re.sub(r"^[\w.<>]+\(", "(", m.group(2).strip())
        what = f"{fname}" if re.fullmatch(r"[A-Za-z][\w.]*", fname) else "an operation on this line"
        reason = f"{what} has no nopython implementation for {_plain_types(sig)}"
    elif "Untyped global name" in msg:
        m = re.search(r"Untyped global name '([^']+)'", msg)
        obj = getattr(getattr(built.fn, "py_func", None), "__globals__", {}).get(m.group(1)) if m else None
        if isinstance(obj, CustomFunction):
            reason = (f"{obj.kind} function '{getattr(obj, '__name__', 'f')}' runs its function and rules as Python, "
                      "which whole-function compiled code cannot call")
        elif obj is not None:
            reason = f"{public_name(obj)} cannot be called from whole-function compiled code"
        else:
            reason = f"'{m.group(1) if m else '?'}' cannot be called from nopython code"
    elif re.search(r"Use of unsupported NumPy function '([^']+)'", msg):
        name = re.search(r"Use of unsupported NumPy function '([^']+)'", msg).group(1)
        reason = f"{name} is not supported there"
    elif re.search(r"Unknown attribute '([^']+)' of type", msg):
        name = re.search(r"Unknown attribute '([^']+)' of type", msg).group(1)
        prim = by_name(name)
        if prim is not None and prim.python_only:   # a kernel with no nopython version (most of SciPy)
            key = prim.key
            label = prim.name if (getattr(key, "__module__", None) or "").startswith("funcgrad") else public_name(key)
            reason = f"{label} has no nopython implementation (it runs as Python only)"
        else:
            reason = f"attribute '{name}' is not supported there"
    elif "Cannot unify" in msg:
        reason = "a variable takes values of different types on different paths"
        m = re.search(r"Cannot unify (.+?) and (.+?) for '([A-Za-z_]\w*?)(?:\.\d+)?'", msg)
        if m:
            var = m.group(3)
            origins = getattr(built, "origins", None) or {}
            base = var[2:] if var.startswith("d_") else var
            words, ident = user_words(base, origins)
            code = getattr(getattr(built, "user_fn", None), "__code__", None)
            if ident is not None and base not in origins and code is not None and base not in code.co_varnames:
                ident = None   # a temporary's adjoint (d_t5 of _t5): no name the user wrote
            if var.startswith("d_") and ident is not None:   # the adjoint of a user's variable
                words = f"the gradient of {words}"
            if ident is not None:   # one of the user's variables
                reason = (f"{words} takes values of different types on different paths: {_plain_types(m.group(1))} "
                          f"on one and {_plain_types(m.group(2))} on another; compiled code needs one type per "
                          "variable")
    elif "have imprecise type: list(undefined)" in msg or re.search(
            r"Type of variable '[^']*' cannot be determined, operation: _p_\w+", msg):
        # (the tape's position counter compared: its list is never appended to where Numba pruned the branch)
        reason = "a branch whose condition is constant never runs, so a list the gradient keeps has no type"
    reason = re.sub(r"\b_ext\d+_", "", reason)
    if where is None:   # nothing names a line of the user's: the function itself
        where = _def_line(getattr(built, "user_fn", None))
    return where, reason[:240]


def _def_line(fn):
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename.startswith("<"):
        return None
    return (code.co_filename, code.co_firstlineno)


def _plain_types(sig):
    """Numba's type names in plain words: array(float64, 3d, C) -> 3-D float64 array."""
    sig = re.sub(r"array\((\w+), (\d+)d, \w+\)", lambda m: f"{m.group(2)}-D {m.group(1)} array", sig)
    sig = re.sub(r"UniTuple\((\w+) x (\d+)\)", lambda m: f"tuple of {m.group(2)} {m.group(1)}", sig)
    sig = re.sub(r"Literal\[(\w+)\]\([^)]*\)", r"\1", sig)
    sig = re.sub(r"reflected list\((\w+)\)", r"list of \1", sig)
    return sig


def _line_text(filename, lineno):
    return linecache.getline(filename, lineno) if filename and lineno else None


def _remember_fallback(built, text, where, loc):
    """Record beside the generated file that Numba could not compile it, so a later process running the same
    code (read from the disk cache) goes straight to Python over the kernels instead of failing again."""
    # the user's location is kept as a line of the generated file: the same generated code (content-hashed)
    # serves every copy of the same source, and a later process maps it to *its* user's file
    gen = next((k for k, v in sorted((built.line_map or {}).items()) if where and tuple(v) == tuple(where)), None)
    try:
        with open(built.path + ".nopython-failed", "w") as fh:
            json.dump({"text": text, "gen_line": gen, "where": list(where) if where else None, "loc": loc}, fh)
    except OSError:
        pass


def _recall_fallback(built):
    """True (after repeating its warning) when an earlier process found Numba cannot compile this code."""
    try:
        with open(built.path + ".nopython-failed") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return False
    where = (built.line_map or {}).get(rec.get("gen_line"))
    if rec.get("where") and not where:
        return False    # a record that cannot name this copy's line (an older format): compile again instead
    if where:
        warnings.warn_explicit(rec["text"], FuncgradWarning, where[0], where[1])
    else:
        loc = rec.get("loc") if not rec.get("where") else None   # a stored path may be another copy's
        warnings.warn(f"{loc or 'this function'}: {rec['text']}", FuncgradWarning, stacklevel=5)
    return True


def _raised_at(err, built):
    """The user's (file, line) of the innermost generated line of ``built`` in ``err``'s traceback, or None."""
    tb, where = err.__traceback__, None
    while tb is not None:
        where = built.user_line(tb.tb_frame.f_code.co_filename, tb.tb_lineno) or where
        tb = tb.tb_next
    return where


def _definition_refusal(err, built, call_args, which):
    """A NoDerivativeError at the user's line for an assert of funcgrad's own definitions that failed while
    generated code ran (its message starts with errors.REFUSAL_MARK), or None for any other error."""
    text = str(err.args[0]) if isinstance(err, AssertionError) and err.args else ""
    mark = next((m for m in (REFUSAL_MARK, UNSUPPORTED_MARK) if text.startswith(m)), None)
    if mark is None:
        return None
    where = _raised_at(err, built)
    if where is None and built.mode == "njit" and built.py_fn is not None:   # Numba's frames name no line
        if which != "fn":
            call_args = (*call_args, *_seeds(built, len(built.out_atoms), np.float64))
        try:
            built.py_fn(*call_args)
        except AssertionError as again:
            where = _raised_at(again, built)
        except Exception:
            pass
    where = where or (None, None)
    cls = NoDerivativeError if mark == REFUSAL_MARK else RunValueError
    return cls(text[len(mark):], where[0], where[1], _line_text(*where) if where[0] else None)


def _note_user_line(err, built):
    """Add a note naming the user's line that the failing generated line came from (PEP 678 notes)."""
    where = _raised_at(err, built)
    if where and hasattr(err, "add_note") and not getattr(err, "_funcgrad_noted", False):
        text = (_line_text(*where) or "").strip()
        err.add_note(f"funcgrad: raised at {where[0]}:{where[1]}" + (f": {text}" if text else ""))
        try:
            err._funcgrad_noted = True
        except AttributeError:
            pass
    return bool(where)


def _locate_in_python(err, built, call_args):
    """An error raised inside whole-function Numba code carries no line of the generated code: run the same
    generated code as plain Python (the functions are pure) and, when it fails the same way, note the user's
    line it failed at on the original error."""
    try:
        built.py_fn(*call_args)
    except type(err) as again:
        where = _raised_at(again, built)
        if where and hasattr(err, "add_note"):
            text = (_line_text(*where) or "").strip()
            said = str(again)   # Python's message, with what compiled code could not format (shapes, values)
            said = said[len(str(err)):].strip() if said.startswith(str(err)) else f"(NumPy says: {said})"
            err.add_note(f"funcgrad: raised at {where[0]}:{where[1]}" + (f": {text}" if text else "") +
                         (f"\n  {said}" if said else ""))
    except Exception:   # fails differently (or not at all) as Python: nothing reliable to add
        pass


def _statics_unchanged(checks):
    """True while every value fixed into the generated code is still what its name refers to."""
    for getter, expected in checks:
        try:
            now = getter()
        except Exception:  # the name went away: rebuild (and report it then)
            return False
        if isinstance(expected, ContentsOf):   # a list or dict: by its contents (it may have changed in place)
            if not expected.matches(now):
                return False
            continue
        if now is expected:
            continue
        if type(now) is not type(expected) or not isinstance(now, (bool, int, float, str, tuple, slice, type(None))):
            return False
        try:
            if not bool(now == expected):
                return False
        except Exception:
            return False
    return True


def _as_python_function(fn):
    """``(function, by_arity)``: a Python function funcgrad reads for any callable users pass.

    The user's functions and methods are read as they are; a callable object of the user's class is
    its ``__call__``. Anything else (a NumPy or SciPy function, a ufunc, a builtin, a C function, a
    ``functools.partial``, a ``custom_vjp`` function, a library's callable object) is called from a
    generated one-line function, so the call is treated as any call in the user's code: a primitive
    is differentiated by its rule, a library routine without one is refused, and no library source is
    ever read. For a callable with no readable signature ``by_arity(n)`` makes the wrapper of ``n``
    arguments (``function`` is then None until the first call)."""
    if getattr(type(fn), "_funcgrad_transform", False):
        if fn.kind == "primal":  # grad(jit(f)) is grad(f)
            return fn.fn, fn._by_arity
        raise TypeError(f"{getattr(fn, '__qualname__', 'f')} is a function returned by funcgrad.grad, "
                        "value_and_grad or vjp; transforming it again is not supported here (transform the "
                        "original function)")
    if isinstance(fn, types.FunctionType) and _is_user_code(fn) and not fn.__dict__.get("_funcgrad_inline"):
        return fn, None   # (a derivative funcgrad made, elementwise_grad(f), is called: its call writes it out)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and \
            _is_user_code(fn.__func__):
        return fn, None
    if not isinstance(fn, (type, types.FunctionType, types.MethodType, functools.partial, CustomFunction)):
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType) and _is_user_code(call):
            return fn.__call__, None  # a callable object of the user's class: its __call__, bound to it
    label = f"functools.partial({public_name(fn.func)})" if isinstance(fn, functools.partial) else public_name(fn)
    params = _wrapper_params(fn)
    if params is None:
        return None, functools.lru_cache(maxsize=None)(
            lambda n: _wrapper(fn, [f"x{i}" for i in range(n)], [], label))
    return _wrapper(fn, *params, label), None


def _wrapper_params(fn):
    """``(positional, keyword-only)`` names of the arguments a call of ``fn`` needs (those without a
    default), or None where ``fn`` has no readable signature or takes ``*args``."""
    prim = lookup(fn)
    try:
        sig = prim.signature if prim is not None else inspect.signature(fn)
    except (TypeError, ValueError):
        if isinstance(fn, np.ufunc):
            return [f"x{i}" for i in range(fn.nin)], []
        return None
    if isinstance(fn, np.ufunc) and prim is None:
        return [f"x{i}" for i in range(fn.nin)], []
    pos, kwonly = [], []
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return None
        if p.kind == p.VAR_KEYWORD or p.default is not p.empty:
            continue
        (kwonly if p.kind == p.KEYWORD_ONLY else pos).append(p.name)
    if any(not n.isidentifier() or n.startswith("_target") for n in pos + kwonly):
        return None
    return pos, kwonly


_WRAPPER_FILES: dict = {}   # file name of a generated wrapper -> what it calls (errors there are the user's call)


def _wrapper(target, pos, kwonly, label):
    """A generated Python function of ``pos`` and ``kwonly`` that returns ``target(...)`` of them."""
    name = "".join(c if c.isalnum() else "_" for c in label.split(".")[-1]) or "f"
    if name[0].isdigit():
        name = "f" + name
    params = ", ".join(pos + (["*"] + kwonly if kwonly else []))
    call = ", ".join(pos + [f"{k}={k}" for k in kwonly])
    src = f"def {name}({params}):\n    return _target({call})\n"
    digest = hashlib.sha1(src.encode()).hexdigest()[:8]   # same text, same name: stable across processes
    filename = f"<funcgrad: a call of {label} #{digest}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    _WRAPPER_FILES[filename] = label
    ns = {"_target": target, "__name__": "funcgrad_wrapper"}
    exec(compile(src, filename, "exec"), ns)
    w = ns[name]
    w.__qualname__ = label
    return w


def _scalar_output_check(fname, out, has_aux):
    if type(out) is float or type(out) is np.float64 or type(out) is np.float32:
        return
    arr = np.asarray(out)
    if arr.size != 1:  # a scalar, or a size-1 array (shape (1,), (1, 1)) as autograd accepts
        raise TypeError(f"grad of {fname} requires a scalar output; the function returned an array of shape "
                        f"{arr.shape}. Reduce it (np.sum, np.mean) or use funcgrad.vjp for non-scalar outputs."
                        + (" (with has_aux=True the function must return (scalar, aux))" if has_aux else ""))
    if arr.dtype.kind == "c":
        raise TypeError(f"grad of {fname} requires a real scalar output; it returned a complex value (dtype "
                        f"{arr.dtype}). Differentiate a real function of it (np.real, np.abs) or use funcgrad.vjp")
    if arr.dtype.kind != "f":
        raise TypeError(f"grad of {fname} requires a floating-point output; it returned dtype {arr.dtype}")


class _ValueAndGrad(_Transformed):
    def __init__(self, fn, argnums=0, has_aux=False, mode=None, jit=True, backend=None, return_value=True,
                 checkpoint_loops=None):
        super().__init__(fn, "vjp", argnums, has_aux, mode, jit, backend, checkpoint_loops)
        self.return_value = return_value

    @_user_facing
    def __call__(self, *args, **kwargs):
        if not kwargs and self._fast:
            fk = _fast_key(args)
            if fk is not None:
                plan, leaves = self._fast.get(fk), args
            else:   # (containers of arrays: the plan by their structure, their leaves in order)
                tk = _fast_tree_key(args)
                plan, leaves = (self._fast.get(tk[0]), tk[1]) if tk is not None else (None, None)
            if plan is not None:
                out = self._fast_call(plan, args, leaves)
                if out is not _MISS:
                    return out
        if kwargs or len(args) != self._n_params:
            args = self._bind(args, kwargs)
            kwargs = True   # bound: not a call the fast path can repeat
        built, single, nums, flat, trees, leaves, cap, key = self._call_vjp(args, None)
        fname = getattr(self.fn, "__qualname__", "f")
        n_out = len(built.out_atoms)
        if self.has_aux:
            if not (isinstance(built.out_tree, Struct) and built.out_tree.kind in ("tuple", "list")
                    and len(built.out_tree.values()) == 2):
                raise TypeError(f"{fname} was differentiated with has_aux=True, so it must return a pair "
                                f"(scalar, aux); it returns {_describe_out(built.out_tree)}")
        # value seed: 1 for the (first) scalar output, 0 for aux outputs
        # run once with the seed; the primal value determines the seed's dtype
        if getattr(built, "seed_dtype", None) is None:
            fl = [x.dtype if is_device_array(x) else x for i in nums for x in flat[i] if not is_user_vspace_value(x)]
            built.seed_dtype = np.result_type(*fl) if fl else np.dtype(np.float64)
            if built.seed_dtype.kind == "c":   # complex inputs, real output: a real seed
                built.seed_dtype = np.finfo(built.seed_dtype).dtype
        seeds = _seeds(built, n_out, built.seed_dtype)
        try:
            built, (outs, grads) = self._invoke(built, key, "fn", (*leaves, *cap, *seeds), len(leaves))
        except Exception:
            if getattr(built, "checked", False):
                raise
            # a non-scalar output makes the scalar seed fail: say so; a size-1 array output (shape (1,)) needs
            # a seed of its shape: run again with one
            _, pouts = self._invoke(built, key, "primal", (*leaves, *cap), len(leaves))
            main = list(pouts)[0]
            _scalar_output_check(fname, main, self.has_aux)
            dt, shape = np.asarray(main).dtype, np.shape(main)
            if not shape and dt == built.seed_dtype:
                raise
            built.seed_dtype, built.seed_shape = dt, shape
            seeds = _seeds(built, n_out, dt)
            built, (outs, grads) = self._invoke(built, key, "fn", (*leaves, *cap, *seeds), len(leaves))
        outs = list(outs)
        main = outs[0]
        _scalar_output_check(fname, main, self.has_aux)
        built.checked = True
        dt = np.asarray(main).dtype
        shape = np.shape(main)
        sd = getattr(built, "seed_dtype", None)   # (np.dtype("float64") == None holds: test for None first)
        if sd is None or sd != dt or getattr(built, "seed_shape", ()) != shape:
            # a float32 result, or a size-1 array result (shape (1,) or (1, 1)): seed with its dtype and shape
            built.seed_dtype, built.seed_shape = dt, shape
            if dt != np.float64 or shape:
                seeds = _seeds(built, n_out, dt)
                built, (outs, grads) = self._invoke(built, key, "fn", (*leaves, *cap, *seeds), len(leaves))
                outs = list(outs)
        grads = list(grads)
        result = []
        gi = 0
        for i in nums:
            gl = []
            for x in flat[i]:
                g = grads[gi]
                gi += 1
                gl.append(_match(g, x))
            result.append(tree_unflatten(trees[i], gl))
        g = result[0] if single else tuple(result)
        value = self._outputs(built, outs)
        if not kwargs and not self.has_aux and self._by_arity is None and \
                len(leaves) == sum(len(f) for f in flat) and \
                not isinstance(built.out_tree, (Struct, Static)) and self.cache.get(key) is built:
            # the next call with arrays and floats of these dtypes and ndims (in containers of this structure)
            # skips the above
            seeds = tuple(_seeds(built, n_out, built.seed_dtype))
            fk = _fast_key(args) if len(leaves) == len(args) else None
            if fk is not None:
                self._fast[fk] = _FastPlan(built, key, tuple(nums), single, seeds)
            else:
                tk = _fast_tree_key(args)
                if tk is not None:
                    spans = _leaf_offsets(flat)
                    self._fast[tk[0]] = _FastPlan(built, key, tuple(nums), single, seeds,
                                                  tuple(trees[i] for i in nums), tuple(spans[i] for i in nums))
        if not self.return_value:
            return (g, value[1]) if self.has_aux else g
        if self.has_aux:
            return (value[0], value[1]), g
        return value, g


    def _fast_call(self, plan, args, leaves):
        """A call whose every argument is an array or a float (``leaves`` is ``args``), or whose arguments are
        plain tuples, lists and dicts of them (``leaves``: their leaves in order), of a signature called before:
        the same checks as the general path (captured values and fixed names unchanged, output still a scalar
        of the seed's dtype), without binding, specs or key building. ``_MISS`` sends the call down the general
        path."""
        built = plan.built
        if built.captured:
            cap = [g() for _, g in built.captured]
            if built.cap_specs != tuple(leaf_spec(c) for c in cap):
                return _MISS
        else:
            cap = ()
        if built.static_checks and not _statics_unchanged(built.static_checks):
            return _MISS
        got, (outs, grads) = self._invoke(built, plan.key, "fn", (*leaves, *cap, *plan.seeds), len(leaves))
        if got is not built:
            return _MISS
        main = outs[0]
        tm = type(main)
        if tm is float or tm is np.float64:
            if built.seed_dtype != np.float64 or getattr(built, "seed_shape", ()):
                return _MISS
        else:
            _scalar_output_check(getattr(self.fn, "__qualname__", "f"), main, False)
            if np.asarray(main).dtype != built.seed_dtype or np.shape(main) != getattr(built, "seed_shape", ()):
                return _MISS
        result = []
        if plan.trees is None:
            for g, i in zip(grads, plan.nums):
                result.append(_fast_match(g, args[i]))
        else:   # (the gradient of argument i: its leaves' gradients, in its structure)
            k = 0
            for td, (lo, hi) in zip(plan.trees, plan.spans):
                n = hi - lo
                result.append(tree_unflatten(td, [_fast_match(g, x) for g, x in zip(grads[k:k + n], leaves[lo:hi])]))
                k += n
        g = result[0] if plan.single else tuple(result)
        return (main, g) if self.return_value else g


_MISS = object()


class _FastPlan:
    __slots__ = ("built", "key", "nums", "single", "seeds", "trees", "spans")

    def __init__(self, built, key, nums, single, seeds, trees=None, spans=None):
        self.built, self.key, self.nums, self.single, self.seeds = built, key, nums, single, seeds
        self.trees, self.spans = trees, spans   # (pytree arguments) differentiated ones' structures, leaf ranges


def _fast_match(g, x):
    """``_match(g, x)``, skipping the work where ``g`` already is of ``x``'s type, dtype and shape."""
    tx = type(x)
    if tx is float and type(g) is float:
        return g
    if tx is np.ndarray and type(g) is np.ndarray and g.dtype == x.dtype and g.shape == x.shape:
        return g
    return _match(g, x)


def _leaf_offsets(flat):
    """Per argument, the range of its leaves among all arguments' leaves in order."""
    out, k = [], 0
    for leaves in flat:
        out.append((k, k + len(leaves)))
        k += len(leaves)
    return out


def _fast_tree_key(args):
    """``(key, leaves)`` for a call whose arguments are arrays (NumPy or GPU), floats and ints in plain tuples,
    lists and dicts (nested): the key holds the structure (container types, lengths, dict keys) and each
    leaf's dtype and ndim, the leaves are in :func:`funcgrad.tree.tree_flatten`'s order; None for anything
    else (other leaf or container types, a registered pytree node)."""
    key, leaves = [], []
    for a in args:
        if not _fast_walk(a, key, leaves):
            return None
    return tuple(key), leaves


def _fast_walk(x, key, leaves):
    t = type(x)
    if t is np.ndarray:
        key.append((x.dtype, x.ndim))
        leaves.append(x)
        return True
    if t is float or t is int:
        key.append(t)
        leaves.append(x)
        return True
    if t in _FAST_DEVICE_TYPES:
        key.append(("gpu", x.dtype, len(x.shape)))
        leaves.append(x)
        return True
    if t is list or t is tuple:
        if t in _tree_registry:
            return False
        key.append((t, len(x)))
        for c in x:
            if not _fast_walk(c, key, leaves):
                return False
        return True
    if t is dict and t not in _tree_registry:
        ks = _dict_keys(x)
        key.append((dict, tuple(ks)))
        for k in ks:
            if not _fast_walk(x[k], key, leaves):
                return False
        return True
    return False


def _fast_key(args):
    """``(dtype, ndim)`` per array, ``float`` per float and ``int`` per int argument (a trip count: a plan is
    only made for a specialization that takes every argument at run time, none fixed into the code); None when
    any argument is anything else."""
    key = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            key.append((a.dtype, a.ndim))
        elif t is float or t is int:
            key.append(t)
        else:
            return None
    return tuple(key)


def _describe_out(v):
    if isinstance(v, Struct):
        return f"a {v.kind} of {len(v.values())} values"
    return "a single value"


def _seeds(built, n_out, dtype=None):
    seeds = []
    shape = getattr(built, "seed_shape", ())
    for i in range(n_out):
        if i == 0:
            if shape:
                seeds.append(np.ones(shape, dtype=dtype or np.float64))
            else:
                seeds.append(1.0 if dtype is None or dtype == np.float64 else np.ones((), dtype=dtype)[()])
        else:
            seeds.append(0.0)
    return seeds


def _match(g, x):
    """A cotangent with the shape, dtype and Python type of its primal leaf."""
    if isinstance(x, np.ndarray):
        g = np.asarray(g)
        if g.dtype != x.dtype:
            g = g.astype(x.dtype)
        if g.shape != x.shape:
            g = np.broadcast_to(g, x.shape).copy()
        return g
    if isinstance(x, float):
        return float(g) if np.ndim(g) == 0 else float(np.sum(g))
    if isinstance(x, np.generic):
        return x.dtype.type(g if np.ndim(g) == 0 else np.sum(g))
    if isinstance(x, complex):
        return complex(g if np.ndim(g) == 0 else np.sum(g))
    return g


def _argnum_alias(argnums, argnum):
    """autograd's keyword ``argnum=`` for ``argnums``."""
    if argnum is None:
        return argnums
    if argnums != 0:
        raise TypeError("give argnums or autograd's argnum, not both")
    return argnum


def grad(fun, argnums=0, has_aux=False, *, jit=True, backend=None, mode=None, argnum=None, checkpoint_loops=False):
    """The gradient of a scalar-valued function with respect to argument(s) ``argnums``.

    ``grad(f)(x, ...)`` returns a value with the structure of ``x`` (a pytree of
    arrays). With a tuple ``argnums`` it returns a tuple of such. With
    ``has_aux=True`` ``f`` returns ``(scalar, aux)`` and ``grad`` returns
    ``(gradient, aux)``.

    ``jit`` chooses how the generated code runs: ``True``/``"auto"`` (the default)
    compiles functions with loops (theirs or a helper's) whole with Numba and runs
    loop-free array code as Python over compiled kernels; ``"whole"`` and
    ``"kernels"`` force either; ``False`` runs everything as plain Python (the
    oracle for tests). ``mode="auto"/"njit"/"python"`` is the older spelling of
    ``jit="auto"/"whole"/"kernels"``. ``backend`` names the kernels it runs on.
    ``argnum=`` is autograd's name for ``argnums``.

    ``checkpoint_loops`` bounds the memory of long loops: ``False`` (the default)
    tapes every loop; a budget in bytes (or a size such as ``"100MB"``)
    checkpoints each top-level ``for`` loop whose tape would exceed it, decided
    when the loop starts from its trip count and the bytes one trip pushes;
    ``True`` checkpoints every loop that can be (README: Long loops).
    """
    argnums = _argnum_alias(argnums, argnum)
    if _is_derivative(fun):   # grad of grad: forward mode builds the inner derivative as code
        return _NESTED[0][1](fun, argnums, has_aux, jit, backend, mode, False, checkpoint_loops)
    return _ValueAndGrad(fun, argnums, has_aux, mode, jit, backend, return_value=False,
                         checkpoint_loops=checkpoint_loops)


def value_and_grad(fun, argnums=0, has_aux=False, *, jit=True, backend=None, mode=None, argnum=None,
                   checkpoint_loops=False):
    """Like :func:`grad` but returns ``(value, gradient)`` (``((value, aux), gradient)`` with has_aux)."""
    argnums = _argnum_alias(argnums, argnum)
    if _is_derivative(fun):
        return _NESTED[0][1](fun, argnums, has_aux, jit, backend, mode, True, checkpoint_loops)
    return _ValueAndGrad(fun, argnums, has_aux, mode, jit, backend, return_value=True,
                         checkpoint_loops=checkpoint_loops)


# written inside a transformed function, grad(f) is made while transforming (normalize inlines the derivative)
grad._funcgrad_static_call = True
value_and_grad._funcgrad_static_call = True


# (class, factory) of nested derivatives, filled in by funcgrad.forward_mode (the layer above) on import
_NESTED: list = [(None, None)]


def _is_derivative(fun):
    return isinstance(fun, _ValueAndGrad) or (_NESTED[0][0] is not None and isinstance(fun, _NESTED[0][0]))


class _VJP(_Transformed):
    def __init__(self, fn, has_aux=False, mode=None, jit=True, backend=None, checkpoint_loops=None):
        super().__init__(fn, "vjp", 0, has_aux, mode, jit, backend, checkpoint_loops)

    @_user_facing
    def run(self, primals, argnums=None):
        self.argnums = tuple(range(len(primals))) if argnums is None else argnums
        built, single, nums, flat, trees, leaves, cap, key = self._call_vjp(primals, None)
        built, outs = self._invoke(built, key, "primal", (*leaves, *cap), len(leaves))
        value = self._outputs(built, list(outs))
        for o in tree_flatten(value)[0]:
            if is_user_vspace_value(o):
                raise ArgumentTypeError(
                    f"vjp of {getattr(self.fn, '__qualname__', 'f')}: the function returns a {type(o).__name__}, a "
                    "value of a vector space registered with VSpace.register; vjp takes cotangents of array and "
                    "number outputs only (return what is computed from it)")

        def vjp_fn(cotangent):
            ct_leaves, ct_td = tree_flatten(cotangent)
            out_leaves, out_td = tree_flatten(value)
            if ct_td != out_td:
                raise TreeStructureError(f"vjp: the cotangent has structure {ct_td!r} but the output has {out_td!r}")
            seeds = []
            for c, o in zip(ct_leaves, out_leaves):
                if is_device_array(o) or is_device_array(c):
                    seeds.append(_device_cotangent(c, o))
                    continue
                c = np.asarray(c, dtype=np.asarray(o).dtype)
                if c.shape != np.shape(o):
                    raise ValueError(f"vjp: a cotangent of shape {c.shape} was given for an output of shape "
                                     f"{np.shape(o)}")
                seeds.append(c if c.shape else c[()])
            _, (_, grads) = self._invoke(built, key, "fn", (*leaves, *cap, *seeds), len(leaves))
            grads = list(grads)
            res, gi = [], 0
            for i in nums:
                gl = []
                for x in flat[i]:
                    gl.append(_match(grads[gi], x))
                    gi += 1
                res.append(tree_unflatten(trees[i], gl))
            return tuple(res)

        return value, vjp_fn


def vjp(fun, *primals, argnums=None, jit=True, backend=None, mode=None, checkpoint_loops=False):
    """``(fun(*primals), vjp_fn)`` where ``vjp_fn(cotangent)`` returns one cotangent per primal.

    ``argnums`` (default: all) limits the primals that get cotangents; ``checkpoint_loops`` as for :func:`grad`.
    """
    t = _cached_vjp(fun, mode, jit, get_backend(backend), _checkpoint_budget(checkpoint_loops))
    return t.run(primals, argnums)


_VJP_ATTR = "__funcgrad_vjp__"
_VJP_OTHER: dict = {}   # callables that take no attributes (bound methods, partials): key holds the object itself


def _cached_vjp(fun, mode, jit, backend, checkpoint_loops=None):
    """The transform of ``fun``, cached on the function object itself (so it lives and dies with it,
    and a new function can never be handed an old one's gradient, as a cache keyed by ``id`` could)."""
    per_fun = getattr(fun, "__dict__", {}).get(_VJP_ATTR) if hasattr(fun, "__dict__") else None
    if per_fun is None:
        per_fun = {}
        try:
            setattr(fun, _VJP_ATTR, per_fun)
        except (AttributeError, TypeError):
            try:
                per_fun = _VJP_OTHER.setdefault(fun, per_fun)  # keyed by the object (eq/hash), never by id
            except TypeError:  # unhashable: transform afresh
                return _VJP(fun, False, mode, jit, backend, checkpoint_loops)
            if len(_VJP_OTHER) > 256:
                _VJP_OTHER.pop(next(iter(_VJP_OTHER)))
    t = per_fun.get((mode, jit, backend, checkpoint_loops))
    if t is None:
        t = per_fun[(mode, jit, backend, checkpoint_loops)] = _VJP(fun, False, mode, jit, backend, checkpoint_loops)
    return t


class _Jit(_Transformed):
    def __init__(self, fn, mode=None, jit="whole", backend=None):
        super().__init__(fn, "primal", 0, False, mode, jit, backend)

    @_user_facing
    def __call__(self, *args, **kwargs):
        tk = None
        if not kwargs and len(args) == self._n_params:
            tk = _fast_tree_key(args)
            plan = self._fast.get(tk[0]) if tk is not None and self._fast else None
            if plan is not None:   # arrays, floats and ints in plain containers, of a signature called before
                built, key = plan
                cap = [g() for _, g in built.captured] if built.captured else ()
                if (not cap or built.cap_specs == tuple(leaf_spec(c) for c in cap)) and \
                        (not built.static_checks or _statics_unchanged(built.static_checks)):
                    got, outs = self._invoke(built, key, "fn", (*tk[1], *cap), len(tk[1]))
                    return self._outputs(got, list(outs))
        if kwargs or len(args) != self._n_params:
            args = self._bind(args, kwargs)
        built, single, nums, flat, trees, cap, key = self._lookup(args)
        leaves = self._runtime_leaves(flat, key)
        built, outs = self._invoke(built, key, "fn", (*leaves, *cap), len(leaves))
        if tk is not None and self._by_arity is None and len(leaves) == len(tk[1]) and self.cache.get(key) is built:
            self._fast[tk[0]] = (built, key)   # the next such call skips the above
        return self._outputs(built, list(outs))


def jit(fun=None, *, mode=None, strategy="whole", backend=None):
    """Compile a pure function without differentiating it (whole-function ``numba.njit`` by default)."""
    if fun is None:
        return lambda f: _Jit(f, mode, True if mode is not None else strategy, backend)
    return _Jit(fun, mode, True if mode is not None else strategy, backend)


def source(fun, *example_args):
    """The generated Python source of a transformed function (``grad``/``value_and_grad``/``jit``).

    After the function has been called, returns the source of its most recent
    specialization; with ``example_args`` it builds the specialization first.
    """
    if not isinstance(fun, _Transformed):
        raise TypeError("funcgrad.source expects a function returned by funcgrad.grad, value_and_grad or jit; "
                        f"received {fun!r}")
    if example_args:
        fun._lookup(example_args)
    if not fun.cache:
        raise ValueError("this function has not been called yet: call it once, or pass example arguments "
                         "(funcgrad.source(f, *args))")
    return list(fun.cache.values())[-1].source
jit._funcgrad_static_call = True   # funcgrad.jit(f)(x) written inside a transformed function: made while transforming
