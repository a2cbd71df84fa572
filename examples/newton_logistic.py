"""Second order for real: Newton's method and a trust region on L2-regularized logistic regression.

    python examples/newton_logistic.py [--n 2000] [--d 20] [--lam 1e-3] [--seed 0]

The loss is plain NumPy (a stable log(1 + exp(-y z)) via np.logaddexp). funcgrad supplies, from its
source, the gradient (reverse mode), the Hessian (reverse over forward: one Hessian-vector product per
column) and Hessian-vector products with no Hessian formed. Three second-order solvers use them:

* Newton's method with the full Hessian (``funcgrad.hessian``) and a backtracking line search;
* matrix-free Newton-CG: each step solves H p = -g by conjugate gradients on ``funcgrad.hvp``;
* SciPy's trust-region Newton-CG (``scipy.optimize.minimize(method="trust-ncg")``) with funcgrad's
  gradient as ``jac`` and its Hessian-vector product as ``hessp``.

Each reaches a gradient norm below 1e-10 in a handful of iterations (quadratic convergence: the
number of correct digits roughly doubles per step), where gradient descent with a tuned step is still
far away after hundreds (the features' scales make the problem ill-conditioned). The script prints each solver's iterations and checks that all three agree.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402

TOL = 1e-10
# the trust region stops earlier: it accepts a step by comparing the loss's actual decrease with the predicted
# one, and below |grad| ~ 1e-8 both are under the loss's own rounding (~1e-16 of ~0.5); its radius then shrinks
# on noise, and the iteration count depends on the last bits of every product (8 or 21 iterations for two
# Hessian-vector products agreeing to 3e-15)
TRUST_TOL = 1e-8


def loss(w, X, y, lam):
    """Mean logistic loss of labels y in {-1, +1} with an intercept w[0], plus (lam / 2) |w[1:]|^2."""
    z = w[0] + X @ w[1:]
    return np.mean(np.logaddexp(0.0, -y * z)) + 0.5 * lam * np.sum(w[1:] ** 2)


def make_data(n, d, seed):
    """Two overlapping classes (so the unregularized optimum is finite too), with features on scales from
    0.1 to 10, as raw measurements come: an ill-conditioned problem, where first-order methods crawl."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(-1, 1, d)
    w_true = rng.normal(size=d) / scales
    X = rng.normal(size=(n, d)) * scales
    p = 1.0 / (1.0 + np.exp(-(0.3 + X @ w_true)))
    y = np.where(rng.uniform(size=n) < p, 1.0, -1.0)
    return X, y


def newton(objective, w, max_iter=50):
    """Newton's method with the full Hessian and an Armijo backtracking line search."""
    value_and_grad = funcgrad.value_and_grad(objective)
    hessian = funcgrad.hessian(objective)
    history = []
    for it in range(max_iter):
        f, g = value_and_grad(w)
        history.append((f, np.linalg.norm(g)))
        if history[-1][1] < TOL:
            break
        p = -np.linalg.solve(hessian(w), g)
        t = 1.0
        while objective(w + t * p) > f + 1e-4 * t * (g @ p) + 1e-15 * abs(f):   # (rounding: not a rise)
            t *= 0.5
        w = w + t * p
    return w, history


def newton_cg(objective, w, max_iter=50):
    """Matrix-free Newton: H p = -g solved by conjugate gradients on Hessian-vector products."""
    value_and_grad = funcgrad.value_and_grad(objective)
    history, n_hvp = [], 0
    for it in range(max_iter):
        f, g = value_and_grad(w)
        gn = np.linalg.norm(g)
        history.append((f, gn))
        if gn < TOL:
            break
        p, r = np.zeros_like(w), -g.copy()
        d = r.copy()
        for _ in range(w.size):                  # CG to a relative residual min(0.5, sqrt|g|) |g|
            Hd = funcgrad.hvp(objective, (w,), (d,))
            n_hvp += 1
            alpha = (r @ r) / (d @ Hd)
            p = p + alpha * d
            r_new = r - alpha * Hd
            if np.linalg.norm(r_new) < min(0.5, np.sqrt(gn)) * gn:
                break
            d = r_new + (r_new @ r_new) / (r @ r) * d
            r = r_new
        w = w + p                                # a full step: near the optimum Newton needs no search
    return w, history, n_hvp


def trust_region(objective, w):
    """SciPy's trust-region Newton-CG driven by funcgrad's gradient and Hessian-vector product."""
    from scipy.optimize import minimize
    return minimize(objective, w, jac=funcgrad.grad(objective),
                    hessp=lambda w, v: funcgrad.hvp(objective, (w,), (v,)), method="trust-ncg",
                    options={"gtol": TRUST_TOL})


def gradient_descent(objective, w, L, iters):
    """Plain gradient descent with step 1/L (L bounds the Hessian's largest eigenvalue), for comparison."""
    grad = funcgrad.grad(objective)
    for _ in range(iters):
        w = w - grad(w) / L
    return w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    X, y = make_data(args.n, args.d, args.seed)
    lam = args.lam

    def objective(w):                 # the data are read when it runs: one transform, reused
        return loss(w, X, y, lam)

    w0 = np.zeros(args.d + 1)
    grad = funcgrad.grad(objective)

    t = time.perf_counter()
    w_n, hist = newton(objective, w0)
    t_n = time.perf_counter() - t
    print(f"Newton (funcgrad.hessian, {args.d + 1} x {args.d + 1}): {len(hist) - 1} iterations, {t_n:.2f} s")
    for k, (f, gn) in enumerate(hist):
        print(f"  iter {k:2d}  loss {f:.12f}  |grad| {gn:.3e}")

    t = time.perf_counter()
    w_cg, hist_cg, n_hvp = newton_cg(objective, w0)
    t_cg = time.perf_counter() - t
    print(f"Newton-CG (funcgrad.hvp, no Hessian formed): {len(hist_cg) - 1} iterations, {n_hvp} Hessian-vector "
          f"products, {t_cg:.2f} s, final |grad| {hist_cg[-1][1]:.3e}")

    t = time.perf_counter()
    res = trust_region(objective, w0)
    t_tr = time.perf_counter() - t
    print(f"trust-ncg (scipy.optimize + funcgrad.grad/hvp): {res.nit} iterations, {res.nhev} Hessian-vector "
          f"products, {t_tr:.2f} s, final |grad| {np.linalg.norm(grad(res.x)):.3e}")

    gd_iters = 500
    A = np.c_[np.ones(len(X)), X]
    L = 0.25 * np.linalg.eigvalsh(A.T @ A / len(X))[-1] + lam
    w_gd = gradient_descent(objective, w0, L, gd_iters)
    print(f"gradient descent (step 1/L), {gd_iters} iterations: |grad| {np.linalg.norm(grad(w_gd)):.3e}, "
          f"|w - w_newton| {np.linalg.norm(w_gd - w_n):.3e}")

    agree = max(np.max(np.abs(w_cg - w_n)), np.max(np.abs(res.x - w_n)))
    print(f"max difference between the three second-order solutions: {agree:.2e}")
    acc = np.mean(np.sign(w_n[0] + X @ w_n[1:]) == y)
    print(f"training accuracy {acc:.3f}")
    return {"newton_iters": len(hist) - 1, "newton_cg_iters": len(hist_cg) - 1, "trust_iters": res.nit,
            "agree": agree, "grad_norm": hist[-1][1], "w": w_n}


if __name__ == "__main__":
    main()
