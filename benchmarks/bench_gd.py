"""Batched GD engine versus a per-run PyTorch autograd loop, measured side by side.

Instance (n, T, d) = (100, 10, 10), 64 initializations, normalized GD on p, float64 in both.
Prints trajectory-steps per second for each and their ratio; exits 1 below the bar (50x).
"""
import statistics
import sys
import time

import numpy as np
import torch

import maxmargin as mm

N, T, D, RUNS, STEPS, LR, BAR = 100, 10, 10, 64, 200, 0.1, 50.0


def autograd_loop(inst, P0, steps):
    """What a reader would write first: one run at a time, autograd for the gradient."""
    X, Y, v = (torch.tensor(a) for a in (inst.X, inst.Y, inst.v))
    W = torch.tensor(inst.W)
    finals = []
    for p0 in P0:
        p = torch.tensor(p0, requires_grad=True)
        for _ in range(steps):
            s = torch.softmax(X @ (W @ p), dim=-1)
            risk = torch.nn.functional.softplus(-Y * (s * (X @ v)).sum(-1)).mean()
            (grad,) = torch.autograd.grad(risk, p)
            with torch.no_grad():
                p -= LR * grad / (grad.norm() + 1e-12)
        finals.append(p.detach().numpy())
    return np.array(finals)


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> int:
    torch.set_default_dtype(torch.float64)
    inst = mm.data.random_instance(N, T, D, seed=0)
    P0 = np.random.default_rng(1).standard_normal((RUNS, D)) * 0.1
    baseline_runs = 8  # the loop is slow; its rate per trajectory-step does not depend on the count
    rates_loop, rates_batched = [], []
    for _ in range(3):  # interleave the two so machine noise hits both alike
        t_loop, loop_final = timed(autograd_loop, inst, P0[:baseline_runs], STEPS)
        t_batch, traj = timed(lambda: mm.gd(inst.X, inst.Y, inst.v, P0, STEPS, LR, W=inst.W, normalized=True))
        rates_loop.append(baseline_runs * STEPS / t_loop)
        rates_batched.append(RUNS * STEPS / t_batch)
    agree = np.max(np.abs(traj.p[-1, :baseline_runs] - loop_final))
    loop, batched = statistics.median(rates_loop), statistics.median(rates_batched)
    ratio = batched / loop
    print(f"instance (n,T,d)=({N},{T},{D}), {RUNS} runs x {STEPS} normalized-GD steps, float64")
    print(f"per-run autograd loop : {loop:12,.0f} trajectory-steps/s")
    print(f"batched mm.gd         : {batched:12,.0f} trajectory-steps/s")
    print(f"ratio                 : {ratio:12.1f}x   (bar >= {BAR:.0f}x)")
    print(f"max |difference| of final iterates: {agree:.2e}")
    ok = ratio >= BAR and agree < 1e-9
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
