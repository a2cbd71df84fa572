"""A generator of random differentiable programs, as Python source text.

``generate(drawer, config) -> Program`` builds a module holding ``f(x, A, ..., n)``
(a float scalar ``x``, 0-2 float arrays of 1-3 dims with sizes 1-4, and an int
``n`` that loops may count to) and possibly helper functions, from a small typed
grammar over the constructs funcgrad documents:

* nested ``for`` (over ``range``, arrays, ``enumerate``, ``zip``) and ``while``,
  with ``break``, ``continue`` and early ``return``; ``if``/``elif``/``else``;
  ``a if c else b``;
* helpers at module level and nested ``def``s, returning a value or a tuple;
* tuple assignment and swaps, ``+=``-style rebinding, in-place element, row and
  slice writes (only into arrays the program owns: a ``.copy()`` or ``np.zeros``);
* integer-array indexing with repeats, slices, negative indices;
* reductions with ``axis`` and ``keepdims``, ``@``/``np.dot`` of 1- to 3-D operands,
  ``.T``, ``reshape``, ``concatenate``, ``stack``, ``where``, ``maximum``, ``clip``;
* NumPy elementwise functions and ``math`` scalar functions.

Every variable's type (float scalar, int with an upper bound, or float array of a
known shape) is tracked, so generated programs are valid Python/NumPy. Values stay
well-conditioned: ``exp`` only of ``tanh``, divisions by ``c + e*e``, ``sqrt``/``log``
of ``c + e*e``. The checker discards the rare program that still fails in plain
Python or overflows.

Which constructs may appear is a ``Config`` (a set of feature names), so the CI
test can grow as funcgrad does.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

ALL_FEATURES = frozenset({
    # control flow
    "for_range", "for_n", "for_rows", "enumerate", "zip", "reversed_range", "while",
    "break", "continue", "if", "elif", "else", "early_return", "return_in_loop", "ternary",
    # functions
    "helpers", "nested_helpers", "tuple_helpers",
    # binding and mutation
    "tuple_assign", "swap", "augassign", "inplace", "slice_write", "row_write",
    # indexing
    "index", "neg_index", "slices", "neg_step", "fancy_index", "fancy_np_array", "loop_index",
    # array operations
    "reduce", "reduce_axis", "keepdims", "max_min", "prod", "methods", "matmul", "matmul3d", "dot",
    "transpose", "reshape", "concatenate", "stack", "stack_scalars", "where", "maximum", "clip",
    "broadcast",
    # elementwise
    "elementwise", "math", "pow", "div", "abs",
})


@dataclasses.dataclass(frozen=True)
class Config:
    features: frozenset = ALL_FEATURES
    max_stmts: int = 5          # statements per block
    max_depth: int = 3          # expression depth
    max_nest: int = 2           # nesting of blocks (loops/ifs inside loops/ifs)
    max_helpers: int = 2
    max_arrays: int = 2

    def has(self, name):
        return name in self.features

    def without(self, *names):
        return dataclasses.replace(self, features=self.features - frozenset(names))


@dataclasses.dataclass
class Program:
    source: str
    arg_names: list
    arg_kinds: list           # "f" (float scalar), a shape tuple (float array), or "i" (the int n)
    n_value: int
    seed: int
    features: frozenset       # constructs this program uses
    uses_inplace: bool

    @property
    def argnums(self):
        return tuple(i for i, k in enumerate(self.arg_kinds) if k != "i")

    def make_args(self):
        rng = np.random.RandomState(self.seed)
        out = []
        for k in self.arg_kinds:
            if k == "f":
                out.append(float(rng.uniform(-1.0, 1.0)))
            elif k == "i":
                out.append(int(self.n_value))
            else:
                out.append(rng.uniform(-1.0, 1.0, size=k))
        return tuple(out)

    def _repr_pretty_(self, p, cycle):  # hypothesis's printer: show the program as text
        p.text(repr(self))

    def __repr__(self):  # what hypothesis prints for a falsifying example
        return (f"Program(seed={self.seed}, n={self.n_value}, args={self.arg_kinds})\n"
                f"---- program ----\n{self.source}-----------------")


@dataclasses.dataclass
class Var:
    kind: str                 # "f" float scalar, "i" int, "a" float array
    shape: tuple = ()
    bound: int = 0            # ints: the largest value it can hold
    owned: bool = False       # arrays: a fresh array only this name refers to (in-place writes allowed)
    readonly: bool = False    # loop targets and parameters of the int kind


class Env(dict):
    def floats(self):
        return [k for k, v in self.items() if v.kind == "f"]

    def ints(self):
        return [k for k, v in self.items() if v.kind == "i"]

    def arrays(self, shape=None):
        return [k for k, v in self.items() if v.kind == "a" and (shape is None or v.shape == shape)]

    def copy(self):
        return Env({k: dataclasses.replace(v) for k, v in self.items()})


@dataclasses.dataclass
class Helper:
    name: str
    params: list              # list of ("f" | shape)
    ret: object               # "f" | shape | ("tuple", t1, t2)


def _shape_src(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _ty(kind_or_shape):
    return "f" if kind_or_shape == "f" else tuple(kind_or_shape)


class Generator:
    CONSTS = ["0.5", "1.5", "-0.7", "2.0", "0.25", "-1.2"]
    SUNARY = ["np.sin", "np.cos", "np.tanh", "np.exp(np.tanh", "np.sqrt", "np.log", "np.abs", "-"]

    def __init__(self, d, cfg: Config):
        self.d = d
        self.cfg = cfg
        self.used = set()
        self.inplace = False
        self.counter = 0
        self.helpers: list[Helper] = []      # callable from f (module level and nested)
        self.n_name = None
        self.n_bound = 0

    # ------------------------------------------------------------------ utilities
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def use(self, feat):
        self.used.add(feat)

    def pick(self, options):
        """options: list of (feature-or-None, value); only enabled ones; simplest first."""
        ok = [v for f, v in options if f is None or self.cfg.has(f)]
        return self.d.choice(ok)

    def small(self):
        return self.d.choice([2, 1, 3])

    def shape_pool(self, env):
        shapes = [env[a].shape for a in env.arrays()]
        return shapes

    def draw_shape(self, env, max_ndim=3):
        pool = [s for s in self.shape_pool(env) if len(s) <= max_ndim]
        opts = pool + ["new"]
        c = self.d.choice(opts)
        if c != "new":
            return c
        nd = self.d.integer(1, max_ndim)
        return tuple(self.small() for _ in range(nd))

    # ------------------------------------------------------------------ int expressions
    def index_into(self, env, m):
        """An int expression valid as an index into an axis of length m."""
        opts = [(None, "const")]
        if self.cfg.has("neg_index"):
            opts.append(("neg_index", "neg"))
        if self.cfg.has("loop_index") and env.ints():
            opts.append(("loop_index", "var"))
        c = self.pick(opts)
        if c == "const":
            self.use("index")
            return str(self.d.integer(0, m - 1))
        if c == "neg":
            self.use("neg_index")
            return str(-self.d.integer(1, m))
        self.use("loop_index")
        v = self.d.choice(env.ints())
        if env[v].bound < m and env[v].bound >= 0:
            return v
        return f"{v} % {m}"

    # ------------------------------------------------------------------ scalar expressions
    def sexpr(self, env, depth):
        opts = [(None, "leaf")]
        if depth > 0:
            opts += [(None, "bin"), ("elementwise", "unary"), ("reduce", "reduce"), ("index", "index"),
                     ("ternary", "ternary"), ("helpers", "call"), ("matmul", "vdot"), ("pow", "pow"),
                     ("div", "div"), ("math", "math"), (None, "intmix")]
        c = self.pick(opts)
        d = depth - 1
        if c == "leaf":
            fl = env.floats()
            cands = fl + ["const"]
            v = self.d.choice(cands)
            return self.d.choice(self.CONSTS) if v == "const" else v
        if c == "bin":
            op = self.d.choice(["+", "*", "-"])
            return f"({self.sexpr(env, d)} {op} {self.sexpr(env, d)})"
        if c == "unary":
            self.use("elementwise")
            return self.unary(self.sexpr(env, d))
        if c == "reduce":
            shape = self.draw_shape(env)
            return self.reduction(self.aexpr(env, shape, d))
        if c == "index":
            arrs = env.arrays()
            if not arrs:
                return self.sexpr(env, 0)
            a = self.d.choice(arrs)
            sh = env[a].shape
            idx = ", ".join(self.index_into(env, m) for m in sh)
            return f"{a}[{idx}]"
        if c == "ternary":
            self.use("ternary")
            return f"({self.sexpr(env, d)} if {self.cond(env, d)} else {self.sexpr(env, d)})"
        if c == "call":
            return self.call(env, "f", d) or self.sexpr(env, 0)
        if c == "vdot":
            self.use("matmul")
            k = self.small()
            a, b = self.aexpr(env, (k,), d), self.aexpr(env, (k,), d)
            if self.cfg.has("dot") and self.d.boolean():
                self.use("dot")
                return f"np.dot({a}, {b})"
            return f"({a} @ {b})"
        if c == "pow":
            self.use("pow")
            return f"({self.sexpr(env, d)}) ** {self.d.choice(['2', '3'])}"
        if c == "div":
            self.use("div")
            return f"({self.sexpr(env, d)} / (1.5 + {self.sq(self.sexpr(env, d))}))"
        if c == "math":
            self.use("math")
            fn = self.d.choice(["math.sin", "math.cos", "math.tanh", "math.exp(math.tanh"])
            inner = self.sexpr(env, d)
            return f"{fn}({inner}))" if fn.endswith("tanh") and fn.startswith("math.exp") else f"{fn}({inner})"
        if c == "intmix":
            ints = env.ints()
            if not ints:
                return self.sexpr(env, d)
            op = self.d.choice(["*", "+"])
            return f"({self.sexpr(env, d)} {op} {self.d.choice(ints)})"
        raise AssertionError(c)

    @staticmethod
    def sq(e):
        return f"{e} * {e}" if e.isidentifier() or e.replace(".", "").lstrip("-").isdigit() else f"({e}) * ({e})"

    def unary(self, e):
        fn = self.d.choice(self.SUNARY)
        if fn == "np.exp(np.tanh":
            return f"np.exp(np.tanh({e}))"
        if fn in ("np.sqrt", "np.log"):
            return f"{fn}(1.5 + {self.sq(e)})"
        if fn == "np.abs":
            if not self.cfg.has("abs"):
                return f"np.sin({e})"
            self.use("abs")
            return f"np.abs({e})"
        if fn == "-":
            return f"(-{e})"
        return f"{fn}({e})"

    def reduction(self, a):
        self.use("reduce")
        opts = [(None, "np.sum"), (None, "np.mean"), ("max_min", "np.max"), ("max_min", "np.min"),
                ("methods", ".sum()"), ("methods", ".mean()"), ("prod", "np.prod")]
        fn = self.pick(opts)
        if fn in ("np.max", "np.min"):
            self.use("max_min")
        if fn == "np.prod":
            self.use("prod")
            return f"np.prod(np.tanh({a}))"
        if fn.startswith("."):
            self.use("methods")
            return f"({a}){fn}" if not a.isidentifier() else f"{a}{fn}"
        return f"{fn}({a})"

    def cond(self, env, depth):
        opts = [(None, "cmp")]
        if env.ints():
            opts.append((None, "intcmp"))
        c = self.pick(opts)
        if c == "cmp":
            op = self.d.choice([">", "<"])
            return f"{self.sexpr(env, depth)} {op} {self.d.choice(['0.0', '0.3', '-0.2'])}"
        v = self.d.choice(env.ints())
        return self.d.choice([f"{v} % 2 == 0", f"{v} > 1", f"{v} == 0"])

    # ------------------------------------------------------------------ array expressions
    def aleaf(self, env, shape):
        cands = [("var", a) for a in env.arrays(shape)]
        # views of bigger arrays
        for a in env.arrays():
            s = env[a].shape
            if len(s) == len(shape) + 1 and s[1:] == shape and self.cfg.has("index"):
                cands.append(("row", a))
            if len(s) == len(shape) + 1 and len(shape) >= 1 and s[0] == shape[0] and s[2:] == shape[1:] \
                    and self.cfg.has("slices"):
                cands.append(("col", a))
            if len(s) == len(shape) and s[1:] == shape[1:]:
                if self.cfg.has("slices") and s[0] >= shape[0] and s != shape:
                    cands.append(("slice", a))
                if self.cfg.has("fancy_index"):
                    cands.append(("fancy", a))
                if self.cfg.has("neg_step") and s == shape:
                    cands.append(("rev", a))
        cands.append(("ones", None))
        k, a = self.d.choice(cands)
        if k == "var":
            return a
        if k == "row":
            self.use("index")
            return f"{a}[{self.index_into(env, env[a].shape[0])}]"
        if k == "col":
            self.use("slices")
            return f"{a}[:, {self.index_into(env, env[a].shape[1])}]"
        if k == "slice":
            self.use("slices")
            m = env[a].shape[0]
            lo = self.d.integer(0, m - shape[0])
            return f"{a}[{lo}:{lo + shape[0]}]" if lo else f"{a}[:{shape[0]}]"
        if k == "fancy":
            self.use("fancy_index")
            m = env[a].shape[0]
            idx = [self.d.integer(0, m - 1) for _ in range(shape[0])]
            lst = "[" + ", ".join(map(str, idx)) + "]"
            if self.cfg.has("fancy_np_array") and self.d.boolean():
                self.use("fancy_np_array")
                return f"{a}[np.array({lst})]"
            return f"{a}[{lst}]"
        if k == "rev":
            self.use("neg_step")
            return f"{a}[::-1]"
        fl = env.floats()
        fill = self.d.choice(fl) if fl else self.sexpr(env, 0)
        return f"(np.ones({_shape_src(shape)}) * {fill})"

    def aexpr(self, env, shape, depth):
        shape = tuple(shape)
        opts = [(None, "leaf")]
        if depth > 0:
            opts += [(None, "bin"), ("elementwise", "unary"), ("broadcast", "bcast"), ("reduce_axis", "raxis"),
                     ("matmul", "matmul"), ("maximum", "maximum"), ("where", "where"), ("clip", "clip"),
                     ("transpose", "transpose"), ("reshape", "reshape"), ("concatenate", "concat"),
                     ("stack", "stack"), ("helpers", "call"), ("div", "div"), ("pow", "pow")]
        c = self.pick(opts)
        d = depth - 1
        if c == "leaf":
            return self.aleaf(env, shape)
        if c == "bin":
            op = self.d.choice(["+", "*", "-"])
            return f"({self.aexpr(env, shape, d)} {op} {self.aexpr(env, shape, d)})"
        if c == "unary":
            self.use("elementwise")
            return self.unary(self.aexpr(env, shape, d))
        if c == "bcast":
            self.use("broadcast")
            op = self.d.choice(["*", "+", "-"])
            # the other operand: a scalar, a trailing sub-shape, or the shape with some axes of size 1
            kind = self.d.choice(["scalar", "suffix", "ones"])
            if kind == "scalar" or len(shape) == 1 and kind == "suffix":
                other = self.sexpr(env, d)
            elif kind == "suffix":
                other = self.aexpr(env, shape[self.d.integer(1, len(shape) - 1):], d)
            else:
                sh = tuple(1 if self.d.boolean() else s for s in shape)
                other = self.aexpr(env, sh, d)
            return f"({self.aexpr(env, shape, d)} {op} {other})" if self.d.boolean() else \
                f"({other} {op} {self.aexpr(env, shape, d)})"
        if c == "raxis":
            if len(shape) >= 3:
                return self.aexpr(env, shape, d)
            self.use("reduce_axis")
            ones = [i for i, s in enumerate(shape) if s == 1]
            fn = self.pick([(None, "np.sum"), (None, "np.mean"), ("max_min", "np.max"), ("max_min", "np.min"),
                            ("methods", ".sum"), ("methods", ".mean")])
            if fn in ("np.max", "np.min"):
                self.use("max_min")
            if ones and self.cfg.has("keepdims") and self.d.boolean():
                self.use("keepdims")
                ax = self.d.choice(ones)
                inner_shape = shape[:ax] + (self.small(),) + shape[ax + 1:]
                extra = ", keepdims=True"
            else:
                ax = self.d.integer(0, len(shape))
                inner_shape = shape[:ax] + (self.small(),) + shape[ax:]
                extra = ""
            axis = ax if self.d.boolean() else ax - len(inner_shape)
            inner = self.aexpr(env, inner_shape, d)
            if fn.startswith("."):
                self.use("methods")
                return f"({inner}){fn}(axis={axis}{extra})"
            return f"{fn}({inner}, axis={axis}{extra})"
        if c == "matmul":
            return self.matmul(env, shape, d)
        if c == "maximum":
            self.use("maximum")
            fn = self.d.choice(["np.maximum", "np.minimum"])
            other = self.sexpr(env, d) if self.d.boolean() else self.aexpr(env, shape, d)
            return f"{fn}({self.aexpr(env, shape, d)}, {other})"
        if c == "where":
            self.use("where")
            a = self.aexpr(env, shape, d)
            b = self.aexpr(env, shape, d) if self.d.boolean() else self.sexpr(env, d)
            return f"np.where({a} > {self.d.choice(['0.0', '0.2'])}, {a}, {b})"
        if c == "clip":
            self.use("clip")
            return f"np.clip({self.aexpr(env, shape, d)}, -0.5, 0.6)"
        if c == "transpose":
            if len(shape) != 2:
                return self.aexpr(env, shape, d)
            self.use("transpose")
            inner = self.aexpr(env, shape[::-1], d)
            return f"np.transpose({inner})" if self.d.boolean() else (
                f"{inner}.T" if inner.isidentifier() else f"({inner}).T")
        if c == "reshape":
            self.use("reshape")
            size = int(np.prod(shape))
            divs = [(a, size // a) for a in range(1, size + 1) if size % a == 0]
            other = self.d.choice([(size,)] + divs)
            if other == shape:
                other = (size,)
            inner = self.aexpr(env, other, d)
            return f"({inner}).reshape({_shape_src(shape)})" if not inner.isidentifier() else \
                f"{inner}.reshape({_shape_src(shape)})"
        if c == "concat":
            if shape[0] < 2:
                return self.aexpr(env, shape, d)
            self.use("concatenate")
            k = self.d.integer(1, shape[0] - 1)
            a = self.aexpr(env, (k,) + shape[1:], d)
            b = self.aexpr(env, (shape[0] - k,) + shape[1:], d)
            return f"np.concatenate(({a}, {b}))" if self.d.boolean() else f"np.concatenate([{a}, {b}])"
        if c == "stack":
            if shape[0] > 3 or (len(shape) == 1 and not self.cfg.has("stack_scalars")):
                return self.aexpr(env, shape, d)
            self.use("stack")
            if len(shape) == 1:
                self.use("stack_scalars")
                parts = [self.sexpr(env, d) for _ in range(shape[0])]
            else:
                parts = [self.aexpr(env, shape[1:], d) for _ in range(shape[0])]
            return f"np.stack([{', '.join(parts)}])"
        if c == "call":
            return self.call(env, shape, d) or self.aleaf(env, shape)
        if c == "div":
            self.use("div")
            return f"({self.aexpr(env, shape, d)} / (1.5 + {self.sq(self.aexpr(env, shape, d))}))"
        if c == "pow":
            self.use("pow")
            return f"({self.aexpr(env, shape, d)}) ** 2"
        raise AssertionError(c)

    def matmul(self, env, shape, d):
        dims = sorted({s for a in env.arrays() for s in env[a].shape})
        k = self.d.choice([self.small()] + dims)
        opts = []
        if len(shape) == 1:
            n = shape[0]
            opts += [(None, ((n, k), (k,))), (None, ((k,), (k, n)))]
        if len(shape) == 2:
            m, n = shape
            opts += [(None, ((m, k), (k, n)))]
            opts += [("matmul3d", ((m, n, k), (k,))), ("matmul3d", ((k,), (m, k, n)))]
        if len(shape) == 3:
            b, m, n = shape
            opts += [("matmul3d", ((b, m, k), (b, k, n))), ("matmul3d", ((b, m, k), (k, n))),
                     ("matmul3d", ((m, k), (b, k, n)))]
        opts = [(f, v) for f, v in opts if f is None or self.cfg.has(f)]
        if not opts:
            return self.aexpr(env, shape, d)
        sa, sb = self.pick(opts)
        self.use("matmul")
        if max(len(sa), len(sb)) == 3:
            self.use("matmul3d")
        a, b = self.aexpr(env, sa, d), self.aexpr(env, sb, d)
        if self.cfg.has("dot") and len(sa) <= 2 and len(sb) <= 2 and self.d.integer(0, 3) == 3:
            self.use("dot")
            return f"np.dot({a}, {b})"
        return f"({a} @ {b})"

    def expr_of(self, env, ty, depth):
        return self.sexpr(env, depth) if ty == "f" else self.aexpr(env, ty, depth)

    def call(self, env, ty, depth):
        """A call to a helper returning ``ty`` (or a tuple holding one, indexed), or None."""
        if not self.cfg.has("helpers"):
            return None
        cands = []
        for h in self.helpers:
            if h.ret == ty:
                cands.append((h, None))
            elif isinstance(h.ret, tuple) and h.ret and h.ret[0] == "tuple":
                for j, t in enumerate(h.ret[1:]):
                    if t == ty:
                        cands.append((h, j))
        if not cands:
            return None
        h, j = self.d.choice(cands)
        self.use("helpers")
        args = ", ".join(self.expr_of(env, p, depth) for p in h.params)
        return f"{h.name}({args})" + (f"[{j}]" if j is not None else "")

    # ------------------------------------------------------------------ statements
    def var_type(self, env):
        c = self.d.choice(["f", "a"])
        if c == "f":
            return "f"
        return self.draw_shape(env)

    def block(self, env, nest, ctx, min_stmts=1):
        """Lines (unindented) of a block, and the environment after it."""
        n = self.d.integer(min_stmts, self.cfg.max_stmts)
        lines = []
        for _ in range(n):
            lines += self.stmt(env, nest, ctx)
        if not lines:
            lines = ["pass"]
        return lines, env

    def stmt(self, env, nest, ctx):
        depth = self.cfg.max_depth
        opts = [(None, "assign"), (None, "rebind"), ("augassign", "aug"), ("tuple_assign", "tuple"),
                ("swap", "swap"), ("inplace", "inplace"), ("tuple_helpers", "tcall")]
        if nest < self.cfg.max_nest:
            opts += [("if", "if"), ("for_range", "for"), ("for_n", "for"), ("for_rows", "for"),
                     ("while", "while")]
        if ctx.get("loop"):
            opts += [("break", "break"), ("continue", "continue")]
        if ctx.get("func") and not ctx.get("loop"):
            opts += [("early_return", "ret")]
        if ctx.get("func") and ctx.get("loop") and self.cfg.has("return_in_loop") and self.d.integer(0, 3) == 3:
            opts += [("early_return", "ret")]       # rarer: funcgrad refuses it today, which hides the rest
        c = self.pick(opts)
        if c == "assign":
            ty = self.var_type(env)
            if ty != "f" and self.cfg.has("inplace") and self.d.integer(0, 2) == 2:
                # an array this function owns, so in-place writes are allowed
                name = self.fresh("w")
                src = self.aexpr(env, ty, depth - 1)
                init = self.d.choice(["copy", "zeros"])
                env[name] = Var("a", ty, owned=True)
                if init == "zeros":
                    return [f"{name} = np.zeros({_shape_src(ty)})"]
                return [f"{name} = ({src}).copy()" if not src.isidentifier() else f"{name} = {src}.copy()"]
            name = self.fresh("s" if ty == "f" else "a")
            e = self.expr_of(env, ty, depth)
            env[name] = Var("f", ()) if ty == "f" else Var("a", ty)
            return [f"{name} = {e}"]
        if c == "rebind":
            cands = [k for k, v in env.items() if v.kind in "fa" and not v.readonly and not v.owned]
            if not cands:
                return self.stmt_assign_fallback(env)
            v = self.d.choice(cands)
            ty = "f" if env[v].kind == "f" else env[v].shape
            return [f"{v} = {self.expr_of(env, ty, depth)}"]
        if c == "aug":
            cands = [k for k, v in env.items() if not v.readonly and (v.kind == "f" or v.owned)]
            if not cands:
                return self.stmt_assign_fallback(env)
            self.use("augassign")
            v = self.d.choice(cands)
            op = self.d.choice(["+=", "-=", "*="])
            if env[v].kind == "a":
                self.inplace = True
                e = self.sexpr(env, depth - 1) if self.d.boolean() else self.aexpr(env, env[v].shape, depth - 1)
            else:
                e = self.sexpr(env, depth - 1)
            if op == "*=":
                e = f"np.tanh({e})"
            return [f"{v} {op} {e}"]
        if c == "tuple":
            self.use("tuple_assign")
            snapshot = env.copy()
            cands = [k for k, v in env.items() if v.kind in "fa" and not v.readonly and not v.owned]
            targets, types = [], []
            for _ in range(2):
                free = [k for k in cands if k not in targets]
                if free and self.d.boolean():
                    t = self.d.choice(free)
                    ty = "f" if env[t].kind == "f" else env[t].shape
                else:
                    ty = self.var_type(snapshot)
                    t = self.fresh("s" if ty == "f" else "a")
                targets.append(t)
                types.append(ty)
            # both right-hand sides read the values from before the statement
            rhs = [self.expr_of(snapshot, ty, depth - 1) for ty in types]
            for t, ty in zip(targets, types):
                env[t] = Var("f") if ty == "f" else Var("a", ty)
            return [f"{targets[0]}, {targets[1]} = {rhs[0]}, {rhs[1]}"]
        if c == "swap":
            groups = {}
            for k, v in env.items():
                if v.kind == "f" and not v.readonly:
                    groups.setdefault(("f",), []).append(k)
                elif v.kind == "a" and not v.readonly:
                    groups.setdefault(("a", v.shape, v.owned), []).append(k)
            groups = [g for g in groups.values() if len(g) >= 2]
            if not groups:
                return self.stmt_assign_fallback(env)
            self.use("swap")
            g = self.d.choice(groups)
            a = self.d.choice(g)
            b = self.d.choice([x for x in g if x != a])
            if self.d.boolean():
                return [f"{a}, {b} = {b}, {a}"]
            # a simultaneous update that reads the old values of both
            e1 = self.d.choice([f"{b}", f"({a} + {b})", f"({a} * 0.5 - {b})"])
            e2 = self.d.choice([f"{a}", f"({a} - {b})", f"({b} * {a})"])
            return [f"{a}, {b} = {e1}, {e2}"]
        if c == "inplace":
            owned = [k for k, v in env.items() if v.kind == "a" and v.owned]
            if not owned:
                return self.stmt_assign_fallback(env)
            self.inplace = True
            self.use("inplace")
            w = self.d.choice(owned)
            sh = env[w].shape
            op = self.d.choice(["=", "+=", "-="])
            kinds = ["elem"]
            if self.cfg.has("row_write") and len(sh) >= 2:
                kinds.append("row")
            if self.cfg.has("slice_write"):
                kinds.append("slice")
            kind = self.d.choice(kinds)
            if kind == "elem":
                idx = ", ".join(self.index_into(env, m) for m in sh)
                return [f"{w}[{idx}] {op} {self.sexpr(env, depth - 1)}"]
            if kind == "row":
                self.use("row_write")
                i = self.index_into(env, sh[0])
                return [f"{w}[{i}] {op} {self.aexpr(env, sh[1:], depth - 1)}"]
            self.use("slice_write")
            lo = self.d.integer(0, sh[0] - 1)
            hi = self.d.integer(lo + 1, sh[0])
            if len(sh) >= 2 and self.d.boolean():
                j = self.index_into(env, sh[1])
                tgt_shape = (hi - lo,) + sh[2:]
                return [f"{w}[{lo}:{hi}, {j}] {op} {self.aexpr(env, tgt_shape, depth - 1)}"]
            tgt_shape = (hi - lo,) + sh[1:]
            rhs = self.aexpr(env, tgt_shape, depth - 1) if self.d.boolean() else self.sexpr(env, depth - 1)
            return [f"{w}[{lo}:{hi}] {op} {rhs}"]
        if c == "tcall":
            tup = [h for h in self.helpers if isinstance(h.ret, tuple) and h.ret and h.ret[0] == "tuple"]
            if not tup or not self.cfg.has("helpers"):
                return self.stmt_assign_fallback(env)
            self.use("tuple_helpers")
            h = self.d.choice(tup)
            args = ", ".join(self.expr_of(env, p, depth - 1) for p in h.params)
            targets = []
            for t in h.ret[1:]:
                cands = [k for k, v in env.items() if not v.readonly and not v.owned and
                         (v.kind == "f" if t == "f" else v.kind == "a" and v.shape == t)]
                if cands and self.d.boolean():
                    targets.append(self.d.choice([x for x in cands if x not in targets] or [None]))
                else:
                    targets.append(None)
                if targets[-1] is None:
                    nm = self.fresh("s" if t == "f" else "a")
                    targets[-1] = nm
            for nm, t in zip(targets, h.ret[1:]):
                env[nm] = Var("f") if t == "f" else Var("a", t)
            return [f"{targets[0]}, {targets[1]} = {h.name}({args})"]
        if c == "if":
            return self.if_stmt(env, nest, ctx)
        if c == "for":
            return self.for_stmt(env, nest, ctx)
        if c == "while":
            return self.while_stmt(env, nest, ctx)
        if c in ("break", "continue"):
            self.use(c)
            return [f"if {self.cond(env, depth - 1)}:", f"    {c}"]
        if c == "ret":
            self.use("early_return")
            if ctx.get("loop"):
                self.use("return_in_loop")
            return [f"if {self.cond(env, depth - 1)}:", f"    return {self.ret_expr(env, ctx)}"]
        raise AssertionError(c)

    def stmt_assign_fallback(self, env):
        name = self.fresh("s")
        e = self.sexpr(env, self.cfg.max_depth)
        env[name] = Var("f")
        return [f"{name} = {e}"]

    def ret_expr(self, env, ctx):
        ty = ctx.get("ret", "f")
        if isinstance(ty, tuple) and ty and ty[0] == "tuple":
            return ", ".join(self.expr_of(env, t, self.cfg.max_depth - 1) for t in ty[1:])
        return self.expr_of(env, ty, self.cfg.max_depth - 1)

    @staticmethod
    def indent(lines):
        return ["    " + ln for ln in lines]

    def sub_block(self, env, nest, ctx):
        """A nested block: its new names stay local to it."""
        inner = env.copy()
        lines, inner = self.block(inner, nest + 1, ctx)
        return self.indent(lines), inner

    def if_stmt(self, env, nest, ctx):
        self.use("if")
        depth = self.cfg.max_depth - 1
        out = [f"if {self.cond(env, depth)}:"]
        body, e1 = self.sub_block(env, nest, ctx)
        out += body
        branch_envs = [e1]
        if self.cfg.has("elif") and self.d.integer(0, 3) == 3:
            self.use("elif")
            out.append(f"elif {self.cond(env, depth)}:")
            body, e2 = self.sub_block(env, nest, ctx)
            out += body
            branch_envs.append(e2)
        if self.cfg.has("else") and self.d.boolean():
            self.use("else")
            out.append("else:")
            body, e3 = self.sub_block(env, nest, ctx)
            out += body
            branch_envs.append(e3)
            # names bound (with one type) in every branch stay defined after the if
            for k in branch_envs[0]:
                if k in env:
                    continue
                vs = [be.get(k) for be in branch_envs]
                if all(v is not None and v.kind == vs[0].kind and v.shape == vs[0].shape for v in vs) \
                        and not any(v.owned for v in vs):
                    env[k] = dataclasses.replace(vs[0])
        return out

    def for_stmt(self, env, nest, ctx):
        inner = env.copy()
        opts = [(None, "range")]
        if self.cfg.has("for_n"):
            opts.append(("for_n", "n"))
        if self.cfg.has("reversed_range"):
            opts.append(("reversed_range", "rev"))
        arrs = env.arrays()
        if arrs and self.cfg.has("for_rows"):
            opts.append(("for_rows", "rows"))
            if self.cfg.has("enumerate"):
                opts.append(("enumerate", "enum"))
            pairs = [(a, b) for a in arrs for b in arrs if a < b and env[a].shape[0] == env[b].shape[0]]
            if self.cfg.has("zip") and pairs:
                opts.append(("zip", "zip"))
        c = self.pick(opts)
        i = self.fresh("i")

        def row(a, nm):
            sh = env[a].shape
            inner[nm] = Var("f", readonly=True) if len(sh) == 1 else Var("a", sh[1:], readonly=True)

        if c == "range":
            self.use("for_range")
            k = self.d.integer(1, 4)
            head = f"for {i} in range({k}):"
            inner[i] = Var("i", bound=k - 1, readonly=True)
        elif c == "n":
            self.use("for_n")
            nn = self.n_name
            if self.d.boolean() or nn is None:
                head = f"for {i} in range({nn}):" if nn else f"for {i} in range(2):"
            else:
                head = f"for {i} in range(1, {nn} + 1):"
            inner[i] = Var("i", bound=(self.n_bound if nn else 1) + 1, readonly=True)
        elif c == "rev":
            self.use("reversed_range")
            k = self.d.integer(1, 4)
            head = f"for {i} in range({k - 1}, -1, -1):"
            inner[i] = Var("i", bound=k - 1, readonly=True)
        elif c == "rows":
            self.use("for_rows")
            a = self.d.choice(arrs)
            r = self.fresh("r")
            head = f"for {r} in {a}:"
            row(a, r)
        elif c == "enum":
            self.use("enumerate")
            a = self.d.choice(arrs)
            r = self.fresh("r")
            head = f"for {i}, {r} in enumerate({a}):"
            inner[i] = Var("i", bound=env[a].shape[0] - 1, readonly=True)
            row(a, r)
        else:
            self.use("zip")
            a, b = self.d.choice(pairs)
            r1, r2 = self.fresh("r"), self.fresh("r")
            head = f"for {r1}, {r2} in zip({a}, {b}):"
            row(a, r1)
            row(b, r2)
        lines, _ = self.block(inner, nest + 1, dict(ctx, loop=True))
        return [head] + self.indent(lines)

    def while_stmt(self, env, nest, ctx):
        self.use("while")
        k = self.fresh("k")
        limit = self.d.integer(1, 4)
        env[k] = Var("i", bound=limit, readonly=True)
        inner = env.copy()
        if self.d.boolean():
            head = f"while {k} < {limit}:"
        else:
            head = f"while {k} < {limit} and {self.cond(env, self.cfg.max_depth - 2)}:"
        lines, _ = self.block(inner, nest + 1, dict(ctx, loop=True))
        return [f"{k} = 0", head, f"    {k} += 1"] + self.indent(lines)

    # ------------------------------------------------------------------ functions
    def helper_sig(self, env_shapes):
        nparams = self.d.integer(1, 2)
        params = []
        for _ in range(nparams):
            if env_shapes and self.d.boolean():
                params.append(self.d.choice(env_shapes))
            else:
                params.append("f")
        kinds = ["f", "a"]
        if self.cfg.has("tuple_helpers"):
            kinds.append("t")
        rk = self.d.choice(kinds)

        def one():
            return "f" if not env_shapes or self.d.boolean() else self.d.choice(env_shapes)
        if rk == "f":
            ret = "f"
        elif rk == "a":
            ret = self.d.choice(env_shapes) if env_shapes else "f"
        else:
            ret = ("tuple", one(), one())
        return params, ret

    def helper_def(self, name, params, ret):
        env = Env()
        names = []
        for p in params:
            nm = self.fresh("p")
            names.append(nm)
            env[nm] = Var("f") if p == "f" else Var("a", p)
        saved, saved_n = self.helpers, self.n_name
        self.helpers = [h for h in saved]          # helpers defined earlier can be called
        self.n_name = None                         # helpers see only their parameters
        lines, env = self.block(env, max(self.cfg.max_nest - 1, 0), dict(func=True, ret=ret), min_stmts=0)
        if lines == ["pass"]:
            lines = []
        self.helpers, self.n_name = saved, saved_n
        ret_src = self.ret_expr(env, dict(ret=ret))
        return [f"def {name}({', '.join(names)}):"] + self.indent(lines + [f"return {ret_src}"])

    def program(self, seed):
        cfg = self.cfg
        # the signature of f
        kinds = ["f"]
        names = ["x"]
        n_arr = self.d.integer(0, cfg.max_arrays)
        for j in range(n_arr):
            nd = self.d.integer(1, 3)
            kinds.append(tuple(self.small() for _ in range(nd)))
            names.append("ABC"[j])
        n_value = self.d.choice([2, 1, 3, 0])
        kinds.append("i")
        names.append("n")
        self.n_bound = n_value
        shapes = [k for k in kinds if isinstance(k, tuple)]
        module = ["import math", "", "import numpy as np", ""]
        # module-level helpers
        if cfg.has("helpers"):
            for _ in range(self.d.integer(0, cfg.max_helpers)):
                name = self.fresh("h")
                params, ret = self.helper_sig(shapes)
                src = self.helper_def(name, params, ret)
                module += ["", *src, ""]
                self.helpers.append(Helper(name, params, ret))
                self.use("helpers")
        env = Env()
        for nm, k in zip(names, kinds):
            env[nm] = Var("f") if k == "f" else Var("i", bound=n_value, readonly=True) if k == "i" else Var("a", k)
        body = []
        self.n_name = "n"
        if cfg.has("nested_helpers") and self.d.integer(0, 2) == 2:
            name = self.fresh("g")
            params, ret = self.helper_sig(shapes)
            body += self.helper_def(name, params, ret)
            self.helpers.append(Helper(name, params, ret))
            self.use("nested_helpers")
        lines, env = self.block(env, 0, dict(func=True, ret="f"))
        body += lines
        body.append(f"return {self.final_return(env)}")
        module += ["", f"def f({', '.join(names)}):"] + self.indent(body) + [""]
        src = "\n".join(module) + "\n"
        return Program(src, names, kinds, n_value, seed, frozenset(self.used), self.inplace)

    def final_return(self, env):
        """A scalar that every live float variable may feed, so a wrong value anywhere shows."""
        terms = []
        for k, v in env.items():
            if v.kind not in "fa":
                continue
            c = self.d.integer(0, 2)
            if c == 0:
                continue
            if v.kind == "f":
                terms.append(k if c == 1 else f"np.sin({k})")
            else:
                terms.append(f"np.sum({k})" if c == 1 else f"np.sum(np.sin({k}) * {k})")
        if not terms:
            return self.sexpr(env, 1)
        return " + ".join(terms)


def generate(drawer, config: Optional[Config] = None, seed: Optional[int] = None) -> Program:
    cfg = config or Config()
    if seed is None:
        seed = drawer.integer(0, 2 ** 16)
    return Generator(drawer, cfg).program(seed)


def programs(config: Optional[Config] = None):
    """A hypothesis strategy of ``Program`` (shrinks toward short, simple programs)."""
    from hypothesis import strategies as st
    from .draw import HypothesisDrawer

    @st.composite
    def _programs(draw):
        return generate(HypothesisDrawer(draw), config)
    return _programs()
