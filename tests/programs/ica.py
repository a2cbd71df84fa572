"""Independent component analysis: the log-likelihood of an unmixing matrix under logistic sources."""
import numpy as np


def logistic_log_density(s):
    """log of the logistic density, sigma(s) * (1 - sigma(s)), written stably."""
    return -s - 2.0 * np.logaddexp(0.0, -s)


def ica_log_likelihood(W, X):
    """Average log-likelihood of the observations X (n, d) under the unmixing matrix W (d, d)."""
    assert W.shape == (X.shape[1], X.shape[1]), "W must be square, one row per source"
    S = X @ W.T
    sign, logdet = np.linalg.slogdet(W)
    return np.mean(np.sum(logistic_log_density(S), axis=1)) + logdet


def loss(W, X):
    return -ica_log_likelihood(W, X)


def make_inputs(seed=0, size="small"):
    n, d = (40, 3) if size == "small" else (2000, 8)
    rs = np.random.RandomState(seed)
    sources = rs.logistic(size=(n, d))
    A = rs.randn(d, d) + 2 * np.eye(d)
    X = sources @ A.T
    W = np.linalg.inv(A) + 0.1 * rs.randn(d, d)
    return (W, X), {}


PROGRAM = {"f": "loss", "argnums": (0,), "njit": True, "autograd": True}
