"""The CPU backend: NumPy arrays, the kernel namespace :mod:`funcgrad.kernels.cpu`, Numba's ``njit``."""
from __future__ import annotations

import hashlib
import os
import platform
import warnings

import numba
import numpy as np
from numba.core import codegen as _codegen
from numba.core import compiler, typed_passes
from numba.core.compiler_machinery import register_pass
from numba.core.errors import NumbaPerformanceWarning
from numba.core.rewrites import registry as _rewrites
from numba.np.ufunc.array_exprs import RewriteArrayExprs

from . import cpu
from .base import Backend, register_backend

__all__ = ["CPUBackend", "CPU"]


def settle_allocator(nbytes=16 << 20):
    """Let glibc reuse the memory of a step's large temporaries instead of mapping fresh pages each step.

    glibc serves an allocation above its mmap threshold (128 kB at start) with fresh pages from the OS and
    gives them back when freed; freeing such a block raises the threshold to its size (and the heap's trim
    threshold to twice that). A LeNet step's temporaries (0.2-1 MB: im2col buffers, conv outputs) otherwise
    paid ~850 page faults a step (3.6 ms; 2.3 ms and none once settled, as in a process that imported
    PyTorch, whose import does the same). One 16 MB block allocated and freed here (never touched: no page is
    mapped) raises the threshold to 16 MB and the trim threshold to 32 MB: up to 32 MB of freed heap stays with
    the process. ``FUNCGRAD_SETTLE_MALLOC=0`` turns it off. Linux with glibc only (elsewhere: nothing)."""
    if os.environ.get("FUNCGRAD_SETTLE_MALLOC", "1").strip() in ("0", "false", "False", "no"):
        return False
    if not platform.system() == "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    block = np.empty(nbytes, np.uint8)   # malloc: above the threshold, its own mapping
    del block                            # free: unmapped, and the threshold raised to its size
    return True


settle_allocator()


@register_pass(mutates_CFG=True, analysis_only=False)
class _RewritesWithoutArrayExprs(typed_passes.NopythonRewrites):
    """Numba's post-typing rewrites except the fusion of array expressions.

    The fusion compiles every fused expression as a function of its own (a whole Numba pipeline per
    expression, never shared): in generated code, where each statement is one operation, it fuses little
    and costs about 20 ms per array operation of the program cold (55 in bundle adjustment's adjoint).
    Unfused, each operation is lowered as NumPy's ufunc loop, in place (bundle adjustment's gradient: the
    same run time; the LSTM's, whose 64-wide adjoint expressions it did join, about 3% slower). The registry is Numba's one list; it is narrowed only while this pass runs, under Numba's
    compiler lock, which every compilation holds."""
    _name = "funcgrad_nopython_rewrites"

    def run_pass(self, state):
        everything = _rewrites.rewrite_registry.rewrites
        kept = [r for r in everything["after-inference"] if r is not RewriteArrayExprs]
        saved, everything["after-inference"] = everything["after-inference"], kept
        try:
            return super().run_pass(state)
        finally:
            everything["after-inference"] = saved


def _module_optimized_library(state):
    """The code library Numba's lowering would make for the function being compiled, made here, that runs
    LLVM's optimizer over the function once, not three times.

    Numba optimizes each lowered function at -O3 alone, links it with the kernels it calls, runs a "cheap"
    module pipeline (-O3 without SLP vectorization, so that inlining brings reference counts together for
    the refcount-pruning pass) and then the full -O3 module pipeline, which ends with refcount pruning too.
    For a generated function (hundreds of statements, a loop per array operation) each run cost about as much
    as the last and left little the next does not do. Only the full module pipeline runs here: the first
    call of ADBench's LSTM gradient 16-18 -> 14.5 s CPU, bundle adjustment's 9-11 -> 9 s (Intel Xeon,
    2026-11-29; skipping the function-level run alone: the same run time on 2026-11-28). The run time of
    both is unchanged within this machine's noise (LSTM 2.30 / 2.30 ms, BA 10.2 / 10.3 ms, best of three
    processes each) and the compiled gradient of BA keeps as many reference-count calls (43 increfs and 110
    decrefs in its machine code against 39 and 114). Kernels' libraries keep Numba's three runs."""
    library = state.targetctx.codegen().create_library(state.func_id.func_qualname)
    library.enable_object_caching()
    if hasattr(library, "_optimize_functions") and hasattr(library._codegen, "_data_layout"):
        def _optimize_functions(ll_module):
            ll_module.data_layout = library._codegen._data_layout
        library._optimize_functions = _optimize_functions
    if hasattr(library, "_optimize_final_module") and hasattr(library, "_recorded_timings"):
        def _optimize_final_module():
            if not numba.config.LLVM_REFPRUNE_PASS:   # as Numba does when its pruning pass is turned off
                library._final_module = _codegen.remove_redundant_nrt_refct(library._final_module)
            pm, pb = library._codegen._module_pass_manager()
            with library._recorded_timings.record("Module passes (full optimization)", pb):
                pm.run(library._final_module, pb)
        library._optimize_final_module = _optimize_final_module
    return library


class _GeneratedCompiler(compiler.Compiler):
    """Numba's pipelines for funcgrad's generated functions, the nopython one without array-expression fusion
    (kernels keep Numba's default; object-mode blocks lifted out of a generated function, which Numba compiles
    with its caller's pipeline class, keep Numba's object-mode pipeline)."""

    def define_pipelines(self):
        pms = super().define_pipelines()
        if not self.state.flags.force_pyobject and self.state.library is None:
            self.state.library = _module_optimized_library(self.state)
        for pm in pms:
            swapped = False
            for i, (cls, _) in enumerate(pm.passes):
                if cls is typed_passes.NopythonRewrites:
                    pm.passes[i] = (_RewritesWithoutArrayExprs, "nopython rewrites, no array expressions")
                    swapped = True
            if swapped:
                pm.finalize()
        return pms


class CPUBackend(Backend):
    name = "cpu"
    array_types = (np.ndarray, np.generic)

    def __init__(self):
        self._python = None
        self._fingerprint = None

    def namespace(self, compiled=True):
        if compiled:
            return cpu
        if self._python is None:
            self._python = cpu.python_namespace()
        return self._python

    def compile_whole(self, fn, cache=True):
        # NumPy's error model: a float divided by zero is inf or nan, as NumPy's scalars and arrays give it (the
        # Python path), not Python's ZeroDivisionError; array work held as scalars (scalarize) keeps NumPy's answer.
        # Bounds checked: an index out of range raises IndexError as NumPy and Python do (api then reruns the call
        # in Python to name the user's line), where unchecked code reads or writes past the array (it cost about
        # 5% of bundle adjustment's gradient, nothing measurable of GMM's or the LSTM's)
        return numba.njit(cache=cache, error_model="numpy", boundscheck=True, pipeline_class=_GeneratedCompiler)(fn)

    def fingerprint(self):
        if self._fingerprint is None:
            h = hashlib.sha256(f"{numba.__version__} {np.__version__}".encode())
            here = os.path.dirname(cpu.__file__)   # every kernel module: cpu.py star-imports the others
            for name in sorted(os.listdir(here)):
                if name.endswith(".py"):
                    with open(os.path.join(here, name), "rb") as f:
                        h.update(f.read())
            self._fingerprint = f"cpu {h.hexdigest()[:16]}"
        return self._fingerprint


CPU = register_backend(CPUBackend())

# Numba's advice about generated code ("'@' is faster on contiguous arrays") points into funcgrad's
# generated files, where the user can do nothing with it
warnings.filterwarnings("ignore", category=NumbaPerformanceWarning, module=r"funcgrad_generated_")
