"""A multilayer perceptron classifier: parameters are a list of (W, b) pairs, with an L2 prior."""
import numpy as np
from scipy.special import logsumexp


def init_random_params(scale, layer_sizes, rs=np.random.RandomState(0)):
    """A list of (weights, biases) tuples, one per layer."""
    return [(scale * rs.randn(m, n), scale * rs.randn(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    """params: list of (W, b); inputs: (N, D). Returns normalized class log-probabilities."""
    for W, b in params:
        outputs = np.dot(inputs, W) + b
        inputs = np.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    """Squared norm of all the parameters, flattened into one vector."""
    flattened = np.concatenate([np.ravel(W) for W, _ in params] + [b for _, b in params])
    return np.dot(flattened, flattened)


def log_posterior(params, inputs, targets, L2_reg):
    log_prior = -L2_reg * l2_norm(params)
    log_lik = np.sum(neural_net_predict(params, inputs) * targets)
    return log_prior + log_lik


def objective(params, inputs, targets, L2_reg=0.1):
    return -log_posterior(params, inputs, targets, L2_reg) / len(inputs)


def accuracy(params, inputs, targets):
    target_class = np.argmax(targets, axis=1)
    predicted_class = np.argmax(neural_net_predict(params, inputs), axis=1)
    return np.mean(predicted_class == target_class)


def make_inputs(seed=0, size="small"):
    n, sizes = (24, [6, 10, 3]) if size == "small" else (256, [64, 128, 64, 10])
    rs = np.random.RandomState(seed)
    params = init_random_params(0.5, sizes, rs)
    X = rs.randn(n, sizes[0])
    y = np.eye(sizes[-1])[rs.randint(sizes[-1], size=n)]
    return (params, X, y), {"L2_reg": 0.05}


PROGRAM = {"f": "objective", "argnums": (0,), "njit": True, "autograd": True}
