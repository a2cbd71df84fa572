"""A second, independent program generator: NumPy as people call it, inside loops and branches.

``gen.py`` grows programs from a typed grammar of control flow and a small set of array operations.
This one works the other way round: it starts from the breadth of the NumPy API that funcgrad documents
(elementwise math, reductions with ``axis``/``keepdims``, shape operations, indexing forms, ``np.linalg``,
``scipy.special``, method forms, dtypes) written as *templates*, each a line a person would write, and
drops them into a few loop and branch skeletons with run-time trip counts. Every template reduces to a
float scalar that is added into an accumulator, so any template composes with any skeleton.

The programs take ``f(x, v, w, s, n)``: ``x`` a (3, 4) float array, ``v`` (4,), ``w`` (3,), ``s`` a
float and ``n`` the loop count (an int, not differentiated). Placeholders in a template (``{X}``,
``{V}``, ``{W}``, ``{S}``) are filled with short elementwise expressions of that shape (``np.tanh(x)``,
``x * s + 0.5``, ``v[::-1]``...), so values stay of order one and logs/sqrts see positive arguments.

``generate(seed) -> Program`` is reproducible from the seed alone. The runner
``python -m tests.fuzz.gen_numpy --n N --seed S`` checks programs ``S .. S+N-1`` with
``check.check_program`` and prints each failure with its seed and source.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys

import numpy as np

SHAPES = {"X": (3, 4), "V": (4,), "W": (3,)}
LEAF = {"X": "x", "V": "v", "W": "w"}

# elementwise wrappers: "{}" is an expression of any shape; results stay of order one
UNARY = [
    "np.tanh({})", "np.sin({})", "np.cos({})", "({} * s + 0.5)", "({} * 0.7 - s)", "np.exp(0.5 * {})",
    "np.sqrt({0} * {0} + 1.0)", "np.log1p({0} * {0})", "np.log({0} * {0} + 0.5)", "np.expm1(0.3 * {})",
    "np.sinh(0.5 * {})", "np.arctan({})", "np.square({})", "(1.0 / (1.0 + {0} * {0}))",
    "np.maximum({}, -0.3)", "np.minimum({}, 0.4)", "np.clip({}, -0.5, 0.6)", "np.abs({} + 0.05)",
    "({} ** 2)", "np.power({0} * {0} + 0.5, 1.5)", "np.hypot({}, 0.5)", "np.arctan2({}, 0.7)",
    "np.logaddexp({}, 0.2)", "np.where({0} > 0.1, {0}, 0.5 * {0})", "sp.expit({})", "sp.erf({})",
    "np.negative({})", "np.reciprocal({0} * {0} + 1.0)", "np.cbrt({0} * {0} + 1.0)", "np.exp2({})",
    "np.log2({0} * {0} + 1.0)", "np.log10({0} * {0} + 1.0)", "np.cosh(0.5 * {})", "np.fmax({}, 0.0)",
    "np.copysign({}, 1.0)", "{}.clip(-0.4, 0.5)", "np.real({} + 0j)", "np.abs({} + 0.5j)",
    "({} * (x[0, 0] > 0))", "({} + np.float64(0.25))", "({0} * np.ones_like({0}))",
]
# shape-preserving views/rearrangements per shape
VIEW = {
    "X": ["x", "x[::-1]", "x[:, ::-1]", "np.flip(x, axis=1)", "np.roll(x, 1, axis=1)", "np.roll(x, -1)",
          "x.reshape(4, 3).reshape(3, 4)", "x.T.T", "np.ascontiguousarray(x.T).T", "(x + v)", "(x * w[:, None])",
          "(x - x.mean(axis=0))", "(x / np.sqrt(1.0 + w[:, np.newaxis] ** 2))", "x.astype(np.float64)",
          "np.tile(v, (3, 1))", "np.outer(w, v)", "np.sort(x, axis=1)", "np.cumsum(x, axis=1)",
          "np.triu(x)", "np.tril(x, 1)", "np.swapaxes(x.T, 0, 1)", "np.moveaxis(x, 0, -1).T",
          "x[[2, 0, 1]]", "x[:, [3, 3, 0, 1]]", "np.take(x, [1, 1, 2], axis=0)[[0, 1, 2]]",
          "np.vstack([x[:2], x[2:]])", "np.hstack([x[:, :1], x[:, 1:]])", "np.concatenate([x[:, 2:], x[:, :2]], axis=1)",
          "np.stack([w, w * 2, w, -w], axis=1)", "np.repeat(w[:, None], 4, axis=1)", "x.copy()",
          "(x * (x > 0.2))", "(x + (w > 0)[:, None])", "np.where(x > v, x, v)"],
    "V": ["v", "v[::-1]", "np.roll(v, 2)", "x[1]", "x[-1, :]", "x[:, 2].repeat(2)[:4]", "x.sum(axis=0)",
          "x.mean(axis=-2)", "np.max(x, axis=0)", "x.min(0)", "np.cumprod(0.5 + 0.1 * v)", "np.sort(v)",
          "v[np.argsort(v)]", "x[[0, 2, 2, 1], [3, 0, 0, 1]]", "np.diag(np.outer(v, v))", "v.ravel()",
          "x.T @ w", "w @ x", "np.dot(w, x)", "np.einsum('ij,i->j', x, w)", "np.tensordot(w, x, axes=1)",
          "np.linspace(0.0, 1.0, 4) * v", "np.arange(4) * v", "np.arange(4.0) + v", "x.ravel()[::3]",
          "x.flatten()[[0, 5, 5, 11]]", "np.concatenate([v[2:], v[:2]])", "np.pad(v[1:3], 1)",
          "np.pad(v[:2], (1, 1), mode='edge')", "np.array([v[0], s, v[2], v[3]])", "np.full(4, s) + v",
          "np.take_along_axis(x, np.argmax(x, axis=0)[None, :], axis=0)[0]", "np.var(x, axis=0)",
          "np.std(x, axis=0)", "np.linalg.norm(x, axis=0)", "np.prod(0.5 + 0.2 * x, axis=0)",
          "np.amax(x, axis=0, keepdims=True)[0]", "np.squeeze(x[:1])", "np.expand_dims(v, 0)[0]",
          "x[..., 1].repeat(2)[1:5]", "np.array_split(x.ravel(), 3)[1]", "np.split(x, 2, axis=1)[0].ravel()[:4]",
          "np.kron(v[:2], v[2:])", "np.diff(np.concatenate([[0.0], v]))", "v * (v > 0) + 0.1 * v * (v <= 0)",
          "np.einsum('ij,ij->j', x, x)", "np.inner(x.T, w) ", "np.matmul(x.T, w)", "sp.logsumexp(x, axis=0)"],
    "W": ["w", "w[::-1]", "x[:, 0]", "x[:, -1]", "x.sum(axis=1)", "x.sum(1)", "x.mean(axis=1)",
          "np.max(x, axis=-1)", "x @ v", "x.dot(v)", "np.dot(x, v)", "np.einsum('ij,j->i', x, v)",
          "np.linalg.norm(x, axis=1)", "np.linalg.norm(x, ord=1, axis=1)", "np.tensordot(x, v, axes=([1], [0]))",
          "x[[0, 1, 2], [0, 0, 3]]", "x[np.arange(3), np.argmax(x, axis=1)]", "np.diag(x)", "np.diag(x[:, :3])",
          "np.trace(x[:, :3]) + w", "np.cumsum(w)", "np.sort(w)[::-1]", "w[[2, 2, 0]]", "np.take(w, [0, 2, 1])",
          "np.logaddexp.reduce(x, axis=1) if False else sp.logsumexp(x, axis=1)", "x.max(axis=1) - x.min(axis=1)",
          "x[:, 1:3].sum(axis=-1)", "np.var(x, axis=1, ddof=1)", "x.std(axis=1)", "np.prod(x * 0.3 + 1.0, axis=1)",
          "np.mean(x, axis=1, keepdims=True).ravel()", "np.sum(x, axis=(1,)) ", "x.reshape(3, 2, 2).sum(axis=(1, 2))",
          "x.reshape(-1, 4)[:, 0]", "np.array([s, 2.0 * s, w[0]])", "np.zeros(3) + w", "np.full_like(w, 0.5) * w",
          "np.eye(3) @ w", "np.linalg.solve(np.eye(3) * 2.0 + 0.1 * np.outer(w, w), w)",
          "np.linalg.inv(np.eye(3) + 0.2 * np.outer(w, w)) @ w", "np.interp(w, [-1.0, 0.0, 1.0], [0.0, 0.5, 2.0])"],
}
# scalar consumers: reduce an expression to a float (the template sees {X}, {V}, {W}, {S}, {i})
SCALAR = [
    "np.sum({X})", "{X}.sum()", "np.mean({V})", "{W}.mean()", "np.max({X})", "{V}.max()", "np.min({W})",
    "np.amax({V})", "np.amin({X})", "np.prod(0.5 + 0.3 * np.tanh({W}))", "np.var({X})", "np.std({V}) + 0.1",
    "np.linalg.norm({V})", "np.linalg.norm({X})", "np.linalg.norm({X}, 'fro')", "np.linalg.norm({W}, 1)",
    "np.linalg.norm({V}, np.inf)", "np.dot({V}, {V})", "{V} @ {V}", "np.inner({W}, {W})", "np.vdot({X}, {X})",
    "{W} @ {X} @ {V}", "np.einsum('i,ij,j->', {W}, {X}, {V})", "np.einsum('ij,ij', {X}, {X})",
    "np.trace({X} @ {X}.T)", "np.tensordot({X}, {X}, axes=2)", "np.sum({X} * {V})", "np.sum({X} * {W}[:, None])",
    "np.sum({X}[:, :, None] * {X}[:, None, :])", "np.sum({V}[None, :, None] * {W}[:, None, None])",
    "np.sum(np.outer({W}, {V}) * {X})", "np.sum(np.kron({W}, {V}))", "{X}[1, 2]", "{X}[-1, -1]", "{V}[-2]",
    "{X}[0][3]", "{X}[..., 0].sum()", "{X}[:, None, 1].sum()", "{X}[1:, ::2].sum()", "{X}[::-1, 1::2][0, 1]",
    "{X}[[0, 2]][:, [1, 1]].sum()", "{X}[[2, 2, 1], [0, 3, 3]].sum()", "{V}[[0, 0, 3, 3, 3]].sum()",
    "{X}[{X} > 0.2].sum()", "np.sum({V}[{V} < 0.3])", "{W}[np.argmax({W})]", "{V}[np.argmin({V})]",
    "np.sort({V})[-1]", "np.sort({X}, axis=0)[0].sum()", "{V}[np.argsort({V})][0]",
    "np.take({V}, [3, 1, 1]).sum()", "np.take_along_axis({X}, np.argsort({X}, axis=1), axis=1)[:, 0].sum()",
    "{X}[np.where({X}[:, 0] > 0.0)].sum()", "np.where({W} > 0.0)[0].size * 0.1 + np.sum({W})",
    "np.sum(np.where({X} > 0.0, {X}, 0.0))", "np.sum(np.cumsum({V}) * {V})", "np.sum(np.cumprod(0.5 + 0.2 * {W}))",
    "sp.logsumexp({X})", "sp.logsumexp({V})", "np.sum(sp.gammaln({V} * {V} + 1.0))", "np.sum(sp.expit({X}))",
    "np.sum(sp.erf({W}))", "np.linalg.det(np.eye(3) + 0.3 * np.outer({W}, {W}) + 0.1 * {X}[:, :3])",
    "np.linalg.slogdet(np.eye(3) * 2.0 + 0.3 * {X}[:, :3])[1]", "np.sum(np.linalg.inv(np.eye(3) * 2.0 + 0.3 * {X}[:, 1:]))",
    "np.sum(np.linalg.solve(np.eye(3) * 2.0 + 0.3 * {X}[:, :3], {W}))",
    "np.sum(np.linalg.cholesky({X} @ {X}.T + np.eye(3)))", "np.sum(np.linalg.eigh({X} @ {X}.T + np.eye(3))[0])",
    "np.linalg.eigh({X}[:, :3] + {X}[:, :3].T)[0][-1]", "np.sum(np.diag({X}))", "np.sum(np.triu({X}[:, :3] @ {X}.T))",
    "np.sum(np.reshape({X}, (2, 6))[1])", "np.sum({X}.reshape(-1)[::5])", "np.sum(np.transpose({X}.reshape(3, 2, 2), (2, 0, 1))[0])",
    "np.sum(np.swapaxes({X}.reshape(3, 2, 2), 0, 2)[1])", "np.sum(np.moveaxis({X}.reshape(3, 2, 2), 0, -1)[0, 1])",
    "np.sum(np.expand_dims({V}, 1) * {V})", "np.squeeze({X}[:1, :1])", "np.sum(np.stack([{V}, {V}], axis=1) ** 2)",
    "np.sum(np.hstack([{V}, {W}]) ** 2)", "np.sum(np.vstack([{X}, {V}])[-1])", "np.sum(np.concatenate([{X}, {X}], axis=-1)[:, 3:5])",
    "np.sum(np.split({V}, 2)[1])", "np.sum(np.array_split({W}, 2)[0])", "np.sum(np.tile({W}, 2)[2:5])",
    "np.sum(np.repeat({V}, [1, 0, 2, 1]))", "np.sum(np.flip({X}) * {X})", "np.sum(np.roll({V}, 1) * {V})",
    "np.sum(np.pad({X}, ((1, 0), (0, 2))) ** 2)", "np.sum(np.tril({X}, -1))", "np.sum(np.outer({V}, {W}))",
    "np.sum({X}.T.dot({W}))", "{X}.mean(axis=0).max()", "{X}.sum(axis=1, keepdims=True).sum()",
    "np.sum({X}, axis=(0, 1))", "np.mean({X}.reshape(3, 2, 2), axis=(0, 2)).sum()", "np.sum(np.max({X}, axis=1, keepdims=True) * {X})",
    "np.sum(np.var({X}, axis=0, keepdims=True))", "np.sum(np.std({X}, axis=-1, ddof=1))", "np.sum({X}.cumsum(axis=0))",
    "np.sum(np.cumsum({X}, axis=-1)[:, -1])", "np.sum(np.prod(0.5 + 0.3 * {X}, axis=0, keepdims=True))",
    "np.sum(sp.logsumexp({X}, axis=1, keepdims=True))", "float({V}[0])", "{V}.item(1) if False else {V}[1].item()",
    "np.sum({V} * np.arange(4))", "np.sum({V} * np.array([1, 2, 3, 4]))", "np.sum({W} * (np.arange(3) > 0))",
    "np.sum({V} * np.linspace(-1.0, 1.0, 4))", "np.sum(np.eye(4)[1] * {V})", "np.sum(np.zeros_like({X}) + {X})",
    "np.sum({X} / (1.0 + np.abs({X})))", "np.sum({X} ** 2) ** 0.5", "np.sum({V}) ** 2 / 4.0",
    "np.sum(np.abs({W} + 0.01j * {W}))", "np.real(np.sum(({V} + 1j) * ({V} - 1j)))",
    "np.sum({V}.astype(np.float32).astype(np.float64))", "np.sum(np.array({W}, dtype=np.float64))",
    "np.sum(np.asarray({V}) * 2)", "np.sum(np.sign({V}) * {V})", "np.sum(np.floor({V}) + {V})",
    "np.median({V})", "np.percentile({W}, 50)", "np.average({V}, weights=np.array([1.0, 2.0, 3.0, 4.0]))",
    "np.sum(np.diff({V}))", "np.sum(np.convolve({V}, {W}))", "np.ptp({V})", "np.sum(np.nan_to_num({V}))",
    "np.nansum({V})", "np.sum(np.round({V}, 3) * 0.0 + {V})", "np.sum(np.matmul({X}.reshape(3, 2, 2), {X}.reshape(3, 2, 2)))",
    "np.sum({X}.reshape(3, 2, 2) @ {V}[:2])", "np.sum(np.einsum('bij,bjk->bik', {X}.reshape(3, 2, 2), {X}.reshape(3, 2, 2)))",
    "np.sum(np.einsum('ij->j', {X}) * {V})", "np.einsum('i,i', {W}, {W})", "np.sum(np.einsum('ij->ji', {X})[0])",
    "np.sum({X}.T[1:3])", "np.sum({X}.dot({V}) * {W})", "np.sum(np.atleast_2d({V}))", "np.sum(np.broadcast_to({V}, (3, 4)) * {X})",
    "np.max(np.abs({X}))", "np.maximum.reduce({V}) if False else np.max({V})", "np.sum(np.minimum({X}, {V}))",
    "np.sum(np.maximum({X}, {W}[:, None]))", "np.sum(np.logaddexp({X}, {V}))", "np.sum(np.arctan2({X}, 1.0 + {V} * {V}))",
    "np.sum(np.hypot({W}, {W}[::-1]))", "np.sum(np.power(1.0 + {V} * {V}, {W}[0]))", "np.sum({V} ** np.array([1, 2, 3, 1]))",
    "np.sum(np.clip({X}, -0.2, {V}))", "np.sum(np.where({X} > {W}[:, None], {X} * 2.0, {V}))",
    "np.sum({X} * ({X} > 0.0) + ({X} > 0.5))", "np.sum(({V} > 0.0) * 1.0 * {V})", "np.sum(True * {V})",
    # counts and means of bool/int arrays (their result dtype is int64/float64, not the input's)
    "np.sum({X}) * np.sum({X} > 0.0)", "np.mean({V} > 0.0) * np.sum({V})", "np.sum({X} * np.cumsum({X} > 0.0, axis=1))",
    "np.sum({X} * np.mean(np.arange(12).reshape(3, 4), axis=0))", "({W} > 0.0).sum() * {W}[0]",
    "np.sum({X} * np.sum({X} > 0.0, axis=0))", "np.sum({V} * np.cumsum(np.arange(4)))",
]

SKELETONS = ["plain", "plain", "loop_i", "loop_i", "loop_state", "nested", "branch", "while", "loop_branch",
             "grow", "loop_index", "loop_scalar_state", "enumerate_rows", "loop_helper", "float32"]


@dataclasses.dataclass
class Program:
    seed: int
    source: str
    n: int
    dtype: str = "float64"
    argnums: tuple = (0, 1, 2, 3)

    def make_args(self):
        rng = np.random.RandomState(self.seed)
        x = rng.uniform(-1.0, 1.0, size=(3, 4))
        v = rng.uniform(-1.0, 1.0, size=4)
        w = rng.uniform(-1.0, 1.0, size=3)
        s = float(rng.uniform(-1.0, 1.0))
        return (x, v, w, s, self.n)


class _Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def arr(self, kind, depth=1):
        """An expression of shape SHAPES[kind]: a view of an input under 0-2 elementwise wrappers."""
        e = self.r.choice(VIEW[kind]) if self.r.random() < 0.7 else LEAF[kind]
        for _ in range(self.r.randint(0, depth + 1)):
            e = self.r.choice(UNARY).format(e)
        return e

    def scalar(self, extra=None):
        t = self.r.choice(SCALAR)
        fill = {k: self.arr(k) for k in ("X", "V", "W")}
        if extra:
            fill.update(extra)
        out = t
        for k in ("X", "V", "W"):
            # each occurrence gets its own expression half the time
            while "{" + k + "}" in out:
                out = out.replace("{" + k + "}", "(" + (fill[k] if self.r.random() < 0.5 else self.arr(k)) + ")", 1)
        return out

    def skeleton(self, kind, ind):
        r = self.r
        p = " " * ind
        e = self.scalar()
        if kind == "plain":
            return [f"{p}acc = acc + {e}"]
        if kind == "loop_i":
            return [f"{p}for i in range(n):",
                    f"{p}    acc = acc + {r.choice(['0.5', '1.0 / (i + 1)', 'np.sin(i)', 'i * 0.1'])} * {e}"]
        if kind == "loop_index":
            idx = r.choice(["x[i % 3]", "x[-1 - i % 3, ::-1]", "x[:, i % 4]", "v[i % 4] * w", "np.roll(v, i)",
                            "x[i % 3, (i + 1) % 4] * v", "x[[i % 3, 0]].sum(axis=0)", "x[i % 3:].sum(axis=0)"])
            return [f"{p}for i in range(n):",
                    f"{p}    r = {idx}",
                    f"{p}    acc = acc + np.sum(np.tanh(r) * r) + 0.1 * {e}"]
        if kind == "loop_state":
            k = r.choice(["X", "V", "W"])
            upd = r.choice(["np.tanh(y) * 0.9 + 0.1 * {A}", "0.5 * y + 0.5 * np.sin({A})", "y - 0.1 * (y - {A}) ** 3",
                            "np.roll(y, 1) * 0.8 + 0.1 * {A}", "np.clip(y + 0.1 * {A}, -1.0, 1.0)",
                            "y[::-1] * 0.7 + 0.2 * np.maximum({A}, 0.0)", "y / (1.0 + np.sum(y * y))",
                            "np.where(y > 0.0, y * 0.9, y * 0.5) + 0.05 * {A}", "np.sort(y) * 0.9 + 0.1 * {A}"])
            if k == "X":
                upd = r.choice([upd, "np.tanh(y @ np.eye(4) * 0.9 + 0.1 * {A})", "0.9 * np.tanh(y.T.T) + 0.1 * {A}",
                                "y - 0.1 * (y - y.mean(axis=0))", "np.tanh(np.outer(y @ v, v)) * 0.5 + 0.1 * {A}"])
            return [f"{p}y = {self.arr(k)}",
                    f"{p}for i in range(n):",
                    f"{p}    y = {upd.format(A=self.arr(k))}",
                    f"{p}    acc = acc + {r.choice(['np.sum(y)', 'np.max(y)', 'y.mean()', 'np.linalg.norm(y)', 'y.ravel()[0]'])}",
                    f"{p}acc = acc + {e} * 0.1"]
        if kind == "nested":
            return [f"{p}for i in range(n):",
                    f"{p}    for j in range(i, 3):",
                    f"{p}        acc = acc + x[j, i % 4] * {r.choice(['0.5', 'v[j]', 'w[j] * s', 'np.tanh(acc)'])}",
                    f"{p}    acc = acc * 0.9 + 0.1 * {e}"]
        if kind == "branch":
            c = r.choice(["np.sum(x) > 0.0", "x[0, 0] > v[0]", "np.max(w) > 0.3", "s > 0.0", "np.any(v > 0.5)",
                          "np.all(w < 0.9)", "acc > 0.5", "np.argmax(v) == 2", "(v > 0).sum() >= 2",
                          "np.mean(x) < 0.0 and s < 0.5", "x.shape[0] == 3",
                          "np.sum(v > 0.0) >= 2", "np.mean(x > 0.0) > 0.5", "np.count_nonzero(w > 0.0) == 1"])
            return [f"{p}if {c}:", f"{p}    acc = acc + {e}", f"{p}else:", f"{p}    acc = acc - {self.scalar()}"]
        if kind == "while":
            return [f"{p}k = 0", f"{p}t = 0.0",
                    f"{p}while k < n and t < 3.0:",
                    f"{p}    t = t + 0.2 + 0.1 * np.tanh({e})",
                    f"{p}    k += 1",
                    f"{p}acc = acc + t"]
        if kind == "loop_branch":
            return [f"{p}for i in range(n):",
                    f"{p}    if {r.choice(['i % 2 == 0', 'v[i % 4] > 0.0', 'np.sum(x[i % 3]) > acc', 'i == n - 1'])}:",
                    f"{p}        acc = acc + {e}",
                    f"{p}    elif {r.choice(['i > 2', 'w[i % 3] < 0.0'])}:",
                    f"{p}        continue",
                    f"{p}    else:",
                    f"{p}        acc = acc * {r.choice(['0.5', 'np.cos(s)', 'np.tanh(w[0])'])}"]
        if kind == "grow":
            # state whose shape changes with the trip count: must be right or refused
            grow = r.choice(["np.concatenate([y, y[-1:] * 0.5])", "np.append(y, np.tanh(y[0]))", "np.hstack([y, [s]])",
                             "y[1:]", "np.concatenate([y, y])[:y.size + 1]", "np.vstack([y.reshape(1, -1), y.reshape(1, -1)]).ravel()"])
            return [f"{p}y = {self.arr('V')}",
                    f"{p}for i in range(min(n, 3)):",
                    f"{p}    y = {grow}",
                    f"{p}acc = acc + np.sum(y ** 2) + 0.1 * {e}"]
        if kind == "loop_scalar_state":
            return [f"{p}m = np.sum(v)",
                    f"{p}for i in range(n):",
                    f"{p}    m = {r.choice(['np.tanh(m) + 0.1 * np.max(x[i % 3])', 'm * 0.5 + np.mean(w) * m', 'np.maximum(m, np.min(v))', 'np.sqrt(m * m + 1.0) - np.sum(x, axis=0)[i % 4]'])}",
                    f"{p}acc = acc + m + 0.1 * {e}"]
        if kind == "enumerate_rows":
            return [f"{p}for i, row in enumerate(x):",
                    f"{p}    acc = acc + {r.choice(['np.dot(row, v)', 'row.max() * w[i]', 'np.sum(row[::-1] * v)', 'row @ row', 'np.sum(np.exp(0.3 * row)) * i'])}",
                    f"{p}for a, b in zip(v, w):",
                    f"{p}    acc = acc + a * b * {r.choice(['0.5', 's', 'np.tanh(acc)'])}",
                    f"{p}acc = acc + {e}"]
        if kind == "loop_helper":
            return [f"{p}for i in range(n):",
                    f"{p}    acc = acc + _h(x, v, i) * 0.3",
                    f"{p}acc = acc + {e}"]
        if kind == "float32":
            return [f"{p}acc = acc + {e}"]
        raise ValueError(kind)


HELPERS = [
    "def _h(x, v, i):\n    z = np.tanh(x @ v)\n    return np.sum(z * z) + z[i % 3]\n",
    "def _h(x, v, i):\n    a, b = np.split(x, 2, axis=1)\n    return np.sum(a * b) * 0.1 + v[-1 - i % 4]\n",
    "def _h(x, v, i):\n    m = x.max(axis=1, keepdims=True)\n    return np.sum(np.exp(x - m)) * 0.1 + np.sum(m)\n",
    "def _h(x, v, i):\n    y = np.zeros(4)\n    y[i % 4] = v[0]\n    y[1:3] += x[0, :2]\n    return np.sum(y * v)\n",
    "def _h(x, v, i):\n    q = x.copy()\n    q[:, 0] = v[:3]\n    q[q > 0.5] = 0.5\n    return np.sum(q ** 2)\n",
]


def generate(seed: int) -> Program:
    g = _Gen(seed)
    r = g.r
    kinds = [r.choice(SKELETONS) for _ in range(r.randint(1, 3))]
    dtype = "float32" if "float32" in kinds else "float64"
    lines = ["import numpy as np", "import scipy.special as sp", ""]
    if "loop_helper" in kinds:
        lines += [r.choice(HELPERS)]
    lines += ["def f(x, v, w, s, n):",
              f"    acc = {r.choice(['0.0', 's * 0', 'np.float64(0.0)', 'np.zeros(())', 'np.sum(np.zeros(2))', '0'])}"]
    for k in kinds:
        lines += g.skeleton(k, 4)
    lines.append(f"    return {r.choice(['acc', 'acc', 'float(acc)', 'acc * 1.0', 'np.tanh(acc) + acc'])}")
    return Program(seed=seed, source="\n".join(lines) + "\n", n=r.randint(0, 5), dtype=dtype)


def check(prog, modes=None, timeout=120):
    from . import check as chk   # the checker imports funcgrad; the generator itself does not need it
    kwargs = {"timeout": timeout}
    if modes:
        kwargs["modes"] = modes
    # a "float32" program is checked in float64 as usual, then the njit and Python modes are compared
    # on the same inputs as float32 arrays (check.FLOAT32)
    old = chk.FLOAT32
    chk.FLOAT32 = prog.dtype == "float32"
    try:
        return chk.check_program(prog.source, prog.make_args(), prog.argnums, **kwargs)
    finally:
        chk.FLOAT32 = old


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--show", action="store_true", help="print the sources only")
    a = ap.parse_args(argv)
    import warnings
    warnings.simplefilter("ignore")
    counts = {}
    for sd in range(a.seed, a.seed + a.n):
        prog = generate(sd)
        if a.show:
            print(f"# seed {sd} n={prog.n} {prog.dtype}\n{prog.source}")
            continue
        out = check(prog, timeout=a.timeout)
        counts[out.status] = counts.get(out.status, 0) + 1
        if out.status in ("FAILURE", "REFUSED"):
            print(f"=== seed {sd} n={prog.n} {prog.dtype}: {out.status} [{out.mode}] {out.kind}: {out.message[:300]}")
            if out.status == "FAILURE":
                print(prog.source)
                print(str(out)[:1500])
        elif out.status == "INVALID":
            print(f"--- seed {sd}: INVALID {out.kind}: {out.message[:120]}")
        sys.stdout.flush()
    print("summary:", counts)


if __name__ == "__main__":
    main()
