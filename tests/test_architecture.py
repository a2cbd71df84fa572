"""The layers run downhill, and no funcgrad import hides inside a function body.

Layers, lowest first (DESIGN.md, README "Architecture"):

    errors, tree, builtins -> kernels -> ops -> custom -> transform -> api, differential
        -> nn, optim, data, checkpoint, initializers, testing, test_util -> dist -> the package itself

A module may import only from its own layer or below, imports inside one
layer form no cycle, and every import of a funcgrad module is at module level
(optional third-party dependencies may be imported lazily, each with its
reason in a comment).
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# installed name -> folder in the repository (pyproject's package-dir)
PARTS = {"funcgrad": "funcgrad", "funcgrad.kernels": "kernels", "funcgrad.dist": "dist"}
LAYERS = [
    {"funcgrad.errors", "funcgrad.tree", "funcgrad.builtins"},
    {"funcgrad.kernels"},
    {"funcgrad.ops"},
    {"funcgrad.custom"},
    {"funcgrad.transform"},
    {"funcgrad.api"},
    {"funcgrad.forward_mode"},
    {"funcgrad.differential"},
    {"funcgrad.nn", "funcgrad.optim", "funcgrad.data", "funcgrad.checkpoint", "funcgrad.initializers",
     "funcgrad.testing", "funcgrad.test_util", "funcgrad.misc", "funcgrad.autograd_api"},
    {"funcgrad.dist"},
    {"funcgrad"},
]


def _modules():
    out = {}
    for pkg, folder in PARTS.items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and
                           os.path.join(dirpath, d) not in [os.path.join(ROOT, f) for f in PARTS.values()]]
            for fn in files:
                if not fn.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), base)[:-3].replace(os.sep, ".")
                name = pkg if rel == "__init__" else pkg + "." + rel.removesuffix(".__init__")
                out[name] = os.path.join(dirpath, fn)
    return out


MODULES = _modules()


def _layer(mod):
    best, idx = None, None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if mod == prefix or mod.startswith(prefix + "."):
                if best is None or len(prefix) > len(best):
                    best, idx = prefix, i
    return idx


def _resolve(node, mod, is_pkg):
    """The funcgrad modules an import statement names (absolute, with submodules where named)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "funcgrad" or a.name.startswith("funcgrad.")]
    if node.level:
        parts = mod.split(".")
        base = parts if is_pkg else parts[:-1]
        base = base[:len(base) - (node.level - 1)]
        root = ".".join(base + ([node.module] if node.module else []))
    else:
        root = node.module or ""
    if not (root == "funcgrad" or root.startswith("funcgrad.")):
        return []
    out = []
    for a in node.names:
        sub = f"{root}.{a.name}"
        out.append(sub if sub in MODULES else root)
    return out


def _imports():
    edges = []   # (module, imported module, line, inside a function)
    for mod, path in MODULES.items():
        tree = ast.parse(open(path).read())
        is_pkg = path.endswith("__init__.py")

        def visit(node, in_func):
            for child in ast.iter_child_nodes(node):
                f = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _resolve(child, mod, is_pkg):
                        edges.append((mod, target, child.lineno, in_func))
                visit(child, f)

        visit(tree, False)
    return edges


EDGES = _imports()


def test_every_module_is_in_a_layer():
    missing = sorted(m for m in MODULES if _layer(m) is None)
    assert not missing, f"modules outside every layer (add them to LAYERS): {missing}"


def test_no_uphill_import():
    bad = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)}) at line {line}"
           for m, t, line, _ in EDGES if _layer(t) is not None and _layer(t) > _layer(m)]
    assert not bad, "uphill imports:\n" + "\n".join(bad)


def test_no_funcgrad_import_inside_a_function():
    bad = [f"{m}:{line} imports {t} inside a function" for m, t, line, inside in EDGES if inside]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph = {}
    for m, t, _, _ in EDGES:
        if t != m and t in MODULES and not (m.startswith(t + ".") and MODULES[t].endswith("__init__.py")):
            graph.setdefault(m, set()).add(t)
    seen, stack, cycles = set(), [], []

    def dfs(n, on_path):
        if n in on_path:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen:
            return
        seen.add(n)
        on_path.add(n)
        stack.append(n)
        for t in sorted(graph.get(n, ())):
            dfs(t, on_path)
        stack.pop()
        on_path.discard(n)

    for n in sorted(graph):
        dfs(n, set())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_module_has_a_docstring_saying_what_it_owns(mod):
    tree = ast.parse(open(MODULES[mod]).read())
    assert ast.get_docstring(tree), f"{MODULES[mod]} has no module docstring"


def test_the_normalizers_parts_define_each_method_once():
    # Normalizer is one class made of mixins (statements, expressions, calls, captures, runtime lists): a method
    # defined in two of them is silently shadowed by the one earlier in the MRO. It happened once (range() in zip
    # added a range_length beside Calls.range_length, and len(range(a, b, s)) raised TypeError)
    from funcgrad.transform.normalize import Normalizer
    owner, twice = {}, []
    for cls in Normalizer.__mro__[1:]:
        if not cls.__module__.startswith("funcgrad.transform.normalize"):
            continue
        for name, obj in vars(cls).items():
            if name.startswith("__") or not (callable(obj) or isinstance(obj, (staticmethod, classmethod, property))):
                continue
            if name in owner:
                twice.append(f"{name}: {owner[name].__name__} and {cls.__name__}")
            owner.setdefault(name, cls)
    assert not twice, twice
