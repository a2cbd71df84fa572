"""Run under mpiexec: the parameter server in every mode.

usage: ps.py SCRATCH_DIR TEST [num_servers]
TEST in: sync (equals sequential SGD on the averaged gradient, + checkpoint/resume),
ssp (recorded clock gap <= s, and the bound is reached), async (converges on a
convex quadratic), die-async / die-sync (a worker calls os._exit mid-training).
Rank 0 prints ``PS OK <test> ...`` on success.
"""
import os
import signal
import sys
import time

import numpy as np

import funcgrad.dist as fd

try:
    import funcgrad.optim as optim

    def SGD(lr, momentum=0.0):
        return optim.sgd(lr, momentum=momentum)
except Exception:  # funcgrad.optim is someone else's module; a tiny stand-in
    class SGD:
        def __init__(self, lr, momentum=0.0):
            self.lr, self.m = lr, momentum

        def init(self, params):
            return fd.buckets.ftree.tree_map(np.zeros_like, params)

        def update(self, grads, state, params):
            tm = fd.buckets.ftree.tree_map
            new = tm(lambda s, g: self.m * s + g, state, grads)
            return tm(lambda v: -self.lr * v, new), new

scratch, test = sys.argv[1], sys.argv[2]
ns = int(sys.argv[3]) if len(sys.argv) > 3 else 1
w = fd.world()
r, p = w.rank, w.size
W = p - ns

# convex quadratic: worker i at clock c sees rows of A, b; loss 0.5/m ||A x - b||^2
D = 13
rng = np.random.default_rng(0)
A_all = rng.standard_normal((4000, D))
x_true = rng.standard_normal(D)
b_all = A_all @ x_true
M = 8


def rows(i, c):
    lo = ((c * W + i) * M) % (len(A_all) - M)
    return A_all[lo:lo + M], b_all[lo:lo + M]


def grad_for(params, i, c):
    A, b = rows(i, c)
    x = np.concatenate([params["x"][0], params["x"][1].ravel(), [params["y"]["z"]]])
    g = A.T @ (A @ x - b) / M
    return {"x": (g[:5].copy(), g[5:12].reshape(7, 1).copy()), "y": {"z": g[12:13].reshape(())}}


def init():
    return {"x": (np.zeros(5), np.zeros((7, 1))), "y": {"z": np.zeros(())}}


def vec(params):
    return np.concatenate([params["x"][0], params["x"][1].ravel(), [float(params["y"]["z"])]])


def sequential(clocks, lr, momentum):
    """One process: SGD on the gradient averaged over workers in rank order."""
    opt = SGD(lr, momentum)
    params = init()
    st = opt.init(params)
    for c in range(clocks):
        gs = [vec(grad_for(params, i, c)) for i in range(W)]
        acc = gs[0].copy()
        for g in gs[1:]:
            acc += g
        acc /= W
        g = {"x": (acc[:5].copy(), acc[5:12].reshape(7, 1).copy()), "y": {"z": acc[12:13].reshape(())}}
        u, st = opt.update(g, st, params)
        params = fd.buckets.ftree.tree_map(lambda a, b: a + b, params, u)
    return vec(params)


def make(mode, **kw):
    return fd.ParameterServer(init(), SGD(0.05, 0.5), mode=mode, num_servers=ns, **kw)


if test == "sync":
    ps = make("sync")
    out = ps.run(lambda prm, c: grad_for(prm, ps.worker_index, c), 30)
    ref = sequential(30, 0.05, 0.5)
    d = np.max(np.abs(vec(out) - ref))
    assert d <= 1e-12, f"sync PS differs from sequential SGD by {d}"
    assert isinstance(out["x"], tuple) and out["x"][1].shape == (7, 1)
    # checkpoint at clock 10, "crash", resume to clock 30: same result
    ck = os.path.join(scratch, f"ps_sync_{ns}")
    ps = make("sync", checkpoint_dir=ck, checkpoint_every=10)
    ps.run(lambda prm, c: grad_for(prm, ps.worker_index, c), 10)
    ps2 = make("sync", checkpoint_dir=ck, checkpoint_every=10, resume=True)
    started = []

    def g2(prm, c):
        started.append(c)
        return grad_for(prm, ps2.worker_index, c)
    out2 = ps2.run(g2, 30)
    d2 = np.max(np.abs(vec(out2) - ref))
    assert d2 <= 1e-12, f"resumed sync PS differs by {d2}"
    if ps2.is_worker:
        assert started[0] == 10 and len(started) == 20, started[:3]
    assert len([f for f in os.listdir(ck) if f.endswith(".npz")]) == ns
    if r == 0:
        print(f"PS OK sync servers={ns} workers={W} maxdiff={d:.2g} resumed_diff={d2:.2g}", flush=True)

elif test == "ssp":
    s = 2
    ps = make("ssp", staleness=s)

    def g(prm, c):
        if ps.worker_index == 0:
            time.sleep(0.02)            # the straggler
        return grad_for(prm, ps.worker_index, c)
    out = ps.run(g, 25)
    mx = np.array([ps.stats["max_gap"]], dtype=np.int64)
    allmx = np.empty(p, dtype=np.int64)
    w.comm.Allgather(mx, allmx)
    worker_gaps = allmx[ns:]
    assert worker_gaps.max() <= s, f"SSP gap {worker_gaps.max()} exceeds s={s}"
    assert worker_gaps.max() == s, f"the straggler never made a fast worker wait at the bound: {worker_gaps}"
    if ps.is_server:
        assert ps.stats["server_max_spread"] <= s + 1, ps.stats
    loss = np.mean((A_all @ vec(out) - b_all) ** 2)
    if r == 0:
        print(f"PS OK ssp servers={ns} s={s} max_gaps={worker_gaps.tolist()} loss={loss:.3g}", flush=True)

elif test == "async":
    ps = make("async")
    x0 = np.mean(b_all ** 2)
    out = ps.run(lambda prm, c: grad_for(prm, ps.worker_index, c), 150)
    loss = np.mean((A_all @ vec(out) - b_all) ** 2)
    assert loss < 1e-3 * x0, f"async did not converge: loss {loss} from {x0}"
    if r == 0:
        print(f"PS OK async servers={ns} loss={loss:.3g} (start {x0:.3g}) pushes={ps.stats['pushes_applied']}",
              flush=True)

elif test in ("die-async", "die-sync", "die-ssp", "kill-async", "kill-sync", "kill-ssp"):
    how, mode = test.split("-")
    ps = make(mode, worker_timeout=float(os.environ.get("PS_WORKER_TIMEOUT", "1.5")), staleness=2)
    victim = ns + 1          # the second worker

    def g(prm, c):
        if r == victim and c == 5:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(7)
        return grad_for(prm, ps.worker_index, c)
    out = ps.run(g, 120)
    loss = np.mean((A_all @ vec(out) - b_all) ** 2)
    if r == 0:
        print(f"PS OK {test} dropped={ps.stats['dropped']} loss={loss:.3g}", flush=True)
        assert ps.stats["dropped"] == [victim] and loss < 1e-2
else:
    raise SystemExit(f"unknown test {test}")
