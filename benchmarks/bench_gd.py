"""Batched GD engine versus per-run PyTorch autograd loops, measured side by side.

Instance (n, T, d) = (100, 10, 10), 64 initializations, normalized GD on p, float64 everywhere.
Every contender runs with PyTorch's default threading (2 threads on the project machines; the
per-run loops' tiny ops cannot use them, the batched engine's large ones can), and again with
one thread, to show how much of the gain is the algorithm alone. Two baselines:

* "paper-style loop": what the paper's experiments do, one run at a time: an ``nn.Module``
  prompt-attention layer, ``loss.backward()``, gradient normalization, ``torch.optim.SGD``.
  The bar (>= 50x trajectory-steps/s) is measured against this one.
* "lean autograd loop": the tightest per-run loop we could write (``torch.autograd.grad`` on a
  functional forward pass, in-place update); reported for honesty, no bar.

Prints, before measuring, an estimate of its total run time (from a short timed calibration),
then one line per contender and repetition as it goes, and ends with PASS or FAIL and the reason
in words. Exits 1 if the bar is missed or the engines disagree.
"""
import statistics
import sys
import time

import numpy as np
import torch

import maxmargin as mm
from maxmargin.nn import PromptAttention, logistic_risk

N, T, D, RUNS, STEPS, LR, EPS, BAR = 100, 10, 10, 64, 200, 0.1, 1e-12, 50.0
LOOP_RUNS = 8  # per-run loops cost the same per trajectory-step whatever their count
REPEATS = 5    # interleaved repetitions per contender and threading setting
AGREE = 1e-9   # largest allowed difference of final iterates between implementations


def paper_style_loop(inst, P0):
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    finals = []
    for p0 in P0:
        layer = PromptAttention(D, p=p0, v=inst.v, W=inst.W)
        opt = torch.optim.SGD([layer.p], lr=LR)
        for _ in range(STEPS):
            opt.zero_grad()
            logistic_risk(layer, X, Y).backward()
            with torch.no_grad():
                layer.p.grad /= layer.p.grad.norm() + EPS
            opt.step()
        finals.append(layer.p.detach().numpy().copy())
    return np.array(finals)


def lean_autograd_loop(inst, P0):
    X, Y, v, W = (torch.tensor(a) for a in (inst.X, inst.Y, inst.v, inst.W))
    finals = []
    for p0 in P0:
        p = torch.tensor(p0, requires_grad=True)
        for _ in range(STEPS):
            s = torch.softmax(X @ (W @ p), dim=-1)
            risk = torch.nn.functional.softplus(-Y * (s * (X @ v)).sum(-1)).mean()
            (grad,) = torch.autograd.grad(risk, p)
            with torch.no_grad():
                p -= LR * grad / (grad.norm() + EPS)
        finals.append(p.detach().numpy().copy())
    return np.array(finals)


def batched(inst, P0):
    return mm.gd(inst.X, inst.Y, inst.v, P0, STEPS, LR, W=inst.W, normalized=True, eps=EPS).p[-1]


def rate(fn, inst, P0):
    start = time.perf_counter()
    out = fn(inst, P0)
    seconds = time.perf_counter() - start
    return len(P0) * STEPS / seconds, out, seconds


def setup(threads: int):
    torch.set_num_threads(threads)
    inst = mm.data.random_instance(N, T, D, seed=0)
    P0 = np.random.default_rng(1).standard_normal((RUNS, D)) * 0.1
    return inst, P0


def contenders(P0):
    """(name, function, starts) of the three implementations, in the order they are timed."""
    return [("paper-style loop", paper_style_loop, P0[:LOOP_RUNS]),
            ("lean autograd loop", lean_autograd_loop, P0[:LOOP_RUNS]),
            ("batched mm.gd", batched, P0)]


def calibrate(threads: list[int]) -> float:
    """Seconds one round of all contenders takes, summed over the threading settings, from a
    short timed run (one start per per-run loop: their cost is proportional to the starts)."""
    total = 0.0
    for n in threads:
        inst, P0 = setup(n)
        batched(inst, P0[:2])  # warm-up
        for _, fn, starts in contenders(P0):
            few = starts[:1] if fn is not batched else starts
            total += rate(fn, inst, few)[2] * len(starts) / len(few)
    return total


def measure(threads: int) -> tuple[float, float, float]:
    """Median trajectory-steps/s ratios (vs paper-style, vs lean) and the largest disagreement."""
    inst, P0 = setup(threads)
    rates = {name: [] for name, _, _ in contenders(P0)}
    finals = {}
    batched(inst, P0[:2])  # warm-up
    print(f"-- {threads} thread(s): {REPEATS} interleaved repetitions", flush=True)
    for rep in range(REPEATS):  # interleaved, so machine noise hits every contender alike
        for name, fn, starts in contenders(P0):
            r, finals[name], seconds = rate(fn, inst, starts)
            rates[name].append(r)
            print(f"   repetition {rep + 1}/{REPEATS}  {name:20s} {r:12,.0f} trajectory-steps/s"
                  f"  ({seconds:5.2f} s)", flush=True)
    median = {k: statistics.median(v) for k, v in rates.items()}
    engine = finals["batched mm.gd"][:LOOP_RUNS]
    diff = max(np.abs(engine - finals["paper-style loop"]).max(),
               np.abs(engine - finals["lean autograd loop"]).max())
    for name, value in median.items():
        print(f"   median {name:20s}: {value:12,.0f} trajectory-steps/s")
    ratio = median["batched mm.gd"] / median["paper-style loop"]
    lean = median["batched mm.gd"] / median["lean autograd loop"]
    print(f"   batched mm.gd is {ratio:.1f}x the paper-style loop and {lean:.1f}x the lean "
          "autograd loop", flush=True)
    return ratio, lean, diff


def main() -> int:
    start = time.perf_counter()
    torch.set_default_dtype(torch.float64)
    default_threads = torch.get_num_threads()
    print(f"bench_gd: instance (n,T,d)=({N},{T},{D}); {RUNS} runs x {STEPS} normalized-GD steps; "
          f"float64; threads: {default_threads} (default) and 1", flush=True)
    estimate = calibrate([default_threads, 1]) * REPEATS + (time.perf_counter() - start)
    print(f"bench_gd: this takes about {estimate:.0f} s ({estimate / 60:.1f} min) on this "
          "machine, estimated from a short calibration run", flush=True)
    ratio, _, diff = measure(default_threads)
    single, _, diff_single = measure(1)
    diff = max(diff, diff_single)
    print(f"bench_gd: finished in {time.perf_counter() - start:.0f} s")
    speed = (f"the batched engine ran {ratio:.1f} times as many trajectory-steps per second as "
             f"the paper-style loop with {default_threads} thread(s) (the bar is at least "
             f"{BAR:.0f} times; with one thread it was {single:.1f} times, reported only)")
    agree = (f"the final iterates of the three implementations differ by at most {diff:.1e} "
             f"(the bar is below {AGREE:.0e})")
    problems = []
    if ratio < BAR:
        problems.append(f"the batched engine is too slow: {speed}")
    if not diff < AGREE:
        problems.append(f"the implementations disagree: {agree}")
    if problems:
        print("FAIL: " + "; and ".join(problems) + ".")
        return 1
    print(f"PASS: {speed}; {agree}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
