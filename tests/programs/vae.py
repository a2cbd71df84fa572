"""A variational autoencoder's negative ELBO, with the reparameterization trick (noise passed in)."""
import numpy as np
from scipy.stats import norm


def init_net_params(scale, layer_sizes, rs=np.random.RandomState(0)):
    return [(scale * rs.randn(m, n), scale * rs.randn(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def relu(x):
    return np.maximum(0, x)


def neural_net(params, inputs):
    """A relu network with a linear last layer."""
    *hidden, (W_out, b_out) = params
    for W, b in hidden:
        inputs = relu(inputs @ W + b)
    return inputs @ W_out + b_out


def encode(rec_params, data):
    out = neural_net(rec_params, data)
    latent_dim = out.shape[1] // 2
    return out[:, :latent_dim], out[:, latent_dim:]


def sample_diag_gaussian(mean, log_std, eps):
    return mean + np.exp(log_std) * eps


def bernoulli_log_density(targets, logits):
    """log p(targets | logits) for targets in {0, 1}, summed over the last axis."""
    signs = 2 * targets - 1
    return -np.sum(np.logaddexp(0.0, -signs * logits), axis=-1)


def diag_gaussian_log_density(x, mean, log_std):
    return np.sum(norm.logpdf(x, mean, np.exp(log_std)), axis=-1)


def elbo(gen_params, rec_params, data, eps):
    q_mean, q_log_std = encode(rec_params, data)
    z = sample_diag_gaussian(q_mean, q_log_std, eps)
    logits = neural_net(gen_params, z)
    log_px_given_z = bernoulli_log_density(data, logits)
    log_pz = diag_gaussian_log_density(z, 0.0, 0.0)
    log_qz = diag_gaussian_log_density(z, q_mean, q_log_std)
    return np.mean(log_px_given_z + log_pz - log_qz)


def vae_loss(combined_params, data, eps):
    gen_params, rec_params = combined_params
    return -elbo(gen_params, rec_params, data, eps)


def make_inputs(seed=0, size="small"):
    D, H, Z, N = (6, 8, 2, 10) if size == "small" else (196, 200, 10, 100)
    rs = np.random.RandomState(seed)
    gen = init_net_params(0.3, [Z, H, D], rs)
    rec = init_net_params(0.3, [D, H, 2 * Z], rs)
    data = (rs.rand(N, D) > 0.5).astype(float)
    eps = rs.randn(N, Z)
    return ((gen, rec), data, eps), {}


PROGRAM = {"f": "vae_loss", "argnums": (0,), "njit": False, "autograd": True}
