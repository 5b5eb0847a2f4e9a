"""Chapter 8, the optimizer's geometry: the studies behind its figures and their drawing.

The computations are the core's (:mod:`maxmargin.optimizers`, :func:`maxmargin.w_svm` in other
norms, :func:`maxmargin.exactstep.scaled_gradient`); this module builds the chapter's instances,
runs its studies, tabulates and draws them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _checks, data
from ..exactstep import scaled_gradient
from ..losses import LOGISTIC
from ..svm import w_svm
from . import plots
from .tables import Table, table


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


def naive_ngd(inst, start, steps: int, *, lr: float = 0.1, record=(100, 1000, 2000)) -> dict:
    """Normalized GD on W with :func:`naive_gradient` and the guard 1e-300 (the common
    implementation): {step: W (d, d)} at the steps in ``record``."""
    X, Y, v, Z = inst.X, inst.Y, inst.v, inst.extra["queries"]
    W, out = np.array(start, dtype=float), {}
    for k in range(1, int(steps) + 1):
        G = naive_gradient(X, Y, v, W, Z)
        W = W - lr * G / (np.linalg.norm(G) + 1e-300)
        if k in record:
            out[k] = W.copy()
    return out


def mpmath_gradient_direction(X, Y, v, W, queries, *, digits: int | None = None) -> np.ndarray:
    """dL/dW / ||dL/dW||_F (d, d) of the logistic risk in mpmath, from the softmax as written
    (s_it = e^(a_it) / sum_u e^(a_iu)), with 30 digits more than the logits' spread needs (so
    that 1 - s_ir, of order e^(-gap), does not round away), or ``digits``."""
    import mpmath

    X, Y, v, W, Z = (np.asarray(a, dtype=float) for a in (X, Y, v, W, queries))
    n, T, d = X.shape
    a = np.einsum("ntd,de,ne->nt", X, W, Z)
    dps = digits or int(30 + np.ptp(a) / np.log(10))
    with mpmath.workdps(dps):
        G = [[mpmath.mpf(0)] * d for _ in range(d)]
        for i in range(n):
            logits = [mpmath.fsum(mpmath.mpf(X[i, t, k]) * mpmath.mpf(W[k, e]) * mpmath.mpf(Z[i, e])
                                  for k in range(d) for e in range(d)) for t in range(T)]
            e = [mpmath.exp(x) for x in logits]
            total = mpmath.fsum(e)
            s = [x / total for x in e]
            h = [mpmath.mpf(Y[i]) * mpmath.fsum(mpmath.mpf(X[i, t, k]) * mpmath.mpf(v[k])
                                                for k in range(d)) for t in range(T)]
            f = mpmath.fsum(st * ht for st, ht in zip(s, h))
            slope = -1 / (1 + mpmath.exp(f)) / n
            for t in range(T):
                w = slope * s[t] * (h[t] - f)
                for k in range(d):
                    for l in range(d):
                        G[k][l] += w * mpmath.mpf(X[i, t, k]) * mpmath.mpf(Z[i, l])
        norm = mpmath.sqrt(mpmath.fsum(g * g for row in G for g in row))
        return np.array([[float(g / norm) for g in row] for row in G])


def dual_norm(G, q: float, *, scaled: bool = True) -> float:
    """||G||_q = (sum |G_ij|^q)^(1/q), entrywise; ``scaled``: computed as m ||G / m||_q with
    m = max |G_ij|, which neither underflows nor overflows (the plain sum underflows to 0 once
    |G|^q is below the smallest float64)."""
    G = np.abs(np.asarray(G, dtype=float))
    if not scaled:
        return float(np.sum(G ** q) ** (1 / q))
    m = G.max()
    return 0.0 if m == 0 else float(m * np.sum((G / m) ** q) ** (1 / q))


def naive_study(*, seeds=(1, 2, 3), steps: int = 10000, record=(100, 1000, 2000, 10000),
                lr: float = 0.1) -> dict:
    """Normalized GD from W_0 = 0 on :func:`authors_instance` (seed) with the naive gradient
    (:func:`naive_ngd`) and with the exact step (:func:`maxmargin.exactstep.ngd_KQ_exact` with
    Q = I frozen): {seed: {"naive", "exact": {step: cos with the Frobenius W-SVM at the
    selection that run ranks first}, "naive gap": {step: its smallest gap}}}."""
    from ..exactstep import ngd_KQ_exact
    from ..svm import w_svm

    insts = [authors_instance(seed) for seed in seeds]
    d = insts[0].X.shape[-1]
    exact = ngd_KQ_exact(np.stack([i.X for i in insts]), np.stack([i.Y for i in insts]),
                         np.stack([i.v for i in insts]), np.zeros((len(insts), d, d)), np.eye(d),
                         np.stack([i.extra["queries"] for i in insts]), steps, lr,
                         freeze_Q=True, record_every=100)       # all seeds in one program
    out = {}
    for j, (seed, inst) in enumerate(zip(seeds, insts)):
        X, Z = inst.X, inst.extra["queries"]
        naive = naive_ngd(inst, np.zeros((d, d)), steps, lr=lr, record=record)
        row = {"naive": {}, "exact": {}, "naive gap": {}}
        for k in record:
            for name, W in (("naive", naive[k]),
                            ("exact", exact.W[np.searchsorted(exact.steps, k), j])):
                a = np.einsum("ntd,de,ne->nt", X, W, Z)
                alpha = a.argmax(axis=1)
                fro = w_svm(X, alpha, queries=Z)
                row[name][k] = float(np.sum(W * fro.W) / np.linalg.norm(W) / np.linalg.norm(fro.W))
                if name == "naive":
                    top = np.sort(a, axis=1)
                    row["naive gap"][k] = float(np.min(top[:, -1] - top[:, -2]))
        out[seed] = row
    return out


def naive_table(study: dict) -> Table:
    """:func:`naive_study` as a table: cos with the SVM per seed, step and gradient."""
    steps = sorted(next(iter(study.values()))["naive"])
    rows = [[seed, name, *(row[name][k] for k in steps)]
            for seed, row in study.items() for name in ("naive", "exact")]
    return table(rows, ["seed", "gradient", *(f"step {k:,}" for k in steps)],
                 ["d", None, *([".4f"] * len(steps))])


# ----------------------------------------------------------------------------------------------
# Studies over many instances of the mirror-descent paper's law
# ----------------------------------------------------------------------------------------------

MD_POTENTIALS = (1.75, 2.0, 3.0)
MD_STEPS = {1.75: 1500, 2.0: 2000, 3.0: 20000}   # the authors' code: steps per potential


class Stack(NamedTuple):
    """Instances of :func:`authors_instance` stacked: X (M, n, T, d), Y (M, n), v (M, d),
    Z (M, n, d), and the seeds."""

    X: np.ndarray
    Y: np.ndarray
    v: np.ndarray
    Z: np.ndarray
    seeds: tuple


def stack(seeds) -> Stack:
    """The instances :func:`authors_instance` (seed) for each of ``seeds``, stacked."""
    insts = [authors_instance(s) for s in seeds]
    return Stack(*(np.stack([getattr(i, k) for i in insts]) for k in ("X", "Y", "v")),
                 np.stack([i.extra["queries"] for i in insts]), tuple(int(s) for s in seeds))


def _norm_name(q: float):
    """The w_svm norm for an entrywise l_q: "frobenius" for q = 2, the number otherwise."""
    return "frobenius" if q == 2 else float(q)


def top_tokens(st: Stack, matrices: np.ndarray) -> np.ndarray:
    """(M, n) the token each sequence ranks first under its instance's matrix (M, d, d)."""
    return np.einsum("mntd,mde,mne->mnt", st.X, matrices, st.Z).argmax(axis=2)


def smallest_gaps(st: Stack, matrices: np.ndarray) -> np.ndarray:
    """(M,) the smallest logit gap between each sequence's top token and the next, under its
    instance's matrix (M, d, d)."""
    a = np.sort(np.einsum("mntd,mde,mne->mnt", st.X, matrices, st.Z), axis=2)
    return np.min(a[..., -1] - a[..., -2], axis=1)


class _SVMCache:
    """W-SVMs of the stack's instances, solved once per (instance, selection, norm)."""

    def __init__(self, st: Stack):
        self.st, self.solved = st, {}

    def __call__(self, j: int, alpha, norm):
        key = (j, tuple(int(a) for a in alpha), norm)
        if key not in self.solved:
            self.solved[key] = w_svm(self.st.X[j], np.asarray(alpha), queries=self.st.Z[j],
                                     norm=norm)
        return self.solved[key]


def bregman(W: np.ndarray, S: np.ndarray, p: float) -> float:
    """The directional Bregman divergence of the potential ||.||_p^p / p between the directions
    of S and W: 1 - <sign(W')|W'|^(p-1), S'> with W' = W / ||W||_p, S' = S / ||S||_p (in
    [0, 2]; 1 - cos for p = 2)."""
    Wn = W / np.sum(np.abs(W) ** p) ** (1 / p)
    Sn = S / np.sum(np.abs(S) ** p) ** (1 / p)
    return float(1 - np.sum(np.sign(Wn) * np.abs(Wn) ** (p - 1) * Sn))


def density(W: np.ndarray) -> float:
    """(||W||_1 / ||W||_F)^2 / (number of entries): 1 for a matrix of equal |entries|, about
    1 / (number of entries) for a single nonzero entry."""
    return float((np.abs(W).sum() / np.linalg.norm(W)) ** 2 / W.size)


def md_study(seeds, *, potentials=MD_POTENTIALS, steps: dict | None = None,
             norms=MD_POTENTIALS, start: str = "zero", progress: bool = False) -> dict:
    """Normalized mirror descent (step 0.1, potential ||W||_p^p / p) on the instances of
    ``seeds``, from W_0 = 0 (``start="zero"``) or from the authors' standard normal start
    seeded 1000 + seed (``start="authors"``), for ``steps[p]`` steps (default the authors'
    ``MD_STEPS``). Each run is compared with the entrywise l_q W-SVM, q in ``norms``, at the
    selection it ranks first at its last step. Returns {"cos", "ratio", "bregman"}
    (P, Q, M) arrays (cosine, margin ratio rho_q and D_p), "alpha" (P, M, n), "gap" (P, M),
    "density" (P, M) of the runs and "svm density" (Q, M) of the SVMs at the highest-score
    selection, and the settings."""
    from ..normsvm import w_margin_ratio
    from ..optimizers import descend

    st = stack(seeds)
    M, n, T, d = st.X.shape
    steps = dict(MD_STEPS if steps is None else steps)
    if start == "zero":
        W0 = np.zeros((M, d, d))
    elif start == "authors":
        import torch
        W0 = np.stack([torch.randn(d, d, generator=torch.Generator().manual_seed(1000 + s),
                                   dtype=torch.float64).numpy() for s in st.seeds])
    else:
        raise ValueError(f"start: expected 'zero' or 'authors', got {start!r}")
    svms = _SVMCache(st)
    P, Q = len(potentials), len(norms)
    out = {k: np.empty((P, Q, M)) for k in ("cos", "ratio", "bregman")}
    out |= {"alpha": np.empty((P, M, n), dtype=int), "gap": np.empty((P, M)),
            "density": np.empty((P, M))}
    for a, p in enumerate(potentials):
        run = descend(st.X, st.Y, st.v, W0, st.Z, steps[p], 0.1, method="md", p=p,
                      record_every=None)
        W = run.W[-1]
        alpha = top_tokens(st, W)
        out["alpha"][a], out["gap"][a] = alpha, smallest_gaps(st, W)
        out["density"][a] = [density(w) for w in W]
        for b, q in enumerate(norms):
            for j in range(M):
                svm = svms(j, alpha[j], _norm_name(q))
                out["cos"][a, b, j] = np.sum(W[j] * svm.W) / np.linalg.norm(W[j]) / np.linalg.norm(svm.W)
                out["ratio"][a, b, j] = w_margin_ratio(st.X[j], W[j], alpha[j], queries=st.Z[j],
                                                       norm=_norm_name(q), svm=svm)
                out["bregman"][a, b, j] = bregman(W[j], svm.W, p)
        if progress:
            print(f"md_study: p = {p}, {steps[p]:,} steps of {M} runs and their SVMs done",
                  flush=True)
    best = np.array([inst.optimal for inst in (authors_instance(s) for s in st.seeds)])
    out["svm density"] = np.array([[density(svms(j, best[j], _norm_name(q)).W) for j in range(M)]
                                   for q in tuple(norms) + (np.inf,)])
    return out | {"potentials": tuple(potentials), "norms": tuple(norms), "steps": steps,
                  "seeds": st.seeds, "start": start}


class Estimate(NamedTuple):
    """A statistic and its 95% interval [low, high]."""

    value: float
    low: float
    high: float


def bootstrap_mean(x, *, draws: int = 2000, seed: int = 0) -> Estimate:
    """The mean of ``x`` (k,) and a 95% percentile-bootstrap interval."""
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(draws, len(x)))].mean(axis=1)
    return Estimate(float(x.mean()), float(np.percentile(means, 2.5)),
                    float(np.percentile(means, 97.5)))


RATE_METHODS = (("GD", "gd", 1.0), ("NGD", "ngd", 0.1), ("Polyak", "polyak", 0.1))


def rate_study(seeds, *, steps: int = 8000, record_every: int = 100, fit=(1000, 8000)) -> dict:
    """GD (step 1), NGD (0.1) and the Polyak step (NGD steps of 0.1 where L - L* <= 0) from
    W_0 = 0 on the instances of ``seeds``: {name: {"steps" (R,), "error" (R, M) 1 - cos with the
    Frobenius W-SVM at the selection of the last step, "slope" (M,) the least-squares slope of
    log(error) against log(step) over ``fit``, "norm" (R, M) ||W_t||_F, "gap" (M,) the last
    smallest gap, "fallbacks" (M,)}}."""
    from ..optimizers import descend

    st = stack(seeds)
    M, n, T, d = st.X.shape
    out = {}
    for name, method, lr in RATE_METHODS:
        run = descend(st.X, st.Y, st.v, np.zeros((M, d, d)), st.Z, steps, lr, method=method,
                      record_every=record_every)
        W = run.W[-1]
        alpha = top_tokens(st, W)
        S = np.stack([w_svm(st.X[j], alpha[j], queries=st.Z[j]).W for j in range(M)])
        error = 1 - run.cosine(S)
        keep = (run.steps >= fit[0]) & (run.steps <= fit[1])
        logs = np.log(run.steps[keep])
        slope = np.array([np.polyfit(logs, np.log(np.maximum(error[keep, j], 1e-300)), 1)[0]
                          for j in range(M)])
        out[name] = {"steps": run.steps, "error": error, "slope": slope, "norm": run.norms,
                     "gap": smallest_gaps(st, W), "fallbacks": run.fallbacks}
    return out


STEEPEST = (("NGD", dict(method="ngd")), ("sign", dict(method="sign")),
            ("spectral", dict(method="spectral")), ("Adam", dict(method="adam")))
STEEPEST_NORMS = (("Frobenius", "frobenius"), ("max", "linf"), ("spectral", "spectral"))


def steepest_study(seeds, *, steps: int = 2000, lr: float = 0.1, progress: bool = False) -> dict:
    """NGD, sign descent, spectral descent and Adam (PyTorch's settings) with step ``lr`` from
    W_0 = 0 on the instances of ``seeds``: {"ratio": (A, N, M) the margin ratio rho_N of each
    run's last iterate for N in ``STEEPEST_NORMS`` at the selection it ranks first, "gap" (A, M),
    "algorithms", "norms"}."""
    from ..normsvm import w_margin_ratio
    from ..optimizers import descend

    st = stack(seeds)
    M, n, T, d = st.X.shape
    svms = _SVMCache(st)
    ratio = np.empty((len(STEEPEST), len(STEEPEST_NORMS), M))
    gap = np.empty((len(STEEPEST), M))
    for a, (name, kw) in enumerate(STEEPEST):
        run = descend(st.X, st.Y, st.v, np.zeros((M, d, d)), st.Z, steps, lr,
                      record_every=None, **kw)
        W = run.W[-1]
        alpha = top_tokens(st, W)
        gap[a] = smallest_gaps(st, W)
        for b, (_, norm) in enumerate(STEEPEST_NORMS):
            for j in range(M):
                ratio[a, b, j] = w_margin_ratio(st.X[j], W[j], alpha[j], queries=st.Z[j],
                                                norm=norm, svm=svms(j, alpha[j], norm))
        if progress:
            print(f"steepest_study: {name}, {steps:,} steps of {M} runs and their SVMs done",
                  flush=True)
    return {"ratio": ratio, "gap": gap, "algorithms": tuple(n for n, _ in STEEPEST),
            "norms": tuple(n for n, _ in STEEPEST_NORMS), "seeds": st.seeds, "steps": steps}


def adam_throttle(seeds, *, betas2=(0.999, 0.95), steps: int = 20000,
                  record_every: int = 500) -> dict:
    """Adam (beta1 0.9, eps 0: scale-free) from W_0 = 0 for each beta2 in ``betas2``:
    {beta2: {"steps" (R,), "gap" (R, M) the smallest logit gap (-scale), "rate" (M,) its growth
    per step over the second half}}."""
    from ..optimizers import descend

    st = stack(seeds)
    M, n, T, d = st.X.shape
    out = {}
    for b2 in betas2:
        run = descend(st.X, st.Y, st.v, np.zeros((M, d, d)), st.Z, steps, 0.1, method="adam",
                      betas=(0.9, b2), eps=0.0, record_every=record_every)
        gaps = np.stack([smallest_gaps(st, W) for W in run.W])
        half = run.steps >= steps // 2
        rate = np.array([np.polyfit(run.steps[half], gaps[half, j], 1)[0] for j in range(M)])
        out[b2] = {"steps": run.steps, "gap": gaps, "rate": rate}
    return out


# ----------------------------------------------------------------------------------------------
# The stored studies (scripts/ch08_studies.py) and their check
# ----------------------------------------------------------------------------------------------

SEEDS = tuple(range(1, 21))          # the 20 instances of every study
AUTHORS_SEEDS = tuple(range(1, 11))  # the cross-check with the authors' start
THROTTLE_SEEDS = tuple(range(1, 6))


def compute_studies(*, seeds=SEEDS, authors_seeds=AUTHORS_SEEDS, throttle_seeds=THROTTLE_SEEDS,
                    progress: bool = False) -> dict:
    """Every study of the chapter: {"md", "md authors", "rates", "steepest", "throttle"} as
    returned by :func:`md_study` (from zero and from the authors' start), :func:`rate_study`,
    :func:`steepest_study` and :func:`adam_throttle` on the given seeds."""
    out = {"md": md_study(seeds, progress=progress)}
    out["md authors"] = md_study(authors_seeds, start="authors", progress=progress)
    out["rates"] = rate_study(seeds)
    if progress:
        print("rates done", flush=True)
    out["steepest"] = steepest_study(seeds, progress=progress)
    out["throttle"] = {str(k): v for k, v in adam_throttle(throttle_seeds).items()}
    if progress:
        print("throttle done", flush=True)
    return out


def load_studies() -> dict:
    """The stored result of ``scripts/ch08_studies.py`` (:func:`compute_studies`), lists as
    arrays."""
    import json
    from importlib.resources import files

    def arrays(x):
        if isinstance(x, dict):
            return {k: arrays(v) for k, v in x.items()}
        if isinstance(x, list) and x and not isinstance(x[0], str):
            return np.array(x)
        return x

    return arrays(json.loads(files(__package__).joinpath("data/ch08_studies.json").read_text()))


def check_studies(stored: dict, *, seeds=(1, 2, 3)) -> dict:
    """Recompute every study on the first ``seeds`` and compare with ``stored``
    (:func:`load_studies`): {study: the largest |difference| of its stored numbers over those
    seeds}. Runs amplify rounding, so another BLAS may differ in late digits."""
    k = len(seeds)
    fresh = compute_studies(seeds=seeds, authors_seeds=seeds, throttle_seeds=seeds[:2])
    out = {}
    for name, key in (("md", "cos"), ("md", "ratio"), ("md authors", "bregman")):
        out[f"{name} {key}"] = float(np.max(np.abs(fresh[name][key] - stored[name][key][..., :k])))
    for method in fresh["rates"]:
        out[f"rates {method}"] = float(np.max(np.abs(
            np.log(fresh["rates"][method]["error"][1:]) - np.log(stored["rates"][method]["error"][1:, :k]))))
    out["steepest ratio"] = float(np.max(np.abs(fresh["steepest"]["ratio"]
                                                - stored["steepest"]["ratio"][..., :k])))
    for b2, row in fresh["throttle"].items():
        out[f"throttle {b2}"] = float(np.max(np.abs(row["gap"] - stored["throttle"][b2]["gap"][:, :2])
                                             / stored["throttle"][b2]["gap"][:, :2].clip(1)))
    return out


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------


def heatmap(ax, values, low, high, rows, cols, *, title: str, fmt: str = "{:.3f}",
            cmap: str = "viridis"):
    """A matrix of ``values`` (R, C) as colours, each cell labelled with its value and its
    interval [low, high] (same shapes); ``rows`` and ``cols`` label the axes."""
    values = np.asarray(values, dtype=float)
    ax.imshow(values, cmap=cmap, aspect="auto")
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            light = values[r, c] < (values.min() + values.max()) / 2
            ax.text(c, r, fmt.format(values[r, c]) + "\n[" + fmt.format(low[r, c]) + ", "
                    + fmt.format(high[r, c]) + "]", ha="center", va="center", fontsize=9,
                    color="white" if light else "black")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(title)
    ax.grid(False)
    return ax


def md_summary(md: dict, *, key: str = "cos") -> Estimate:
    """The means (P, Q) over the seeds of ``md[key]`` (P, Q, M), with bootstrap intervals of
    the mean (each (P, Q))."""
    P, Q, _ = md[key].shape
    cells = [[bootstrap_mean(md[key][a, b]) for b in range(Q)] for a in range(P)]
    return Estimate(*(np.array([[cell[i] for cell in row] for row in cells]) for i in range(3)))


def md_panels(axes, md: dict):
    """(a) mean cosine of mirror descent with potential p (rows) against the l_q W-SVM (columns)
    with bootstrap intervals; (b) the density of the runs' W and of the SVMs against p or q."""
    mean, low, high = md_summary(md, key="cos")
    names = [f"{p:g}" for p in md["potentials"]]
    heatmap(axes[0], mean, low, high, [f"MD, p = {n}" for n in names],
            [f"q = {n}" for n in md["norms"]], title=r"(a) cos with the $\ell_q$ SVM")
    qs = list(md["norms"]) + [np.inf]
    axes[1].plot(range(len(md["potentials"])), np.median(md["density"], axis=1), "o-",
                 color=plots.VERMILLION, label="mirror descent, W_T")
    axes[1].plot(range(len(qs)), np.median(md["svm density"], axis=1), "s--",
                 color=plots.BLUE, label=r"$\ell_q$ SVM")
    axes[1].set_xticks(range(len(qs)), [f"{q:g}" for q in qs])
    axes[1].set(xlabel="p (runs) or q (SVMs)", ylabel=r"$(\|W\|_1 / \|W\|_F)^2 / d^2$",
                ylim=(0, 1.02), title="(b) how spread the entries are")
    axes[1].legend(loc="lower right", fontsize=9)
    return axes


def rates_panel(ax, rates: dict):
    """1 - cos with the Frobenius SVM against the step, median over the seeds and the band
    between the quartiles, for each method of :func:`rate_study`."""
    colors = {"GD": plots.BLACK, "NGD": plots.BLUE, "Polyak": plots.VERMILLION}
    for name, row in rates.items():
        k = np.asarray(row["steps"])[1:]
        err = np.maximum(np.asarray(row["error"])[1:], 1e-16)
        low, mid, high = np.percentile(err, [25, 50, 75], axis=1)
        ax.fill_between(k, low, high, color=colors[name], alpha=0.2, lw=0)
        ax.plot(k, mid, color=colors[name], lw=2,
                label=f"{name} (slope {np.median(row['slope']):.2f})")
    ax.set(xscale="log", yscale="log", xlabel="step t",
           ylabel=r"$1 - \cos(W_t, W^{\mathrm{mm}})$", title="direction error")
    ax.legend(loc="lower left", fontsize=9)
    return ax


def steepest_panels(axes, steep: dict, throttle: dict):
    """(a) median margin ratio rho_N of each optimizer (rows) in each norm (columns) with
    bootstrap intervals of the median; (b) Adam's smallest gap against the step for each
    beta2, with the slope (1 - beta2) / 2 dotted."""
    ratio = np.asarray(steep["ratio"])
    A, N, _ = ratio.shape
    cells = [[bootstrap_median(ratio[a, b]) for b in range(N)] for a in range(A)]
    mid, low, high = (np.array([[c[i] for c in row] for row in cells]) for i in range(3))
    heatmap(axes[0], mid, low, high, list(steep["algorithms"]), list(steep["norms"]),
            title=r"(a) margin ratio $\rho_N$", fmt="{:.2f}")
    for (b2, row), color in zip(throttle.items(), (plots.BLUE, plots.VERMILLION)):
        k = np.asarray(row["steps"])
        gaps = np.asarray(row["gap"])
        axes[1].plot(k, np.median(gaps, axis=1), color=color, lw=2, label=f"beta2 = {b2}")
        half = k >= k[-1] // 2
        anchor = np.median(gaps[half][0])
        axes[1].plot(k[half], anchor + (1 - float(b2)) / 2 * (k[half] - k[half][0]), ":",
                     color=plots.BLACK, lw=1.4)
    axes[1].set(xlabel="step t", ylabel="smallest logit gap", yscale="log",
                title="(b) Adam (eps = 0): the gap's growth")
    axes[1].legend(loc="lower right", fontsize=9)
    return axes


def bootstrap_median(x, *, draws: int = 2000, seed: int = 0) -> Estimate:
    """The median of ``x`` (k,) and a 95% percentile-bootstrap interval."""
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, len(x), size=(draws, len(x)))], axis=1)
    return Estimate(float(np.median(x)), float(np.percentile(meds, 2.5)),
                    float(np.percentile(meds, 97.5)))
