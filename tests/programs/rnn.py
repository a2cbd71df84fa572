"""An Elman recurrent network predicting the next vector of a sequence given as a list of vectors."""
import numpy as np


def init_params(n_in, n_hidden, scale=0.3, seed=0):
    rs = np.random.RandomState(seed)
    Wxh = scale * rs.randn(n_hidden, n_in)
    Whh = scale * rs.randn(n_hidden, n_hidden)
    bh = np.zeros(n_hidden)
    Why = scale * rs.randn(n_in, n_hidden)
    by = np.zeros(n_in)
    return (Wxh, Whh, bh, Why, by)


def step(params, h, x):
    Wxh, Whh, bh, Why, by = params
    h = np.tanh(Wxh @ x + Whh @ h + bh)
    return h, Why @ h + by


def sequence_loss(params, xs, h0=None):
    """Mean squared error of one-step-ahead predictions over the list of vectors xs."""
    h = np.zeros(params[2].shape[0]) if h0 is None else h0
    errors = []
    for t, (x, x_next) in enumerate(zip(xs[:-1], xs[1:])):
        h, y = step(params, h, x)
        errors.append(np.sum((y - x_next) ** 2))
    return sum(errors) / len(errors)


def make_inputs(seed=0, size="small"):
    n_in, n_hidden, T = (3, 5, 6) if size == "small" else (16, 64, 50)
    params = init_params(n_in, n_hidden, seed=seed)
    rs = np.random.RandomState(seed + 1)
    ts = np.linspace(0, 3, T)
    xs = [np.sin(t + np.arange(n_in)) + 0.1 * rs.randn(n_in) for t in ts]
    return (params, xs), {}


PROGRAM = {"f": "sequence_loss", "argnums": (0,), "njit": True, "autograd": True}
