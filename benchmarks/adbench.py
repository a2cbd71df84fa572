"""ADBench's GMM, bundle-adjustment and LSTM gradients: funcgrad vs JAX ``jit`` vs PyTorch eager (issue 18).

The objectives are in ``benchmarks/adbench_objectives.py``, written as a NumPy user would write them (loops
over BA's observations and the LSTM's time steps and layers); funcgrad differentiates them as they are.
JAX and PyTorch get the same functions written as their users would: JAX vectorized (``vmap`` over BA's
observations, ``lax.scan`` over the LSTM's time steps) under ``jax.jit(jax.value_and_grad(...))`` in float64
(``jax_enable_x64``); PyTorch eager in float64, value then ``backward()`` (batched over BA's observations, a
Python loop over the LSTM's steps, as its users write it without a scan).

Every gradient is checked against funcgrad's before any timing (rtol 1e-8), so all rows time one function.

Timing: alternating blocks. Each contender runs a block of ``--reps`` calls (cut short after ``--block-s``
seconds, at least 3 calls, so the slow plain-NumPy rows do not dominate the run), then the next contender,
for ``--rounds`` rounds; each contender's figure is the minimum over rounds of its block's median. (Thread
pools one framework leaves spinning slow the next, so single calls are never interleaved.)

Rows per task:
  funcgrad value_and_grad(jit="auto"); funcgrad.jit of the objective (or, where funcgrad.jit refuses it,
  the plain NumPy call; the row says which) and the plain NumPy call; JAX jit(value_and_grad) and JAX
  jit(objective); PyTorch value + backward and PyTorch objective alone. Then per task the gradient/objective
  ratios (issue 18's goal: funcgrad <= 4x its own objective), funcgrad/JAX and funcgrad/PyTorch, and the
  geometric mean of funcgrad/JAX over the tasks measured (goal <= 1.0x). Last, funcgrad's first call per task
  in a fresh process with empty FUNCGRAD_CACHE_DIR and NUMBA_CACHE_DIR (cold: transform + Numba compile of the
  generated code and of every kernel it calls) and in a second fresh process sharing them (warm: disk cache),
  wall and CPU seconds.

    python benchmarks/adbench.py                                   # all tasks, --size small
    python benchmarks/adbench.py --tasks gmm lstm --size large --reps 20 --rounds 5
    python benchmarks/adbench.py --no-first-calls                  # skip the fresh-process first calls

Sizes (ADBench's own sizes are larger for BA: its smallest problem has 31,843 observations):
  small: GMM d=10 K=10 n=1000;  BA 20 cameras, 500 points, 2,000 observations;  LSTM l=2 b=64 c=64
  large: GMM d=64 K=25 n=1000;  BA 50 cameras, 2,000 points, 10,000 observations; LSTM l=2 b=1024 c=1024
         (ADBench's smallest LSTM)

``--unset-openblas-env`` re-runs the script without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE and says so;
by default the environment is left as it is.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import adbench_objectives as A  # noqa: E402

SIZES = {
    "small": {"gmm": (10, 10, 1000), "ba": (20, 500, 2000), "lstm": (2, 64, 64)},
    "large": {"gmm": (64, 25, 1000), "ba": (50, 2000, 10000), "lstm": (2, 1024, 1024)},
}
TASKS = ("gmm", "ba", "lstm")
ARGNUMS = {"gmm": (0, 1, 2), "ba": (0, 1, 2), "lstm": (0, 1)}
OBJECTIVE = {"gmm": "gmm_objective", "ba": "ba_objective", "lstm": "lstm_objective"}
INPUTS = {"gmm": "gmm_inputs", "ba": "ba_inputs", "lstm": "lstm_inputs"}


def describe(task, size):
    p = SIZES[size][task]
    return {"gmm": "GMM d={} K={} n={}", "ba": "BA {} cameras, {} points, {} observations",
            "lstm": "LSTM l={} b={} c={}"}[task].format(*p)


def make_inputs(task, size):
    return getattr(A, INPUTS[task])(*SIZES[size][task])


# ----------------------------------------------------------------------------------------- JAX versions


def jax_objectives():
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp
    jax.config.update("jax_enable_x64", True)

    def gmm(alphas, means, icf, x, gamma, m):
        n, d = x.shape
        K = alphas.shape[0]
        rows = np.array([i for j in range(d) for i in range(j + 1, d)], dtype=np.int64)
        cols = np.array([j for j in range(d) for i in range(j + 1, d)], dtype=np.int64)
        Qdiags = jnp.exp(icf[:, :d])
        sum_qs = jnp.sum(icf[:, :d], axis=1)
        below = icf[:, d:]
        Ls = jnp.zeros((K, d, d), icf.dtype).at[:, rows, cols].set(below)
        centered = x[:, None, :] - means[None, :, :]
        Qx = Qdiags[None] * centered + jnp.einsum("kij,nkj->nki", Ls, centered)
        inner = alphas + sum_qs - 0.5 * jnp.sum(Qx ** 2, axis=2)
        nw = d + m + 1
        prior = 0.5 * gamma * gamma * (jnp.sum(Qdiags ** 2) + jnp.sum(below ** 2)) - m * jnp.sum(sum_qs)
        C = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - A.multigammaln_const(0.5 * nw, d)
        const = -n * d * 0.5 * math.log(2 * math.pi)
        return const + jnp.sum(logsumexp(inner, axis=1)) - n * logsumexp(alphas) + prior - K * C

    def project(cam, X):
        rot = cam[0:3]
        Xc = X - cam[3:6]
        theta2 = jnp.sum(rot ** 2)
        nz = theta2 != 0.0
        theta = jnp.sqrt(jnp.where(nz, theta2, 1.0))
        w = rot / theta
        rotated = Xc * jnp.cos(theta) + jnp.cross(w, Xc) * jnp.sin(theta) + w * jnp.dot(w, Xc) * (1 - jnp.cos(theta))
        Xcam = jnp.where(nz, rotated, Xc + jnp.cross(rot, Xc))
        p = Xcam[:2] / Xcam[2]
        r2 = jnp.sum(p ** 2)
        distorted = p * (1.0 + cam[9] * r2 + cam[10] * r2 * r2)
        return distorted * cam[6] + cam[7:9]

    def ba(cams, X, w, obs, feats):
        proj = jax.vmap(project)(cams[obs[:, 0]], X[obs[:, 1]])
        err = w[:, None] * (proj - feats)
        return jnp.sum(err ** 2) + jnp.sum((1.0 - w * w) ** 2)

    def cell(weight, bias, hidden, c, x):
        b = hidden.shape[0]
        gates = jnp.concatenate((x, hidden, x, hidden)) * weight + bias
        forget = jax.nn.sigmoid(gates[0:b])
        ingate = jax.nn.sigmoid(gates[b:2 * b])
        outgate = jax.nn.sigmoid(gates[2 * b:3 * b])
        change = jnp.tanh(gates[3 * b:])
        c = c * forget + ingate * change
        return outgate * jnp.tanh(c), c

    def lstm(main_params, extra_params, state, sequence):
        n_layers = main_params.shape[0] // 2
        b = state.shape[1]

        def step(s, xy):
            x_t, y = xy
            x = x_t * extra_params[0]
            new = []
            for i in range(n_layers):
                h, c = cell(main_params[2 * i], main_params[2 * i + 1], s[2 * i], s[2 * i + 1], x)
                new += [h, c]
                x = h
            ypred = x * extra_params[1] + extra_params[2]
            ynorm = ypred - jnp.log(jnp.sum(jnp.exp(ypred)) + 2.0)
            return jnp.stack(new), jnp.sum(y * ynorm)

        _, totals = jax.lax.scan(step, state, (sequence[:-1], sequence[1:]))
        return -jnp.sum(totals) / ((sequence.shape[0] - 1) * b)

    return jax, {"gmm": gmm, "ba": ba, "lstm": lstm}


# ----------------------------------------------------------------------------------------- PyTorch versions


def torch_objectives():
    import torch

    def gmm(alphas, means, icf, x, gamma, m):
        n, d = x.shape
        K = alphas.shape[0]
        rows = torch.tensor([i for j in range(d) for i in range(j + 1, d)], dtype=torch.long)
        cols = torch.tensor([j for j in range(d) for i in range(j + 1, d)], dtype=torch.long)
        Qdiags = torch.exp(icf[:, :d])
        sum_qs = torch.sum(icf[:, :d], 1)
        below = icf[:, d:]
        Ls = torch.zeros((K, d, d), dtype=icf.dtype)
        Ls[:, rows, cols] = below
        centered = x[:, None, :] - means[None, :, :]
        Qx = Qdiags[None] * centered + torch.einsum("kij,nkj->nki", Ls, centered)
        inner = alphas + sum_qs - 0.5 * torch.sum(Qx ** 2, 2)
        nw = d + m + 1
        prior = 0.5 * gamma * gamma * (torch.sum(Qdiags ** 2) + torch.sum(below ** 2)) - m * torch.sum(sum_qs)
        C = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - A.multigammaln_const(0.5 * nw, d)
        const = -n * d * 0.5 * math.log(2 * math.pi)
        return (const + torch.sum(torch.logsumexp(inner, 1)) - n * torch.logsumexp(alphas, 0)
                + prior - K * C)

    def ba(cams, X, w, obs, feats):
        cam = cams[obs[:, 0]]
        P = X[obs[:, 1]] - cam[:, 3:6]
        rot = cam[:, 0:3]
        theta = torch.sqrt(torch.sum(rot ** 2, 1, keepdim=True))   # no camera has a zero rotation here
        wv = rot / theta
        cos_t, sin_t = torch.cos(theta), torch.sin(theta)
        Xcam = (P * cos_t + torch.linalg.cross(wv, P) * sin_t
                + wv * torch.sum(wv * P, 1, keepdim=True) * (1 - cos_t))
        p = Xcam[:, :2] / Xcam[:, 2:3]
        r2 = torch.sum(p ** 2, 1, keepdim=True)
        distorted = p * (1.0 + cam[:, 9:10] * r2 + cam[:, 10:11] * r2 * r2)
        proj = distorted * cam[:, 6:7] + cam[:, 7:9]
        err = w[:, None] * (proj - feats)
        return torch.sum(err ** 2) + torch.sum((1.0 - w * w) ** 2)

    def lstm(main_params, extra_params, state, sequence):
        n_layers = main_params.shape[0] // 2
        b = state.shape[1]
        s = [state[i] for i in range(2 * n_layers)]
        total = 0.0
        for t in range(sequence.shape[0] - 1):
            x = sequence[t] * extra_params[0]
            new = []
            for i in range(n_layers):
                gates = torch.cat((x, s[2 * i], x, s[2 * i])) * main_params[2 * i] + main_params[2 * i + 1]
                forget = torch.sigmoid(gates[0:b])
                ingate = torch.sigmoid(gates[b:2 * b])
                outgate = torch.sigmoid(gates[2 * b:3 * b])
                change = torch.tanh(gates[3 * b:])
                c = s[2 * i + 1] * forget + ingate * change
                h = outgate * torch.tanh(c)
                new += [h, c]
                x = h
            s = new
            ypred = x * extra_params[1] + extra_params[2]
            ynorm = ypred - torch.log(torch.sum(torch.exp(ypred)) + 2.0)
            total = total + torch.sum(sequence[t + 1] * ynorm)
        return -total / ((sequence.shape[0] - 1) * b)

    return torch, {"gmm": gmm, "ba": ba, "lstm": lstm}


# ----------------------------------------------------------------------------------------- timing


def alternating_blocks(contenders, reps, rounds, block_s):
    """``{name: seconds}``: per contender the minimum over rounds of the median of its block (``reps`` calls,
    or fewer, at least 3, once the block has run ``block_s`` seconds); contenders run one block each in turn."""
    best = {k: float("inf") for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            ts = []
            start = time.perf_counter()
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
                if len(ts) >= 3 and time.perf_counter() - start > block_s:
                    break
            best[name] = min(best[name], float(np.median(ts)))
    return best


def check_close(name, got, ref):
    for i, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10 * scale,
                                   err_msg=f"{name}: gradient {i} differs from funcgrad's")


_CHILD = r"""
import sys, time, json, resource
sys.path.insert(0, sys.argv[1])
import numpy as np
import funcgrad
import adbench
task, size = sys.argv[2], sys.argv[3]
args = adbench.make_inputs(task, size)
f = getattr(adbench.A, adbench.OBJECTIVE[task])
g = funcgrad.value_and_grad(f, argnums=adbench.ARGNUMS[task], jit="auto")
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c = time.perf_counter(), cpu()
g(*args)
print(json.dumps({"first": time.perf_counter() - t, "cpu": cpu() - c}))
"""


def first_calls(task, size):
    """[(wall, CPU) cold, (wall, CPU) warm] seconds of funcgrad's first value_and_grad call (``import funcgrad``
    not included), each in a fresh process; both share one new FUNCGRAD_CACHE_DIR and NUMBA_CACHE_DIR, empty for
    the cold one (nothing of funcgrad's or Numba's disk caches: generated code and kernels compile). CPU time
    (user + system of the process) is reported beside the wall time: the machine is shared."""
    out = []
    with tempfile.TemporaryDirectory(prefix="funcgrad-adbench-") as cache:
        env = dict(os.environ, FUNCGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
                   PYTHONWARNINGS="ignore")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", _CHILD, HERE, task, size], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=1800)
            if p.returncode != 0:
                return "error: " + (p.stderr.strip().splitlines() or ["?"])[-1][:160]
            r = json.loads(p.stdout.strip().splitlines()[-1])
            out.append((r["first"], r["cpu"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--reps", type=int, default=20, help="calls per block")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of blocks")
    ap.add_argument("--block-s", type=float, default=1.0, help="cut a block short after this many seconds")
    ap.add_argument("--no-first-calls", action="store_true", help="skip the cold/warm first calls")
    ap.add_argument("--unset-openblas-env", action="store_true",
                    help="re-run without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (the output says so)")
    a = ap.parse_args(argv)

    if a.unset_openblas_env and ("OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["FUNCGRAD_BENCH_UNSET"] = "1"
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    if os.environ.get("FUNCGRAD_BENCH_UNSET"):
        print("note: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE were unset for this run (--unset-openblas-env)")
    else:
        print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
              f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')} (left as they are)")

    import funcgrad
    try:
        jax, J = jax_objectives()
        jax_name = f"JAX {jax.__version__}"
    except ImportError:
        jax = None
        print("JAX is not installed: its rows are left out")
    try:
        torch, T = torch_objectives()
        torch_name = f"PyTorch {torch.__version__}"
    except ImportError:
        torch = None
        print("PyTorch is not installed: its rows are left out")

    print(f"size {a.size}; float64; alternating blocks of up to {a.reps} calls (cut at {a.block_s:g} s, "
          f"at least 3), {a.rounds} rounds, minimum over rounds of the block median")
    summary = {}
    for task in a.tasks:
        args = make_inputs(task, a.size)
        f = getattr(A, OBJECTIVE[task])
        nums = ARGNUMS[task]
        diff = [args[i] for i in nums]
        rest = [x for i, x in enumerate(args) if i not in nums]
        print(f"\n== {describe(task, a.size)} (gradient w.r.t. {len(nums)} arrays, "
              f"{sum(x.size for x in diff)} numbers)")

        g = funcgrad.value_and_grad(f, argnums=nums, jit="auto")
        try:
            t0 = time.perf_counter()
            value, grads = g(*args)
            print(f"funcgrad first call in this process: {time.perf_counter() - t0:.2f} s")
        except Exception as e:  # a refusal is a finding: report it and go on
            print(f"funcgrad refuses: {type(e).__name__}: {str(e)[:600]}")
            continue
        assert np.isclose(value, f(*args), rtol=1e-10), (value, f(*args))
        contenders = {"funcgrad value_and_grad": lambda: g(*args)}

        obj_label = None
        for strategy in ("whole", "auto"):
            fj = funcgrad.jit(f, strategy=strategy)
            try:
                vj = fj(*args)
            except Exception as e:
                print(f"funcgrad.jit(strategy={strategy!r}) refuses: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            assert np.isclose(vj, value, rtol=1e-10)
            obj_label = f"funcgrad.jit objective ({strategy})"
            contenders[obj_label] = lambda fj=fj: fj(*args)
            break
        contenders["plain NumPy objective"] = lambda: f(*args)
        if obj_label is None:
            obj_label = "plain NumPy objective"

        if jax is not None:
            jf = J[task]
            jnums = nums
            jvg = jax.jit(jax.value_and_grad(jf, argnums=jnums), static_argnums=(4, 5) if task == "gmm" else ())
            jobj = jax.jit(jf, static_argnums=(4, 5) if task == "gmm" else ())
            jargs = [jax.numpy.asarray(x) if isinstance(x, np.ndarray) else x for x in args]
            jv, jg = jax.block_until_ready(jvg(*jargs))
            assert np.isclose(float(jv), value, rtol=1e-10), (float(jv), value)
            check_close(jax_name, jg, grads)
            assert np.isclose(float(jobj(*jargs)), value, rtol=1e-10)
            contenders[f"{jax_name} jit(value_and_grad)"] = lambda: jax.block_until_ready(jvg(*jargs))
            contenders[f"{jax_name} jit(objective)"] = lambda: jax.block_until_ready(jobj(*jargs))

        if torch is not None:
            tf = T[task]
            targs = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in args]

            def torch_vg():
                leaves = [targs[i].detach().requires_grad_(True) for i in nums]
                full = list(targs)
                for i, leaf in zip(nums, leaves):
                    full[i] = leaf
                out = tf(*full)
                out.backward()
                return out.item(), [leaf.grad for leaf in leaves]

            def torch_obj():
                with torch.no_grad():
                    return tf(*targs).item()

            tv, tg = torch_vg()
            assert np.isclose(tv, value, rtol=1e-10), (tv, value)
            check_close(torch_name, [x.numpy() for x in tg], grads)
            contenders[f"{torch_name} eager value + backward"] = torch_vg
            contenders[f"{torch_name} eager objective"] = torch_obj
        print("gradients agree with funcgrad's (rtol 1e-8) for every contender")

        best = alternating_blocks(contenders, a.reps, a.rounds, a.block_s)
        t_fg, t_obj = best["funcgrad value_and_grad"], best[obj_label]
        print(f"{'contender':46s} {'ms':>10s} {'vs funcgrad grad':>17s}")
        for name, tm in best.items():
            print(f"{name:46s} {tm * 1e3:10.3f} {tm / t_fg:16.2f}x")
        row = {"fg": t_fg, "fg_ratio": t_fg / t_obj}
        print(f"funcgrad gradient / its objective ({obj_label}): {t_fg / t_obj:.2f}x (goal <= 4x); "
              f"/ plain NumPy objective: {t_fg / best['plain NumPy objective']:.2f}x")
        if jax is not None:
            t_j = best[f"{jax_name} jit(value_and_grad)"]
            row["jax"] = t_fg / t_j
            print(f"JAX gradient / its objective: {t_j / best[f'{jax_name} jit(objective)']:.2f}x;  "
                  f"funcgrad / JAX: {t_fg / t_j:.2f}x (goal <= 1.0x)")
        if torch is not None:
            t_t = best[f"{torch_name} eager value + backward"]
            row["torch"] = t_fg / t_t
            print(f"PyTorch gradient / its objective: {t_t / best[f'{torch_name} eager objective']:.2f}x;  "
                  f"funcgrad / PyTorch: {t_fg / t_t:.2f}x")
        summary[task] = row

    print("\n== summary")
    for task, row in summary.items():
        parts = [f"grad/objective {row['fg_ratio']:.2f}x"]
        if "jax" in row:
            parts.append(f"vs JAX {row['jax']:.2f}x")
        if "torch" in row:
            parts.append(f"vs PyTorch {row['torch']:.2f}x")
        print(f"{describe(task, a.size):48s} funcgrad {row['fg'] * 1e3:9.3f} ms  " + ",  ".join(parts))
    jr = [row["jax"] for row in summary.values() if "jax" in row]
    if jr:
        print(f"geometric mean of funcgrad/JAX over {len(jr)} task(s): "
              f"{math.exp(sum(map(math.log, jr)) / len(jr)):.2f}x (goal <= 1.0x)")

    if not a.no_first_calls:
        print("\nfuncgrad first value_and_grad call in a fresh process, wall (CPU) seconds (cold: empty "
              "FUNCGRAD_CACHE_DIR and NUMBA_CACHE_DIR; warm: a second process, same directories; import funcgrad "
              "not included)")
        for task in a.tasks:
            r = first_calls(task, a.size)
            if isinstance(r, str):
                print(f"{describe(task, a.size):48s} {r}")
            else:
                (cw, cc), (ww, wc) = r
                print(f"{describe(task, a.size):48s} cold {cw:6.2f} s ({cc:.2f} s CPU)   warm {ww:6.2f} s "
                      f"({wc:.2f} s CPU)", flush=True)


if __name__ == "__main__":
    main()
