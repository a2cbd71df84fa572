"""Log-likelihood of a discrete hidden Markov model by the forward algorithm, over a list of sequences."""
import numpy as np
from scipy.special import logsumexp


def log_normalize(a, axis=-1):
    return a - logsumexp(a, axis=axis, keepdims=True)


def forward_log_likelihood(log_pi, log_A, log_B, obs):
    """log p(obs) for one sequence of integer symbols."""
    alpha = log_pi + log_B[:, obs[0]]
    for t in range(1, len(obs)):
        alpha = logsumexp(alpha[:, None] + log_A, axis=0) + log_B[:, obs[t]]
    return logsumexp(alpha)


def hmm_log_likelihood(params, sequences):
    """params holds unnormalized log initial, transition and emission weights."""
    log_pi = log_normalize(params["pi"])
    log_A = log_normalize(params["A"], axis=1)
    log_B = log_normalize(params["B"], axis=1)
    return sum(forward_log_likelihood(log_pi, log_A, log_B, obs) for obs in sequences)


def make_inputs(seed=0, size="small"):
    S, V, lengths = (3, 4, [6, 4, 5]) if size == "small" else (8, 20, [100, 80, 120, 90])
    rs = np.random.RandomState(seed)
    params = {"pi": rs.randn(S), "A": rs.randn(S, S), "B": rs.randn(S, V)}
    sequences = [rs.randint(V, size=T) for T in lengths]
    return (params, sequences), {}


PROGRAM = {"f": "hmm_log_likelihood", "argnums": (0,), "njit": True, "autograd": True}
