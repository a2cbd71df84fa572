"""Run under mpiexec -n p: ring_allreduce, allreduce_tree, broadcast_tree, mismatches.

Every check is an assert; a failure on any rank aborts the job (non-zero
exit), and rank 0 prints ``COLLECTIVES OK p=<p> checks=<n>`` at the end.
"""
import sys

import numpy as np
from mpi4py import MPI

import funcgrad.dist as fd
from funcgrad.dist import buckets

w = fd.world()
comm = MPI.COMM_WORLD
p, r = w.size, w.rank
checks = 0
assert w.comm is not None and w.comm != comm, "world() must use a duplicate of COMM_WORLD"
assert (w.rank, w.size) == (comm.Get_rank(), comm.Get_size())
assert w.local_rank == r and w.local_size == p, (w.local_rank, w.local_size)   # one node here


def same_on_all_ranks(a):
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    allb = np.empty((p, b.size), np.uint8)
    comm.Allgather(b, allb)
    return bool((allb == allb[0]).all())


def everyone(flag):
    return comm.allreduce(bool(flag), op=MPI.LAND)


# ---------------------------------------------------------------- ring_allreduce
sizes = [1, p - 1, p, p + 1, 7, 1000, 65539, 2 ** 20]
for algo in ("auto", "ring", "mpi"):
    for n in sizes:
        for dt in (np.float32, np.float64, np.int64):
            rng = np.random.default_rng(1000 * r + n)
            x = rng.integers(-1000, 1000, n).astype(dt)          # integer-valued: sums exact
            x0 = x.copy()
            ref = np.empty_like(x)
            comm.Allreduce(x, ref, op=MPI.SUM)
            y = fd.ring_allreduce(x, algorithm=algo)
            assert np.array_equal(x, x0), f"input modified {algo} n={n} {dt}"
            assert y.dtype == x.dtype and y.shape == x.shape
            assert np.array_equal(y, ref), f"ring != Allreduce: {algo} n={n} {dt}"
            assert same_on_all_ranks(y), f"not bit-identical across ranks: {algo} n={n} {dt}"
            checks += 3
            if dt is not np.int64:
                # general floats: close to MPI, and identical bits on every rank
                xf = rng.standard_normal(n).astype(dt)
                reff = np.empty_like(xf)
                comm.Allreduce(xf, reff, op=MPI.SUM)
                yf = fd.ring_allreduce(xf, op="mean", algorithm=algo)
                tol = 1e-5 if dt is np.float32 else 1e-12
                assert np.allclose(yf, reff / p, rtol=tol, atol=tol), f"mean wrong {algo} n={n}"
                assert same_on_all_ranks(yf), f"mean not bit-identical {algo} n={n} {dt}"
                checks += 2
# in place, 2-D, out=
x = np.arange(12 * 5, dtype=np.float64).reshape(12, 5) * (r + 1)
expect = np.arange(60, dtype=np.float64).reshape(12, 5) * (p * (p + 1) / 2)
out = fd.ring_allreduce(x, out=x, algorithm="ring")
assert out is x and np.array_equal(x, expect)
o = np.empty((12, 5))
res = fd.ring_allreduce(np.ones((12, 5)), out=o)
assert res is o and np.all(o == p)
checks += 2
# out aliasing x through another view
for algo in ("ring", "mpi"):
    base = np.arange(10, dtype=np.float64) + r
    res = fd.ring_allreduce(base, out=base[:], algorithm=algo)
    assert np.array_equal(res, np.arange(10) * p + sum(range(p))), (algo, res)
    checks += 1
# int32
yi = fd.ring_allreduce(np.full(100, r, dtype=np.int32), algorithm="ring")
assert yi.dtype == np.int32 and np.all(yi == sum(range(p)))
checks += 1

# ------------------------------------------------------------- mismatch errors
def expect_mismatch(fn, words):
    global checks
    try:
        fn()
    except fd.CommMismatchError as e:
        msg = str(e)
        ok = all(wd in msg for wd in words)
        assert ok, f"mismatch message lacks {words}: {msg}"
        raised = True
    else:
        raised = False
    assert everyone(raised), "a mismatch must raise on every rank"
    checks += 1


expect_mismatch(lambda: fd.ring_allreduce(np.ones(10 + (r == p - 1))), ["length", "rank 0: 10", f"rank {p - 1}: 11"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(2 ** 18 + r)), ["length"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(10, dtype=np.float32 if r == 0 else np.float64)),
                ["dtype", "float32", "float64"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(10), op="sum" if r else "mean"), ["op"])
# trees: the message names each leaf that differs, with every rank's shape and dtype
expect_mismatch(lambda: fd.allreduce_tree({"a": np.ones(3), "b": np.ones(2 + (r == 1))}),
                ["different trees", "tree['b']: ", "rank 1 (3,) float64", "rank 0" if p == 2 else "ranks 0, 2"])
expect_mismatch(lambda: fd.broadcast_tree([np.ones(3)] * (1 + (r == 0))), ["tree[1]: rank 0 (3,) float64, rank", "missing"])
expect_mismatch(lambda: fd.allreduce_tree((np.ones(2),) if r == 0 else [np.ones(2)]), ["structure: rank 0"])
# shapes, not only lengths
expect_mismatch(lambda: fd.ring_allreduce(np.ones((3, 4) if r != p - 1 else (4, 3))),
                ["shape", "rank 0: (3, 4)", f"rank {p - 1}: (4, 3)"])
fd.ring_allreduce(np.ones(12))    # a 1-D shape seen before another one: still reported as itself
fd.ring_allreduce(np.ones(5))
expect_mismatch(lambda: fd.ring_allreduce(np.ones((12,) if r else (3, 4))), ["shape", "rank 0: (3, 4)", "rank 1: (12,)"])
# the small-message path (data in the control allreduce) against the header-only path
S = w._ctl.slots
expect_mismatch(lambda: fd.ring_allreduce(np.ones(S if r == 0 else S + 1)), ["length", f"rank 0: {S}", f"rank 1: {S + 1}"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(10, dtype=np.float32 if r == 0 else np.int64)),
                ["dtype", "float32", "int64"])
# large messages (the ring; at p = 2 the check rides next to the first ring message): length,
# dtype (different byte counts) and op (same byte counts) mismatches, then the ring still works
expect_mismatch(lambda: fd.ring_allreduce(np.ones(2 ** 18 - 5 * r)), ["length", f"rank 0: {2 ** 18}"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(2 ** 18, dtype=np.float32 if r == 0 else np.float64)),
                ["dtype", "float32", "float64"])
expect_mismatch(lambda: fd.ring_allreduce(np.ones(2 ** 18), op="sum" if r else "mean"), ["op", "sum", "mean"])
big = fd.ring_allreduce(np.full(2 ** 18, r + 1.0))
assert np.all(big == p * (p + 1) / 2) and same_on_all_ranks(big)
checks += 1
# different operations on different ranks: the same clear error everywhere, naming them
expect_mismatch(lambda: fd.ring_allreduce(np.ones(5)) if r == 0 else fd.allreduce_tree({"a": np.ones(5)}),
                ["operation", "rank 0: ring_allreduce", "rank 1: allreduce_tree"])
# float16 rides in the control allreduce too; sizes at the boundary of the payload
for n in (S - 1, S, S + 1):
    for dt in (np.float16, np.float32):
        xs = (np.arange(n) % 5 + r).astype(dt)
        comm.Allreduce(xs.astype(np.float64), ref64 := np.empty(n), op=MPI.SUM)
        ys = fd.ring_allreduce(xs)
        assert ys.dtype == dt and np.array_equal(ys, ref64.astype(dt)) and same_on_all_ranks(ys), (n, dt)
        checks += 1
# after the mismatches the communicator still works
assert np.all(fd.ring_allreduce(np.ones(5)) == p)
checks += 1

# ------------------------------------------------ repeated calls: the check rides in the data's round
for n in (10, 1000, 5000, 2 ** 17 + 3):            # folded, small, mid-size (data in the round), ring
    for dt in (np.float32, np.float64, np.int64, np.int32):
        for rep in range(4):
            xr = (np.arange(n) % 7 + r + rep).astype(dt)
            x0 = xr.copy()
            yr = fd.ring_allreduce(xr)
            ref = np.empty_like(xr)
            comm.Allreduce(xr, ref, op=MPI.SUM)
            assert np.array_equal(yr, ref) and np.array_equal(xr, x0) and same_on_all_ranks(yr), (n, dt, rep)
            checks += 1
        assert w._spec.cur is not None and w._spec.cur.sig[0] == n, "repeated calls must speculate"
    for rep in range(4):                          # general floats through the repeated path: same bits
        xg = np.random.default_rng(100 * r + rep).standard_normal(n) * 10.0 ** rep
        assert same_on_all_ranks(fd.ring_allreduce(xg, op="mean")), (n, rep)
        checks += 1
    ym = fd.ring_allreduce(np.full(n, r + 1.0), op="mean")    # a new signature: plain path, then again
    ym = fd.ring_allreduce(np.full(n, r + 1.0), op="mean", out=ym)
    assert np.allclose(ym, (p + 1) / 2) and same_on_all_ranks(ym)
    # a mismatch while speculating raises on every rank, and the next calls work
    expect_mismatch(lambda: fd.ring_allreduce(np.ones(n + (r == p - 1))), ["length", f"rank {p - 1}: {n + 1}"])
    for rep in range(3):
        fd.ring_allreduce(np.ones(n))
    expect_mismatch(lambda: fd.ring_allreduce(np.ones(n, dtype=np.float32 if r else np.float64)), ["dtype"])
    assert np.all(fd.ring_allreduce(np.ones(n)) == p)
    checks += 2

# --------------------- repeated calls on the same x and out (ring._PLANS skips the argument checks)
from funcgrad.dist import ring as ring_mod  # noqa: E402
from funcgrad.dist.shm import NODE_SHM_BYTES, NODE_SHM_MIN_BYTES  # noqa: E402

# folded, control-size, data-in-round, header-only round + MPI's allreduce, header-only + ring
for n in (10, 1000, 5000, 20000, 2 ** 17 + 3):
    for dt, op in ((np.float32, "sum"), (np.float64, "mean"), (np.int64, "sum")):
        xb = np.zeros(n, dtype=dt)
        ob = np.empty(n, dtype=dt)
        for rep in range(6):                      # new contents every step, same two arrays
            xb[...] = (np.arange(n) % 9 + r * (rep + 1)).astype(dt)
            ref = np.empty_like(xb)
            comm.Allreduce(xb, ref, op=MPI.SUM)
            if op == "mean":
                ref = ref / p
            res = fd.ring_allreduce(xb, op=op, out=ob)
            assert res is ob and np.array_equal(ob, ref.astype(dt)) and same_on_all_ranks(ob), (n, dt, rep)
            checks += 1
        assert ring_mod._PLANS.get(None) is not None and ring_mod._PLANS[None].xref() is xb, \
            "repeated calls on the same buffers must take the planned path"
        pl = ring_mod._PLANS[None]
        assert pl.use_mpi == (n * xb.itemsize < ring_mod._small_bytes(w)), n
        nbytes = n * xb.itemsize
        served = pl.spec.shm is not None
        assert served == (w.node_shm and NODE_SHM_MIN_BYTES <= nbytes <= NODE_SHM_BYTES), (n, dt)
        if served:
            assert pl.req is None, "calls reduced in node shared memory bind no MPI request"
        elif pl.use_mpi and nbytes > ring_mod.SPEC_DATA_BYTES:
            assert pl.token >= 2 and pl.req is not None, "repeated mid-size calls must bind"
        # a read-only out is refused, not written through the remembered view
        ob.flags.writeable = False
        try:
            fd.ring_allreduce(xb, op=op, out=ob)
        except ValueError as e:
            assert "writeable" in str(e)
        else:
            raise AssertionError("a read-only out must be refused")
        ob.flags.writeable = True
        checks += 1
        # the same buffers with another op on one rank: the round still checks, on every rank
        other = "mean" if op == "sum" and dt is not np.int64 else "sum"
        if op == "sum" and dt is np.int64:
            expect_mismatch(lambda: fd.ring_allreduce(xb, op=op, out=ob) if r else
                            fd.ring_allreduce(xb.astype(np.float64), op=op,
                                              out=np.empty(n, np.float64)), ["dtype"])
        else:
            expect_mismatch(lambda: fd.ring_allreduce(xb, op=op if r else other, out=ob), ["op"])
        for rep in range(3):                      # and the buffers work again afterwards
            xb[...] = r + rep
            fd.ring_allreduce(xb, op="sum", out=ob)
            assert np.all(ob == sum(range(p)) + p * rep)
            checks += 1
# repeated mid-size calls: one rank changes its buffers, then changes back; every call is
# right. With w.node_shm they are reduced in node shared memory (shm.NodeShm: any arrays of
# the agreed signature), else by a persistent allreduce bound to the caller's arrays, which the
# ranks bind again together
n = 20000
xa_, oa_ = np.zeros(n), np.empty(n)
xc_, oc_ = np.zeros(n), np.empty(n)
for rep in range(12):
    use_c = r == 0 and 4 <= rep < 7
    xs_, os_ = (xc_, oc_) if use_c else (xa_, oa_)
    xs_[...] = np.arange(n) * (r + 1) + rep
    xs_copy = xs_.copy()
    res = fd.ring_allreduce(xs_, out=os_)
    assert res is os_ and np.array_equal(os_, np.arange(n) * (p * (p + 1) // 2) + p * rep), rep
    assert same_on_all_ranks(os_) and np.array_equal(xs_, xs_copy)
    checks += 1
pl = ring_mod._PLANS[None]
assert pl.xref() is xa_
if w.node_shm:
    assert pl.spec.shm is not None and pl.req is None, "one node: repeated calls go through shared memory"
else:
    assert pl.spec.shm is None and pl.token >= 2, "the ranks must have bound again after the switch"
checks += 1
# in the steady state: a mismatched length, dtype or op raises on every rank, and the calls
# settle again afterwards
for bad, words in ((lambda: fd.ring_allreduce(np.ones(n + (r == p - 1)), out=np.empty(n + (r == p - 1))),
                    ["length", f"rank {p - 1}: {n + 1}", f"rank 0: {n}"]),
                   (lambda: fd.ring_allreduce(xa_, out=oa_) if r else
                    fd.ring_allreduce(xa_.astype(np.float32), out=np.empty(n, np.float32)), ["dtype"]),
                   (lambda: fd.ring_allreduce(xa_, out=oa_, op="mean" if r == p - 1 else "sum"), ["op"])):
    for rep in range(4):
        xa_[...] = r + rep
        fd.ring_allreduce(xa_, out=oa_)
        assert np.all(oa_ == sum(range(p)) + p * rep)
    assert w._spec.cur is ring_mod._PLANS[None].spec, "four calls must reach the steady state"
    expect_mismatch(bad, words)
    assert w._spec.cur is None
    checks += 1
# every rank switches to other arrays of the same signature at once, and a small call in between
for rep in range(3):
    xa_[...] = r
    fd.ring_allreduce(xa_, out=oa_)
xc_[...] = r + 1
assert np.all(fd.ring_allreduce(xc_, out=oc_) == sum(range(p)) + p) and np.all(oa_ == sum(range(p)))
assert np.all(fd.ring_allreduce(np.full(3, 1.0 + r)) == sum(range(p)) + p)
checks += 2
# remembered buffers are not kept alive by funcgrad (plans hold weak references only)
import weakref  # noqa: E402
xb2 = np.ones((40, 25))
ob2 = np.empty((40, 25))
for rep in range(3):
    fd.ring_allreduce(xb2, out=ob2)
assert ring_mod._PLANS[None].xref() is xb2 and np.all(ob2 == p)
wx, wo = weakref.ref(xb2), weakref.ref(ob2)
del xb2, ob2
assert wx() is None and wo() is None, "ring_allreduce must not keep the caller's arrays alive"
checks += 2
# a freed x whose id is reused by a new array is never mistaken for the remembered one
for rep in range(5):
    tmp = np.full(64, float(r + rep))
    o64 = np.empty(64)
    assert np.all(fd.ring_allreduce(tmp, out=o64) == sum(range(p)) + p * rep)
    del tmp
    checks += 1

# ------------------------------------------------------------- allreduce_tree
rng = np.random.default_rng(r)
tree = {"w": rng.standard_normal((30, 40)), "b": rng.standard_normal(40).astype(np.float32),
        "layers": [rng.standard_normal(7), (rng.standard_normal((3, 3)), 2.5 * (r + 1))],
        "count": np.int64(r), "none": None}


def ref_mean(a):
    a = np.asarray(a)
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    o = np.empty_like(a)
    comm.Allreduce(np.ascontiguousarray(a), o)
    return o / p


tree_f = {k: v for k, v in tree.items() if k != "count"}
for bb in (25 * 2 ** 20, 1000, 1):  # one bucket, several, one per leaf
    red = fd.allreduce_tree(tree_f, op="mean", bucket_bytes=bb)
    assert set(red) == set(tree_f) and red["none"] is None
    assert np.allclose(red["w"], ref_mean(tree["w"]), rtol=1e-12)
    assert red["b"].dtype == np.float32 and np.allclose(red["b"], ref_mean(tree["b"]), rtol=1e-5)
    assert isinstance(red["layers"][1][1], float) and abs(red["layers"][1][1] - 2.5 * (p + 1) / 2) < 1e-12
    assert red["layers"][1][0].shape == (3, 3)
    assert same_on_all_ranks(red["w"])
    checks += 5
plans_before = len(buckets._PLANS)
plan = buckets._PLANS[next(iter(buckets._PLANS))][1]
bufs_before = [id(b) for b in plan.buffers]
red2 = fd.allreduce_tree(tree_f, op="mean")
assert len(buckets._PLANS) == plans_before, "buffers not reused across steps"
assert [id(b) for b in plan.buffers] == bufs_before
assert not any(np.shares_memory(red2["w"], b) for b in plan.buffers), "results must not alias buffers"
checks += 3
sm = fd.allreduce_tree({"c": np.int64(r), "v": np.arange(5, dtype=np.int64)}, op="sum")
assert int(sm["c"]) == sum(range(p)) and np.array_equal(sm["v"], np.arange(5) * p)
checks += 1
# buckets split by dtype and by size
pl = buckets._Plan([np.ones(10), np.ones(10), np.ones(3, np.float32), np.ones(10)], 100)
assert [b[2] for b in pl.buckets] == [10, 10, 3, 10]
pl = buckets._Plan([np.ones(4), np.ones(4), np.ones(40)], 100)
assert [b[2] for b in pl.buckets] == [8, 40]
checks += 2

# ------------------------------------------------------------- broadcast_tree
t = {"a": np.full((3, 2), float(r)), "n": r, "f": float(r) + 0.5, "t": (np.arange(4, dtype=np.int32) + r,)}
for root in range(p):
    bt = fd.broadcast_tree(t, root=root)
    assert np.all(bt["a"] == root) and bt["a"].shape == (3, 2)
    assert bt["n"] == root and isinstance(bt["n"], int)
    assert bt["f"] == root + 0.5 and isinstance(bt["f"], float)
    assert bt["t"][0].dtype == np.int32 and np.array_equal(bt["t"][0], np.arange(4) + root)
    checks += 4
assert np.all(t["a"] == r), "broadcast_tree must not modify its input"
checks += 1

w.barrier()
if r == 0:
    print(f"COLLECTIVES OK p={p} checks={checks}", flush=True)
sys.stdout.flush()
