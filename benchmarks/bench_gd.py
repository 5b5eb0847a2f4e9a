"""The GD engine against the loops a reader would write, and against this machine's limit.

Instance (n, T, d) = (100, 10, 10), 64 starts, normalized GD on p, float64, measured side by side
in one run (interleaved repetitions, medians):

* "engine": ``mm.gd(..., record_every=None)`` (the compiled kernel when numba is installed), and
  with today's default recording of every step (``record_every=1``);
* "plain batched loop": ten lines of batched torch of the same mathematics (logits, softmax over
  tokens, the logistic weights, one contraction back to p, no recording). Bar: engine >= 2x;
* "lean autograd loop": one run at a time, ``torch.autograd.grad`` on a functional forward pass.
  Bar: engine >= 50x;
* "paper-style loop": an ``nn.Module``, ``backward()`` and ``torch.optim.SGD``, reported only.

Every baseline is timed with torch's default threads and with one thread, and the better of the two
is the one compared (tiny per-run ops on two threads of a busy machine run many times slower: the
comparison would flatter the engine). The engine's iterates are checked against the lean autograd
loop, step by step, to 1e-12 relative.

Then: the ceiling of this machine for one trajectory-step (4 n T d flops of two contractions at
the flop rate of a large float64 matmul, plus n T exponentials at the best exp rate of a large
vector among numpy, torch and the engine's own kernel; best of 7 timings each, so that the ceiling is the machine's rather than
its load), the engine's fraction of it, the scaling
of the rate with the batch B and with n, and the engine's start-up cost (loading the compiled
kernel from the cache, and compiling it with an empty cache). Timings on a shared machine are
inflated by the others' load; the uptime load average is printed with the results.

Exits 1 if a bar is missed or the engine disagrees with the reference.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import maxmargin as mm
from maxmargin.nn import PromptAttention, logistic_risk

N, T, D, RUNS, STEPS, LR, EPS = 100, 10, 10, 64, 200, 0.1, 1e-12
PLAIN_BAR, LEAN_BAR = 2.0, 50.0
LOOP_RUNS = 4      # per-run loops cost the same per trajectory-step whatever their count
LOOP_STEPS = 50    # ... and whatever their number of steps: fewer, so the bench stays short
REPEATS = 5        # interleaved repetitions
AGREE = 1e-12      # largest relative difference of any iterate from the autograd reference
AGREE_STEPS = 50


def engine(inst, P0, steps=STEPS, record_every=None):
    return mm.gd(inst.X, inst.Y, inst.v, P0, steps, LR, W=inst.W, normalized=True, eps=EPS,
                 record_every=record_every).p[-1]


def engine_recording(inst, P0):
    return engine(inst, P0, record_every=1)


def plain_batched_loop(inst, P0, steps=STEPS):
    K = torch.tensor(inst.X @ inst.W)                            # (n, T, d) keys
    gamma = torch.tensor(inst.Y[:, None] * (inst.X @ inst.v))    # (n, T) scores
    P = torch.tensor(P0.T.copy())                                # (d, B)
    n = K.shape[0]
    for _ in range(steps):
        s = torch.softmax(torch.einsum("ntd,db->ntb", K, P), dim=1)
        z = (s * gamma[..., None]).sum(1)
        w = -torch.sigmoid(-z) / n
        g = torch.einsum("ntd,ntb->db", K, s * (gamma[..., None] - z[:, None]) * w[:, None])
        P = P - LR * g / (g.norm(dim=0) + EPS)
    return P.T.numpy()


def lean_autograd_path(inst, p0, steps):
    """(steps + 1, d) iterates of the lean per-run autograd loop."""
    X, Y, v, W = (torch.tensor(a) for a in (inst.X, inst.Y, inst.v, inst.W))
    p = torch.tensor(p0, requires_grad=True)
    path = [p0.copy()]
    for _ in range(steps):
        s = torch.softmax(X @ (W @ p), dim=-1)
        risk = torch.nn.functional.softplus(-Y * (s * (X @ v)).sum(-1)).mean()
        (grad,) = torch.autograd.grad(risk, p)
        with torch.no_grad():
            p -= LR * grad / (grad.norm() + EPS)
        path.append(p.detach().numpy().copy())
    return np.array(path)


def lean_autograd_loop(inst, P0):
    return np.array([lean_autograd_path(inst, p0, LOOP_STEPS)[-1] for p0 in P0])


def paper_style_loop(inst, P0):
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    finals = []
    for p0 in P0:
        layer = PromptAttention(D, p=p0, v=inst.v, W=inst.W)
        opt = torch.optim.SGD([layer.p], lr=LR)
        for _ in range(LOOP_STEPS):
            opt.zero_grad()
            logistic_risk(layer, X, Y).backward()
            with torch.no_grad():
                layer.p.grad /= layer.p.grad.norm() + EPS
            opt.step()
        finals.append(layer.p.detach().numpy().copy())
    return np.array(finals)


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def side_by_side(inst, P0, threads: int) -> dict:
    """Median trajectory-steps/s of each contender, interleaved, at the default threads and one."""
    contenders = [("engine, record_every=None", engine, P0, threads, STEPS),
                  ("engine, record_every=1", engine_recording, P0, threads, STEPS)]
    for n_threads in sorted({threads, 1}, reverse=True):
        contenders += [(f"plain batched loop, {n_threads} thread(s)", plain_batched_loop, P0,
                        n_threads, STEPS),
                       (f"lean autograd loop, {n_threads} thread(s)", lean_autograd_loop,
                        P0[:LOOP_RUNS], n_threads, LOOP_STEPS),
                       (f"paper-style loop, {n_threads} thread(s)", paper_style_loop,
                        P0[:LOOP_RUNS], n_threads, LOOP_STEPS)]
    rates = {name: [] for name, *_ in contenders}
    for rep in range(REPEATS):
        for name, fn, starts, n_threads, steps in contenders:
            torch.set_num_threads(n_threads)
            seconds = timed(fn, inst, starts)
            rates[name].append(len(starts) * steps / seconds)
            print(f"   repetition {rep + 1}/{REPEATS}  {name:36s} {rates[name][-1]:12,.0f} "
                  f"trajectory-steps/s  ({seconds:5.2f} s)", flush=True)
    torch.set_num_threads(threads)
    return {name: statistics.median(r) for name, r in rates.items()}


def agreement(inst, P0) -> float:
    """Largest ||p_k(engine) - p_k(autograd)|| / ||p_k(autograd)|| over AGREE_STEPS steps."""
    run = mm.gd(inst.X, inst.Y, inst.v, P0, AGREE_STEPS, LR, W=inst.W, normalized=True, eps=EPS)
    worst = 0.0
    for b, p0 in enumerate(P0):
        path = lean_autograd_path(inst, p0, AGREE_STEPS)
        error = np.linalg.norm(run.p[:, b] - path, axis=-1) / np.linalg.norm(path, axis=-1)
        worst = max(worst, float(error.max()))
    return worst


def best_rate(work: float, fn, *args, repeats: int = 7) -> float:
    """Largest work / seconds over ``repeats`` timed calls (the machine's best, not its load)."""
    return max(work / timed(fn, *args) for _ in range(repeats))


def ceiling() -> tuple[float, float, float]:
    """(flop/s of a 1500 x 1500 float64 matmul, best exp/s over numpy, torch and the engine's
    own exp on a cache-resident vector, the trajectory-steps/s these two rates allow)."""
    a = torch.randn(1500, 1500, dtype=torch.float64)
    a @ a
    flops = best_rate(2 * 1500**3, torch.matmul, a, a)
    size, reps = 1 << 15, 50
    x = -np.random.default_rng(0).random(size) * 30
    out, xt, outt = np.empty(size), torch.from_numpy(x), torch.empty(size, dtype=torch.float64)
    from maxmargin import _compiled  # the engine's own vectorized exp
    y, scratch = x.copy(), (np.empty(size), np.empty(size))
    _compiled._exp_lanes(y, size, *scratch)

    def repeat(fn, *args):
        for _ in range(reps):
            fn(*args)

    exps = max(best_rate(size * reps, repeat, np.exp, x, out),
               best_rate(size * reps, repeat, lambda u, v: torch.exp(u, out=v), xt, outt),
               best_rate(size * reps, repeat, _compiled._exp_lanes, y, size, *scratch))
    per_step = 4 * N * T * D / flops + N * T / exps
    return flops, exps, 1.0 / per_step


def scaling(inst) -> None:
    print("-- scaling of the engine's rate (record_every=None), trajectory-steps/s", flush=True)
    rng = np.random.default_rng(3)
    for B in (1, 8, 64, 512, 4096):
        P0 = rng.standard_normal((B, D)) * 0.1
        steps = max(10, STEPS * 64 // B)
        engine(inst, P0, steps=2)
        rate = B * steps / min(timed(engine, inst, P0, steps) for _ in range(3))
        print(f"   B = {B:5d}  ({steps:4d} steps)   {rate:12,.0f}", flush=True)
    for n in (10, 100, 1000):
        other = mm.data.random_instance(n, T, D, seed=0)
        P0 = rng.standard_normal((RUNS, D)) * 0.1
        steps = max(10, STEPS * 100 // n)
        rate = RUNS * steps / min(timed(engine, other, P0, steps) for _ in range(3))
        print(f"   n = {n:5d}  ({steps:4d} steps, B = {RUNS})   {rate:12,.0f}"
              f"   ({rate * n:14,.0f} sequence-steps/s)", flush=True)


STARTUP = ("import time, numpy as np; t = time.perf_counter(); import maxmargin as mm; "
           "inst = mm.data.random_instance(100, 10, 10, seed=0); "
           "mm.gd(inst.X, inst.Y, inst.v, np.zeros((64, 10)), 10, 0.1, W=inst.W); "
           "print(time.perf_counter() - t)")


def startup() -> tuple[float, float]:
    """Seconds of a fresh process's import + first engine call: cache loaded, and cache empty."""
    env = dict(os.environ, MAXMARGIN_ENGINE="compiled")
    warm = float(subprocess.run([sys.executable, "-c", STARTUP], env=env, check=True,
                                capture_output=True, text=True).stdout)
    with tempfile.TemporaryDirectory() as empty:
        cold = float(subprocess.run([sys.executable, "-c", STARTUP],
                                    env=dict(env, NUMBA_CACHE_DIR=empty), check=True,
                                    capture_output=True, text=True).stdout)
    return warm, cold


def main() -> int:
    start = time.perf_counter()
    torch.set_default_dtype(torch.float64)
    threads = torch.get_num_threads()
    inst = mm.data.random_instance(N, T, D, seed=0)
    P0 = np.random.default_rng(1).standard_normal((RUNS, D)) * 0.1
    print(f"bench_gd: (n,T,d)=({N},{T},{D}); {RUNS} starts x {STEPS} normalized-GD steps; float64; "
          f"engine {mm.train.engine()}; torch threads {threads}; {load()}", flush=True)
    engine(inst, P0[:2], steps=2)  # loads (or compiles) the kernel
    print("bench_gd: takes about 3 to 6 minutes on a loaded two-core machine", flush=True)
    worst = agreement(inst, P0[:8])
    print(f"-- agreement: each of {AGREE_STEPS} iterates of 8 starts within {worst:.1e} relative "
          "of the lean autograd loop", flush=True)
    print(f"-- side by side, {REPEATS} interleaved repetitions", flush=True)
    rates = side_by_side(inst, P0, threads)
    best = lambda kind: max(v for k, v in rates.items() if k.startswith(kind))  # noqa: E731
    fast, recording = rates["engine, record_every=None"], rates["engine, record_every=1"]
    plain, lean, paper = best("plain batched"), best("lean autograd"), best("paper-style")
    print("-- medians (baselines at their better thread setting), trajectory-steps/s")
    for name, value in rates.items():
        print(f"   {name:36s} {value:12,.0f}")
    print(f"   engine (record_every=None) / plain batched loop   {fast / plain:7.2f}x  "
          f"(bar {PLAIN_BAR:.0f}x)")
    print(f"   engine (record_every=None) / lean autograd loop   {fast / lean:7.1f}x  "
          f"(bar {LEAN_BAR:.0f}x)")
    print(f"   engine (record_every=1)    / plain batched loop   {recording / plain:7.2f}x  "
          "(bar: above 1x)")
    print(f"   engine (record_every=None) / paper-style loop     {fast / paper:7.1f}x")
    flops, exps, limit = ceiling()
    print(f"-- ceiling: {flops / 1e9:.1f} GFLOP/s (float64 matmul, {threads} threads), "
          f"{exps / 1e9:.2f} G exp/s (best vector exp); one trajectory-step is "
          f"{4 * N * T * D:,} flops + {N * T:,} exp, so at most {limit:,.0f} trajectory-steps/s; "
          f"the engine reaches {fast / limit:.1%} of it", flush=True)
    scaling(inst)
    warm, cold = startup()
    print(f"-- start-up of a fresh process (import + first compiled call): {warm:.1f} s with the "
          f"kernel in numba's cache, {cold:.1f} s compiling it", flush=True)
    print(f"bench_gd: finished in {time.perf_counter() - start:.0f} s; {load()}")
    problems = []
    if fast < PLAIN_BAR * plain:
        problems.append(f"the engine is {fast / plain:.2f}x the plain batched loop (bar "
                        f"{PLAIN_BAR:.0f}x)")
    if fast < LEAN_BAR * lean:
        problems.append(f"the engine is {fast / lean:.1f}x the lean autograd loop (bar "
                        f"{LEAN_BAR:.0f}x)")
    if recording <= plain:
        problems.append(f"recording every step, the engine is {recording / plain:.2f}x the plain "
                        "loop (must beat it)")
    if not worst <= AGREE:
        problems.append(f"the engine's iterates differ from the autograd loop by {worst:.1e} "
                        f"relative (bar {AGREE:.0e})")
    if problems:
        print("FAIL: " + "; ".join(problems) + ".")
        return 1
    print(f"PASS: the engine runs {fast / plain:.2f}x the plain batched loop and {fast / lean:.0f}x "
          f"the lean autograd loop ({recording / plain:.2f}x the plain loop recording every "
          f"step), at {fast / limit:.0%} of this machine's ceiling, its iterates within "
          f"{worst:.0e} of the autograd loop.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
