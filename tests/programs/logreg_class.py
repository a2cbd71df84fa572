"""Bayesian logistic regression as a model class: ``grad(model.loss)`` on a method that prints and asserts."""
import numpy as np


class LogisticRegression:
    def __init__(self, X, y, prior_scale=1.0, verbose=False):
        self.X = X
        self.y = y
        self.prior_scale = prior_scale
        self.verbose = verbose

    def logits(self, w, b=0.0):
        return self.X @ w + b

    def log_prior(self, w):
        return -0.5 * np.sum(w ** 2) / self.prior_scale ** 2

    def log_likelihood(self, w, b):
        z = self.logits(w, b)
        # log sigmoid(z) for y = 1, log sigmoid(-z) for y = 0
        return np.sum(self.y * -np.logaddexp(0, -z) + (1 - self.y) * -np.logaddexp(0, z))

    def loss(self, params):
        """Negative log posterior of params = {"w": weights, "b": bias}."""
        w, b = params["w"], params["b"]
        assert w.ndim == 1, "weights must be a vector"
        value = -(self.log_likelihood(w, b) + self.log_prior(w))
        if self.verbose:
            print("loss evaluated")
        return value / len(self.y)


MODEL = LogisticRegression(np.random.RandomState(1).randn(30, 4),
                           (np.random.RandomState(2).rand(30) > 0.5).astype(float))


def make_inputs(seed=0, size="small"):
    rs = np.random.RandomState(seed)
    return ({"w": rs.randn(4), "b": 0.3},), {}


PROGRAM = {"f": "MODEL.loss", "argnums": (0,), "njit": True, "autograd": True}
