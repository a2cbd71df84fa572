"""Right or refused on NumPy as people call it: programs from ``tests/fuzz/gen_numpy.py``.

The second generator (independent of ``gen.py``) writes the breadth of the NumPy API funcgrad documents
(elementwise math, reductions with axis/keepdims, shape operations, indexing forms, np.linalg,
scipy.special, method forms, bool/int arrays in arithmetic, float32) into loops and branches with run-time
trip counts. Each program is checked by ``tests/fuzz/check.py`` in every mode against plain Python and
central differences. A fixed set of seeds (``FUZZ_NUMPY_SEEDS``, ``start:stop``; default 6 programs: the suite keeps to 15 minutes) runs
here; ``python -m tests.fuzz.gen_numpy --n N --seed S`` is the long run.

The found programs (``/work/notes/s18/found_fzb.md``) are checked by name below, reduced to a few lines.
"""
import os
import warnings

import numpy as np
import pytest

from tests.fuzz import gen_numpy
from tests.fuzz.check import FAILURE, check_program

_lo, _, _hi = os.environ.get("FUZZ_NUMPY_SEEDS", "5000:5006").partition(":")
SEEDS = range(int(_lo), int(_hi))


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_numpy_program_is_right_or_refused(seed):
    prog = gen_numpy.generate(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = gen_numpy.check(prog, timeout=300)
    assert out.status != FAILURE, f"seed {seed} (n={prog.n}, {prog.dtype}):\n{prog.source}\n{out}"


def test_generator_is_reproducible_and_mostly_valid():
    assert gen_numpy.generate(7).source == gen_numpy.generate(7).source
    assert gen_numpy.generate(7).source != gen_numpy.generate(8).source
    ok = 0
    for seed in range(60):
        prog = gen_numpy.generate(seed)
        ns = {}
        try:
            with np.errstate(all="raise"), warnings.catch_warnings():
                warnings.simplefilter("error")
                exec(compile(prog.source, f"<gen_numpy {seed}>", "exec"), ns)
                value = ns["f"](*prog.make_args())
            ok += isinstance(value, (float, np.floating))
        except Exception:
            pass
    assert ok >= 50, f"only {ok} of 60 generated programs run in plain Python"


# ---------------------------------------------------------------- found by gen_numpy (found_fzb.md)
_X = np.arange(12.0).reshape(3, 4) / 10 - 0.25   # no exact zero: x > 0 has a kink there
FOUND = {
    # 1: np.take without axis, the indices a list literal (IndexError in the Python modes)
    "take_list_no_axis": ("import numpy as np\n\ndef f(x):\n    return np.sum(np.take(x, [0, 2, 1, 2]) * x[0])\n",
                          (_X,)),
    # 2: sum/mean of a bool array (a count) and mean of an int array under njit
    "sum_of_bools": ("import numpy as np\n\ndef f(x):\n    return np.sum(x) * np.sum(x > 0)\n", (_X,)),
    "mean_of_bools_axis": ("import numpy as np\n\ndef f(x):\n    return np.sum(x * np.mean(x > 0, axis=0))\n", (_X,)),
    "branch_on_count": ("import numpy as np\n\ndef f(x):\n    if (x > 0).sum() >= 2:\n        return np.sum(x ** 2)\n"
                        "    return -np.sum(x)\n", (_X,)),
    # 3: the same under scans, axes and method forms
    "cumsum_of_bools_axis": ("import numpy as np\n\ndef f(x):\n    return np.sum(x * np.cumsum(x > 0, axis=1))\n", (_X,)),
    "mean_of_ints_axis": ("import numpy as np\n\ndef f(x):\n    k = np.arange(12).reshape(3, 4)\n"
                          "    return np.sum(x * np.mean(k, axis=1, keepdims=True))\n", (_X,)),
    "count_method": ("import numpy as np\n\ndef f(x):\n    m = x > 0\n    return np.sum(x) * m.sum(axis=1)[0] + m.mean() * np.sum(x)\n",
                     (_X,)),
    "mean_of_ints": ("import numpy as np\n\ndef f(x):\n    return np.sum(x) * np.mean(np.arange(4))\n", (_X,)),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_numpy_program(name):
    src, args = FOUND[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = check_program(src, args, (0,), timeout=300)
    assert out.status != FAILURE, f"{name}:\n{src}\n{out}"
