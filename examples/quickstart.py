"""funcgrad in one screen: differentiate plain NumPy with a real Python loop, read the gradient's source.

Run with `make demo` (or `python examples/quickstart.py`).
"""
import numpy as np

import funcgrad

DT = 1e-3


def logistic(a, b, x0, n):
    """Euler steps of dx/dt = a x - b x^2: a plain Python loop over NumPy scalars."""
    x = x0
    for t in range(n):
        x = x + DT * (a * x - b * x * x)
    return x


def loss(params, x, y):
    """A two-layer classifier over a dict of parameters."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logits = logits - np.max(logits, axis=1, keepdims=True)
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def main():
    grad_ab = funcgrad.grad(logistic, argnums=(0, 1))  # compiled whole with Numba: the function has a loop
    da, db = grad_ab(1.5, 0.7, 0.1, 10_000)
    eps = 1e-6
    fd_a = (logistic(1.5 + eps, 0.7, 0.1, 10_000) - logistic(1.5 - eps, 0.7, 0.1, 10_000)) / (2 * eps)
    print(f"d x_T / d a = {da:.10f}   (finite differences: {fd_a:.10f})")
    print(f"d x_T / d b = {db:.10f}")
    print("\nThe generated reverse-mode source (forward loop with a tape, then the loop reversed):\n")
    print(funcgrad.source(grad_ab))

    rng = np.random.default_rng(0)
    params = {"W1": rng.normal(size=(4, 8)), "b1": np.zeros(8), "W2": rng.normal(size=(8, 3)), "b2": np.zeros(3)}
    x = rng.normal(size=(16, 4))
    y = np.eye(3)[rng.integers(0, 3, 16)]
    value, g = funcgrad.value_and_grad(loss)(params, x, y)
    print(f"MLP loss {value:.6f}; gradient has the structure of params: "
          f"{ {k: v.shape for k, v in g.items()} }")
    funcgrad.testing.check_grads(loss, (params, x, y))
    print("check_grads: the MLP gradient matches central finite differences")


if __name__ == "__main__":
    main()
