"""Tolerances for comparing iterated float64 computations, derived from the computation.

Not a test module: the library tests import it (``from roundoff import ...``).

Why not one tolerance for a whole trajectory: gradient descent amplifies rounding. Two correct
implementations of x_{k+1} = x_k - lr d(x_k) round differently at every step (summation order,
OpenBLAS / MKL / ATen SIMD kernels, threads), and each difference is then amplified by the
steps that follow: in 40 plain steps of the unbounded correlation loss (test_reference_joint.py)
random perturbations of one step's rounding size grow 1e7-fold, and the library and an autograd
loop end 5e-12 apart with one set of kernels, 7e-10 with another (ATEN_CPU_CAPABILITY=default)
on the same machine.

What is bounded is one step. Started from the same iterate x_k, two correct implementations of
the step differ by at most

    |x_k| u                                 (the subtraction)
  + lr |dg|              (plain GD)    or   lr min(2, 2 |dg| / (||g|| + eps))   (normalized)

and the rounding error dg of a gradient g = sum_j c_j of m terms (m = n T here) satisfies

    |dg| <= (a + m) (1 + L) u G,    G = sum_j |c_j| (componentwise), L = max_it sum_e |k_ite p_e|,

where a (a few tens) counts the roundings inside one term, m u bounds recursive summation in any
order and any SIMD blocking, and (1 + L) is there because the logits carry an absolute error of
a few u L, which exp turns into a relative error of the attention weights. :func:`step_atol`
takes |dg| <= STEP_RTOL (1 + L) G and adds STEP_RTOL |x_k|: STEP_RTOL = 1e-12 = 9000 u covers
a + m <= 200 with a factor of 45 to spare (the measured one-step differences stay below 2e-4 of
the bound). G is computed from the terms themselves by :func:`attention_terms`, with
|gamma_it| + |z_i| in place of |gamma_it - z_i| (the absolute error of a deviation computed
naively), so the tolerance follows each step: large where the gradient cancels (a saturated
normalized step is ill-determined for a naive reference), tiny elsewhere. Every bug the
reference tests name (a wrong sign, a dropped 1/n, W used as W.T, eps in the wrong place, a
wrong loss derivative) changes one step by a fraction of lr |g| or more, orders of magnitude
above this tolerance; tests/mutants.py checks that they are caught.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

STEP_RTOL = 1e-12  # bound on one step's rounding relative to its scale (above): 9000 units u


@contextmanager
def one_thread():
    """torch on one thread inside the block (for the references' tiny ops, which run tens of
    times slower on two threads of a busy machine), then the caller's setting again."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def as_numpy(a) -> np.ndarray:
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, dtype=np.float64)


def attention_terms(weight, s, gamma, z, keys) -> np.ndarray:
    """G = sum_{i,t} |weight_i s_it| (|gamma_it| + |z_i|) |k_it| (d,), the size of the terms of
    the attention gradient sum_it weight_i s_it (gamma_it - z_i) k_it (weight_i = l'(z_i) / n)
    and of their rounding errors; ``s``, ``gamma`` (n, T), ``weight``, ``z`` (n,), keys (n, T, d).
    Pass ``gamma`` = 0 and ``z`` = 1 for terms weight_i s_it k_it (the v-gradient: keys = Y X)."""
    weight, s, gamma, z, keys = (as_numpy(a) for a in (weight, s, gamma, z, keys))
    size = np.abs(weight)[:, None] * s * (np.abs(gamma) + np.abs(z)[:, None])
    return np.einsum("nt,ntd->d", size, np.abs(keys))


def logit_size(keys, p) -> float:
    """L = max_it sum_e |k_ite p_e|: the logits' rounding errors are a few u L."""
    keys, p = as_numpy(keys), as_numpy(p)
    return float(np.max(np.abs(keys) @ np.abs(p)))


def step_atol(x, lr: float, terms, logits: float, grad_norm: float | None = None,
              eps: float = 0.0) -> float:
    """The largest difference between two correct roundings of one step from ``x``: plain
    (``grad_norm`` None) x - lr g, or normalized x - lr g / (||g|| + eps), for a gradient whose
    terms have size ``terms`` (:func:`attention_terms`, summed over parameters if several) and
    logits of size ``logits`` (:func:`logit_size`); see the module docstring."""
    x, G = as_numpy(x), float(np.max(as_numpy(terms)))
    gradient_error = STEP_RTOL * (1.0 + logits) * G
    if grad_norm is None:
        step_error = lr * gradient_error
    else:  # g / (||g|| + eps) moves by at most 2 |dg| / (||g|| + eps), and never by more than 2
        step_error = lr * min(2.0, 2.0 * gradient_error / (grad_norm + eps))
    return STEP_RTOL * float(np.max(np.abs(x))) + step_error


def risk_atol(weight, gamma, logits: float) -> float:
    """The rounding bound of a recorded risk mean_i l(z_i) beyond its relative accuracy: each
    margin z_i = sum_t s_it gamma_it is off by at most STEP_RTOL (1 + L) max|gamma| (as the
    gradient's terms above), and l moves by |l'(z_i)| = n |weight_i| times that."""
    weight, gamma = as_numpy(weight), as_numpy(gamma)
    return STEP_RTOL * (1.0 + logits) * float(np.max(np.abs(gamma))) * len(weight) * float(
        np.max(np.abs(weight)))


def autograd_step(model, x, lr: float, normalized: bool, eps: float):
    """One plain or normalized GD step by torch autograd from x (numpy), on one thread.

    ``model(x)`` (x a torch tensor) returns the risk, the margins z (n,), the attention s (n, T),
    the scores gamma (n, T) and the derivative of the logits in x, (n, T, *x.shape). Returns the
    next x, the risk at x, and the rounding bounds of the step (:func:`step_atol`) and of the
    risk (:func:`risk_atol`).
    """
    with one_thread():
        x = torch.tensor(x, requires_grad=True)
        risk, margin, s, gamma, keys = model(x)
        g, weight = torch.autograd.grad(risk, (x, margin))    # weight_i = l'(z_i) / n
        with torch.no_grad():
            nxt = x - lr * (g / (g.norm() + eps) if normalized else g)
        keys = keys.reshape(keys.shape[0], keys.shape[1], -1)
        L = logit_size(keys, x.reshape(-1))
        atol = step_atol(x, lr, attention_terms(weight, s, gamma, margin, keys), L,
                         g.norm().item() if normalized else None, eps)
        return nxt.detach().numpy(), risk.item(), atol, risk_atol(weight, gamma, L)


def assert_every_step_matches(path, risks, model, lr: float, normalized: bool, eps: float, x0,
                              risk_rtol: float = 1e-10) -> None:
    """A recorded trajectory (steps + 1, ...) and its risks, step by step against autograd:
    iterate 0 is x0 itself, the reference's step from the library's iterate k gives its iterate
    k + 1 to within that step's rounding bound, and the risk recorded at k is the reference's at
    iterate k (a single evaluation, ``risk_rtol`` plus :func:`risk_atol`)."""
    np.testing.assert_array_equal(path[0], x0)
    for k in range(len(path)):
        nxt, risk, atol, r_atol = autograd_step(model, path[k], lr, normalized, eps)
        assert risks[k] == pytest.approx(risk, rel=risk_rtol, abs=r_atol), k
        if k + 1 < len(path):
            np.testing.assert_allclose(path[k + 1], nxt, rtol=0, atol=atol,
                                       err_msg=f"step {k} -> {k + 1}")


def step_bounds(model, path, lr: float, normalized: bool, eps: float) -> np.ndarray:
    """(len(path) - 1,) the rounding bound of the step from each iterate of ``path`` but the
    last (:func:`autograd_step`): for comparing two implementations' steps from one iterate."""
    return np.array([autograd_step(model, x, lr, normalized, eps)[2] for x in path[:-1]])


def prompt_model(X, Y, v, W, loss):
    """The prompt model written out in torch, for :func:`autograd_step`: p -> (risk, z, s,
    gamma, keys) with logits x_it^T W p, scores gamma_it = Y_i v^T x_it and the torch loss
    function ``loss``; X, Y, v, W are numpy arrays (W None: the identity)."""
    X, Y, v = torch.tensor(X), torch.tensor(Y), torch.tensor(v)
    W = torch.eye(X.shape[2], dtype=torch.float64) if W is None else torch.tensor(W)
    gamma, keys = Y[:, None] * (X @ v), X @ W

    def model(p):
        s = torch.softmax(X @ (W @ p), dim=-1)
        margin = (s * gamma).sum(-1)
        return loss(margin).mean(), margin, s, gamma, keys

    return model


def noisy_spread(run, trials: int = 3, seed: int = 0) -> np.ndarray:
    """The measured amplification of a trajectory, for a whole-trajectory comparison.

    ``run(perturb)`` replays the reference trajectory, continuing after each step from
    ``perturb(x, atol)`` instead of x, where atol is that step's :func:`step_atol`, and returns
    the iterates (steps + 1, ...). Each trial moves every iterate by up to atol in a random
    direction: the largest rounding one step may make (thousands of times what a step actually
    makes). Returns, per step (steps + 1,), the largest deviation over the trials from the
    unperturbed run (max over components): two correct implementations drift apart by less.
    """
    clean = np.asarray(run(lambda x, atol: x))
    rng = np.random.default_rng(seed)
    spread = np.zeros(len(clean))
    for _ in range(trials):
        noisy = np.asarray(run(lambda x, atol: x + atol * rng.uniform(-1.0, 1.0, np.shape(x))))
        spread = np.maximum(spread, np.abs(noisy - clean).reshape(len(clean), -1).max(axis=1))
    return spread
