"""Gaussian-process regression: the negative log marginal likelihood of the kernel's hyperparameters."""
import numpy as np
from scipy.linalg import solve_triangular


def sq_dists(X, Z):
    return np.sum(X ** 2, axis=1)[:, None] + np.sum(Z ** 2, axis=1)[None, :] - 2.0 * X @ Z.T


def rbf(X, Z, amplitude, lengthscales):
    """Squared-exponential kernel with one lengthscale per input dimension."""
    return amplitude ** 2 * np.exp(-0.5 * sq_dists(X / lengthscales, Z / lengthscales))


def unpack(hyp):
    return np.exp(hyp["log_amp"]), np.exp(hyp["log_ell"]), np.exp(2.0 * hyp["log_noise"])


def neg_log_marginal_likelihood(hyp, X, y, jitter=1e-8):
    amplitude, lengthscales, noise_var = unpack(hyp)
    n = X.shape[0]
    K = rbf(X, X, amplitude, lengthscales) + (noise_var + jitter) * np.eye(n)
    L = np.linalg.cholesky(K)
    v = solve_triangular(L, y, lower=True)
    alpha = solve_triangular(L.T, v, lower=False)
    return 0.5 * np.dot(y, alpha) + np.sum(np.log(np.diag(L))) + 0.5 * n * np.log(2 * np.pi)


def predict(hyp, X, y, Xtest):
    amplitude, lengthscales, noise_var = unpack(hyp)
    K = rbf(X, X, amplitude, lengthscales) + noise_var * np.eye(len(X))
    return rbf(Xtest, X, amplitude, lengthscales) @ np.linalg.solve(K, y)


def make_inputs(seed=0, size="small"):
    n, d = (12, 2) if size == "small" else (200, 4)
    rs = np.random.RandomState(seed)
    X = rs.randn(n, d)
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rs.randn(n)
    hyp = {"log_amp": 0.1, "log_ell": np.log(np.ones(d) * 1.3), "log_noise": -1.0}
    return (hyp, X, y), {}


PROGRAM = {"f": "neg_log_marginal_likelihood", "argnums": (0,), "njit": True, "autograd": True, "heavy": True}
