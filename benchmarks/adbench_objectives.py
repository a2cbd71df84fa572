"""ADBench's three gradient objectives (GMM, bundle adjustment, LSTM) written as a NumPy user would write them.

These follow the task definitions of Microsoft's ADBench (github.com/microsoft/ADBench): the same parameter
layouts, the same formulas, so figures can be compared with its tables; the code is our own, in plain NumPy,
with loops where the natural code has them (BA's observations, the LSTM's time steps and layers).
funcgrad differentiates these functions as they are; ``benchmarks/adbench.py`` writes the JAX and PyTorch
versions beside them.

* GMM: the log-likelihood of ``n`` points in ``d`` dimensions under ``K`` Gaussians, each
  parameterized by a log-weight ``alphas[k]``, a mean ``means[k]`` and ``icf[k]``: the log of the inverse
  covariance's Cholesky diagonal (``d`` numbers) followed by its strictly lower triangle column by column
  (``d(d-1)/2``); plus a Wishart prior (``gamma``, ``m``) on each inverse covariance.
* BA: bundle adjustment's sum of squared reprojection errors. A camera is 11 numbers (Rodrigues rotation,
  centre, focal length, principal point, two radial distortion coefficients); observation ``i`` says camera
  ``obs[i, 0]`` saw point ``obs[i, 1]`` at ``feats[i]``, with weight ``w[i]``; ADBench's weight residual
  ``1 - w[i]**2`` is added squared.
* LSTM: ADBench's diagonal LSTM (every gate is an elementwise product of the input and hidden state with a
  weight vector, not a matrix product), ``l`` layers of hidden size ``b`` over a one-hot sequence of ``c``
  characters; ``main_params`` is ``(2l, 4b)`` (weights, biases per layer), ``extra_params`` is ``(3, b)``
  (input scale, output scale, output bias), ``state`` is ``(2l, b)`` (hidden, cell per layer).
"""
import math

import numpy as np
from scipy.special import gammaln

# ---------------------------------------------------------------------------------------------- GMM


def gmm_L(d, below):
    """The (d, d) strictly lower-triangular matrix whose columns, left to right, take ``below`` in order."""
    cols = []
    pos = 0
    for j in range(d):
        n_below = d - j - 1
        cols.append(np.concatenate([np.zeros(j + 1), below[pos:pos + n_below]]))
        pos += n_below
    return np.stack(cols, axis=1)


def logsumexp_rows(a):
    """log(sum(exp(a), axis=1)) of a 2-D array, stabilized by each row's maximum."""
    mx = np.max(a, axis=1)
    return np.log(np.sum(np.exp(a - mx[:, None]), axis=1)) + mx


def logsumexp_vec(v):
    mx = np.max(v)
    return np.log(np.sum(np.exp(v - mx))) + mx


def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    K = alphas.shape[0]
    Qdiags = np.exp(icf[:, :d])                                   # (K, d)
    sum_qs = np.sum(icf[:, :d], axis=1)                           # (K,)
    below = icf[:, d:]
    Ls = np.stack([gmm_L(d, below[k]) for k in range(K)])         # (K, d, d)
    centered = x[:, None, :] - means[None, :, :]                  # (n, K, d)
    Qx = Qdiags[None, :, :] * centered + np.einsum("kij,nkj->nki", Ls, centered)
    inner = alphas[None, :] + sum_qs[None, :] - 0.5 * np.sum(Qx ** 2, axis=2)   # (n, K)
    const = -n * d * 0.5 * math.log(2 * math.pi)
    # Wishart prior
    nw = d + m + 1
    frobenius = np.sum(Qdiags ** 2) + np.sum(below ** 2)
    prior = 0.5 * gamma * gamma * frobenius - m * np.sum(sum_qs)
    C = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - multigammaln_const(0.5 * nw, d)
    return const + np.sum(logsumexp_rows(inner)) - n * logsumexp_vec(alphas) + prior - K * C


def multigammaln_const(a, p):
    """log of the multivariate gamma function Gamma_p(a) (a constant here: no parameter enters it)."""
    return 0.25 * p * (p - 1) * math.log(math.pi) + float(np.sum(gammaln(a - 0.5 * np.arange(p))))


def gmm_inputs(d, K, n, seed=0):
    rs = np.random.RandomState(seed)
    alphas = rs.randn(K)
    means = rs.rand(K, d)
    icf = 0.3 * rs.randn(K, d + d * (d - 1) // 2)
    x = rs.randn(n, d)
    return (alphas, means, icf, x, 1.0, 0)


# ---------------------------------------------------------------------------------------------- BA

ROT, CEN, FOC, X0, RAD = 0, 3, 6, 7, 9


def rodrigues_rotate(rot, X):
    theta = np.sqrt(np.sum(rot ** 2))
    if theta != 0.0:
        w = rot / theta
        cos_t = np.cos(theta)
        sin_t = np.sin(theta)
        return X * cos_t + np.cross(w, X) * sin_t + w * np.dot(w, X) * (1.0 - cos_t)
    return X + np.cross(rot, X)


def radial_distort(k, p):
    r2 = p[0] * p[0] + p[1] * p[1]
    return p * (1.0 + k[0] * r2 + k[1] * r2 * r2)


def project(cam, X):
    Xcam = rodrigues_rotate(cam[ROT:ROT + 3], X - cam[CEN:CEN + 3])
    distorted = radial_distort(cam[RAD:RAD + 2], Xcam[:2] / Xcam[2])
    return distorted * cam[FOC] + cam[X0:X0 + 2]


def ba_objective(cams, X, w, obs, feats):
    """Sum over observations of |w_i (project(camera, point) - feature)|^2, plus sum of (1 - w_i^2)^2."""
    total = 0.0
    for i in range(obs.shape[0]):
        err = w[i] * (project(cams[obs[i, 0]], X[obs[i, 1]]) - feats[i])
        total = total + err[0] * err[0] + err[1] * err[1]
    return total + np.sum((1.0 - w * w) ** 2)


def ba_inputs(n_cams, n_pts, n_obs, seed=0):
    """A synthetic problem shaped like ADBench's: cameras looking at a cloud of points from z = -5."""
    rs = np.random.RandomState(seed)
    cams = np.zeros((n_cams, 11))
    cams[:, ROT:ROT + 3] = 0.1 * rs.randn(n_cams, 3)
    cams[:, CEN:CEN + 3] = rs.randn(n_cams, 3) * 0.2 + np.array([0.0, 0.0, -5.0])
    cams[:, FOC] = 1.0 + 0.1 * rs.rand(n_cams)
    cams[:, X0:X0 + 2] = 0.01 * rs.randn(n_cams, 2)
    cams[:, RAD:RAD + 2] = 0.01 * rs.randn(n_cams, 2)
    X = rs.randn(n_pts, 3)
    w = 1.0 + 0.1 * rs.randn(n_obs)
    obs = np.stack([np.arange(n_obs) % n_cams, rs.randint(n_pts, size=n_obs)], axis=1).astype(np.int64)
    feats = 0.2 * rs.randn(n_obs, 2)
    return (cams, X, w, obs, feats)


# ---------------------------------------------------------------------------------------------- LSTM


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(weight, bias, hidden, cell, x):
    """ADBench's LSTM cell: gates = [x, h, x, h] * weight + bias (elementwise), split in four."""
    b = hidden.shape[0]
    gates = np.concatenate((x, hidden, x, hidden)) * weight + bias
    forget = sigmoid(gates[0:b])
    ingate = sigmoid(gates[b:2 * b])
    outgate = sigmoid(gates[2 * b:3 * b])
    change = np.tanh(gates[3 * b:4 * b])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


def lstm_objective(main_params, extra_params, state, sequence):
    """Average log-loss of predicting each next character; ``state`` is left untouched."""
    n_layers = main_params.shape[0] // 2
    b = state.shape[1]
    s = state.copy()
    total = 0.0
    x_t = sequence[0]
    for t in range(sequence.shape[0] - 1):
        x = x_t * extra_params[0]
        s_next = np.empty_like(s)
        for i in range(n_layers):
            h, c = lstm_cell(main_params[2 * i], main_params[2 * i + 1], s[2 * i], s[2 * i + 1], x)
            s_next[2 * i] = h
            s_next[2 * i + 1] = c
            x = h
        s = s_next
        ypred = x * extra_params[1] + extra_params[2]
        ynorm = ypred - np.log(np.sum(np.exp(ypred)) + 2.0)
        x_t = sequence[t + 1]
        total = total + np.sum(x_t * ynorm)
    return -total / ((sequence.shape[0] - 1) * b)


def lstm_inputs(l, b, c, seed=0):
    rs = np.random.RandomState(seed)
    main_params = rs.rand(2 * l, 4 * b) * 2 - 1
    extra_params = rs.rand(3, b) * 2 - 1
    state = rs.rand(2 * l, b) * 2 - 1
    sequence = np.eye(b)[rs.randint(b, size=c)]
    return (main_params, extra_params, state, sequence)
