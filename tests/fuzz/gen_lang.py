"""A second program generator: the Python *language* as people write it in numeric functions.

``gen.py`` grows programs from a typed expression/statement grammar. This one works
the other way round: it holds a library of *idioms*, each a few lines of ordinary
Python that someone would write (an alias and a write through it, a list grown in a
loop then stacked, a closure over an array, ``for ... else``, ``divmod``, a dict
updated in a loop, a helper that fills an array passed to it ...), with random
holes (constants, which names, which index), and composes a handful of them, some
wrapped in a loop, a branch, a ``while`` on a float condition or a helper
(module-level, nested, closure, lambda, default and keyword arguments, ``*args``).

Every program is ``f(x, a, B, n)`` (or a variant taking ``a`` and ``B`` in a dict,
a tuple or a list, or ``n`` by keyword), where ``x`` is a float, ``a`` a 1-D
array of length ``m`` (3-5), ``B`` a ``(p, q)`` array (2-4 each) and ``n`` an int
(2-4). Each idiom reads those, may make locals of its own (suffixed by its
number), and adds a float to the accumulator ``s``; ``f`` returns ``s``.

Programs are reproducible from ``(seed, without)``: ``generate(seed, without)`` returns a
``LangProgram``, and ``python -m tests.fuzz.gen_lang --n N --seed S`` checks programs
``S .. S+N-1`` with ``tests/fuzz/check.py`` (``--only i`` prints and checks program ``S+i``;
``--show`` only prints; ``--without a,b`` leaves idioms out, e.g. one whose failure is open;
``--reduce`` shrinks a failure with ``reduce.py``; ``FUZZ_FLOAT32=1`` also compares njit with
the Python mode on float32 arrays). A right program is called a second time in the same
process (``recall``: other arguments and ``n``, then module constants rebound), so a cache
that answers for the first call is caught. Which idioms a program uses is in ``prog.idioms``.
Adding an idiom changes which program a seed draws: quote failures by their source.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time

import numpy as np

# ----------------------------------------------------------------------------- the program object


@dataclasses.dataclass
class LangProgram:
    source: str
    seed: int
    m: int
    p: int
    q: int
    n: int
    signature: str          # "plain", "dict", "tuple", "list", "nested", "kw"
    idioms: list
    inplace: bool

    @property
    def argnums(self):
        return (0, 1) if self.signature in ("dict", "tuple", "list", "nested") else (0, 1, 2)

    def make_args(self):
        rng = np.random.RandomState(self.seed % (2 ** 32))
        x = float(rng.uniform(-1.0, 1.0))
        a = rng.uniform(-1.0, 1.0, size=self.m)
        B = rng.uniform(-1.0, 1.0, size=(self.p, self.q))
        if self.signature == "dict":
            return (x, {"a": a, "B": B}, self.n)
        if self.signature == "tuple":
            return (x, (a, B), self.n)
        if self.signature == "list":
            return (x, [a, B], self.n)
        if self.signature == "nested":
            return (x, {"lin": {"w": a, "extra": [B]}, "scale": 0.5}, self.n)
        return (x, a, B) if self.signature == "kw" else (x, a, B, self.n)

    def make_kwargs(self):
        return {"n": self.n} if self.signature == "kw" else {}

    def __repr__(self):
        return (f"LangProgram(seed={self.seed}, m={self.m}, p={self.p}, q={self.q}, n={self.n}, "
                f"signature={self.signature!r}, idioms={self.idioms})\n---- program ----\n{self.source}"
                f"-----------------")


# ----------------------------------------------------------------------------- the generator


class Ctx:
    """Where an idiom is being written: the int names it may index with (name, largest value), whether
    it is inside a loop (``break``/``continue`` allowed), a helper (names of f's parameters may be closed
    over or passed) and how deep the wrappers go."""

    def __init__(self, ints=(), loop=False, depth=0, can_return=True):
        self.ints = list(ints)
        self.loop = loop
        self.depth = depth
        self.can_return = can_return

    def inner(self, **kw):
        c = Ctx(self.ints, self.loop, self.depth + 1, self.can_return)
        for k, v in kw.items():
            setattr(c, k, v)
        return c


def ind(lines, k=1):
    return ["    " * k + ln if ln else ln for ln in lines]


class Gen:
    def __init__(self, seed, without=()):
        self.seed = seed
        self.without = frozenset(without)
        self.r = random.Random(seed)
        self.m = self.r.choice([3, 4, 5])
        self.p = self.r.choice([2, 3, 4])
        self.q = self.r.choice([2, 3, 4])
        self.n = self.r.choice([2, 3, 4])
        self.k = 0
        self.module = []          # module-level lines (globals, helpers)
        self.used = []
        self.inplace = False
        self.needs_math = False

    # ------------------------------------------------------------------ small pieces
    def fresh(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def c(self):
        return self.r.choice(["0.5", "0.3", "-0.7", "1.5", "0.25", "-1.2", "2.0", "0.1"])

    def ia(self):
        """An index into a."""
        return self.r.choice([str(self.r.randrange(self.m)), str(-self.r.randint(1, self.m))])

    def ib(self):
        return f"{self.r.randrange(self.p)}, {self.r.randrange(self.q)}"

    def iv(self, ctx, size):
        """An int expression valid as an index of an axis of length ``size``, maybe from a loop variable."""
        opts = [str(self.r.randrange(size))]
        for name, bound in ctx.ints:
            opts.append(name if bound < size else f"{name} % {size}")
        return self.r.choice(opts)

    def fe(self, ctx, simple=False):
        """A small smooth float expression of the inputs (and loop ints)."""
        i = self.iv(ctx, self.m)
        opts = [
            "x", f"a[{i}]", f"B[{self.ib()}]", "np.sum(a) * 0.3", "np.sin(x)", "np.mean(B)",
            f"x * a[{i}]", "np.dot(a, a) * 0.2", f"B[{self.iv(ctx, self.p)}].sum()",
            f"{self.c()} * x", "np.tanh(s)", "math.cos(x)", f"a[{i}] ** 2",
        ]
        e = self.r.choice(opts)
        if "math." in e:
            self.needs_math = True
        if simple or self.r.random() < 0.6:
            return e
        op = self.r.choice(["+", "-", "*"])
        return f"({e} {op} {self.fe(ctx, True)})"

    # ------------------------------------------------------------------ composition
    def idiom(self, ctx):
        """Lines of one idiom, perhaps wrapped."""
        if ctx.depth < 2 and self.r.random() < 0.45:
            w = self.r.choice([w for w in WRAPPERS if w.__name__[2:] not in self.without])
            self.used.append(w.__name__[2:])
            return w(self, ctx)
        leaves = LEAVES_LOOP + LEAVES if ctx.loop else LEAVES
        fn = self.r.choice([fn for fn in leaves if fn.__name__[2:] not in self.without])
        self.used.append(fn.__name__[2:])
        return fn(self, ctx)

    def program(self):
        sig = self.r.choice(["plain"] * 5 + ["dict", "tuple", "list", "kw", "nested"])
        body = []
        if sig == "dict":
            params = "x, params, n"
            body += self.r.choice([['a = params["a"]', 'B = params["B"]'],
                                   ['a, B = params["a"], params["B"]']])
        elif sig in ("tuple", "list"):
            params = "x, arrays, n"
            body += self.r.choice([["a, B = arrays"], ["a = arrays[0]", "B = arrays[1]"],
                                   ["(a, B) = arrays"], ["a, *rest = arrays", "B = rest[0]"]])
        elif sig == "nested":
            params = "x, params, n"
            body += self.r.choice([['a = params["lin"]["w"]', 'B = params["lin"]["extra"][0]',
                                    'x = x * params["scale"] * 2.0'],
                                   ['lin = params["lin"]', 'a, (B,) = lin["w"], lin["extra"]'],
                                   ['for key, val in params["lin"].items():', '    if key == "w":', '        a = val',
                                    '    else:', '        B = val[0]']])
        elif sig == "kw":
            params = "x, a, B, *, n=" + str(self.r.choice([2, 3]))
        else:
            params = "x, a, B, n"
        body.append(self.r.choice(["s = 0.0", "s = 0.0", "s = 0", "s = x * 0.5", "s = float(x)"]))
        for _ in range(self.r.randint(1, 3)):
            body += self.idiom(Ctx())
        body.append(self.r.choice(["return s", "return s", "return s * 1.0", "return float(s)",
                                   "return s + 0.0 * x", "return np.array(s)", "return np.float64(s)",
                                   "return np.sum(np.array([s]))", "return (s,)[0]", "return [s][-1]"]))
        head = ["import numpy as np"]
        if self.needs_math or any("math." in ln for ln in body + self.module):
            head.append("import math")
        src = "\n".join(head + [""] + self.module + ([""] if self.module else []) +
                        [f"def f({params}):"] + ind(body)) + "\n"
        return LangProgram(src, self.seed, self.m, self.p, self.q, self.n, sig, self.used, self.inplace)


# ============================================================================= idioms (leaves)
# each takes (g, ctx) and returns lines that leave a float in ``s``

def L_alias_copy_write(g, ctx):
    """y = c (one array, two names), write through one, read through the other."""
    g.inplace = True
    c, y = g.fresh("c"), g.fresh("y")
    src = g.r.choice(["a.copy()", "np.array(a)", "a * 1.0", "np.copy(a)", "a + 0.0"])
    w = g.r.choice([f"{y}[{g.ia()}] = {g.fe(ctx)}", f"{y}[{g.ia()}] += {g.fe(ctx)}",
                    f"{y} *= {g.c()}", f"{y} += x", f"{y}[1:] -= x", f"{y}[:] = {y} * x"])
    read = g.r.choice([f"np.sum({c} * a)", f"{c}[{g.ia()}]", f"np.dot({c}, {y})", f"np.sum({c} ** 2)"])
    return [f"{c} = {src}", f"{y} = {c}", w, f"s = s + {read}"]


def L_alias_chain(g, ctx):
    """z = y = c chains, and rebinding (not mutating) one of them."""
    c, y, z = g.fresh("c"), g.fresh("y"), g.fresh("z")
    lines = [f"{c} = {g.r.choice(['a * x', 'np.sin(a)', 'a + x', 'a.copy()'])}"]
    lines += g.r.choice([[f"{y} = {z} = {c}"], [f"{y} = {c}", f"{z} = {y}"]])
    if g.r.random() < 0.5:
        g.inplace = True
        lines.append(g.r.choice([f"{z}[0] = x * 2.0", f"{y} *= 0.5", f"{z} += {y}"]))
    lines.append(g.r.choice([f"{y} = {y} * 2.0", f"{z} = {z} + 1.0", f"{y} = {y} - x"]))
    lines.append(f"s = s + np.sum({c} * {y}) + np.sum({z})")
    return lines


def L_multi_target(g, ctx):
    """a = b = expr on floats, then rebinding one."""
    u, v = g.fresh("u"), g.fresh("v")
    return [f"{u} = {v} = {g.fe(ctx)}", f"{u} = {u} * {g.c()} + x", f"{v} += {u}", f"s = s + {u} * {v}"]


def L_view_write(g, ctx):
    """A view (slice, .T, reshape, [None]) then a write through the view or the base, then a read."""
    g.inplace = True
    c, v = g.fresh("c"), g.fresh("v")
    kind = g.r.choice(["slice", "T", "reshape", "none", "ravel"])
    if kind == "slice":
        lines = [f"{c} = a.copy()", f"{v} = {c}[1:3]"]
        w = g.r.choice([f"{v}[0] = x", f"{v} *= x", f"{c}[1] = x * 3.0", f"{v}[:] = {v} + x"])
    elif kind == "T":
        lines = [f"{c} = B.copy()", f"{v} = {c}.T"]
        w = g.r.choice([f"{v}[0, 1] = x", f"{v} *= x", f"{c}[1, 0] = x", f"{v}[0] += x"])
    elif kind == "reshape":
        lines = [f"{c} = B.copy()", f"{v} = {c}.reshape(-1)"]
        w = g.r.choice([f"{v}[0] = x", f"{v}[1] *= x", f"{c}[0, 0] += x"])
    elif kind == "ravel":
        lines = [f"{c} = B.copy()", f"{v} = {c}.ravel()"]
        w = g.r.choice([f"{v}[0] = x", f"{c}[0, 0] += x"])
    else:
        lines = [f"{c} = a.copy()", f"{v} = {c}[None]"]
        w = g.r.choice([f"{v}[0, 0] = x", f"{v} *= x", f"{c}[0] = x"])
    lines.append(w)
    lines.append(g.r.choice([f"s = s + np.sum({v} * {v})", f"s = s + np.sum({c} ** 2)",
                             f"s = s + np.sum({c}) + np.sum({v})"]))
    return lines


def L_copy_rebind_param(g, ctx):
    """a = a.copy() (a parameter rebound to its copy), then in-place writes."""
    g.inplace = True
    which = g.r.choice(["a", "B"])
    tmp = g.fresh("t")
    if which == "a":
        w = g.r.choice([f"{tmp}[{g.ia()}] = x", f"{tmp}[0] += x * {tmp}[1]", f"{tmp} *= x",
                        f"{tmp}[::2] = {tmp}[::2] * x"])
    else:
        w = g.r.choice([f"{tmp}[0, 0] = x", f"{tmp}[{g.ib()}] *= x", f"{tmp}[:, 0] += x", f"{tmp}[-1] = {tmp}[0] * x"])
    src = g.r.choice([f"{which}.copy()", f"np.array({which})", f"np.asarray({which}).copy()", f"{which} * 1.0"])
    return [f"{tmp} = {src}", w, f"s = s + np.sum({tmp} ** 2)"]


def L_asarray(g, ctx):
    """np.asarray / np.array / np.float64 of inputs and scalars (0-d arrays)."""
    z = g.fresh("z")
    return g.r.choice([
        [f"{z} = np.asarray(a)", f"s = s + np.sum({z} * x)"],
        [f"{z} = np.asarray(a, dtype=np.float64)", f"s = s + {z}[{g.ia()}]"],
        [f"{z} = np.array(x)", f"s = s + float({z} * {z})"],
        [f"{z} = np.float64(x)", f"s = s + {z} * a[{g.ia()}]"],
        [f"{z} = np.array([x, a[0], {g.fe(ctx)}])", f"s = s + np.sum({z} ** 2)"],
        [f"{z} = np.array([[x, 0.0], [a[1], x]])", f"s = s + np.sum({z} @ {z})"],
        [f"{z} = np.sum(a, keepdims=True)", f"s = s + {z}[0] * x"],
        [f"{z} = np.array(x)", f"s = s + {z}[()] * 2.0"],
        [f"{z} = a[1:2]", f"s = s + {z}[0] * x"],
        [f"{z} = np.atleast_1d(x)", f"s = s + np.sum({z} * a[:1])"],
    ])


def L_item(g, ctx):
    """a 1-element array to a Python float: .item(), float(), [0]."""
    z = g.fresh("z")
    return g.r.choice([
        [f"{z} = (a[:1] * x).item()", f"s = s + {z}"],
        [f"{z} = float(np.sum(a) * x)", f"s = s + {z}"],
        [f"{z} = np.sum(a * x, keepdims=True)", f"s = s + {z}.item()"],
        [f"{z} = (B[0] * x)[0]", f"s = s + {z}"],
        [f"s = s + float(a[{g.ia()}])"],
        [f"s = s + a[{g.ia()}].item() * x"],
    ])


def L_aug_elem(g, ctx):
    """Augmented assignment to elements, 2-D elements, slices, masks, with every operator."""
    g.inplace = True
    c = g.fresh("c")
    base = g.r.choice(["a", "B"])
    lines = [f"{c} = {base}.copy()"]
    opsym = g.r.choice(["+=", "-=", "*=", "/="])
    rhs = g.fe(ctx)
    if opsym == "/=":
        rhs = f"(2.0 + {rhs} ** 2)"
    if base == "a":
        tgt = g.r.choice([f"{c}[{g.iv(ctx, g.m)}]", f"{c}[1:3]", f"{c}[:2]",
                          f"{c}[-2:]", f"{c}[::2]", f"{c}[{c} > 0]", f"{c}[[0, 2]]", f"{c}[np.array([1, 0])]"])
    else:
        tgt = g.r.choice([f"{c}[{g.iv(ctx, g.p)}, {g.iv(ctx, g.q)}]", f"{c}[0]", f"{c}[:, 1]",
                          f"{c}[1:, :]", f"{c}[{c} < 0.2]", f"{c}[[0, 1], [1, 0]]", f"{c}[-1, ::-1]"])
    lines.append(f"{tgt} {opsym} {rhs}")
    lines.append(f"s = s + np.sum({c} * {base})")
    return lines


def L_aug_repeated(g, ctx):
    """c[idx] op= v with a repeated index: NumPy applies it ONCE per index (not np.add.at)."""
    g.inplace = True
    c = g.fresh("c")
    idx, k = g.r.choice([("[0, 1, 0]", 3), ("[2, 2]", 2), ("[0, 2, 0, 2]", 4), ("np.array([1, 1, 0])", 3),
                         ("[-1, 2, -1]", 3)])
    op = g.r.choice(["+=", "-=", "*=", "="])
    rhs = g.r.choice(["x", f"a[:{k}] * x", f"np.sin(a[-{k}:])", f"{g.c()} * x", f"B.ravel()[:{k}]"])
    return [f"{c} = a.copy()", f"{c}[{idx}] {op} {rhs}", f"s = s + np.sum({c} * a)"]


def L_aug_scalar(g, ctx):
    """Augmented assignment on floats: -=, *=, /=, **=, //=, %=."""
    t = g.fresh("t")
    lines = [f"{t} = {g.fe(ctx)}"]
    for _ in range(g.r.randint(1, 3)):
        lines.append(g.r.choice([f"{t} += x", f"{t} -= a[{g.ia()}]", f"{t} *= {g.c()}", f"{t} /= (1.5 + x * x)",
                                 f"{t} **= 2", f"{t} *= {t}", f"{t} -= 0.5 * {t}"]))
    lines.append(f"s += {t}")
    return lines


def L_builtins(g, ctx):
    """abs, min, max (2 args, iterables), sum, len, pow, divmod, round, int, float."""
    t = g.fresh("t")
    e1, e2 = g.fe(ctx), g.fe(ctx)
    return [g.r.choice([
        f"{t} = abs({e1}) + min({e1}, {e2})",
        f"{t} = max({e1}, {e2}, 0.1)",
        f"{t} = max(a) - min(a)",
        f"{t} = sum(a) * x",
        f"{t} = sum(B[0]) + sum([x, {e1}])",
        f"{t} = len(a) * x + len(B) * {e1}",
        f"{t} = pow({e1}, 2) + pow(1.5 + x * x, 0.5)",
        f"{t} = divmod(x + 3.0, 1.0)[1] * {e1}",
        f"{t} = (x + 3.0) % 1.0 + (x + 3.0) // 1.0",
        f"{t} = round(x, 1) + x",
        f"{t} = int(n) * x + float(n) * {e1}",
        f"{t} = max(abs(v) for v in a)",
        f"{t} = sum(v * v for v in a)",
        f"{t} = min([a[0], a[1], x])",
        f"{t} = max(B[0])",
        f"{t} = sum(sum(row) for row in B)",
        f"{t} = abs(x) ** 1.5",
    ]), f"s = s + {t}"]


def L_math(g, ctx):
    """math. functions on float scalars."""
    g.needs_math = True
    t = g.fresh("t")
    e = g.fe(ctx)
    return [g.r.choice([
        f"{t} = math.sin({e}) + math.exp(0.3 * x)",
        f"{t} = math.sqrt(1.0 + {e} ** 2)",
        f"{t} = math.log(2.0 + math.tanh({e}))",
        f"{t} = math.fabs({e}) + math.hypot(x, a[0])",
        f"{t} = math.pi * x + math.e * {e}",
        f"{t} = math.atan2({e}, 2.0) + math.cosh(x * 0.5)",
        f"{t} = math.pow(1.5 + x * x, 0.7) + math.log1p(x * x)",
        f"{t} = math.erf(x) + math.expm1(0.5 * {e})",
        f"{t} = math.degrees(x) * 0.01 + math.radians({e})",
    ]), f"s = s + {t}"]


def L_list_grow(g, ctx):
    """A Python list grown in a loop, then np.array / np.stack / sum / indexing of it."""
    L = g.fresh("L")
    v = g.fresh("v")
    it = g.r.choice([(f"{v} in a", f"{v} * x"), (f"{v} in B", f"{v} * x"),
                     (f"{v} in range(n)", f"a[{v} % {g.m}] * x"), (f"{v} in range(3)", f"np.sin(x + {v})")])
    loop, item = it
    use = g.r.choice([f"np.sum(np.array({L}))", f"np.sum(np.stack({L}))", f"sum({L})" if "B" not in loop else
                      f"np.sum(sum({L}))", f"{L}[-1] * {L}[0]" if "B" not in loop else f"np.sum({L}[-1] * {L}[0])",
                      f"np.sum(np.asarray({L}) ** 2)", f"len({L}) * np.sum({L}[0])"])
    if g.r.random() < 0.3:
        return [f"{L} = [{item} for {loop}]", f"s = s + {use}"]
    return [f"{L} = []", f"for {loop}:", f"    {L}.append({item})", f"s = s + {use}"]


def L_unpack(g, ctx):
    """Star unpacking and nested unpacking."""
    u, w, r = g.fresh("u"), g.fresh("w"), g.fresh("r")
    return g.r.choice([
        [f"{u}, *{r} = a", f"s = s + {u} * x + sum({r})"],
        [f"*{r}, {u} = a", f"s = s + {u} + np.sum(np.array({r})) * x"],
        [f"({u}, {w}), {r} = (x, a[0]), a[1]", f"s = s + {u} * {w} + {r}"],
        [f"{u}, {w} = B[0], B[1]", f"s = s + np.dot({u}, {w}) * x"],
        [f"{u}, ({w}, {r}) = a[0], (a[1] * x, a[2])", f"s = s + {u} + {w} * {r}"],
        [f"{u}, {w}, *{r} = a", f"s = s + {u} * {w} + len({r}) * x"],
        [f"[{u}, {w}] = [x * 2.0, a[1]]", f"s = s + {u} - {w}"],
        [f"{u} = (x, a)", f"{w}, {r} = {u}", f"s = s + {w} * np.sum({r})"],
    ])


def L_dict(g, ctx):
    """A dict built in the body, updated in a loop, read by key."""
    d = g.fresh("d")
    i = g.fresh("i")
    return g.r.choice([
        [f'{d} = {{"w": a * x, "b": x}}', f'{d}["b"] = {d}["b"] + 1.0', f'{d}["w"] = {d}["w"] * {d}["b"]',
         f's = s + np.sum({d}["w"])'],
        [f'{d} = {{"acc": 0.0, "v": a.copy()}}', f"for {i} in range(n):",
         f'    {d}["acc"] += {d}["v"][{i} % {g.m}] * x', f'    {d}["v"] = {d}["v"] * 0.9',
         f's = s + {d}["acc"] + np.sum({d}["v"])'],
        [f"{d} = {{}}", f"for {i}, v in enumerate(a):", f"    {d}[{i}] = v * x",
         f"s = s + sum({d}.values()) + {d}[0]"],
        [f'{d} = dict(u=x, w=a[0])', f'{d}.update(u={d}["u"] * 2.0)', f's = s + {d}["u"] * {d}["w"]'],
        [f'{d} = {{"k": x}}', f'for key in ("k",):', f'    {d}[key] = {d}[key] ** 2 + a[1]', f's = s + {d}["k"]'],
    ])


def L_tuple_container(g, ctx):
    """Tuples and lists of arrays inside the body, indexed and looped over."""
    T = g.fresh("T")
    v = g.fresh("v")
    return g.r.choice([
        [f"{T} = (a, a * x, np.sin(a))", f"for {v} in {T}:", f"    s = s + np.sum({v}) * 0.5"],
        [f"{T} = [x, a[0], B[0, 0]]", f"s = s + sum({T}) * {T}[0]"],
        [f"{T} = (a * x, B * x)", f"s = s + np.sum({T}[0]) + np.sum({T}[-1] ** 2)"],
        [f"{T} = [a]", f"{T}.append(a * x)", f"s = s + np.sum({T}[1] * {T}[0])"],
        [f"{T} = [a, a * 2.0]", f"{T}[0] = {T}[0] * x", f"s = s + np.sum({T}[0] + {T}[1])"],
        [f"{T} = (x,) * 3", f"s = s + sum({T})"],
        [f"{T} = [x] * 2 + [a[0]]", f"s = s + {T}[0] * {T}[2]"],
    ])


def L_for_rows(g, ctx):
    """for over arrays, enumerate, zip, reversed, range with steps, loop variables used after the loop."""
    v, i, w = g.fresh("v"), g.fresh("i"), g.fresh("w")
    return g.r.choice([
        [f"for {v} in B:", f"    s = s + np.dot({v}, {v}) * x"],
        [f"for {i}, {v} in enumerate(a):", f"    s = s + {v} * {i} * x"],
        [f"for {v}, {w} in zip(a, a[1:]):", f"    s = s + {v} * {w}"],
        [f"for {v} in reversed(a):", f"    s = s * 0.5 + {v}"],
        [f"for {i} in range({g.m - 1}, -1, -1):", f"    s = s + a[{i}] * x * {i}"],
        [f"for {i} in range(0, {g.m}, 2):", f"    s = s + a[{i}]"],
        [f"for {i} in range(1, n):", f"    s = s + a[{i} % {g.m}] * x", f"s = s + {i} * x"],
        [f"for {v} in a:", f"    pass", f"s = s + {v} * x"],
        [f"for {i} in range(n, 0, -1):", f"    s = s + np.sin(x * {i})"],
        [f"for {i}, ({v}, {w}) in enumerate(zip(a, reversed(a))):", f"    s = s + {v} * {w} + {i} * x"],
        [f"for {v} in B.T:", f"    s = s + np.sum({v}) * x"],
        [f"for {i} in range(len(a) - 1):", f"    s = s + (a[{i} + 1] - a[{i}]) ** 2"],
        [f"for {v} in [x, a[0], a[1]]:", f"    s = s + {v} ** 2"],
        [f"for {v} in (a, B[0]):", f"    s = s + np.sum({v}) * x"],
        [f"for {i} in reversed(range(n)):", f"    s = s * 0.9 + a[{i} % {g.m}]"],
    ])


def L_nested_loops(g, ctx):
    """Nested loops with break/continue and a shared accumulator."""
    i, j, acc = g.fresh("i"), g.fresh("j"), g.fresh("acc")
    inner = g.r.choice([
        [f"if {j} > {i}:", "    break"],
        [f"if ({i} + {j}) % 2 == 0:", "    continue"],
        [f"if a[{j}] > 0.5:", "    break"],
        [f"if B[{i} % {g.p}, {j} % {g.q}] < -0.3:", "    continue"],
        [],
    ])
    return [f"{acc} = 0.0", f"for {i} in range({g.p}):", f"    for {j} in range({g.m}):"] + \
        ind(inner, 2) + [f"        {acc} += a[{j}] * B[{i}, {j} % {g.q}] * x",
                         f"    {acc} *= 0.8", f"s = s + {acc}"]


def L_for_else(g, ctx):
    """for ... else and while ... else."""
    i, k = g.fresh("i"), g.fresh("k")
    return g.r.choice([
        [f"for {i} in range({g.m}):", f"    if a[{i}] > {g.r.choice(['0.5', '0.0', '2.0'])}:",
         f"        s = s + a[{i}] * x", "        break", "else:", "    s = s - x * 2.0"],
        [f"{k} = 0", f"while {k} < n:", f"    s = s + a[{k} % {g.m}] * x",
         f"    if s > {g.r.choice(['0.5', '5.0', '-5.0'])}:", "        break", f"    {k} += 1", "else:",
         "    s = s * 0.5"],
        [f"for {i} in range(n):", f"    s = s + x * {i}", "else:", f"    s = s + {i} * a[0]"],
    ])


def L_while_float(g, ctx):
    """A while loop whose condition depends on float values (with a guard counter)."""
    t, k = g.fresh("t"), g.fresh("k")
    cond = g.r.choice([f"{t} < 2.0 and {k} < 6", f"abs({t}) < 1.5 and {k} < 5", f"{k} < 5 and not {t} > 3.0",
                       f"{t} ** 2 < 4.0 and {k} < n + 2"])
    return [f"{t} = {g.fe(ctx)}", f"{k} = 0", f"while {cond}:",
            f"    {t} = {t} + 0.4 + 0.2 * np.tanh({t} * x)", f"    {k} += 1", f"s = s + {t} * x + {k}"]


def L_ifs(g, ctx):
    """if on reductions, len, ints, chained comparisons, and/or/not, ternaries, truthiness."""
    e = g.fe(ctx)
    cond = g.r.choice(["np.sum(a) > 0", "len(a) > 3", "n > 2", "-0.5 < x < 0.5", "a[0] < a[1] <= a[2]",
                       "x > 0 and a[0] > 0", "x > 0 or a[1] < 0", "not (np.sum(B) > 0)", "np.max(a) > 0.5",
                       "np.all(a > -0.9)", "np.any(B > 0.8)", "len(B) == 2", "a.shape[0] > 3",
                       "B.shape == (2, 2)", "isinstance(x, float)", "x", "n % 2 == 0", "np.argmax(a) == 0"])
    return g.r.choice([
        [f"if {cond}:", f"    s = s + {e}", "else:", f"    s = s - {g.fe(ctx)}"],
        [f"s = s + ({e} if {cond} else {g.fe(ctx)})"],
        [f"if {cond}:", f"    s = s * x", f"elif x < 0.3:", f"    s = s + x", "else:", "    pass"],
    ])


def L_andor_values(g, ctx):
    """and/or returning their operands (not bools), and bool arithmetic."""
    t = g.fresh("t")
    return g.r.choice([
        [f"{t} = x or 1.0", f"s = s + {t} * 2.0"],
        [f"{t} = (x > 0) and x", f"s = s + {t} * 1.0"],
        [f"{t} = s and a[0]", f"s = s + {t}"],
        [f"{t} = (x > 0) * x + (x <= 0) * x * 0.5", f"s = s + {t}"],
        [f"{t} = 0.0 or x * a[1]", f"s = s + {t}"],
        [f"{t} = n and x", f"s = s + {t}"],
        [f"{t} = True + x", f"s = s + {t}"],
    ])


def L_globals(g, ctx):
    """Module-level constants, arrays, tuples and helper functions."""
    name = g.fresh("SCALE")
    kind = g.r.choice(["const", "array", "tuple", "helper", "dict", "mutable"])
    if kind == "const":
        g.module.append(f"{name} = {g.c()}")
        return [f"s = s + {name} * {g.fe(ctx)}"]
    if kind == "array":
        g.module.append(f"{name} = np.linspace(-1.0, 1.0, {g.m})")
        return [f"s = s + np.dot({name}, a) * x"]
    if kind == "tuple":
        g.module.append(f"{name} = (0.1, 0.2, 0.3)")
        return [f"for c_ in {name}:", f"    s = s + c_ * x"]
    if kind == "dict":
        g.module.append(f'{name} = {{"w": 0.5, "b": -0.25}}')
        return [f's = s + {name}["w"] * x + {name}["b"]']
    if kind == "mutable":
        g.module.append(f"{name} = [0.5, 1.5]")
        return [f"s = s + {name}[0] * x + {name}[-1] * np.sum(a)"]
    h = g.fresh("norm2_")
    g.module += [f"def {h}(v):", "    return np.sum(v * v)", ""]
    return [f"s = s + {h}(a * x) + {h}(B)"]


def L_recursion(g, ctx):
    """A recursive helper of fixed depth (module-level or nested)."""
    h = g.fresh("rec")
    depth = g.r.choice(["3", "2", "n"])
    body = g.r.choice([[f"def {h}(v, d):", "    if d == 0:", "        return v",
                        f"    return {h}(np.sin(v) + 0.5 * v, d - 1)"],
                       [f"def {h}(v, d):", f"    return v if d <= 0 else {h}(v * 0.9 + 0.1 * v * v, d - 1)"]])
    if g.r.random() < 0.5:
        g.module += body + [""]
        return [f"s = s + {h}(x, {depth})" if g.r.random() < 0.5 else f"s = s + np.sum({h}(a, {depth}))"]
    return body + [f"s = s + {h}(x, {depth})"]


def L_mutating_helper(g, ctx):
    """A helper that mutates an array passed to it (and returns nothing or it)."""
    g.inplace = True
    h, c = g.fresh("fill"), g.fresh("c")
    body = g.r.choice([
        [f"def {h}(out, v):", "    out[0] = v", "    out[1] += v * 2.0"],
        [f"def {h}(out, v):", "    for i in range(len(out)):", "        out[i] = out[i] * v", "    return out"],
        [f"def {h}(out, v):", "    out *= v"],
        [f"def {h}(out, v):", "    out[:] = np.sin(out) + v"],
    ])
    where = g.r.random() < 0.5
    if where:
        g.module += body + [""]
        lines = []
    else:
        lines = body
    return lines + [f"{c} = {g.r.choice(['a.copy()', 'np.zeros(' + str(g.m) + ')', 'np.ones_like(a)'])}",
                    f"{h}({c}, x)", f"s = s + np.sum({c} * a)"]


LEAVES = [L_alias_copy_write, L_alias_chain, L_multi_target, L_view_write, L_copy_rebind_param, L_asarray,
          L_item, L_aug_elem, L_aug_repeated, L_aug_scalar, L_builtins, L_math, L_list_grow, L_unpack, L_dict,
          L_tuple_container, L_for_rows, L_nested_loops, L_for_else, L_while_float, L_ifs, L_andor_values,
          L_globals, L_recursion, L_mutating_helper]


def L_late_binding(g, ctx):
    """Closures see a name's value when they RUN (late binding); default arguments when they are DEFINED."""
    h, k, t = g.fresh("h"), g.fresh("k"), g.fresh("t")
    return g.r.choice([
        [f"{t} = x", f"def {h}(v):", f"    return v * {t}", f"{t} = {t} + 1.0", f"s = s + {h}(a[0])"],
        [f"{t} = x", f"def {h}(v, w={t}):", f"    return v * w", f"{t} = {t} * 3.0", f"s = s + {h}(a[1]) + {t}"],
        [f"fs{k} = [lambda v: v * {k} for {k} in range(3)]", f"s = s + sum(fn(x) for fn in fs{k})"],
        [f"fs{k} = [lambda v, {k}={k}: v * {k} for {k} in range(3)]", f"s = s + sum(fn(x) for fn in fs{k})"],
        [f"{t} = a * x", f"{h} = lambda: np.sum({t} ** 2)", f"{t} = {t} + 1.0", f"s = s + {h}()"],
        [f"{t} = 0.5", f"def {h}(v):", f"    return v + {t}", f"for {k} in range(2):", f"    {t} = {t} + x",
         f"    s = s + {h}(a[{k}])"],
    ])


def L_param_rebind(g, ctx):
    """Rebinding the differentiated parameters themselves (gradient-descent style), in a loop."""
    k = g.fresh("k")
    return g.r.choice([
        [f"x0_{k} = x", f"for {k} in range(n):", f"    x = x - 0.1 * np.sin(x)", f"s = s + x * x0_{k}"],
        [f"a_{k} = a", f"for {k} in range(2):", f"    a = a - 0.1 * a * x", f"s = s + np.sum(a * a_{k})",
         f"a = a_{k}"],
        [f"B_{k} = B", f"B = B * x", f"s = s + np.sum(B)", f"B = B_{k}"],
        [f"x_{k} = x", f"x *= 2.0", f"s = s + x + x_{k}", f"x = x_{k}"],
    ])


def L_recurrence(g, ctx):
    """An array filled in a loop from its own earlier entries (c[i] from c[i-1])."""
    g.inplace = True
    c, i = g.fresh("c"), g.fresh("i")
    return g.r.choice([
        [f"{c} = np.zeros({g.m})", f"{c}[0] = x", f"for {i} in range(1, {g.m}):",
         f"    {c}[{i}] = {c}[{i} - 1] * 0.5 + a[{i}] * x", f"s = s + np.sum({c} ** 2)"],
        [f"{c} = a.copy()", f"for {i} in range(1, len({c})):", f"    {c}[{i}] += {c}[{i} - 1] * x",
         f"s = s + {c}[-1]"],
        [f"{c} = np.zeros(({g.p}, {g.q}))", f"for {i} in range({g.p}):",
         f"    {c}[{i}, :] = B[{i}] * x + ({c}[{i} - 1] if {i} > 0 else 0.0)", f"s = s + np.sum({c} * B)"],
        [f"{c} = np.empty({g.m})", f"for {i}, v in enumerate(a):", f"    {c}[{i}] = v * v * x",
         f"s = s + np.sum({c})"],
        [f"{c} = np.zeros_like(B)", f"for {i} in range(B.shape[1]):", f"    {c}[:, {i}] += B[:, {i}] * x",
         f"s = s + np.sum({c} * B)"],
        [f"{c} = [0.0] * {g.m}", f"for {i} in range({g.m}):", f"    {c}[{i}] = a[{i}] * x + ({c}[{i} - 1] if {i} else 0.0)",
         f"s = s + sum({c})"],
    ])


def L_funcs_as_values(g, ctx):
    """Functions in lists/dicts, chosen by loop or key."""
    k = g.fresh("k")
    return g.r.choice([
        [f"for op in (np.sin, np.cos, np.tanh):", f"    s = s + op(x) * 0.5"],
        [f'ops{k} = {{"sin": np.sin, "sq": lambda v: v * v}}', f's = s + np.sum(ops{k}["sin"](a)) + ops{k}["sq"](x)'],
        [f"ops{k} = [np.exp, np.sin]", f"s = s + ops{k}[{g.r.randrange(2)}](x * 0.5)"],
        [f"act{k} = np.tanh if n > 2 else np.sin", f"s = s + np.sum(act{k}(a * x))"],
    ])


def L_sorted(g, ctx):
    """sorted / sort / list reversal of differentiated values."""
    t = g.fresh("t")
    return g.r.choice([
        [f"{t} = sorted(a)", f"s = s + {t}[0] * x + {t}[-1]"],
        [f"{t} = sorted([x, a[0], a[1]], key=abs)", f"s = s + {t}[0] * 2.0 + {t}[1]"],
        [f"{t} = np.sort(a)", f"s = s + {t}[-1] * x"],
        [f"{t} = list(a)", f"{t}.reverse()", f"s = s + {t}[0] * x"],
        [f"{t} = list(a)[::-1]", f"s = s + {t}[0] * x + {t}[1]"],
    ])


def L_slice_obj(g, ctx):
    t = g.fresh("sl")
    return g.r.choice([
        [f"{t} = slice(1, 3)", f"s = s + np.sum(a[{t}]) * x"],
        [f"{t} = slice(None, None, -1)", f"s = s + np.sum(a[{t}] * a) * x"],
        [f"{t} = (slice(0, 2), 1)", f"s = s + np.sum(B[{t}]) * x"],
        [f"{t} = Ellipsis", f"s = s + np.sum(B[{t}, 0]) * x"],
    ])


def L_list_ops(g, ctx):
    """Lists as people mutate them: pop, extend, insert, element +=, del, list of arrays summed."""
    L = g.fresh("L")
    return g.r.choice([
        [f"{L} = [x, a[0], a[1]]", f"last{L} = {L}.pop()", f"s = s + last{L} * {L}[0]"],
        [f"{L} = [x]", f"{L}.extend([a[0] * x, a[1]])", f"s = s + sum({L})"],
        [f"{L} = [a[0], a[1]]", f"{L}.insert(0, x)", f"s = s + {L}[0] * {L}[1]"],
        [f"{L} = [x, a[0]]", f"{L}[0] += a[1]", f"{L}[-1] *= x", f"s = s + {L}[0] + {L}[1]"],
        [f"{L} = [x, a[0], a[1]]", f"del {L}[0]", f"s = s + {L}[0] * x"],
        [f"{L} = [a * x, a * a]", f"s = s + np.sum(sum({L}))"],
        [f"{L} = [v * x for v in a if v > 0]", f"s = s + sum({L})"],
        [f"{L} = [v for v in a]", f"s = s + {L}[-1] * x + len({L})"],
        [f"{L} = {{i: v * x for i, v in enumerate(a)}}", f"s = s + {L}[1] + sum({L}.values())"],
        [f"{L} = [[x, a[0]], [a[1], x * x]]", f"s = s + np.sum(np.array({L}) @ a[:2])"],
    ])


def L_while_true(g, ctx):
    k = g.fresh("k")
    return g.r.choice([
        [f"{k} = 0", "while True:", f"    s = s + a[{k} % {g.m}] * x", f"    {k} += 1", f"    if {k} >= n:",
         "        break"],
        [f"{k} = 0", f"while {k} < {g.m}:", f"    {k} += 1", f"    if a[{k} - 1] < 0:", "        continue",
         f"    s = s + a[{k} - 1] * x"],
    ])


def L_enum_zip(g, ctx):
    i, v, w = g.fresh("i"), g.fresh("v"), g.fresh("w")
    return g.r.choice([
        [f"for {i}, {v} in enumerate(a, 1):", f"    s = s + {v} * {i} * x"],
        [f"for {i}, {v} in enumerate(a, start=2):", f"    s = s + {v} / {i}"],
        [f"for {v}, {w}, {i} in zip(a, B[0], range(3)):", f"    s = s + {v} * {w} * {i} + x"],
        [f"for {i} in range(len(B)):", f"    for {v} in range(B.shape[1]):", f"        s = s + B[{i}, {v}] * x"],
        [f"for {i}, ({v}, {w}) in enumerate(zip(B[0], B[-1])):", f"    s = s + {v} * {w} * x"],
        [f"for {v} in zip(*B):", f"    s = s + sum({v}) * x"],
    ])


def L_int_arith(g, ctx):
    """Int arguments in index arithmetic and as floats."""
    return g.r.choice([
        [f"s = s + a[n // 2] * x + a[-n + 1] + a[n - 2]"],
        [f"s = s + x * n + a[(n * 3) % {g.m}]"],
        [f"s = s + np.sum(a[:n]) * x"],
        [f"s = s + np.sum(B[: n - 1, ::2]) * x"],
        [f"s = s + x ** n"],
        [f"s = s + x / n + a[0] * (n > 2)"],
    ])


def L_closure_write(g, ctx):
    """A nested function writing into an array of the enclosing scope, or rebinding with nonlocal."""
    g.inplace = True
    h, c, t = g.fresh("h"), g.fresh("c"), g.fresh("t")
    return g.r.choice([
        [f"{c} = np.zeros({g.m})", f"def {h}(i, v):", f"    {c}[i] = v", f"for i_{h} in range({g.m}):",
         f"    {h}(i_{h}, a[i_{h}] * x)", f"s = s + np.sum({c} ** 2)"],
        [f"{t} = 0.0", f"def {h}(v):", f"    nonlocal {t}", f"    {t} = {t} + v", f"{h}(x)", f"{h}(a[0] * x)",
         f"s = s + {t}"],
    ])


def L_star_call(g, ctx):
    h = g.fresh("h")
    return g.r.choice([
        [f"def {h}(u, v, w=1.0):", "    return u * v + w", f"pair{h} = (x, a[0])", f"s = s + {h}(*pair{h})"],
        [f"def {h}(u, v, w=1.0):", "    return u * v + w", f'kw{h} = {{"v": a[1], "w": x}}', f"s = s + {h}(x, **kw{h})"],
        [f"def {h}(*vs):", "    return sum(v * v for v in vs)", f"s = s + {h}(x, a[0], a[1])"],
        [f"def {h}(u, **kw):", "    return u * kw['scale'] + kw.get('shift', 0.0)", f"s = s + {h}(x, scale=a[0])"],
    ])


LEAVES += [L_late_binding, L_param_rebind, L_recurrence, L_funcs_as_values, L_sorted, L_slice_obj, L_list_ops,
           L_while_true, L_enum_zip, L_int_arith, L_closure_write, L_star_call]


def L_comprehension(g, ctx):
    """Comprehensions and generator expressions: nested, filtered, shadowing an outer name, over zip/rows."""
    L, v = g.fresh("L"), g.fresh("v")
    return g.r.choice([
        [f"{v} = x", f"{L} = [{v} * 2.0 for {v} in a]", f"s = s + sum({L}) + {v} * 3.0"],
        [f"{L} = [[u * w for w in a[:2]] for u in a[:3]]", f"s = s + np.sum(np.array({L})) * x"],
        [f"{L} = [np.sum(row * x) for row in B]", f"s = s + sum({L})"],
        [f"{L} = [u * w for u, w in zip(a, B[0])]", f"s = s + sum({L}) * x"],
        [f"{L} = [u * x for u in a[:3] if u > -2.0]", f"s = s + {L}[0] + {L}[-1]"],
        [f"s = s + sum(u * x for u in B[-1])"],
        [f"s = s + sum(np.sin(u) * w for u, w in zip(a, a[::-1]))"],
        [f"{L} = {{k: u * x for k, u in zip('abc', a)}}", f"s = s + {L}['b'] + {L}['c'] * 2.0"],
        [f"{L} = [a[k] * x for k in range(2)]", f"s = s + sum({L})"],
        [f"{L} = np.array([u ** 2 for u in a]) * x", f"s = s + np.sum({L})"],
        [f"{L} = [x * k for k in range(n)]", f"s = s + sum({L})"],
        [f"{L} = [(u, u * x) for u in a[:2]]", f"s = s + sum(p * q for p, q in {L})"],
    ])


def L_container_alias(g, ctx):
    """Two names for one list or dict, mutated through one, read through the other; arrays held in containers."""
    g.inplace = True
    L, M = g.fresh("L"), g.fresh("M")
    return g.r.choice([
        [f"{L} = {M} = []", f"{L}.append(x * a[0])", f"{M}.append(a[1])", f"s = s + sum({M}) * x + len({L})"],
        [f"{L} = {{}}", f"{M} = {L}", f'{M}["k"] = x * 2.0', f's = s + {L}["k"] * a[0]'],
        [f"{L} = a.copy()", f"{M} = [{L}]", f"{L}[0] = x", f"s = s + {M}[0][0] * a[1] + np.sum({M}[0])"],
        [f"{L} = a.copy()", f'{M} = {{"c": {L}}}', f"{L} *= x", f's = s + np.sum({M}["c"])'],
        [f"{L} = [x]", f"{M} = {L}", f"{L} += [a[0]]", f"s = s + sum({M}) * x"],
        [f"{L} = [a.copy(), a * 2.0]", f"{L}[0][1] = x", f"s = s + np.sum({L}[0] * {L}[1])"],
        [f"{L} = [x, a[0]]", f"{M} = list({L})", f"{M}[0] = 5.0", f"s = s + {L}[0] * {M}[1]"],
        [f"{L} = {{'v': x}}", f"{M} = dict({L})", f"{M}['v'] = 1.0", f"s = s + {L}['v'] * a[0] + {M}['v']"],
    ])


def L_scope(g, ctx):
    """Names shadowed in helpers: a helper's local with an outer name, a parameter named like f's."""
    h, t = g.fresh("h"), g.fresh("t")
    return g.r.choice([
        [f"{t} = x", f"def {h}(v):", f"    {t} = v * 2.0", f"    return {t}", f"s = s + {t} * {h}(a[0]) + {t}"],
        [f"def {h}(x):", "    x = x * 2.0", "    return x", f"s = s + {h}(a[0]) + {h}(x) + x"],
        [f"def {h}(v, w=None):", "    if w is None:", "        w = 0.5", "    return v * w",
         f"s = s + {h}(x) + {h}(a[0], w=x)"],
        [f"def {h}(v):", "    return v * 2.0", f"s = s + {h}(x) + np.sum({h}(a))"],
        [f"def {h}(v):", "    for k in range(3):", "        if v > 0.5:", "            return v * k",
         "        v = v + 0.3", "    return v", f"s = s + {h}(x) + {h}(a[0])"],
        [f"def {h}(a):", "    a = a[::-1]", "    return a[0]", f"s = s + {h}(a) * x + a[0]"],
    ])


def L_index_arrays(g, ctx):
    """Indices computed from values (argsort, argmax, combined masks), shapes unpacked into loop bounds."""
    t = g.fresh("t")
    return g.r.choice([
        [f"{t} = np.argsort(a)", f"s = s + np.sum(a[{t}] * np.arange({g.m})) * x"],
        [f"s = s + a[np.argmax(a)] * x + B[np.argmin(B[:, 0]), 0]"],
        [f"{t} = a[(a > 0) & (a < 0.5)]", f"s = s + np.sum({t}) * x + np.sum(a[~(a > 0)] ** 2)"],
        [f"{t} = np.where(a > 0)[0]", f"s = s + np.sum(a[{t}]) * x"],
        [f"p_{t}, q_{t} = B.shape", f"for i_{t} in range(p_{t}):", f"    for j_{t} in range(q_{t}):",
         f"        s = s + B[i_{t}, j_{t}] * x * (i_{t} + j_{t})"],
        [f"(m_{t},) = a.shape", f"s = s + a[m_{t} - 1] * x + B.size * 0.1 + B.ndim * x"],
        [f"{t} = np.arange({g.m})[::-1]", f"s = s + np.sum(a[{t}] * a) * x"],
        [f"{t} = [i for i in range({g.m}) if i % 2 == 0]", f"s = s + np.sum(a[{t}]) * x"],
    ])


def L_py_numbers(g, ctx):
    """Python number semantics: sum with a start, % and // of negatives, int() truncation, round."""
    return g.r.choice([
        ["s = s + sum(a, x) + sum([a[0], a[1]], 2.0 * x)"],
        ["s = s + (x - 1.0) % 1.0 * a[0] + (x - 1.0) // 0.3"],
        [f"s = s + sum(a[(i - 3) % {g.m}] * ((i - 3) // 2) * x for i in range(3))"],
        ["s = s + int(-1.5 + 0.0 * x) * x + int(x * 4) * a[1]"],
        ["s = s + round(x * 10) * a[0] + round(2.5) * x"],
        ["s = s + (-x) ** 3 + x ** -2.0 * 0.01 + (-2) ** n * x"],
        ["s = s + 7 // -2 * x + (-7) % 3 * a[0]"],
        ["s = s + float('0.5') * x + complex(x, 0.0).real"],
    ])


LEAVES += [L_comprehension, L_container_alias, L_scope, L_index_arrays, L_py_numbers]


def L_overlap(g, ctx):
    """Writes whose right side reads the array being written (overlapping slices, row swaps): NumPy's answer
    is as if the right side were copied first, except the tuple-swap of rows (views), which NumPy gets 'wrong'."""
    g.inplace = True
    c = g.fresh("c")
    return g.r.choice([
        [f"{c} = a * x", f"{c}[1:] = {c}[:-1]", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c}[:-1] = {c}[1:]", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c}[1:] += {c}[:-1]", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c}[:] = {c}[::-1]", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c} += {c}", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c}[0], {c}[1] = {c}[1], {c}[0]", f"s = s + np.sum({c} * a)"],
        [f"{c} = B * x", f"{c}[0], {c}[1] = {c}[1], {c}[0]", f"s = s + np.sum({c} * B)"],
        [f"{c} = B * x", f"{c}[[0, 1]] = {c}[[1, 0]]", f"s = s + np.sum({c} * B)"],
        [f"{c} = a * x", f"{c}[[0, 2]] = {c}[[2, 0]] * 2.0", f"s = s + np.sum({c} * a)"],
        [f"{c} = a * x", f"{c}[{c} > 0] = {c}[::-1][{c} > 0]", f"s = s + np.sum({c} * a)"],
        [f"{c} = B[:, :1] * x", f"{c} -= {c}.T[:, :1] * 0.5", f"s = s + np.sum({c})"],
    ])


def L_search(g, ctx):
    """Best-so-far searches: inf starts, comparisons in a loop, the winner used afterwards."""
    best, bi, v, i = g.fresh("best"), g.fresh("bi"), g.fresh("v"), g.fresh("i")
    return g.r.choice([
        [f"{best} = math.inf", f"for {v} in a:", f"    if {v} < {best}:", f"        {best} = {v}",
         f"s = s + {best} * x"],
        [f"{best} = -np.inf", f"{bi} = -1", f"for {i}, {v} in enumerate(a):", f"    if {v} * x > {best}:",
         f"        {best} = {v} * x", f"        {bi} = {i}", f"s = s + {best} + a[{bi}]"],
        [f"{best} = None", f"for {v} in a:", f"    if {best} is None or {v} > {best}:", f"        {best} = {v}",
         f"s = s + {best} * x"],
        [f"{best} = a[0]", f"for {v} in a[1:]:", f"    {best} = {v} if {v} > {best} else {best}", f"s = s + {best} * x"],
    ])


def L_class(g, ctx):
    """A small class defined at module level, built and called inside f."""
    cls = g.fresh("Lin")
    style = g.r.choice(["call", "method", "attr"])
    if style == "call":
        g.module += [f"class {cls}:", "    def __init__(self, w, b=0.0):", "        self.w = w", "        self.b = b",
                     "", "    def __call__(self, v):", "        return np.sum(self.w * v) + self.b", ""]
        return [f"s = s + {cls}(a, x)(a * x)"]
    if style == "method":
        g.module += [f"class {cls}:", "    def __init__(self, w):", "        self.w = w", "",
                     "    def energy(self, v):", "        return np.dot(self.w, v) ** 2", ""]
        return [f"m_{cls} = {cls}(a)", f"s = s + m_{cls}.energy(a * x)"]
    g.module += [f"class {cls}:", "    scale = 0.5", "    shift = (0.1, 0.2)", ""]
    return [f"s = s + {cls}.scale * x + {cls}.shift[1] * a[0]"]


LEAVES += [L_overlap, L_search, L_class]


def L_generators(g, ctx):
    """Generator helpers (yield, yield from), functools.partial, map over a known list."""
    h = g.fresh("gen")
    style = g.r.choice(["yield", "yield_from", "partial", "map"])
    if style == "yield":
        return [f"def {h}(v, w):", "    for u in v:", "        yield u * w", f"s = s + sum({h}(a, x))"]
    if style == "yield_from":
        return [f"def {h}(v, w):", "    yield w", "    yield from [v[0] * w, v[1]]",
                f"s = s + sum(list({h}(a, x)))"]
    if style == "partial":
        g.module += ["import functools", "", f"def {h}(u, v, scale=1.0):", "    return u * v * scale", ""]
        return [f"p_{h} = functools.partial({h}, scale=0.5)", f"s = s + p_{h}(x, a[0]) + p_{h}(a[1], v=x)"]
    return ["s = s + sum(map(np.sin, [x, a[0]])) + sum(map(lambda u: u * x, [a[1], a[2]]))"]


def L_statements(g, ctx):
    """Statements for the user: assert, a raise in a guard not taken, a bare string, del of a scalar temp,
    `in` tests on constants and dict keys, isnan/isfinite guards."""
    t = g.fresh("t")
    return g.r.choice([
        ["assert np.all(np.isfinite(a)), 'bad input'", "s = s + x"],
        ["if x > 100.0:", "    raise ValueError('x too large')", "s = s + x * a[0]"],
        [f'"""a note about {t}"""', "s = s + x"],
        [f"{t} = x * 2.0", f"s = s + {t}", f"del {t}"],
        [f"{t} = {{'w': x, 'b': a[0]}}", f"if 'w' in {t}:", f"    s = s + {t}['w'] * 2.0",
         f"if 'z' not in {t}:", f"    s = s + {t}['b']"],
        [f"if {g.r.choice(['2', 'n'])} in (1, 2, 3):", "    s = s + x", "else:", "    s = s - x"],
        ["if not np.isnan(x) and math.isfinite(x):", "    s = s + x * a[1]"],
    ])


def L_dynamic_slices(g, ctx):
    """Slices with loop-variable bounds, negative steps, np.newaxis."""
    i = g.fresh("i")
    return g.r.choice([
        [f"for {i} in range({g.m - 1}):", f"    s = s + np.sum(a[{i}:{i} + 2]) * x"],
        [f"for {i} in range({g.p}):", f"    s = s + np.sum(B[{i}, {i} % {g.q}:]) * x"],
        ["s = s + np.sum(a[::-2]) * x + np.sum(a[-1:0:-1]) + np.sum(B[::-1, 1:] * x)"],
        ["s = s + np.sum(a[:, np.newaxis] * a[np.newaxis, :]) * x"],
        [f"for {i} in range(1, n):", f"    s = s + np.sum(a[-{i}:]) * x"],
        [f"for {i} in range(n):", f"    s = s + np.sum(a[:{i}]) + x"],
    ])


def L_dict_iter(g, ctx):
    d, k, v = g.fresh("d"), g.fresh("k"), g.fresh("v")
    return g.r.choice([
        [f'{d} = {{"u": x, "w": a[0] * x}}', f"for {k}, {v} in {d}.items():", f"    s = s + {v} * 2.0"],
        [f'{d} = {{"u": a * x, "w": a}}', f"for {k} in {d}:", f"    s = s + np.sum({d}[{k}]) * 0.5"],
        [f'{d} = {{"b": x, "a": a[1]}}', f"for {k} in sorted({d}):", f"    s = s * 0.5 + {d}[{k}]"],
        [f"{d} = {{}}", f"for {k} in ('w', 'b'):", f"    {d}[{k}] = {d}.get({k}, 0.0) + x", f"s = s + sum({d}.values())"],
    ])


def L_loop_reuse(g, ctx):
    """The same loop variable in two loops; used after both; int counters mixed into floats."""
    i = g.fresh("i")
    return g.r.choice([
        [f"for {i} in range(3):", f"    s = s + a[{i}] * x", f"for {i} in range(n):", "    s = s + x * 0.1",
         f"s = s + {i} * a[0]"],
        [f"{i} = 0", f"for {i} in range(n):", "    pass", f"s = s + {i} / n * x + float({i}) * a[1]"],
        [f"for {i} in range(n):", f"    s = s + {i} / n * x"],
    ])


def L_power_iter(g, ctx):
    """Iterative numerics: power iteration with normalisation, a fixed-point loop with a tolerance."""
    v, k = g.fresh("v"), g.fresh("k")
    return g.r.choice([
        [f"M_{v} = B.T @ B + np.eye({g.q})", f"{v} = np.ones({g.q}) / {g.q}", f"for {k} in range(n + 2):",
         f"    {v} = M_{v} @ {v}", f"    {v} = {v} / np.linalg.norm({v})", f"s = s + {v} @ M_{v} @ {v} * x"],
        [f"{v} = x", f"for {k} in range(20):", f"    new_{v} = 0.5 * np.cos({v}) + 0.1 * a[0]",
         f"    if abs(new_{v} - {v}) < 1e-10:", "        break", f"    {v} = new_{v}", f"s = s + {v}"],
        [f"{v} = a * 0.0", f"for {k} in range(n):", f"    {v} = {v} + 0.3 * (a * x - {v})", f"s = s + np.sum({v} ** 2)"],
    ])


def L_bool_arith(g, ctx):
    t = g.fresh("t")
    return g.r.choice([
        ["s = s + np.sum(a > 0) * x"],
        ["s = s + np.sum((a > 0).astype(float) * a) * x"],
        [f"{t} = (B > 0) * B", f"s = s + np.sum({t}) * x"],
        ["s = s + (x > 0) * x + (a[0] < a[1]) * a[2]"],
        ["s = s + np.sum(np.where(a > 0, a, 0.1 * a)) * x + np.count_nonzero(B > 0) * x"],
    ])


LEAVES += [L_generators, L_statements, L_dynamic_slices, L_dict_iter, L_loop_reuse, L_power_iter, L_bool_arith]


def L_recent(g, ctx):
    """Constructs funcgrad learned recently (and/or values, loop else, reversed, item, casts, recursion, list
    arithmetic, builtin max/min/pow), in the combinations people write."""
    t, i, v = g.fresh("t"), g.fresh("i"), g.fresh("v")
    return g.r.choice([
        [f"{t} = a[0] > 0 and x or a[1]", f"s = s + {t} * 2.0"],
        [f"{t} = (x or 0.5) * a", f"s = s + np.sum({t})"],
        [f"{i} = 0", f"while {i} < n and a[{i} % {g.m}] > -0.9:", f"    s = s + a[{i} % {g.m}] * x", f"    {i} += 1"],
        [f"{t} = [x, a[0]]", f"s = s + ({t} and {t}[0]) * 2.0"],
        [f"for {i} in range(n - n):", "    s = s + x", "else:", "    s = s + a[0] * x"],
        [f"for {v} in B:", f"    for {i} in range({g.q}):", f"        if {v}[{i}] > 0.5:", "            break",
         "    else:", f"        s = s + np.sum({v}) * x", "        continue", f"    s = s - {v}[0]"],
        [f"for {i}, {v} in enumerate(reversed(a)):", f"    s = s + {v} * {i} * x"],
        [f"for {v} in reversed(B):", f"    s = s * 0.5 + np.sum({v}) * x"],
        [f"for {v} in reversed([x, a[0], a[1]]):", f"    s = s * 0.5 + {v}"],
        [f"s = s + np.sum(a * x).item() + np.float64(x) * a[0] + float(np.float32(0.5)) * x"],
        [f"for {i} in range(n):", f"    s = s + a[{i} % {g.m}].item() * x"],
        [f"{t} = [0.0] * n", f"for {i} in range(n):", f"    {t}[{i}] = a[{i} % {g.m}] * x", f"s = s + sum({t})"],
        [f"{t} = []", f"for {i} in range(3):", f"    {t} = {t} + [a[{i}] * x]", f"s = s + sum({t})"],
        [f"{t} = [a * x] * 2", f"s = s + np.sum({t}[0] + {t}[1])"],
        [f"s = s + max(x, a[0]) + min(a[0], a[1], a[2]) + max(abs(a)) * x"],
        [f"s = s + max(a, default=0.0) * x + max([x, a[1]]) + min(np.sin(a))"],
        [f"s = s + max(v * x for v in a) + min([v for v in a[:2]])"],
        [f"s = s + np.sum(pow(a, 2)) * x + pow(2.0, x) + pow(x, n)"],
        [f"def fib{t}(v, d):", "    if d <= 1:", "        return v", f"    return fib{t}(v, d - 1) * 0.5 + fib{t}(v * 0.9, d - 2)",
         f"s = s + fib{t}(x, 4)"],
        [f"def ev{t}(v, d):", "    return v if d == 0 else od" + t + "(v * 0.9, d - 1)",
         f"def od{t}(v, d):", f"    return -v if d == 0 else ev{t}(np.sin(v), d - 1)", f"s = s + ev{t}(x, 3)"],
        [f"def kw{t}(u, *, scale, shift=0.0):", "    return u * scale + shift",
         f"s = s + kw{t}(x, scale=a[0]) + kw{t}(a[1], shift=x, scale=2.0)"],
    ])


LEAVES += [L_recent]


def L_break_continue(g, ctx):
    e = g.fe(ctx)
    return g.r.choice([[f"if {e} > 0.6:", "    break"], [f"if {e} < -0.4:", "    continue"],
                       [f"if s > 3.0:", "    break", f"s = s + {e}"]])


def L_loop_return(g, ctx):
    if not ctx.can_return:
        return [f"s = s + {g.fe(ctx)}"]
    return [f"if s > {g.r.choice(['1.0', '2.5', '0.0'])}:", f"    return s * {g.c()} + x"]


LEAVES_LOOP = [L_break_continue, L_loop_return]


# ============================================================================= wrappers
# each takes (g, ctx) and returns lines that contain one or two inner idioms

def W_for_range(g, ctx):
    i = g.fresh("i")
    rng, bound = g.r.choice([("range(n)", 4), ("range(3)", 2), ("range(2, 0, -1)", 2), ("range(n - 1, -1, -1)", 3),
                             ("range(1, n, 2)", 3), ("reversed(range(n))", 3)])
    inner = g.idiom(ctx.inner(ints=ctx.ints + [(i, bound)], loop=True))
    return [f"for {i} in {rng}:"] + ind(inner)


def W_for_rows(g, ctx):
    v, i = g.fresh("v"), g.fresh("i")
    head, ints = g.r.choice([(f"for {v} in a:", []), (f"for {i}, {v} in enumerate(a):", [(i, g.m - 1)]),
                             (f"for {v} in B[:, 0]:", [])])
    inner = g.idiom(ctx.inner(ints=ctx.ints + ints, loop=True))
    return [head, f"    s = s + {v} * 0.1"] + ind(inner)


def W_while(g, ctx):
    k = g.fresh("k")
    cond = g.r.choice([f"{k} < n", f"{k} < 3 and s < 5.0", f"{k} < n and abs(s) < 10.0"])
    inner = g.idiom(ctx.inner(ints=ctx.ints + [(k, 4)], loop=True))     # k is 1..n in the body
    # the counter moves first: a ``continue`` in the body must not make the loop endless
    return [f"{k} = 0", f"while {cond}:", f"    {k} += 1"] + ind(inner)


def W_if(g, ctx):
    cond = g.r.choice(["np.sum(a) > 0", "len(a) > 3", "n > 2", "x > -2.0", "np.mean(B) < 0.3",
                       "not n == 3", "-1.0 < np.sum(a) < 1.0"])
    inner = g.idiom(ctx.inner())
    lines = [f"if {cond}:"] + ind(inner)
    if g.r.random() < 0.6:
        lines += ["else:"] + ind(g.idiom(ctx.inner()))
    return lines


def W_helper(g, ctx):
    """The inner idiom moved into a helper: module level, nested with parameters, closure, default or
    keyword arguments, *args; called once or from a loop."""
    h = g.fresh("h")
    style = g.r.choice(["module", "nested", "closure", "defaults", "kwonly", "star", "tuple_ret", "dict_ret",
                        "lambda", "kwargs"])
    inner = g.idiom(Ctx(depth=ctx.depth + 1, can_return=False))
    if style == "lambda":
        lam = g.fresh("lam")
        e = g.fe(ctx)
        return [f"{lam} = lambda t, k={g.c()}: t * k + {e}",
                f"s = {lam}(s) + {lam}(x, k=0.5)"]
    if style == "module":
        g.module += [f"def {h}(x, a, B, n, s):"] + ind(inner) + ["    return s", ""]
        return [f"s = {h}(x, a, B, n, s)"]
    if style == "nested":
        return [f"def {h}(x, a, B, s):"] + ind(inner) + ["    return s", f"s = {h}(x, a, B, s)"]
    if style == "closure":
        return [f"def {h}(s):"] + ind(inner) + ["    return s", f"s = {h}(s)"]
    if style == "defaults":
        return [f"def {h}(s, x=x, a=a, scale={g.c()}):"] + ind(inner) + ["    return s * scale",
                                                                       f"s = {h}(s) + {h}(0.0, a=a * 0.5)"]
    if style == "kwonly":
        return [f"def {h}(s, *, x, a):"] + ind(inner) + ["    return s", f"s = {h}(s, a=a, x=x)"]
    if style == "kwargs":
        return [f"def {h}(s, **kw):", "    x = kw['x']", "    a = kw.get('a')"] + ind(inner) + \
            ["    return s", f"s = {h}(s, x=x, a=a)"]
    if style == "star":
        return [f"def {h}(*args):", "    s, x, a = args"] + ind(inner) + ["    return s", f"s = {h}(s, x, a)"]
    if style == "tuple_ret":
        return [f"def {h}(s):"] + ind(inner) + ["    return s, s * x", f"s, s_extra = {h}(s)",
                                                "s = s + 0.1 * s_extra"]
    return [f"def {h}(s):"] + ind(inner) + ['    return {"s": s, "twice": 2.0 * s}', f's = {h}(s)["twice"] * 0.5']


WRAPPERS = [W_for_range, W_for_rows, W_while, W_if, W_helper]


# ----------------------------------------------------------------------------- entry points

def generate(seed, without=()):
    """Program number ``seed``; ``without``: idiom names (``L_``/``W_`` functions less the prefix) left out."""
    return Gen(seed, without).program()


def recall(prog, modes, timeout):
    """A right program called again in the same process (funcgrad's caches warm): with other arguments and
    another int ``n``, then with every module-level constant rebound. None when that is right too (or the
    program is not usable there), else the failing Outcome (its message says which second call)."""
    import sys as _sys
    from .check import FAILURE, check_program, load_program
    other = dataclasses.replace(prog, seed=prog.seed + 7919, n=max(2, prog.n - 1) if prog.n > 2 else prog.n + 1)
    out = check_program(prog.source, other.make_args(), prog.argnums, modes=modes, timeout=timeout,
                        use_autograd=False, kwargs=other.make_kwargs())
    if out.status == FAILURE:
        out.message = f"second call (other arguments, n={other.n}): {out.message}"
        return out
    consts = [ln.split(" = ")[0] for ln in prog.source.splitlines()
              if ln.startswith("SCALE") and " = " in ln and not ln.split(" = ")[1].startswith(("(", "[", "{"))]
    if not consts:
        return None
    fn, _ = load_program(prog.source)
    mod = _sys.modules[fn.__module__]
    old = {c: getattr(mod, c) for c in consts}
    try:
        for c in consts:
            v = getattr(mod, c)
            setattr(mod, c, v * 1.7 + 0.1 if not isinstance(v, np.ndarray) else v[::-1] * 1.7)
        out = check_program(prog.source, prog.make_args(), prog.argnums, modes=modes, timeout=timeout,
                            use_autograd=False, kwargs=prog.make_kwargs())
    finally:
        for c, v in old.items():
            setattr(mod, c, v)
    if out.status == FAILURE:
        out.message = f"second call (module constants {consts} rebound): {out.message}"
        return out
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, default=None, help="only program i (seed + i)")
    ap.add_argument("--show", action="store_true", help="print the programs, check nothing")
    ap.add_argument("--modes", default=None)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--no-recall", action="store_true", help="do not call a right program a second time")
    ap.add_argument("--reduce", action="store_true", help="with --only: shrink a failure (tests/fuzz/reduce.py)")
    ap.add_argument("--without", default="", help="comma list of idioms to leave out (e.g. andor_values)")
    args = ap.parse_args(argv)
    idx = [args.only] if args.only is not None else range(args.n)
    without = tuple(filter(None, args.without.split(",")))
    if args.show:
        for i in idx:
            print(f"# program {i}\n{generate(args.seed + i, without)!r}\n")
        return 0
    import warnings
    warnings.simplefilter("ignore")
    from .check import FAILURE, MODES, check_program
    modes = tuple(args.modes.split(",")) if args.modes else MODES
    counts = {}
    fails = []
    t0 = time.time()
    for i in idx:
        prog = generate(args.seed + i, without)
        try:
            out = check_program(prog.source, prog.make_args(), prog.argnums, modes=modes, timeout=args.timeout,
                                use_autograd=not prog.inplace, kwargs=prog.make_kwargs())
        except Exception:   # the harness itself failed on this program: say so, keep going
            import traceback
            print(f"[{i}] HARNESS ERROR\n{prog!r}\n{traceback.format_exc()}", flush=True)
            counts["HARNESS"] = counts.get("HARNESS", 0) + 1
            continue
        if out.status == "RIGHT" and not args.no_recall:
            again = recall(prog, modes, args.timeout)
            if again is not None:
                out = again
        counts[out.status] = counts.get(out.status, 0) + 1
        if args.reduce and out.status == FAILURE:
            from .reduce import reduce_source
            want = (out.kind, out.mode)

            def still_fails(src, prog=prog):
                o = check_program(src, prog.make_args(), prog.argnums, modes=modes, timeout=args.timeout,
                                  use_autograd=False, kwargs=prog.make_kwargs())
                return o.status == FAILURE and (o.kind, o.mode) == want
            small = reduce_source(prog.source, still_fails, max_seconds=400)
            print(f"---- reduced ({want}) ----\n{small}\n", flush=True)
        line = f"[{i}] {out.status} {out.mode} {out.kind} {out.message.splitlines()[0][:160] if out.message else ''}"
        if out.status == FAILURE:
            fails.append(i)
            print(line + f"\n{prog!r}\n{out}\n", flush=True)
        elif args.verbose or args.only is not None or out.status == "REFUSED":
            print(line, flush=True)
            if args.only is not None:
                print(repr(prog))
                print(out)
    print(f"checked {len(idx)} programs in {time.time() - t0:.0f} s: {counts}; failures at {fails}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
