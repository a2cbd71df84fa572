"""One MLP training step on the GPU: funcgrad (numba.cuda backend) vs PyTorch CUDA vs JAX (GPU).

float32, ReLU MLP, softmax cross-entropy, forward + backward + SGD, for two sizes:
784-512-512-10 at batch 128 and 784-2048-2048-10 at batch 1024. Every implementation
runs the same step on the same device; they are timed in alternating blocks (funcgrad for
N steps, PyTorch for N steps, JAX for N steps, repeated R rounds; each step ends with a
device synchronisation) and the table gives the minimum of the block medians, as ratios
to PyTorch measured in the same run, plus the kernel launches (and cuBLAS calls) of one
funcgrad step. Before timing, funcgrad's gradient is checked against PyTorch's.

Then the LeNet-5 step of benchmarks/lenet_step.py (batch 64, 1x28x28) against PyTorch the same way.

Usage: python benchmarks/gpu_step.py [--rounds 5] [--block 20]
       python benchmarks/gpu_step.py --simulate      (Numba's CUDA simulator, tiny sizes: checks the script)
"""
import argparse
import os
import sys
import time

if "--simulate" in sys.argv:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

LR = 0.01


def loss(params, x, y):
    (W1, b1), (W2, b2), (W3, b3) = params
    h1 = nn.relu(x @ W1 + b1)
    h2 = nn.relu(h1 @ W2 + b2)
    logp = nn.log_softmax(h2 @ W3 + b3, axis=-1)
    return -np.mean(np.sum(logp * y, axis=1))


def init(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32), np.zeros(b, np.float32))
            for a, b in zip(sizes[:-1], sizes[1:])]


def data(batch, d_in, d_out, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, d_in)).astype(np.float32)
    y = np.eye(d_out, dtype=np.float32)[rng.integers(0, d_out, batch)]
    return x, y


def sgd(params, grads):
    return [(W - LR * gW, b - LR * gb) for (W, b), (gW, gb) in zip(params, grads)]


def funcgrad_step_fn(sizes, x, y, alloc=None, graphs=True, jit_update=False):
    """funcgrad's step: ``value_and_grad`` then SGD, either with K.add_scaled per parameter (one fused kernel
    each) or as ``funcgrad.jit(sgd)`` (with graphs on, one more recorded graph); CUDA graphs on or off."""
    from funcgrad.kernels import cuda as K
    from funcgrad.kernels import cuda_graph
    state = {"p": funcgrad.device_put(init(sizes))}
    dx, dy = funcgrad.device_put((x, y))
    vg = funcgrad.value_and_grad(loss)
    upd = funcgrad.jit(sgd) if jit_update else None

    def step():
        if alloc:
            K.set_allocator(alloc)
        cuda_graph.ENABLED[0] = graphs
        v, g = vg(state["p"], dx, dy)
        if upd is not None:
            state["p"] = upd(state["p"], g)
        else:
            state["p"] = K.materialize([(K.add_scaled(W, gW, -LR), K.add_scaled(b, gb, -LR))
                                        for (W, b), (gW, gb) in zip(state["p"], g)])
        K.cuda.synchronize()
        return v

    def grads():
        cuda_graph.ENABLED[0] = graphs
        return funcgrad.device_get(vg(funcgrad.device_put(init(sizes)), dx, dy)[1])

    return step, grads, K


def torch_step_fn(sizes, x, y):
    import torch
    dev = torch.device("cuda")
    ps = [(torch.tensor(W, device=dev, requires_grad=True), torch.tensor(b, device=dev, requires_grad=True))
          for W, b in init(sizes)]
    tx, ty = torch.tensor(x, device=dev), torch.tensor(y, device=dev)

    def fwd(ps):
        h = tx
        for i, (W, b) in enumerate(ps):
            h = h @ W + b
            if i < len(ps) - 1:
                h = torch.relu(h)
        return -(torch.log_softmax(h, 1) * ty).sum(1).mean()

    def step():
        lv = fwd(ps)
        for W, b in ps:
            W.grad = b.grad = None
        lv.backward()
        with torch.no_grad():
            for W, b in ps:
                W.sub_(LR * W.grad)
                b.sub_(LR * b.grad)
        torch.cuda.synchronize()

    def grads():
        fresh = [(torch.tensor(W, device=dev, requires_grad=True), torch.tensor(b, device=dev, requires_grad=True))
                 for W, b in init(sizes)]
        fwd(fresh).backward()
        return [(W.grad.cpu().numpy(), b.grad.cpu().numpy()) for W, b in fresh]

    return step, grads, torch.__version__


def jax_step_fn(sizes, x, y):
    import jax
    import jax.numpy as jnp

    def jloss(p, x, y):
        h = x
        for i, (W, b) in enumerate(p):
            h = h @ W + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h, 1) * y, 1))

    @jax.jit
    def jstep(p, x, y):
        g = jax.grad(jloss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g)

    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpu:
        raise ImportError("JAX sees no GPU")
    state = {"p": jax.device_put(init(sizes), gpu[0])}
    jx, jy = jax.device_put((x, y), gpu[0])

    def step():
        state["p"] = jstep(state["p"], jx, jy)
        jax.block_until_ready(state["p"])

    return step, None, jax.__version__


LENET = {"c1w": (6, 1, 5, 5), "c1b": (6,), "c2w": (16, 6, 5, 5), "c2b": (16,), "f1w": (256, 120), "f1b": (120,),
         "f2w": (120, 84), "f2b": (84,), "f3w": (84, 10), "f3b": (10,)}


def lenet_loss(p, x, labels):
    """LeNet-5 on 1x28x28 (as benchmarks/lenet_step.py): conv 6@5x5, pool, conv 16@5x5, pool, 120, 84, 10."""
    h = nn.max_pool2d(nn.relu(nn.conv2d(x, p["c1w"], p["c1b"])), 2)
    h = nn.max_pool2d(nn.relu(nn.conv2d(h, p["c2w"], p["c2b"])), 2)
    h = np.reshape(h, (h.shape[0], 256))
    h = nn.relu(h @ p["f1w"] + p["f1b"])
    h = nn.relu(h @ p["f2w"] + p["f2b"])
    return nn.cross_entropy(h @ p["f3w"] + p["f3b"], labels)


def lenet_sgd(p, g):
    return {k: p[k] - LR * g[k] for k in p}


def lenet_init(seed=0):
    rng = np.random.default_rng(seed)
    return {k: (np.zeros(s, np.float32) if k.endswith("b") else
                (rng.uniform(-1, 1, s) / np.sqrt(np.prod(s[1:]) if len(s) == 4 else s[0])).astype(np.float32))
            for k, s in LENET.items()}


def run_lenet(batch, rounds, block, simulate):
    from funcgrad.kernels import cuda as K
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, batch)
    vg = funcgrad.value_and_grad(lenet_loss)
    dx, dl = funcgrad.device_put((x, labels))
    state = {"p": funcgrad.device_put(lenet_init())}

    if K._cupy() is not None:
        K.set_allocator("cupy")   # (the MLP runs before measured numba's allocator last)

    from funcgrad.kernels import cuda_graph
    g_state = {"p": funcgrad.device_put(lenet_init())}
    upd = funcgrad.jit(lenet_sgd)

    def fg_step():
        cuda_graph.ENABLED[0] = False
        _, g = vg(state["p"], dx, dl)
        state["p"] = K.materialize({k: K.add_scaled(v, g[k], -LR) for k, v in state["p"].items()})
        K.cuda.synchronize()

    def fg_graph_step():
        cuda_graph.ENABLED[0] = True
        _, g = vg(g_state["p"], dx, dl)
        g_state["p"] = upd(g_state["p"], g)
        K.cuda.synchronize()

    first, launches = _first_and_launches(fg_step, K)
    if PROFILE[0]:
        _profile(fg_step, "LeNet-5 step")
    fns, names = {"funcgrad": fg_step}, {"funcgrad": "funcgrad without graphs (s19's path)"}
    if K._cupy() is not None:
        _, g_launches = _first_and_launches(fg_graph_step, K)
        fns["funcgrad-graphs"], names["funcgrad-graphs"] = fg_graph_step, "funcgrad, CUDA graphs, jit(sgd)"
    if not simulate:
        try:
            import torch
            import torch.nn.functional as F
            dev = torch.device("cuda")
            tp = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in lenet_init().items()}
            tx, ty = torch.tensor(x, device=dev), torch.tensor(labels, device=dev)

            def tloss(p):
                h = F.max_pool2d(torch.relu(F.conv2d(tx, p["c1w"], p["c1b"])), 2)
                h = F.max_pool2d(torch.relu(F.conv2d(h, p["c2w"], p["c2b"])), 2).reshape(batch, 256)
                h = torch.relu(torch.relu(h @ p["f1w"] + p["f1b"]) @ p["f2w"] + p["f2b"])
                return F.cross_entropy(h @ p["f3w"] + p["f3b"], ty)

            fresh = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in lenet_init().items()}
            tloss(fresh).backward()
            got = funcgrad.device_get(vg(funcgrad.device_put(lenet_init()), dx, dl)[1])
            for k in fresh:
                np.testing.assert_allclose(got[k], fresh[k].grad.cpu().numpy(), rtol=2e-3, atol=2e-5)

            def t_step():
                lv = tloss(tp)
                for v in tp.values():
                    v.grad = None
                lv.backward()
                with torch.no_grad():
                    for v in tp.values():
                        v.sub_(LR * v.grad)
                torch.cuda.synchronize()

            t_step()
            fns["torch"], names["torch"] = t_step, f"PyTorch {torch.__version__} CUDA eager"
        except ImportError:
            pass
    best = timed_blocks(fns, rounds, block)
    _table(f"LeNet-5 step, batch {batch}, float32; min over {rounds} rounds of the median of {block} steps",
           best, names)
    print(f"funcgrad without graphs: {_launch_text(launches)} per step; first step {first:.1f} s")
    if "funcgrad-graphs" in fns:
        print(f"funcgrad with graphs: {_launch_text(g_launches)} per step")
    graph_report()


PROFILE = [False]


def _profile(step, what, n=20):
    """cProfile of ``n`` steps (after one more warm-up): where the host's time goes."""
    import cProfile
    import pstats
    step()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        step()
    pr.disable()
    print(f"\nprofile of {n} funcgrad steps: {what}")
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats(12)
    # each kernel's time on the GPU (the device synchronized around every launch: a diagnostic, not the step)
    from funcgrad.kernels import cuda_launch
    from funcgrad.kernels import cuda as K
    cuda_launch.TIMING[0] = True
    cuda_launch.KERNEL_TIMES.clear()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    K.cuda.synchronize()
    total = (time.perf_counter() - t0) / 5
    cuda_launch.TIMING[0] = False
    print(f"kernels of one step, synchronized around each launch ({total * 1e3:.2f} ms a step so):")
    for name, (cnt, t) in sorted(cuda_launch.KERNEL_TIMES.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"  {name:24s} {cnt / 5:5.1f} launches {t / 5 * 1e3:8.3f} ms")


def _first_and_launches(step, K):
    """(seconds of the first step: transform and kernel compiles; what the third step launched: kernels and
    cuBLAS calls outside graphs, and graph replays). The second step records the graphs."""
    from funcgrad.kernels import cuda_graph
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()
    before, replays = K.LAUNCHES[0], cuda_graph.STATS["replayed"]
    step()
    return first, (K.LAUNCHES[0] - before, cuda_graph.STATS["replayed"] - replays)


def _launch_text(launches):
    n, r = launches
    return f"{n} kernel launches + cuBLAS calls" + (f" and {r} graph replays" if r else "")


def graph_report():
    from funcgrad.kernels import cuda_graph
    st = cuda_graph.STATS
    print(f"CUDA graphs so far: {st['recorded']} recorded, {st['replayed']} replays, {st['failed']} recordings failed")
    for why, n in st["reasons"].items():
        print(f"  failed {n}x: {why}")
        if os.environ.get("FUNCGRAD_GRAPH_WHERE"):
            print("    " + st["where"].get(why, "").replace("\n", "\n    "))


def _table(title, best, names):
    ref = best.get("torch")
    print(f"\n{title}")
    print(f"{'implementation':46s} {'ms/step':>9s} {'vs PyTorch':>11s}")
    for k, t in best.items():
        r = f"{t / ref:10.2f}x" if ref else "         -"
        print(f"{names[k]:46s} {t * 1e3:9.3f} {r}")


def timed_blocks(fns, rounds, block):
    """Alternating blocks (benchmarks/_timing.py): each function ``block`` steps in a row, in turn, ``rounds``
    times; per function the minimum over rounds of the block's median step time."""
    return alternating_blocks(fns, block, rounds, warmup=0)


def run(sizes, batch, rounds, block, simulate):
    x, y = data(batch, sizes[0], sizes[-1])
    from funcgrad.kernels import cuda as K
    variants = [("graphs-jit", dict(graphs=True, jit_update=True), "funcgrad, CUDA graphs, jit(sgd)"),
                ("graphs", dict(graphs=True), "funcgrad, CUDA graph + K.add_scaled SGD"),
                ("eager", dict(graphs=False), "funcgrad without graphs (s19's path)")]
    if K._cupy() is None:   # (graphs need CuPy)
        variants = variants[2:]
    fns, names, fg_launches = {}, {}, {}
    for tag, how, text in variants:
        step, grads, _ = funcgrad_step_fn(sizes, x, y, None, **how)
        first, launches = _first_and_launches(step, K)
        fns[f"funcgrad-{tag}"] = step
        names[f"funcgrad-{tag}"] = text
        fg_launches[tag] = launches
        if tag == variants[0][0]:
            fg_grads, fg_first = grads, first
    if not simulate:
        try:
            t_step, t_grads, tv = torch_step_fn(sizes, x, y)
            ref, got = t_grads(), fg_grads()
            for (W, b), (gW, gb) in zip(ref, got):
                np.testing.assert_allclose(gW, W, rtol=2e-3, atol=2e-5)
                np.testing.assert_allclose(gb, b, rtol=2e-3, atol=2e-5)
            t_step()
            fns["torch"] = t_step
            names["torch"] = f"PyTorch {tv} CUDA eager"
        except ImportError:
            pass
        try:
            j_step, _, jv = jax_step_fn(sizes, x, y)
            j_step()
            fns["jax"] = j_step
            names["jax"] = f"JAX {jv} jit (GPU)"
        except ImportError:
            pass
    best = timed_blocks(fns, rounds, block)
    label = "-".join(map(str, sizes))
    _table(f"MLP step {label}, batch {batch}, float32; min over {rounds} rounds of the median of {block} steps",
           best, names)
    for tag, launches in fg_launches.items():
        print(f"funcgrad {tag}: {_launch_text(launches)} per step")
    print(f"funcgrad: first step (transform + kernel compiles) {fg_first:.1f} s")
    graph_report()
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile 20 funcgrad steps of the small MLP and of LeNet")
    args = ap.parse_args()
    from funcgrad.kernels import cuda as K
    if args.simulate:
        print("CUDA simulator (NUMBA_ENABLE_CUDASIM=1): tiny sizes, no peers, timings meaningless")
        run([8, 6, 6, 3], 4, 1, 2, True)
    else:
        dev = K.cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        print(f"device: {name}; cuBLAS through CuPy: {'yes' if K._cupy() is not None else 'no (tiled kernel)'}")
        if args.profile:
            PROFILE[0] = True
            x, y = data(128, 784, 10)
            step = funcgrad_step_fn([784, 512, 512, 10], x, y, graphs=False)[0]
            step()
            _profile(step, "MLP step 784-512-512-10, batch 128")
        run([784, 512, 512, 10], 128, args.rounds, args.block, False)
        run([784, 2048, 2048, 10], 1024, args.rounds, args.block, False)
    if args.simulate:   # (minutes on the simulator even at batch 1; tests/test_cuda.py checks the kernels)
        print("\nLeNet step: measured on a GPU only")
    else:
        run_lenet(64, args.rounds, args.block, False)


if __name__ == "__main__":
    main()
