"""A vibrating string: leapfrog time stepping of u_tt = c(x)^2 u_xx, written cell by cell in place.

The objective fits the per-cell wave speed c so that the final displacement matches a target.
"""
import numpy as np


def simulate(c, u0, n_steps=40, dt=0.1, dx=1.0, damping=0.01):
    n = u0.shape[0]
    r = (dt / dx) ** 2
    u_prev = u0.copy()
    u = u0.copy()
    for step in range(n_steps):
        u_next = np.zeros(n)
        for i in range(1, n - 1):
            laplacian = u[i - 1] - 2.0 * u[i] + u[i + 1]
            u_next[i] = (2.0 * u[i] - u_prev[i] + r * c[i] ** 2 * laplacian
                         - damping * dt * (u[i] - u_prev[i]))
        u_next[0] = 0.0          # fixed ends
        u_next[n - 1] = 0.0
        u_prev, u = u, u_next
    return u


def misfit(c, u0, target, **sim_options):
    u = simulate(c, u0, **sim_options)
    return 0.5 * np.sum((u - target) ** 2)


def make_inputs(seed=0, size="small"):
    n, steps = (12, 15) if size == "small" else (200, 400)
    xs = np.linspace(0, 1, n)
    u0 = np.exp(-100 * (xs - 0.3) ** 2)
    rs = np.random.RandomState(seed)
    c = 1.0 + 0.2 * rs.rand(n)
    target = np.roll(u0, 2) * 0.5
    return (c, u0, target), {"n_steps": steps, "dt": 0.2}


PROGRAM = {"f": "misfit", "argnums": (0, 1), "njit": True, "heavy": True,
           "autograd": "the program writes into arrays in place, which autograd does not support"}
