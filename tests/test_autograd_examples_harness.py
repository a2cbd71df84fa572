"""The autograd-examples survey (tests/autograd_examples/): its pickle-free records round-trip, its verdicts
follow the documented statuses, it extracts and rewrites the examples from the sdist, and the harness
records a funcgrad gradient call (reading the original text of a source file); no network, no autograd."""
import io
import json
import os
import tarfile

import numpy as np
import pytest

from tests.autograd_examples import records as R
from tests.autograd_examples import run as RUN


def _same_tree(a, b):
    """Equal values and the very same types, all the way down."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_tree(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_tree(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    else:
        assert a == b


def test_pytree_round_trip_without_pickle(tmp_path):
    tree = ([np.arange(6.0).reshape(2, 3), np.array([1 + 2j, np.nan]), np.array([True, False])],
            {"W": np.float32(1.5), "b": (None, 3, 2.5, 1j, "name", True), 7: np.int64(-4)},
            np.array(np.inf))
    blob = R.save_tree(tree, str(tmp_path / "t.npz"))
    json.dumps(blob)  # the structure is plain JSON
    with np.load(tmp_path / "t.npz", allow_pickle=False) as z:  # every leaf an ordinary array
        assert all(z[k].dtype != object for k in z.files) and len(z.files) == 9
    _same_tree(R.load_tree(json.loads(json.dumps(blob)), str(tmp_path)), tree)


@pytest.mark.parametrize("value", [lambda x: x, np.array([object()], dtype=object), {(1, 2): 3.0},
                                   np.dtype("float64")])
def test_values_the_record_cannot_hold_are_refused(tmp_path, value):
    with pytest.raises(R.NotRecordable):
        R.save_tree([1.0, value], str(tmp_path / "t.npz"))


def test_a_result_of_the_programs_own_class_is_recorded_by_its_attributes(tmp_path):
    def kernel(a, b):
        return a * b

    Fun = type("Fun", (), {"__module__": "__main__"})   # a class the example program (run as __main__) defines

    def fun(alphas):
        f = Fun()
        f.alphas, f.kernel = alphas, kernel
        return f

    with pytest.raises(R.NotRecordable):   # as an argument: autograd could not be called with its record
        R.save_tree(fun({0: 1.0}), str(tmp_path / "a.npz"))
    with pytest.raises(R.NotRecordable):   # a function is a result's attribute only, never a result
        R.save_tree(kernel, str(tmp_path / "k.npz"), objects=True)
    blob = R.save_tree(fun({0: 1.5, 3: np.float64(2.0)}), str(tmp_path / "r.npz"), objects=True)
    back = R.load_tree(json.loads(json.dumps(blob)), str(tmp_path))
    assert back == {"__class__": "Fun", "alphas": {0: 1.5, 3: 2.0}, "kernel": f"<function {kernel.__qualname__}>"}
    assert R.compare(back, {"__class__": "Fun", "alphas": {3: 2.0, 0: 1.5}, "kernel": back["kernel"]})[0]
    assert R.compare(back, {"__class__": "Fun", "alphas": {0: 1.5, 2: 2.0}, "kernel": back["kernel"]})[3] == \
        "different dict keys"
    assert not R.compare(back, {"__class__": "Fun", "alphas": {0: 1.5, 3: 2.5}, "kernel": back["kernel"]})[0]
    assert not R.compare(back, {"__class__": "Other", "alphas": {0: 1.5, 3: 2.0}, "kernel": back["kernel"]})[0]


def test_state_round_trip_keeps_tuple_keys(tmp_path):
    key = ("grad(f)", 0, 1)
    state = {"status": "ok", "records": {key: {"seq": 1, "seconds": 0.5}}, "order": [key]}
    R.write_state(state, str(tmp_path / "s.json"))
    back = R.read_state(str(tmp_path / "s.json"))
    assert back["records"] == {key: {"seq": 1, "seconds": 0.5, "key": list(key)}} and back["order"] == [key]


def test_compare():
    a = {"w": np.array([1.0, 2.0]), "b": 3.0}
    assert R.compare(a, {"b": 3.0, "w": np.array([1.0, 2.0 + 1e-9])})[0]  # dict order does not matter
    ok, mad, _, _ = R.compare(a, {"b": 3.0, "w": np.array([1.0, 2.1])})
    assert not ok and mad == pytest.approx(0.1)
    assert not R.compare([np.array([1.0, np.nan])], [np.array([1.0, 1.0])])[0]  # NaN where autograd has none
    assert R.compare([np.array([1.0, np.nan])], [np.array([1.0, np.nan])])[0]
    assert R.compare(np.ones(3), np.ones((1, 3)))[0]
    assert not R.compare(np.ones((2, 3)), np.ones((3, 2)))[0]
    assert R.compare((1.0, 2.0), (1.0,))[3] == "2 leaves vs 1"
    assert not R.compare(np.array([1e-3]), np.array([0.0]))[0]  # atol scales with max|autograd|, here 1


def _rec(seq, result=None, error=None, seconds=1.0, args_equal=True):
    r = {"seq": seq, "seconds": seconds, "error": error, "structure": "ndarray", "args_equal": args_equal}
    r["result_blob"] = None if result is None else "x"
    r["result"] = result
    return r


K1, K2 = ("grad(f)", 0, 0), ("grad(f)", 0, 1)
ERR = {"type": "TypeError", "first": "boom", "traceback": "..."}


def _judge(fg_recs, ag_recs, fg_status="ok", ag_status="ok", fg_error=None):
    return R.judge("ex", {"status": fg_status, "records": fg_recs, "error": fg_error},
                   {"status": ag_status, "records": ag_recs, "error": None})


def test_judge_statuses():
    one, two = np.array([1.0]), np.array([2.0])
    r = _judge({K2: _rec(2, one, seconds=0.1), K1: _rec(1, two, seconds=3.0)}, {K1: _rec(1, two), K2: _rec(2, one)})
    assert r["status"] == "MATCH" and r["n_compared"] == 2 and r["fg_first_call_s"] == 3.0  # the first by seq
    assert _judge({K1: _rec(1, one)}, {K1: _rec(1, one + 0.25)})["status"] == "MISMATCH 0.25"
    # a gradient call that raised, even when the program went on (caught it): an error, not a match
    r = _judge({K1: _rec(1, one), K2: _rec(2, error=ERR)}, {K1: _rec(1, one), K2: _rec(2, one)})
    assert r["status"] == "FUNCGRAD ERROR" and "traceback" not in r["calls"][1]["error"]
    assert _judge({}, {}, fg_status="error", fg_error=ERR)["status"] == "FUNCGRAD ERROR"
    assert _judge({}, {}, fg_status="error", ag_status="error", fg_error=ERR)["status"] == "AUTOGRAD ALSO FAILS"
    assert _judge({K1: _rec(1, one)}, {K1: _rec(1, one)}, fg_status="timeout")["status"] == "TIMEOUT"
    assert _judge({K1: _rec(1, one)}, {}, ag_status="crash")["status"] == "AUTOGRAD FAILS (funcgrad ran)"
    r = _judge({K1: _rec(1, one)}, {K1: _rec(1, None)})  # autograd's result could not be recorded
    assert r["status"] == "NO GRADIENT COMPARED" and r["calls"][0]["status"] == "not comparable"
    assert _judge({}, {})["status"] == "NO GRADIENT COMPARED"


def _sdist(path, files):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"autograd-{RUN.VERSION}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_prepare_extracts_and_rewrites_the_examples(tmp_path):
    png = bytes(range(256))
    _sdist(tmp_path / "a.tar.gz", {
        "examples/demo.py": b"import autograd.numpy as np\nfrom autograd import grad\n",
        "examples/data.py": b"import autograd.numpy as np\n",
        "examples/fluidsim/wing.py": b"from autograd import value_and_grad\n",
        "examples/fluidsim/wing.png": png,
        "tests/test_x.py": b"",
    })
    src = str(tmp_path / "src")
    examples = RUN.prepare(str(tmp_path / "a.tar.gz"), src)
    assert examples == {"demo": "demo.py", "wing": "fluidsim/wing.py"}  # helpers are not examples
    read = lambda *p: open(os.path.join(src, *p), "rb").read()  # noqa: E731
    assert read("fg", "demo.py") == b"import numpy as np\nfrom funcgrad import grad\n"
    assert read("orig", "demo.py") == b"import autograd.numpy as np\nfrom autograd import grad\n"
    assert read("fg", "data.py") == b"import numpy as np\n"
    assert read("fg", "fluidsim", "wing.png") == png == read("orig", "fluidsim", "wing.png")


EXAMPLE = '''\
import numpy as np
from funcgrad import grad

text = open(__file__).read()          # like lstm.py: trains on its own source
f = lambda x: np.sum(x ** 3)
print(grad(f)(np.array([1.0, float(len(text))])))
'''


def test_harness_records_a_funcgrad_call_on_the_original_text(tmp_path):
    work = str(tmp_path)
    for kind, text in (("fg", EXAMPLE), ("orig", EXAMPLE.replace("funcgrad", "autograd") + "# original\n")):
        os.makedirs(os.path.join(work, "src", kind))
        with open(os.path.join(work, "src", kind, "mine.py"), "w") as fh:
            fh.write(text)
    n = len(open(os.path.join(work, "src", "orig", "mine.py")).read())
    path, state = RUN.run_one("mine", "mine.py", "fg", 120, work)
    assert state["status"] == "ok", open(state["log"]).read()
    assert state["lib_file"].startswith(os.path.join(RUN.ROOT, "funcgrad"))
    (key, rec), = state["records"].items()
    assert key == ("grad(<lambda>@5)", 0, 0) and rec["error"] is None
    args, kwargs = R.load_tree(rec["args_blob"], R.arrays_dir(path))
    assert kwargs == {} and np.array_equal(args[0], [1.0, n])  # the original file's length, not the copy's
    result = R.load_tree(rec["result_blob"], R.arrays_dir(path))
    assert np.allclose(result, [3.0, 3.0 * n * n])
