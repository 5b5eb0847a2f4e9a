"""The GD engines against the plain loops a reader would write, at four shapes, on one and two threads.

Routines: ``mm.gd`` (on p), ``mm.gd_W`` (on W, one prompt p shared by every sequence),
``mm.gd_joint`` (on v and p) and ``mm.gd_KQ`` (on the factors of W = K Q^T, shared prompt).
Shapes (n, T, d, B): the reference (100, 10, 10, 64), a tiny single run (20, 5, 8, 1), a large
instance (1000, 20, 32, 16), and a tiny instance with many starts (8, 4, 4, 1024). Normalized
GD, logistic loss, float64, ``record_every=None`` (the plain loops record nothing either).

Contenders, per routine, shape and thread count:

* "engine": the library routine, the whole public call (validation included);
* "matmul loop" (the baseline): the strongest plain batched torch loop a reader would write,
  batch-last, every contraction a single matmul, one softmax call, no recording;
* "einsum loop": the same mathematics written with ``torch.einsum`` (reported, not a bar).

Each cell sets the threads of torch (``torch.set_num_threads``), of OpenBLAS/MKL
(threadpoolctl) and of numba (``numba.set_num_threads``) alike, and states them. Each
contender's number of steps is chosen so that its call takes at least WINDOW seconds (the
engine's fixed cost per call, its validation, is then a small part); the contenders run
interleaved, REPEATS times, and their speeds (steps per second) are compared per repetition
(paired), so that the load of the machine cancels as far as it can: min and median of the
paired ratios engine speed / loop speed are printed (above 1: the engine is faster). PASS when
the median reaches the target: 2x the matmul loop for gd at the reference shape, 1x elsewhere.

Every loop's iterate after 100 steps (50 for gd_joint, 20 for gd_KQ, see ROUTINES) must equal the engine's to AGREE relative (the
largest entry difference over the largest entry): the same mathematics in another summation
order differs by a few ulp per step, about 1e-16 n T relative over 100 steps at most. (Over
10^4 steps and more the runs saturate the softmax, where the plain loops' margins sum_t s_t
gamma_t lose the digits the engines keep by centring at the top token: the iterates then
drift apart by up to 1e-5, which is the loops' error, not a different computation.)
The engine itself is checked against an autograd loop (one run, 50 steps, to 1e-12) for gd, so
that the baselines are not only checked against each other.

Ceiling: the float64 flop rate of a large matmul and the best vector exp rate, per thread
count; a trajectory-step of gd costs 4 n T d flops (two contractions) and n T exponentials, of
gd_joint 8 n T d flops; the fraction of that ceiling the engine reaches is printed per cell.

``--quick``: 3 repetitions and windows of 0.1 s (a smoke run); ``--only gd,gd_W``: some routines.
Exits 1 if a cell misses its target or a contender disagrees.
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
import torch

import maxmargin as mm

SHAPES = [(100, 10, 10, 64), (20, 5, 8, 1), (1000, 20, 32, 16), (8, 4, 4, 1024)]
REFERENCE = SHAPES[0]
THREADS = (1, 2)
LR, EPS = 0.1, 1e-12
WINDOW = 0.2       # seconds: the shortest call timed
REPEATS = 5        # interleaved repetitions
AGREE = 1e-12      # relative difference of each loop's final iterate from the engine's


# ---------------------------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------------------------

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - OpenBLAS then keeps its own setting
    threadpool_limits = None


def set_threads(k: int) -> str:
    """The same thread count for numba, torch and OpenBLAS/MKL (threadpoolctl); a description
    read back after all three are set. numba first: launching its threading layer (OpenMP)
    resets the OpenMP threads that torch reads (torch ran on 2 threads after
    torch.set_num_threads(1) followed by numba.set_num_threads(1))."""
    said = []
    try:
        import numba

        numba.set_num_threads(min(k, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        numba = None
    torch.set_num_threads(k)
    if threadpool_limits is not None:
        threadpool_limits(limits=k)
    said.append(f"torch {torch.get_num_threads()}")
    if threadpool_limits is not None:
        from threadpoolctl import threadpool_info

        said.append("BLAS/OpenMP " + "/".join(str(i["num_threads"]) for i in threadpool_info()))
    else:
        said.append("BLAS unset (no threadpoolctl)")
    if numba is not None:
        said.append(f"numba {numba.get_num_threads()}")
    assert torch.get_num_threads() == k, said
    return ", ".join(said)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------
# instances and starts
# ---------------------------------------------------------------------------------------------

def instance(shape):
    n, T, d, B = shape
    inst = mm.data.random_instance(n, T, d, seed=0)
    rng = np.random.default_rng(1)
    return inst, rng


def prompt(inst):
    """One prompt shared by every sequence (for gd_W and gd_KQ): a unit vector."""
    d = inst.X.shape[2]
    p = np.random.default_rng(2).standard_normal(d)
    return p / np.linalg.norm(p)


def softmax_(s):
    return torch.softmax(s, dim=1)


def unit_step(x, g, dim):
    """x - LR g / (||g|| + EPS), the norm over ``dim``."""
    return x - LR * g / (torch.linalg.vector_norm(g, dim=dim, keepdim=True) + EPS)


# ---------------------------------------------------------------------------------------------
# gd: p (d, B)
# ---------------------------------------------------------------------------------------------

def gd_setup(shape):
    inst, rng = instance(shape)
    P0 = rng.standard_normal((shape[3], shape[2])) * 0.1
    return inst, P0


def gd_engine(setup, steps):
    inst, P0 = setup
    return mm.gd(inst.X, inst.Y, inst.v, P0, steps, LR, W=inst.W, normalized=True, eps=EPS,
                 record_every=None).p[-1]


def gd_matmul(setup, steps):
    inst, P0 = setup
    n, T, d = inst.X.shape
    B = len(P0)
    K = torch.from_numpy((inst.X @ inst.W).reshape(n * T, d))          # keys (n T, d)
    KT = K.T.contiguous()                                              # (d, n T)
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))[..., None]  # scores (n, T, 1)
    P = torch.from_numpy(P0.T.copy())                                  # (d, B)
    for _ in range(steps):
        s = softmax_((K @ P).view(n, T, B))
        z = (s * g).sum(1, keepdim=True)                               # margins (n, 1, B)
        c = s * (g - z) * torch.sigmoid(-z)                            # -n dL/dlogits
        grad = KT @ c.view(n * T, B)                                   # -n dL/dp
        P = P + LR * grad / (torch.linalg.vector_norm(grad, dim=0) + n * EPS)
    return P.T.numpy()


def gd_einsum(setup, steps):
    inst, P0 = setup
    n = inst.X.shape[0]
    K = torch.from_numpy(inst.X @ inst.W)
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))
    P = torch.from_numpy(P0.T.copy())
    for _ in range(steps):
        s = torch.softmax(torch.einsum("ntd,db->ntb", K, P), dim=1)
        z = (s * g[..., None]).sum(1)
        w = -torch.sigmoid(-z) / n
        grad = torch.einsum("ntd,ntb->db", K, s * (g[..., None] - z[:, None]) * w[:, None])
        P = unit_step(P, grad, 0)
    return P.T.numpy()


# ---------------------------------------------------------------------------------------------
# gd_W: W (B, d, d), one shared prompt p
# ---------------------------------------------------------------------------------------------

def gd_W_setup(shape):
    inst, rng = instance(shape)
    n, T, d, B = shape
    return inst, rng.standard_normal((B, d, d)) * 0.1, prompt(inst)


def gd_W_engine(setup, steps):
    inst, W0, p = setup
    return mm.gd_W(inst.X, inst.Y, inst.v, W0, p, steps, LR, normalized=True, eps=EPS,
                   record_every=None).W[-1]


def gd_W_matmul(setup, steps):
    """logits x^T W p = x^T (W p): W p first; the gradient sum c x p^T is an outer product."""
    inst, W0, p0 = setup
    n, T, d = inst.X.shape
    B = len(W0)
    X = torch.from_numpy(inst.X.reshape(n * T, d))
    XT = X.T.contiguous()
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))[..., None]
    p = torch.from_numpy(p0)
    pnorm = float(np.linalg.norm(p0))
    W = torch.from_numpy(W0.copy())                                    # (B, d, d)
    for _ in range(steps):
        u = (W @ p).T                                                  # (d, B)
        s = softmax_((X @ u).view(n, T, B))
        z = (s * g).sum(1, keepdim=True)
        c = s * (g - z) * torch.sigmoid(-z)
        a = XT @ c.view(n * T, B)                                      # (d, B): -n dL/dW = a p^T
        scale = LR / (torch.linalg.vector_norm(a, dim=0) * pnorm + n * EPS)  # ||a p^T|| = |a||p|
        W = W + (a * scale).T[:, :, None] * p
    return W.numpy()


def gd_W_einsum(setup, steps):
    inst, W0, p0 = setup
    n, T, d = inst.X.shape
    X = torch.from_numpy(inst.X)
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))
    p = torch.from_numpy(p0)
    W = torch.from_numpy(W0.copy())
    for _ in range(steps):
        s = torch.softmax(torch.einsum("ntd,bde,e->ntb", X, W, p), dim=1)
        z = (s * g[..., None]).sum(1)
        w = -torch.sigmoid(-z) / n
        grad = torch.einsum("ntb,ntd,e->bde", s * (g[..., None] - z[:, None]) * w[:, None], X, p)
        W = unit_step(W, grad, (1, 2))
    return W.numpy()


# ---------------------------------------------------------------------------------------------
# gd_joint: v, p (d, B)
# ---------------------------------------------------------------------------------------------

def gd_joint_setup(shape):
    inst, rng = instance(shape)
    n, T, d, B = shape
    return inst, rng.standard_normal((B, d)) * 0.1, rng.standard_normal((B, d)) * 0.1


def gd_joint_engine(setup, steps):
    inst, V0, P0 = setup
    run = mm.gd_joint(inst.X, inst.Y, V0, P0, steps, LR, normalized=True, W=inst.W,
                      eps_v=EPS, eps_p=EPS, record_every=None)
    return np.concatenate([run.v[-1], run.p[-1]], axis=1)


def gd_joint_matmul(setup, steps):
    inst, V0, P0 = setup
    n, T, d = inst.X.shape
    B = len(P0)
    X = torch.from_numpy(inst.X.reshape(n * T, d))
    XT = X.T.contiguous()
    K = torch.from_numpy((inst.X @ inst.W).reshape(n * T, d))
    KT = K.T.contiguous()
    Y = torch.from_numpy(inst.Y)[:, None, None]                        # (n, 1, 1)
    V, P = torch.from_numpy(V0.T.copy()), torch.from_numpy(P0.T.copy())
    for _ in range(steps):
        g = (X @ V).view(n, T, B) * Y                                  # scores (n, T, B)
        s = softmax_((K @ P).view(n, T, B))
        z = (s * g).sum(1, keepdim=True)
        w = torch.sigmoid(-z)                                          # -n l'(z)
        grad_v = XT @ (s * (w * Y)).view(n * T, B)                     # -n dL/dv
        grad_p = KT @ (s * (g - z) * w).view(n * T, B)                 # -n dL/dp
        V = V + LR * grad_v / (torch.linalg.vector_norm(grad_v, dim=0) + n * EPS)
        P = P + LR * grad_p / (torch.linalg.vector_norm(grad_p, dim=0) + n * EPS)
    return torch.cat([V.T, P.T], dim=1).numpy()


def gd_joint_einsum(setup, steps):
    inst, V0, P0 = setup
    n = inst.X.shape[0]
    X = torch.from_numpy(inst.X)
    K = torch.from_numpy(inst.X @ inst.W)
    Y = torch.from_numpy(inst.Y)
    V, P = torch.from_numpy(V0.T.copy()), torch.from_numpy(P0.T.copy())
    for _ in range(steps):
        g = Y[:, None, None] * torch.einsum("ntd,db->ntb", X, V)
        s = torch.softmax(torch.einsum("ntd,db->ntb", K, P), dim=1)
        z = (s * g).sum(1)
        w = -torch.sigmoid(-z) / n
        grad_v = torch.einsum("ntd,ntb->db", X, s * (w * Y[:, None])[:, None])
        grad_p = torch.einsum("ntd,ntb->db", K, s * (g - z[:, None]) * w[:, None])
        V, P = unit_step(V, grad_v, 0), unit_step(P, grad_p, 0)
    return torch.cat([V.T, P.T], dim=1).numpy()


# ---------------------------------------------------------------------------------------------
# gd_KQ: K, Q (B, d, m), m = d // 2, one shared prompt p
# ---------------------------------------------------------------------------------------------

def gd_KQ_setup(shape):
    inst, rng = instance(shape)
    n, T, d, B = shape
    m = max(1, d // 2)
    return (inst, rng.standard_normal((B, d, m)) * 0.3, rng.standard_normal((B, d, m)) * 0.3,
            prompt(inst))


def gd_KQ_engine(setup, steps):
    inst, K0, Q0, p = setup
    run = mm.gd_KQ(inst.X, inst.Y, inst.v, K0, Q0, p, steps, LR, normalized=True, eps=EPS,
                   record_every=None)
    return np.concatenate([run.K[-1], run.Q[-1]], axis=2)


def gd_KQ_matmul(setup, steps):
    """logits x^T K Q^T p: q = Q^T p, u = K q, logits X u; with a = sum c x (d, B):
    dK = a q^T, dQ = p (K^T a)^T."""
    inst, K0, Q0, p0 = setup
    n, T, d = inst.X.shape
    B = len(K0)
    X = torch.from_numpy(inst.X.reshape(n * T, d))
    XT = X.T.contiguous()
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))[..., None]
    p = torch.from_numpy(p0)
    pnorm = float(np.linalg.norm(p0))
    K, Q = torch.from_numpy(K0.copy()), torch.from_numpy(Q0.copy())
    for _ in range(steps):
        q = p @ Q                                                      # (B, m): Q^T p
        u = (K @ q[:, :, None])[:, :, 0]                               # (B, d): K Q^T p
        s = softmax_((X @ u.T).view(n, T, B))
        z = (s * g).sum(1, keepdim=True)
        c = s * (g - z) * torch.sigmoid(-z)
        a = (XT @ c.view(n * T, B)).T                                  # (B, d): -n G = a p^T
        ka = (a[:, None, :] @ K)[:, 0]                                 # (B, m): K^T a
        na = torch.linalg.vector_norm(a, dim=1)
        step_K = LR / (na * torch.linalg.vector_norm(q, dim=1) + n * EPS)  # ||a q^T|| = |a||q|
        step_Q = LR / (torch.linalg.vector_norm(ka, dim=1) * pnorm + n * EPS)
        K = K + (a * step_K[:, None])[:, :, None] * q[:, None, :]
        Q = Q + p[None, :, None] * (ka * step_Q[:, None])[:, None, :]
    return torch.cat([K, Q], dim=2).numpy()


def gd_KQ_einsum(setup, steps):
    inst, K0, Q0, p0 = setup
    n = inst.X.shape[0]
    X = torch.from_numpy(inst.X)
    g = torch.from_numpy(inst.Y[:, None] * (inst.X @ inst.v))
    p = torch.from_numpy(p0)
    K, Q = torch.from_numpy(K0.copy()), torch.from_numpy(Q0.copy())
    for _ in range(steps):
        s = torch.softmax(torch.einsum("ntd,bdm,bem,e->ntb", X, K, Q, p), dim=1)
        z = (s * g[..., None]).sum(1)
        w = -torch.sigmoid(-z) / n
        G = torch.einsum("ntb,ntd,e->bde", s * (g[..., None] - z[:, None]) * w[:, None], X, p)
        dK, dQ = G @ Q, G.transpose(1, 2) @ K
        K, Q = unit_step(K, dK, (1, 2)), unit_step(Q, dQ, (1, 2))
    return torch.cat([K, Q], dim=2).numpy()


# flops of one trajectory-step per n T d (the two or four contractions over n T d dominate), and
# the steps after which the loops' iterates are compared with the engine's: the factors of gd_KQ
# amplify rounding about tenfold every few steps (engine, matmul and einsum loops mutually 1e-14
# apart at step 30, 1e-2 at step 100, measured), so they are compared after 20 steps; one run of
# gd_joint at the reference shape turns between steps 50 and 100 (the loops mutually 4e-15 apart
# at step 50, 5e-7 at step 100), so it is compared after 50
ROUTINES = {
    "gd": (gd_setup, gd_engine, gd_matmul, gd_einsum, 4, 100),
    "gd_W": (gd_W_setup, gd_W_engine, gd_W_matmul, gd_W_einsum, 4, 100),
    "gd_joint": (gd_joint_setup, gd_joint_engine, gd_joint_matmul, gd_joint_einsum, 8, 50),
    "gd_KQ": (gd_KQ_setup, gd_KQ_engine, gd_KQ_matmul, gd_KQ_einsum, 4, 20),
}


def target(routine: str, shape) -> float:
    return 2.0 if routine == "gd" and shape == REFERENCE else 1.0


# ---------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------

def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def relative_difference(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


def calibrate(fn, setup, window) -> int:
    """Steps for which a call of ``fn`` takes about ``window`` seconds (at least), as a rate of
    steps per second measured on calls of at least 0.02 s."""
    steps = 4
    while True:
        seconds = timed(fn, setup, steps)
        if seconds >= 0.02 or steps >= 1 << 20:
            break
        steps *= 4
    return max(2, math.ceil(steps * 1.15 * window / seconds))


def ceiling(threads: int) -> tuple[float, float]:
    """(flop/s of a 1024^2 float64 matmul, best exp/s of numpy, torch and the engine's exp on a
    cache-resident vector), best of 5: the machine's rate rather than its load."""
    a = torch.randn(1024, 1024, dtype=torch.float64)
    a @ a
    flops = max(2 * 1024**3 / timed(torch.matmul, a, a) for _ in range(5))
    size, reps = 1 << 14, 40
    x = -np.random.default_rng(0).random(size) * 30
    out, xt, outt = np.empty(size), torch.from_numpy(x), torch.empty(size, dtype=torch.float64)
    contenders = [lambda: np.exp(x, out=out), lambda: torch.exp(xt, out=outt)]
    try:
        from maxmargin import _compiled

        y = x.copy()
        _compiled._exp_lanes(y, size)
        contenders.append(lambda: _compiled._exp_lanes(y, size))
    except ImportError:
        pass

    def repeat(fn):
        for _ in range(reps):
            fn()

    exps = max(size * reps / timed(repeat, fn) for fn in contenders for _ in range(5))
    return flops, exps


def agreement_with_autograd() -> float:
    """gd's iterates against a lean per-run autograd loop (50 steps, 4 starts, reference shape)."""
    inst, P0 = gd_setup(REFERENCE)
    P0 = P0[:4]
    steps = 50
    run = mm.gd(inst.X, inst.Y, inst.v, P0, steps, LR, W=inst.W, normalized=True, eps=EPS)
    X, Y, v, W = (torch.from_numpy(a) for a in (inst.X, inst.Y, inst.v, inst.W))
    worst = 0.0
    for b, p0 in enumerate(P0):
        p = torch.tensor(p0, requires_grad=True)
        for k in range(steps):
            s = torch.softmax(X @ (W @ p), dim=-1)
            risk = torch.nn.functional.softplus(-Y * (s * (X @ v)).sum(-1)).mean()
            (grad,) = torch.autograd.grad(risk, p)
            with torch.no_grad():
                p -= LR * grad / (grad.norm() + EPS)
            worst = max(worst, relative_difference(run.p[k + 1, b], p.detach().numpy()))
    return worst


def cell(routine, shape, threads, window, repeats, rates):
    """One routine at one shape and thread count: each contender's steps chosen so that its call
    takes about ``window`` seconds; the rates (trajectory-steps/s) compared per repetition."""
    setup_fn, engine_fn, matmul_fn, einsum_fn, flops_per, agree_steps = ROUTINES[routine]
    setup = setup_fn(shape)
    said = set_threads(threads)
    contenders = {"engine": engine_fn, "matmul loop": matmul_fn, "einsum loop": einsum_fn}
    for fn in contenders.values():  # warm-up (loads the compiled kernel, torch's allocator)
        fn(setup, 3)
    reference = engine_fn(setup, agree_steps)
    disagree = {name: (relative_difference(fn(setup, agree_steps), reference), agree_steps)
                for name, fn in contenders.items() if name != "engine"}
    steps = {name: calibrate(fn, setup, window) for name, fn in contenders.items()}
    speed = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            speed[name].append(steps[name] / timed(fn, setup, steps[name]))
    n, T, d, B = shape
    flops, exps = rates[threads]
    limit = 1.0 / (flops_per * n * T * d / flops + n * T / exps)       # trajectory-steps/s
    engine_rate = B * statistics.median(speed["engine"])
    rows = []
    for name in ("matmul loop", "einsum loop"):
        paired = [a / b for a, b in zip(speed["engine"], speed[name])]
        rows.append((name, min(paired), statistics.median(paired), disagree[name]))
    return said, steps, rows, engine_rate, limit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions, 0.1 s windows")
    parser.add_argument("--only", default=",".join(ROUTINES), help="routines, comma-separated")
    args = parser.parse_args()
    window, repeats = (0.1, 3) if args.quick else (WINDOW, REPEATS)
    routines = [r.strip() for r in args.only.split(",") if r.strip()]
    start = time.perf_counter()
    torch.set_default_dtype(torch.float64)
    print(f"bench_gd: engine {mm.train.engine()}; normalized GD, logistic loss, float64, "
          f"record_every=None; windows >= {window} s, {repeats} interleaved repetitions; "
          f"ratios = engine speed / loop speed, paired per repetition; {load()}", flush=True)
    worst = agreement_with_autograd()
    print(f"-- gd against a per-run autograd loop, 4 starts x 50 steps: every iterate within "
          f"{worst:.1e} relative (bar {AGREE:.0e})", flush=True)
    rates = {}
    for threads in THREADS:
        said = set_threads(threads)
        rates[threads] = ceiling(threads)
        print(f"-- ceiling at {said}: {rates[threads][0] / 1e9:.1f} GFLOP/s (1024^2 matmul), "
              f"{rates[threads][1] / 1e9:.2f} G exp/s; {load()}", flush=True)
    failures = [] if worst <= AGREE else [f"gd vs autograd {worst:.1e}"]
    table = []
    for routine in routines:
        for shape in SHAPES:
            for threads in THREADS:
                said, steps, rows, engine_rate, limit = cell(routine, shape, threads,
                                                                      window, repeats, rates)
                goal = target(routine, shape)
                n, T, d, B = shape
                print(f"{routine:8s} (n,T,d,B)=({n},{T},{d},{B}) threads: {said}; steps per call: "
                      + ", ".join(f"{k} {v}" for k, v in steps.items()) + "; "
                      f"engine {engine_rate:,.0f} traj-steps/s = {engine_rate / limit:.1%} of the "
                      f"ceiling {limit:,.0f}; {load()}", flush=True)
                for name, low, mid, (diff, agreed) in rows:
                    verdict = ""
                    if name == "matmul loop":
                        verdict = "PASS" if mid >= goal else "FAIL"
                        table.append((routine, shape, threads, low, mid, goal, verdict))
                        if verdict == "FAIL":
                            failures.append(f"{routine} {shape} {threads} thread(s) {mid:.2f}x "
                                            f"(target {goal:.0f}x)")
                    if not diff <= AGREE:
                        failures.append(f"{routine} {shape} {name} differs by {diff:.1e}")
                    print(f"   engine / {name:12s} min {low:6.2f}x  median {mid:6.2f}x  "
                          f"(iterate {agreed} within {diff:.0e})"
                          + (f"  target {goal:.0f}x  {verdict}" if verdict else ""), flush=True)
    print("-- summary: engine speed / matmul loop speed (paired, min and median)")
    print(f"   {'routine':9s} {'(n, T, d, B)':20s} {'threads':>7s} {'min':>7s} {'median':>7s}"
          f" {'target':>6s}")
    for routine, shape, threads, low, mid, goal, verdict in table:
        print(f"   {routine:9s} {str(shape):20s} {threads:7d} {low:6.2f}x {mid:6.2f}x "
              f"{goal:5.0f}x  {verdict}")
    print(f"bench_gd: finished in {time.perf_counter() - start:.0f} s; {load()}")
    if failures:
        print("FAIL: " + "; ".join(failures) + ".")
        return 1
    print("PASS: every engine meets its target against the matmul loop at every shape and thread "
          "count, every loop's final iterate equal to the engine's.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
