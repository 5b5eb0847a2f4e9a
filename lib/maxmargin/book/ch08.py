"""Chapter 8, the optimizer's geometry: the studies behind its figures and their drawing.

The computations are the core's (:mod:`maxmargin.optimizers`, :func:`maxmargin.w_svm` in other
norms, :func:`maxmargin.exactstep.scaled_gradient`); this module builds the chapter's instances,
runs its studies, tabulates and draws them.
"""
from __future__ import annotations

import numpy as np

from .. import _checks, data
from ..exactstep import scaled_gradient
from ..losses import LOGISTIC
from . import plots


def authors_instance(seed: int, *, n: int = 6, T: int = 8, d: int = 10) -> data.Instance:
    """The synthetic law of the mirror-descent paper's code, drawn with
    ``torch.Generator().manual_seed(seed)`` in its order: v ~ N(0, I_d), Y_i = +1 where a
    standard normal draw is positive (else -1), X ~ N(0, 1)^(n x T x d), queries Z ~ N(0, 1)^(n x d);
    then v, every token and every query scaled to unit norm. The queries are in
    ``extra["queries"]``."""
    import torch

    seed = _checks.seed(seed)
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    Y = torch.where(torch.randn(n, generator=g, dtype=torch.float64) > 0, 1.0, -1.0)
    X = torch.randn(n, T, d, generator=g, dtype=torch.float64)
    Z = torch.randn(n, d, generator=g, dtype=torch.float64)
    v, X, Z = (a / torch.linalg.norm(a, dim=-1, keepdim=True) for a in (v, X, Z))
    return data.Instance(f"md-seed{seed}", X.numpy(), Y.numpy(), v.numpy(), None,
                         np.zeros((1, d)), notes="the mirror-descent paper's synthetic law",
                         extra={"queries": Z.numpy()})


def naive_gradient(X, Y, v, W, queries, *, dtype=np.float64) -> np.ndarray:
    """dL/dW (d, d) of the logistic risk computed as autograd does, in ``dtype``:
    dL/da_it = (1/n) l'(f_i) s_it (h_it - f_i) with f_i = sum_t s_it h_it formed first. Once
    attention saturates f_i rounds to the top token's value and the top term loses its digits
    (absorption)."""
    X, Y, v, W, Z = (np.asarray(a, dtype=dtype) for a in (X, Y, v, W, queries))
    a = np.einsum("ntd,de,ne->nt", X, W, Z)
    s = np.exp(a - a.max(axis=1, keepdims=True))
    s = s / s.sum(axis=1, keepdims=True)
    h = Y[:, None] * (X @ v)                                  # scores gamma_it
    f = np.sum(s * h, axis=1)                                 # margins
    slope = -1 / (1 + np.exp(f))                              # l'(f) of the logistic loss
    dlogits = slope[:, None] * s * (h - f[:, None]) / len(X)
    return np.einsum("nt,ntd,ne->de", dlogits, X, Z)


def exact_gradient_direction(X, Y, v, W, queries) -> np.ndarray:
    """dL/dW / ||dL/dW||_F (d, d) from :func:`maxmargin.exactstep.scaled_gradient` (weights
    relative to the largest non-selected one: exact at any gap)."""
    X, W, Z = (np.asarray(a, dtype=float) for a in (X, W, queries))
    gamma = np.asarray(Y, float)[:, None] * (X @ np.asarray(v, float))
    G, _, _ = scaled_gradient(X[None], gamma[None], Z[None], W[None], np.eye(W.shape[1])[None],
                              LOGISTIC)
    return G[0] / np.linalg.norm(G[0])


def absorption(inst, W_dir, gaps, *, dtypes=(np.float32, np.float64)) -> dict:
    """cos(naive gradient, exact gradient) at W = R W_dir / (smallest gap of W_dir) for each
    smallest logit gap R in ``gaps``: {dtype name: (len(gaps),)} (NaN where the naive gradient
    is exactly 0)."""
    X, Y, v, Z = inst.X, inst.Y, inst.v, inst.extra["queries"]
    a = np.einsum("ntd,de,ne->nt", X, W_dir, Z)
    top = np.sort(a, axis=1)
    unit = float(np.min(top[:, -1] - top[:, -2]))
    if unit <= 0:
        raise ValueError("W_dir: its selection must be strict (every gap > 0)")
    out = {}
    for dtype in dtypes:
        row = []
        for R in gaps:
            W = (R / unit) * W_dir
            naive = naive_gradient(X, Y, v, W, Z, dtype=dtype).astype(float)
            exact = exact_gradient_direction(X, Y, v, W, Z)
            size = np.linalg.norm(naive)
            row.append(float(np.sum(naive * exact) / size) if size > 0 else np.nan)
        out[np.dtype(dtype).name] = np.array(row)
    return out


def absorption_panel(ax, gaps, cosines: dict):
    """cos(naive, exact) against the smallest gap, one curve per dtype, with the onsets
    ln 2^24 = 16.6 (float32) and ln 2^53 = 36.7 (float64) dotted."""
    colors = {"float32": plots.VERMILLION, "float64": plots.BLUE}
    for name, cos in cosines.items():
        ax.plot(gaps, cos, "-o", ms=3, color=colors.get(name, plots.BLACK), label=name)
    for onset, name in ((24 * np.log(2), "float32"), (53 * np.log(2), "float64")):
        ax.axvline(onset, color=colors[name], ls=":", lw=1.2)
    ax.set(xlabel="smallest logit gap", ylabel="cos(naive gradient, exact gradient)",
           ylim=(-0.05, 1.05), title="absorption at saturation")
    ax.legend(loc="lower left", fontsize=9)
    return ax


def naive_ngd(inst, W0, steps: int, *, lr: float = 0.1, record=(100, 1000, 2000)) -> dict:
    """Normalized GD on W with :func:`naive_gradient` and the guard 1e-300 (the common
    implementation): {step: W (d, d)} at the steps in ``record``."""
    X, Y, v, Z = inst.X, inst.Y, inst.v, inst.extra["queries"]
    W, out = np.array(W0, dtype=float), {}
    for k in range(1, int(steps) + 1):
        G = naive_gradient(X, Y, v, W, Z)
        W = W - lr * G / (np.linalg.norm(G) + 1e-300)
        if k in record:
            out[k] = W.copy()
    return out
