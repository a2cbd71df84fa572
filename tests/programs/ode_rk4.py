"""Fitting Lotka-Volterra rates to a trajectory integrated by an explicit fourth-order Runge-Kutta loop."""
import numpy as np


def lotka_volterra(state, t, theta):
    prey, predator = state[0], state[1]
    alpha, beta, delta, gamma = theta
    return np.array([alpha * prey - beta * prey * predator,
                     delta * prey * predator - gamma * predator])


def rk4(f, y0, ts, *args):
    """Integrate dy/dt = f(y, t, *args) over the time grid ts; returns the (len(ts), ...) trajectory."""
    ys = [y0]
    y = y0
    for i in range(len(ts) - 1):
        t, h = ts[i], ts[i + 1] - ts[i]
        k1 = f(y, t, *args)
        k2 = f(y + 0.5 * h * k1, t + 0.5 * h, *args)
        k3 = f(y + 0.5 * h * k2, t + 0.5 * h, *args)
        k4 = f(y + h * k3, t + h, *args)
        y = y + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return np.stack(ys)


def fit_loss(theta, y0, ts, observed):
    trajectory = rk4(lotka_volterra, y0, ts, theta)
    return np.mean((np.log(trajectory) - np.log(observed)) ** 2)


def make_inputs(seed=0, size="small"):
    n = 12 if size == "small" else 400
    ts = np.linspace(0.0, 4.0, n)
    true_theta = np.array([1.0, 0.4, 0.3, 0.8])
    y0 = np.array([2.0, 1.0])
    rs = np.random.RandomState(seed)
    observed = rk4(lotka_volterra, y0, ts, true_theta) * np.exp(0.05 * rs.randn(n, 2))
    theta = true_theta * (1 + 0.1 * rs.randn(4))
    return (theta, y0, ts, observed), {}


PROGRAM = {"f": "fit_loss", "argnums": (0, 1), "njit": True, "autograd": True, "heavy": True}
