"""Black-box variational inference: a Gaussian approximation to a banana-shaped density, as a class."""
import numpy as np


def banana_log_density(x, a=1.0, b=0.5):
    """Unnormalized log density of a 2-D banana; x is (n_samples, 2)."""
    x1 = x[:, 0] / a
    x2 = x[:, 1] * a + b * (x[:, 0] ** 2 + a ** 2)
    return -0.5 * (x1 ** 2 + x2 ** 2)


class GaussianVI:
    """Fits a diagonal Gaussian q(z) = N(mean, exp(log_std)^2) by maximizing the ELBO."""

    def __init__(self, log_density, dim, n_samples=50):
        self.log_density = log_density
        self.dim = dim
        self.n_samples = n_samples

    def unpack(self, params):
        return params[:self.dim], params[self.dim:]

    def entropy(self, log_std):
        return 0.5 * self.dim * (1.0 + np.log(2 * np.pi)) + np.sum(log_std)

    def loss(self, params, seed):
        """Negative ELBO estimated with fresh noise from the given seed."""
        mean, log_std = self.unpack(params)
        rs = np.random.RandomState(seed)
        eps = rs.randn(self.n_samples, self.dim)
        samples = mean + eps * np.exp(log_std)
        lower_bound = self.entropy(log_std) + np.mean(self.log_density(samples))
        return -lower_bound


MODEL = GaussianVI(banana_log_density, 2, n_samples=40)


def objective(params, seed):
    return MODEL.loss(params, seed)


def make_inputs(seed=0, size="small"):
    rs = np.random.RandomState(seed)
    return (np.concatenate([rs.randn(2) * 0.5, -1.0 + 0.1 * rs.randn(2)]), 3), {}


# njit: False. The noise comes from np.random.RandomState(seed) made inside the loss, which whole-function
# Numba code cannot call: auto runs it as Python over compiled kernels.
PROGRAM = {"f": "objective", "argnums": (0,), "njit": False, "autograd": True}
