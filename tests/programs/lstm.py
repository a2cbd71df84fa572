"""An LSTM language model over a list of one-hot symbol sequences of different lengths."""
import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def logsumexp(v):
    m = np.max(v)
    return m + np.log(np.sum(np.exp(v - m)))


def init_lstm(n_symbols, n_hidden, scale=0.2, rs=None):
    rs = rs or np.random.RandomState(0)
    n_in = n_symbols + n_hidden
    params = {}
    for gate in ["i", "f", "o", "g"]:
        params["W" + gate] = scale * rs.randn(n_hidden, n_in)
        params["b" + gate] = np.zeros(n_hidden)
    params["bf"] = params["bf"] + 1.0   # remember by default
    params["Wy"] = scale * rs.randn(n_symbols, n_hidden)
    params["by"] = np.zeros(n_symbols)
    return params


def lstm_cell(p, x, h, c):
    z = np.concatenate([x, h])
    i = sigmoid(p["Wi"] @ z + p["bi"])
    f = sigmoid(p["Wf"] @ z + p["bf"])
    o = sigmoid(p["Wo"] @ z + p["bo"])
    g = np.tanh(p["Wg"] @ z + p["bg"])
    c = f * c + i * g
    h = o * np.tanh(c)
    return h, c


def negative_log_likelihood(params, sequences):
    """Average next-symbol cross-entropy; each sequence is a (T, n_symbols) one-hot array."""
    total = 0.0
    count = 0
    for seq in sequences:
        h = np.zeros(params["bi"].shape)
        c = np.zeros_like(h)
        for t in range(len(seq) - 1):
            h, c = lstm_cell(params, seq[t], h, c)
            logits = params["Wy"] @ h + params["by"]
            total = total - np.dot(logits - logsumexp(logits), seq[t + 1])
            count += 1
    return total / count


def make_inputs(seed=0, size="small"):
    n_symbols, n_hidden, lengths = (4, 5, [5, 3, 4]) if size == "small" else (20, 64, [30, 25, 40, 35])
    rs = np.random.RandomState(seed)
    params = init_lstm(n_symbols, n_hidden, rs=rs)
    sequences = [np.eye(n_symbols)[rs.randint(n_symbols, size=T)] for T in lengths]
    return (params, sequences), {}


PROGRAM = {"f": "negative_log_likelihood", "argnums": (0,), "njit": True, "autograd": True, "heavy": True}
