"""Gaussian mixture log-likelihood with a Wishart prior, parameterized by inverse Cholesky factors."""
import numpy as np
from scipy.special import logsumexp, gammaln


def lower_triangular(d, diag, below):
    """The (d, d) lower-triangular matrix with the given diagonal and, column by column, entries below."""
    cols = []
    pos = 0
    for j in range(d):
        n_below = d - j - 1
        cols.append(np.concatenate([np.zeros(j), diag[j:j + 1], below[pos:pos + n_below]]))
        pos += n_below
    return np.stack(cols, axis=1)


def log_wishart_prior(Qdiags, sum_qs, below, gamma, m):
    d = Qdiags.shape[1]
    n = d + m + 1
    frobenius = np.sum(Qdiags ** 2) + np.sum(below ** 2)
    out = 0.5 * gamma ** 2 * frobenius - m * np.sum(sum_qs)
    C = n * d * (np.log(gamma) - 0.5 * np.log(2)) - sum(gammaln(0.5 * (n - j)) for j in range(d))
    return out - Qdiags.shape[0] * C


def gmm_objective(alphas, means, icf, x, gamma=1.0, m=0):
    n, d = x.shape
    K = alphas.shape[0]
    Qdiags = np.exp(icf[:, :d])
    sum_qs = np.sum(icf[:, :d], axis=1)
    below = icf[:, d:]
    Qs = np.stack([lower_triangular(d, Qdiags[k], below[k]) for k in range(K)])
    centered = x[:, None, :] - means[None, :, :]                # (n, K, d)
    Qx = np.einsum("kij,nkj->nki", Qs, centered)
    inner = alphas + sum_qs - 0.5 * np.sum(Qx ** 2, axis=2)      # (n, K)
    const = -n * d * 0.5 * np.log(2 * np.pi)
    return (const + np.sum(logsumexp(inner, axis=1)) - n * logsumexp(alphas)
            + log_wishart_prior(Qdiags, sum_qs, below, gamma, m))


def make_inputs(seed=0, size="small"):
    n, d, K = (20, 3, 4) if size == "small" else (1000, 10, 25)
    rs = np.random.RandomState(seed)
    alphas = rs.randn(K)
    means = rs.rand(K, d)
    icf = 0.3 * rs.randn(K, d + d * (d - 1) // 2)
    x = rs.randn(n, d)
    return (alphas, means, icf, x), {"gamma": 1.0, "m": 0}


PROGRAM = {"f": "gmm_objective", "argnums": (0, 1, 2), "njit": False, "autograd": True}
