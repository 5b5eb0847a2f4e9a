"""Chapter 7, the key-query factorization: the studies behind its figures and their drawing.

The computations are the core's (:func:`maxmargin.gd_W`, :func:`maxmargin.gd_KQ`,
:func:`maxmargin.gd_KQ_stack`, :func:`maxmargin.w_svm`); this module runs them in the chapter's
settings, tabulates them, and draws them.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import _checks, data
from ..exactstep import ngd_KQ_exact, scaled_gradient
from ..losses import LOGISTIC
from ..keyquery import gd_KQ, gd_KQ_stack
from ..svm import IllConditionedError, w_svm
from ..train import gd_W
from . import plots
from .explore import live
from .tables import Table, table

NGD = dict(lr=0.1, normalized=True, eps=1e-300)   # the follow-up's step; no early stall
RANK_CUT = 1e-5          # singular values below this fraction of the largest count as 0
GRAY_ZONE = (1e-9, RANK_CUT)  # counted as 0 but above the polished solver's noise
REACH = 0.99             # correlation at which a run "reaches" an SVM solution


class Selected(NamedTuple):
    """The selection a key-query matrix ranks first, and its smallest logit gap."""

    alpha: np.ndarray
    gap: float


def _logits(X, W, queries):
    return np.einsum("ntd,de,ne->nt", X, W, queries)


def selection(X, W, queries) -> Selected:
    """The tokens ``alpha`` (n,) with the largest logit x_it^T W z_i in each sequence, and the
    smallest gap min_{i, t != alpha_i} (x_{i alpha_i} - x_it)^T W z_i (> 0: a strict ranking)."""
    L = _logits(np.asarray(X, float), np.asarray(W, float), np.asarray(queries, float))
    alpha = L.argmax(axis=1)
    rows = np.arange(len(alpha))
    gaps = L[rows, alpha][:, None] - L
    gaps[rows, alpha] = np.inf
    return Selected(alpha, float(gaps.min()))


def wilson(k, n, *, z: float = 1.959963984540054):
    """95% Wilson score interval [low, high] for the proportion k / n."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def slug(text: str) -> str:
    """A glue-name fragment: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def _rank(W) -> int:
    sv = np.linalg.svd(W, compute_uv=False)
    return int(np.sum(sv > RANK_CUT * sv[0]))


def _gray(W) -> float:
    """The largest singular value of W inside GRAY_ZONE, relative to the largest (0 if none)."""
    sv = np.linalg.svd(W, compute_uv=False)
    rel = sv / sv[0]
    inside = rel[(rel > GRAY_ZONE[0]) & (rel <= GRAY_ZONE[1])]
    return float(inside.max(initial=0.0))


def _smallest_counted(W) -> float:
    """The smallest singular value of W counted in its rank, relative to the largest."""
    sv = np.linalg.svd(W, compute_uv=False)
    rel = sv / sv[0]
    return float(rel[rel > RANK_CUT].min())


def _pair(X, alpha, queries):
    return (w_svm(X, alpha, queries=queries), w_svm(X, alpha, queries=queries, norm="nuclear"))


@dataclass(frozen=True)
class RankStudy:
    """Ranks of both W-SVM solutions over random instances (:func:`rank_study`).

    ranks : (len(ns), len(ds), count, 2) ranks of the Frobenius (0) and nuclear (1) solutions;
    mean_rank : (len(ns), len(ds), 2); skipped : (len(ns), len(ds)) infeasible draws skipped;
    ill_conditioned : draws refused by the solver's certificate; gray_zone : the largest
    relative singular value inside GRAY_ZONE over all solutions (counted as 0, yet above the
    noise of a polished solution); smallest_counted : the smallest relative singular value
    counted in a rank; ns, ds, T.
    """

    ranks: np.ndarray
    mean_rank: np.ndarray
    skipped: np.ndarray
    ill_conditioned: int
    gray_zone: float
    smallest_counted: float
    ns: tuple
    ds: tuple
    T: int


def rank_study(ns, ds, *, T: int = 5, count: int = 12, seed: int = 0,
               max_draws: int = 500) -> RankStudy:
    """For each n in ``ns`` and d in ``ds``, ``count`` feasible instances of
    :func:`maxmargin.data.query_instance` (seeds from ``seed`` on; infeasible ones skipped and
    counted), both W-SVMs at the highest-score selection, and their ranks."""
    count = _checks.positive_int(count, "count")
    ranks = np.zeros((len(ns), len(ds), count, 2), dtype=int)
    skipped = np.zeros((len(ns), len(ds)), dtype=int)
    ill, gray, counted = 0, 0.0, 1.0
    for a, n in enumerate(ns):
        for b, d in enumerate(ds):
            found, s = 0, seed
            while found < count:
                if s - seed >= max_draws:
                    raise ValueError(f"count: fewer than {count} feasible draws in {max_draws} "
                                     f"for n={n}, d={d}")
                inst = data.query_instance(n, T, d, seed=s)
                s += 1
                try:
                    pair = _pair(inst.X, inst.optimal, inst.extra["queries"])
                except IllConditionedError:
                    ill += 1
                    continue
                except ValueError:
                    skipped[a, b] += 1
                    continue
                ranks[a, b, found] = [_rank(res.W) for res in pair]
                gray = max(gray, *(_gray(res.W) for res in pair))
                counted = min(counted, *(_smallest_counted(res.W) for res in pair))
                found += 1
    return RankStudy(ranks, ranks.mean(axis=2), skipped, ill, gray, counted, tuple(ns),
                     tuple(ds), T)


def rank_panel(ax, study: RankStudy):
    """Mean rank against d, one colour per n: solid Frobenius, dashed nuclear."""
    colors = [plots.BLUE, plots.VERMILLION, plots.GREEN, plots.ORANGE]
    for a, n in enumerate(study.ns):
        c = colors[a % len(colors)]
        ax.plot(study.ds, study.mean_rank[a, :, 0], "-o", color=c, label=f"n = {n}, Frobenius")
        ax.plot(study.ds, study.mean_rank[a, :, 1], "--s", color=c, label=f"n = {n}, nuclear")
    ax.set(xlabel="dimension d", ylabel="mean rank of the solution",
           title=f"W-SVM ranks, T = {study.T}")
    ax.legend(loc="upper left", fontsize=8)
    return ax


def plane_instance(*, seed: int = 3) -> data.Instance:
    """The follow-up's visualization setting, drawn with ``numpy.random.default_rng(seed)``:
    n = 2 sequences of T = 3 tokens in the plane, 0.3 times Gaussian around (-1, 0) and (1, 0),
    Y = (1, 1), a random unit head v and random unit queries (``extra["queries"]``)."""
    rng = np.random.default_rng(_checks.seed(seed))
    X = 0.3 * rng.standard_normal((2, 3, 2))
    X[0] += [-1.0, 0.0]
    X[1] += [1.0, 0.0]
    v = rng.standard_normal(2)
    v /= np.linalg.norm(v)
    Z = rng.standard_normal((2, 2))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    return data.Instance(f"plane-seed{seed}", X, np.ones(2), v, None, np.zeros((1, 2)),
                         notes="the follow-up's visualization law", extra={"queries": Z})


def plane_panel(ax, inst, run, svm, *, other=None, style: str = "-", title: str = ""):
    """The vectors W_k z_i of one run (``run``, a trajectory with ``.W``) for each sequence i,
    in the sequence's colour, with the rays W^mm z_i of ``svm`` (black, dotted) and of
    ``other`` (gray, thin) when given; the window fits the paths, and the tokens are drawn."""
    Z = inst.extra["queries"]
    colors = plots.SEQUENCE_COLORS
    paths = [run.W[:, 0] @ Z[i] for i in range(len(Z))]
    pts = np.concatenate(paths + [inst.X.reshape(-1, 2)])
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pad = 0.08 * (hi - lo).max()
    ax.set_xlim(lo[0] - pad, hi[0] + pad)
    ax.set_ylim(lo[1] - pad, hi[1] + pad)
    for i, path in enumerate(paths):
        if other is not None:
            plots.direction(ax, other.W @ Z[i], color="#999999", style="-", lw=1.0,
                            label="the other SVM" if i == 0 else None)
        plots.direction(ax, svm.W @ Z[i], color=plots.BLACK, style=":", lw=1.6,
                        label="its SVM" if i == 0 else None)
        ax.plot(path[:, 0], path[:, 1], style, color=colors[i], lw=2.2,
                label=f"$W_k z_{i}$")
    plots.sequences(ax, inst.X, optimal=inst.optimal)
    ax.set(xlabel="first coordinate", ylabel="second coordinate", title=title)
    ax.locator_params(nbins=5)
    ax.legend(loc="best", fontsize=9)
    return ax


class FourRuns(NamedTuple):
    """Normalized GD (step 0.1) and plain GD (step 1) on W and on (K, Q), one instance, and
    normalized GD on (K, Q) with the follow-up's penalty (``PENALTY``)."""

    ngd_W: object
    ngd_KQ: object
    gd_W: object
    gd_KQ: object
    ngd_KQ_penalty: object


def four_runs(inst, *, steps: int = 1500, scale: float = 0.01, seed: int = 1) -> FourRuns:
    """The chapter's runs from ``scale`` times Gaussian starts (m = d), recorded every 10
    steps: the four of the section, and the penalized run from the same start."""
    n, T, d = inst.X.shape
    Z = inst.extra["queries"]
    rng = np.random.default_rng(_checks.seed(seed))
    W0, K0, Q0 = (scale * rng.standard_normal((d, d)) for _ in range(3))
    args = (inst.X, inst.Y, inst.v)
    plain = dict(lr=1.0, record_every=10)
    return FourRuns(gd_W(*args, W0, Z, steps, record_every=10, **NGD),
                    gd_KQ(*args, K0, Q0, Z, steps, record_every=10, **NGD),
                    gd_W(*args, W0, Z, steps, **plain),
                    gd_KQ(*args, K0, Q0, Z, steps, **plain),
                    gd_KQ(*args, K0, Q0, Z, steps, record_every=10, reg=PENALTY, **NGD))


RUN_NAMES = ("NGD on W", "NGD on (K, Q)", "GD on W", "GD on (K, Q)", "NGD on (K, Q), penalty")


def run_table(inst, runs: FourRuns) -> dict:
    """Per run: the selection reached at the last step, its smallest gap, the correlations with
    both SVMs there, their change over the last 500 steps ("moved"), the nuclear rank."""
    Z = inst.extra["queries"]
    table = {}
    for name, run in zip(RUN_NAMES, runs):
        sel = selection(inst.X, run.W[-1, 0], Z)
        fro, nuc = _pair(inst.X, sel.alpha, Z)
        back = int(np.searchsorted(run.steps, run.steps[-1] - 500))
        cos_nuc = run.cosine(nuc.W)[:, 0]
        table[name] = {"alpha": sel.alpha.tolist(), "gap": sel.gap,
                       "cos fro": float(run.cosine(fro.W)[-1, 0]), "cos nuc": float(cos_nuc[-1]),
                       "moved": float(cos_nuc[-1] - cos_nuc[back]), "nuclear rank": _rank(nuc.W)}
    return table


def gd_panels(axes, inst, runs: FourRuns):
    """(a) correlations of the NGD runs with both SVMs at their own selections; (b), (c) the
    relative singular values of W_k for NGD on (K, Q) and on W."""
    Z = inst.extra["queries"]
    for run, style, name in ((runs.ngd_W, "-", "W"), (runs.ngd_KQ, "--", "(K, Q)"),
                             (runs.ngd_KQ_penalty, ":", "(K, Q) + penalty")):
        fro, nuc = _pair(inst.X, selection(inst.X, run.W[-1, 0], Z).alpha, Z)
        k = run.steps[1:]
        axes[0].plot(k, run.cosine(fro.W)[1:, 0], style, color=plots.BLUE,
                     label=f"{name}: Frobenius")
        axes[0].plot(k, run.cosine(nuc.W)[1:, 0], style, color=plots.VERMILLION,
                     label=f"{name}: nuclear")
    axes[0].set(xscale="log", xlabel="step k", ylabel="correlation", ylim=(0.4, 1.01),
                title="(a) correlation with the SVMs")
    axes[0].figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
                          ncols=3, fontsize=9)
    for ax, run, title in ((axes[1], runs.ngd_KQ, "(b) NGD on (K, Q)"),
                           (axes[2], runs.ngd_W, "(c) NGD on W")):
        sv = np.linalg.svd(run.W[1:, 0], compute_uv=False)
        ax.plot(run.steps[1:], np.maximum(sv / sv[:, :1], 1e-18), color=plots.BLACK, lw=1.0)
        ax.set(xscale="log", yscale="log", xlabel="step k", ylim=(1e-8, 2),
               ylabel=r"$\sigma_j(W_k) / \sigma_1(W_k)$", title=title)
    return axes


@dataclass(frozen=True)
class FactorStudy:
    """The chapter's 100-instance study (:func:`factor_study`).

    summary : {setting: {column: value}} proportions (with "low"/"high" Wilson bounds) of
        "reach Frobenius", "reach nuclear", "closer to nuclear", and "median cos nuc";
    pair_median : median correlation of the two SVM solutions of an instance;
    runs, checked : numbers of runs, and of runs whose selection is strict (every gap > 0)
        with both SVMs certified there;
    gaps : {setting: (count,)} smallest logit gap of each run at the last step;
    moved : {setting: (count,)} change of the correlation with the run's own closer SVM over
        the last 500 steps;
    narrow : columns of the width-one runs, each (count,): "cos nuc", "bound", "nuclear rank",
        "reached" (bool);
    selections : {"W not optimal": count, "W and (K, Q) differ": count};
    rows : {setting: :func:`verdicts` of its runs at steps (last - 500, last)};
    svms : the solved SVM pairs, callable as svms(j, alpha) (solved on first use);
    factors : {setting: (K, Q)} the last iterates, (count, d, m) each.
    """

    summary: dict
    pair_median: float
    runs: int
    checked: int
    gaps: dict
    moved: dict
    narrow: dict
    selections: dict
    rows: dict
    svms: object
    factors: dict


PENALTY = float(np.finfo(float).eps)   # the follow-up's code: lambda = machine epsilon

# (name, width, start scale, penalty): width "W" is GD on W (Q frozen at I), "d" is m = d. The
# penalized settings start where their unpenalized namesakes do (same draws).
SETTINGS = (("W, 0.01", "W", 0.01, 0.0), ("(K, Q) m=d, 0.01", "d", 0.01, 0.0),
            ("(K, Q) m=d, 1", "d", 1.0, 0.0), ("(K, Q) m=1, 0.01", 1, 0.01, 0.0),
            ("(K, Q) m=d, 0.01, penalty", "d", 0.01, PENALTY),
            ("(K, Q) m=d, 1, penalty", "d", 1.0, PENALTY))


def _cos(A, B) -> np.ndarray:
    """Frobenius cosines of matrices A (..., d, d) with one B (d, d)."""
    return np.sum(A * B, axis=(-2, -1)) / np.linalg.norm(A, axis=(-2, -1)) / np.linalg.norm(B)


class StudyData(NamedTuple):
    """The study's ``count`` instances (seeds 1000 + j) stacked: X (M, n, T, d), Y (M, n),
    v (M, d), Z (M, n, d) queries, and the instances themselves."""

    X: np.ndarray
    Y: np.ndarray
    v: np.ndarray
    Z: np.ndarray
    instances: list


def study_data(count: int, *, n: int = 3, T: int = 4, d: int = 5) -> StudyData:
    """The instances of :func:`factor_study`: :func:`maxmargin.data.query_instance` with
    seeds 1000 + j, j < ``count``."""
    count = _checks.positive_int(count, "count")
    insts = [data.query_instance(n, T, d, seed=1000 + j) for j in range(count)]
    return StudyData(*(np.stack([getattr(i, k) for i in insts]) for k in ("X", "Y", "v")),
                     np.stack([i.extra["queries"] for i in insts]), insts)


def study_starts(count: int, d: int, seed: int) -> dict:
    """{setting name: (K0, Q0)} (count, d, m) each, for the settings of ``SETTINGS``, drawn in
    that order from ``numpy.random.default_rng(seed)``; a penalized setting reuses the starts of
    its unpenalized namesake."""
    rng = np.random.default_rng(_checks.seed(seed))
    starts = {}
    for name, width, scale, reg in SETTINGS:
        if reg > 0:
            starts[name] = starts[name.rsplit(", penalty", 1)[0]]
            continue
        m = d if width in ("W", "d") else width
        starts[name] = (scale * rng.standard_normal((count, d, m)),
                        np.eye(d) if width == "W" else scale * rng.standard_normal((count, d, m)))
    return starts


class _SVMs:
    """Both W-SVMs of the study's instances, solved once per (instance, selection)."""

    def __init__(self, sd: StudyData):
        self.sd, self.pairs = sd, {}

    def __call__(self, j: int, alpha) -> tuple:
        key = (j, tuple(int(a) for a in alpha))
        if key not in self.pairs:
            self.pairs[key] = _pair(self.sd.X[j], np.asarray(alpha), self.sd.Z[j])
        return self.pairs[key]


def verdicts(svms: _SVMs, Ws: np.ndarray, *, m: int | None = None) -> dict:
    """Per instance j, at the selection the last of ``Ws`` (R, count, d, d) ranks first:
    "alpha" (count, n), "gap" (count,), "cos fro" and "cos nuc" (R, count) of every W with the
    two SVMs there, "nuclear rank" (count,) and, for a width ``m``, "bound" (count,) the
    correlation of the best rank-m approximation of the nuclear solution."""
    sd = svms.sd
    out = {k: [] for k in ("alpha", "gap", "cos fro", "cos nuc", "nuclear rank", "bound")}
    for j in range(Ws.shape[1]):
        sel = selection(sd.X[j], Ws[-1, j], sd.Z[j])
        fro, nuc = svms(j, sel.alpha)
        sv = np.linalg.svd(nuc.W, compute_uv=False)
        out["alpha"].append(sel.alpha)
        out["gap"].append(sel.gap)
        out["cos fro"].append(_cos(Ws[:, j], fro.W))
        out["cos nuc"].append(_cos(Ws[:, j], nuc.W))
        out["nuclear rank"].append(_rank(nuc.W))
        out["bound"].append(np.nan if m is None else
                            float(np.sqrt(np.sum(sv[:m] ** 2)) / np.linalg.norm(sv)))
    return {k: (np.stack(v, axis=-1) if k.startswith("cos") else np.array(v))
            for k, v in out.items()}


def counts(cos_fro: np.ndarray, cos_nuc: np.ndarray) -> dict:
    """Proportions (count,) -> {"reach Frobenius", "reach nuclear", "closer to nuclear"},
    each with its "low"/"high" Wilson bounds, and "median cos nuc"."""
    cf, cn = np.asarray(cos_fro), np.asarray(cos_nuc)
    hits = {"reach Frobenius": (cf >= REACH) & (cf > cn),
            "reach nuclear": (cn >= REACH) & (cn > cf), "closer to nuclear": cn > cf}
    row = {}
    for col, hit in hits.items():
        k = int(hit.sum())
        low, high = (float(b) for b in wilson(k, len(cf)))
        row |= {col: k / len(cf), col + " low": low, col + " high": high, col + " count": k}
    row["median cos nuc"] = float(np.median(cn))
    return row


def factor_study(count: int, *, n: int = 3, T: int = 4, d: int = 5, steps: int = 2000,
                 seed: int = 0, progress: bool = False) -> FactorStudy:
    """Normalized GD (step 0.1, eps 1e-300) on ``count`` instances of
    :func:`maxmargin.data.query_instance` (seeds 1000 + j) in the settings of ``SETTINGS``;
    verdicts at the selection each run ranks first at the last step. ``progress``: print a
    line on stdout after each stage (each batch of runs, each setting's SVMs)."""
    count = _checks.positive_int(count, "count")
    steps = _checks.positive_int(steps, "steps", minimum=1000)
    sd = study_data(count, n=n, T=T, d=d)
    starts = study_starts(count, d, seed)
    svms = _SVMs(sd)
    # One array program per kind of run and penalty: W (Q frozen at I), the m = d settings
    # together, and m = 1.
    batches = {}
    for name, width, _, reg in SETTINGS:
        kind = width if width in ("W", "d") else "narrow"
        batches.setdefault((kind, reg), []).append(name)
    runs_W, factors = {}, {}
    for (kind, reg), names in batches.items():
        K0 = np.concatenate([starts[n_][0] for n_ in names])
        Q0 = np.concatenate([np.broadcast_to(starts[n_][1], starts[n_][0].shape) for n_ in names])
        reps = len(names)
        run = gd_KQ_stack(np.tile(sd.X, (reps, 1, 1, 1)), np.tile(sd.Y, (reps, 1)),
                          np.tile(sd.v, (reps, 1)), K0, Q0, np.tile(sd.Z, (reps, 1, 1)), steps,
                          freeze_Q=kind == "W", reg=reg, record_every=500, **NGD)
        W_all = run.W[-2:]                                    # (2, reps count, d, d)
        for r, n_ in enumerate(names):
            part = slice(r * count, (r + 1) * count)
            runs_W[n_] = (W_all[:, part], run.K.shape[-1])
            factors[n_] = (run.K[-1, part], run.Q[-1, part])
        if progress:
            print(f"factor_study: {steps:,} steps of {reps * count} runs done "
                  f"({', '.join(names)})", flush=True)
    rows, summary, gaps, moved = {}, {}, {}, {}
    checked = 0
    for name, *_ in SETTINGS:
        Ws, m = runs_W[name]
        res = verdicts(svms, Ws, m=m)
        cf, cn = res["cos fro"], res["cos nuc"]
        rows[name] = res
        checked += int(np.sum(res["gap"] > 0))
        summary[name] = counts(cf[-1], cn[-1])
        gaps[name] = res["gap"]
        own = np.where(cn[-1] > cf[-1], cn[-1] - cn[0], cf[-1] - cf[0])
        moved[name] = own
        if progress:
            print(f"factor_study: the SVMs of {count} instances, setting {name}, done "
                  f"({len(svms.pairs)} pairs solved so far)", flush=True)
    pairs = [float(_cos(f.W, u.W)) for f, u in svms.pairs.values()]
    narrow_rows = rows["(K, Q) m=1, 0.01"]
    narrow = {"cos nuc": narrow_rows["cos nuc"][-1], "bound": narrow_rows["bound"],
              "nuclear rank": narrow_rows["nuclear rank"],
              "reached": (narrow_rows["cos nuc"][-1] >= REACH)
              & (narrow_rows["cos nuc"][-1] > narrow_rows["cos fro"][-1])}
    optimal = [i.optimal for i in sd.instances]
    sel_W, sel_KQ = rows["W, 0.01"]["alpha"], rows["(K, Q) m=d, 0.01"]["alpha"]
    selections = {"W not optimal": sum(not np.array_equal(a, o) for a, o in zip(sel_W, optimal)),
                  "W and (K, Q) differ": sum(not np.array_equal(a, b)
                                             for a, b in zip(sel_W, sel_KQ))}
    return FactorStudy(summary, float(np.median(pairs)), len(SETTINGS) * count, int(checked),
                       gaps, moved, narrow, selections, rows, svms, factors)


def penalized_stationarity(K, Q, *, instances: StudyData, lam: float) -> np.ndarray:
    """||grad F|| / ||grad of the penalty|| for F = L(K Q^T) + lam (||K||^2 + ||Q||^2) at
    factors K, Q (count, d, m) of the stacked ``instances`` (0 at a stationary point: the two
    gradients cancel). The risk's gradient is :func:`maxmargin.exactstep.scaled_gradient`'s
    times e^c, whose top-token term is not formed by cancellation (autograd through the
    softmax as written loses it near gaps of 32, where e^(-gap) is below float64's rounding)."""
    sd = instances
    gamma = sd.Y[..., None] * np.einsum("mntd,md->mnt", sd.X, sd.v)
    G, c, _ = scaled_gradient(sd.X, gamma, sd.Z, K, Q, LOGISTIC)
    grad_W = np.exp(c)[:, None, None] * G                     # dL/dW, (count, d, d)
    gK = grad_W @ Q + 2 * lam * K
    gQ = np.swapaxes(grad_W, 1, 2) @ K + 2 * lam * Q
    total = np.sqrt(np.sum(gK ** 2, axis=(1, 2)) + np.sum(gQ ** 2, axis=(1, 2)))
    penalty = 2 * lam * np.sqrt(np.sum(K ** 2, axis=(1, 2)) + np.sum(Q ** 2, axis=(1, 2)))
    return total / penalty


def penalty_settle(study: FactorStudy, *, name: str = "(K, Q) m=d, 0.01, penalty",
                   lrs=(0.01, 0.001, 0.0001), steps: int = 2000) -> dict:
    """Continue the penalized runs of ``study`` (setting ``name``) with normalized steps of
    the sizes ``lrs``, ``steps`` each: {"before", "after"} their
    :func:`penalized_stationarity` (count,), and "cos" (count,) the correlation of each run's
    W at step 2000 with its continued W."""
    sd = study.svms.sd
    K, Q = study.factors[name]
    before = penalized_stationarity(K, Q, instances=sd, lam=PENALTY)
    W0 = K @ np.swapaxes(Q, 1, 2)
    for lr in lrs:
        run = gd_KQ_stack(sd.X, sd.Y, sd.v, K, Q, sd.Z, steps, lr=lr, normalized=True,
                          eps=NGD["eps"], reg=PENALTY, record_every=None)
        K, Q = run.K[-1], run.Q[-1]
    W = K @ np.swapaxes(Q, 1, 2)
    cos = np.sum(W0 * W, axis=(1, 2)) / np.linalg.norm(W0, axis=(1, 2)) / np.linalg.norm(
        W, axis=(1, 2))
    return {"before": before, "after": penalized_stationarity(K, Q, instances=sd, lam=PENALTY),
            "cos": cos}


def offset_study(study: FactorStudy, *, steps: int = 2000, seed: int = 0,
                 offsets=(1e-300, PENALTY, 1e-12)) -> dict:
    """Reach-nuclear counts of normalized GD on (K, Q) (m = d, the small starts of ``study``)
    for each offset eps of the step g / (||g|| + eps) in ``offsets``, without and with the
    follow-up's penalty: {(eps, penalty): :func:`counts` row}. The runs already in ``study``
    (eps = 1e-300) are not run again."""
    sd, svms = study.svms.sd, study.svms
    count, d = sd.X.shape[0], sd.X.shape[-1]
    K0, Q0 = study_starts(count, d, seed)["(K, Q) m=d, 0.01"]
    out = {}
    for eps in offsets:
        for reg in (0.0, PENALTY):
            if eps == NGD["eps"]:
                name = "(K, Q) m=d, 0.01" + (", penalty" if reg > 0 else "")
                out[(eps, reg)] = study.summary[name]
                continue
            run = gd_KQ_stack(sd.X, sd.Y, sd.v, K0, Q0, sd.Z, steps, lr=NGD["lr"],
                              normalized=True, eps=eps, reg=reg, record_every=None)
            res = verdicts(svms, run.W[-1:])
            out[(eps, reg)] = counts(res["cos fro"][-1], res["cos nuc"][-1])
    return out


EXACT_STEPS = (2000, 20000, 60000)   # the verdict steps of the exact-step study
LOG_GRID = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 40000, 60000)
# (name, start scale, joint normalization, steps): the scales multiply the same Gaussian draws
EXACT_SETTINGS = (("per factor, 0.01", 0.01, False, 60000), ("joint, 0.01", 0.01, True, 60000),
                  ("per factor, 1", 1.0, False, 20000), ("per factor, 10", 10.0, False, 20000),
                  ("per factor, 100", 100.0, False, 20000))


def nuclear_excess(svms: _SVMs, Ws: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """||W||_* / (its smallest margin constraint) / ||W^mm_*||_* - 1 for each W (count, d, d) at
    its selection ``alphas`` (count, n): how far W, rescaled to margin 1, is from the optimal
    nuclear norm. It tends to 0 along a run that approaches any nuclear solution (unique or
    not), and it does not depend on which solution the solver returned."""
    sd = svms.sd
    out = np.empty(len(Ws))
    for j, (W, alpha) in enumerate(zip(Ws, alphas)):
        L = _logits(sd.X[j], W, sd.Z[j])
        rows = np.arange(len(alpha))
        gaps = L[rows, alpha][:, None] - L
        gaps[rows, alpha] = np.inf
        nuc = svms(j, alpha)[1]
        out[j] = np.linalg.norm(W, "nuc") / gaps.min() / nuc.norm - 1
    return out


def exact_runs(count: int, *, seed: int = 0, settings=EXACT_SETTINGS, steps=None,
               progress: bool = False) -> dict:
    """Normalized GD on (K, Q) (m = d, step 0.1) with the exact step of
    :func:`maxmargin.exactstep.ngd_KQ_exact` on the instances of :func:`factor_study`, from the
    small starts' Gaussian draws times each setting's scale. ``steps`` caps every setting's
    length (None: each its own). Returns {name: {"steps": verdict steps (R,), "cos nuc",
    "cos fro", "gap", "balance" ||K^T K - Q^T Q||_F / ||K||_F^2, "norm K" ||K||_F and
    "nuclear excess" (:func:`nuclear_excess`), "moved" ||K - K_0||_F / ||K_0||_F and
    "start share" ||K_0 Q_0^T||_F / ||W||_F (R, count) at the selection each run ranks first
    at each of them, "alpha" (R, count, n), "grid" (G,) and "curve" (G, count), the cos nuc on
    ``LOG_GRID`` at the selection of the last step, "norm K" (R, count)}}."""
    sd = study_data(count)
    svms = _SVMs(sd)
    K0, Q0 = study_starts(count, sd.X.shape[-1], seed)["(K, Q) m=d, 0.01"]
    lengths = {name: length if steps is None else min(length, steps)
               for name, _, _, length in settings}
    # one array program per (normalization, length): the settings' starts stacked
    groups = {}
    for name, scale, joint, _ in settings:
        groups.setdefault((joint, lengths[name]), []).append((name, scale))
    runs = {}
    for (joint, length), members in groups.items():
        reps = len(members)
        run = ngd_KQ_exact(np.tile(sd.X, (reps, 1, 1, 1)), np.tile(sd.Y, (reps, 1)),
                           np.tile(sd.v, (reps, 1)),
                           np.concatenate([K0 * (scale / 0.01) for _, scale in members]),
                           np.concatenate([Q0 * (scale / 0.01) for _, scale in members]),
                           np.tile(sd.Z, (reps, 1, 1)), length, NGD["lr"], joint=joint,
                           record_every=10)
        for r, (name, _) in enumerate(members):
            part = slice(r * count, (r + 1) * count)
            runs[name] = (run.steps, run.K[:, part], run.Q[:, part], run.W[:, part])
        if progress:
            print(f"exact_runs: {length:,} steps of {reps * count} runs done "
                  f"({', '.join(name for name, _ in members)})", flush=True)
    out = {}
    for name, scale, joint, _ in settings:
        length = lengths[name]
        grid = [k for k in LOG_GRID if k <= length]
        verdict_steps = [k for k in EXACT_STEPS if k <= length]
        run_steps, run_K, run_Q, run_W = runs[name]
        rows = {k: [] for k in ("cos nuc", "cos fro", "gap", "balance", "alpha", "norm K",
                                "nuclear excess", "moved", "start share")}
        K_start, Q_start = K0 * (scale / 0.01), Q0 * (scale / 0.01)
        W_start = K_start @ np.swapaxes(Q_start, 1, 2)
        for k in verdict_steps:
            r = int(np.searchsorted(run_steps, k))
            res = verdicts(svms, run_W[r:r + 1])
            K, Q = run_K[r], run_Q[r]
            gram = np.swapaxes(K, 1, 2) @ K - np.swapaxes(Q, 1, 2) @ Q
            rows["balance"].append(np.linalg.norm(gram, axis=(1, 2))
                                   / np.linalg.norm(K, axis=(1, 2)) ** 2)
            rows["norm K"].append(np.linalg.norm(K, axis=(1, 2)))
            rows["moved"].append(np.linalg.norm(K - K_start, axis=(1, 2))
                                 / np.linalg.norm(K_start, axis=(1, 2)))
            rows["start share"].append(np.linalg.norm(W_start, axis=(1, 2))
                                       / np.linalg.norm(run_W[r], axis=(1, 2)))
            for key in ("cos nuc", "cos fro"):
                rows[key].append(res[key][0])
            rows["gap"].append(res["gap"])
            rows["alpha"].append(res["alpha"])
            rows["nuclear excess"].append(nuclear_excess(svms, run_W[r], res["alpha"]))
        at = np.searchsorted(run_steps, grid)
        curve = verdicts(svms, run_W[at])["cos nuc"]
        out[name] = {"steps": np.array(verdict_steps)} | {k: np.array(v) for k, v in rows.items()}
        out[name] |= {"grid": np.array(grid), "curve": curve}
    return out


def load_exact_runs() -> dict:
    """The stored result of ``scripts/ch07_long_runs.py`` (:func:`exact_runs` over
    ``EXACT_SETTINGS``, 100 instances, seed 0): {"runs": {name: {key: array}}, and the
    settings it was made with}."""
    from importlib.resources import files

    table = json.loads(files(__package__).joinpath("data/ch07_long_runs.json").read_text())
    table["runs"] = {name: {k: np.array(v) for k, v in row.items()}
                     for name, row in table["runs"].items()}
    return table


def exact_check(table: dict, *, steps: int = 2000) -> dict:
    """Recompute the first ``steps`` steps of every stored run of ``table``
    (:func:`load_exact_runs`) and compare: {name: "largest difference" of cos nuc at step
    ``steps`` over the instances, "other selection" (instances whose selection differs) and
    "reach difference" (the counts within 0.99, fresh minus stored)}. The runs are sensitive to
    rounding (a relative change of 1e-15 in the start moves cos nuc at step 2000 by up to
    about 5e-4), so another BLAS may differ in the fourth digit, not in the verdicts."""
    settings = [tuple(s) for s in table["settings"]]
    fresh = exact_runs(table["count"], seed=table["seed"], settings=settings, steps=steps)
    out = {}
    for name, row in fresh.items():
        stored = table["runs"][name]
        r = int(np.searchsorted(stored["steps"], steps))
        now = counts(row["cos fro"][0], row["cos nuc"][0])["reach nuclear count"]
        then = counts(stored["cos fro"][r], stored["cos nuc"][r])["reach nuclear count"]
        out[name] = {"largest difference": float(np.max(np.abs(row["cos nuc"][0]
                                                               - stored["cos nuc"][r]))),
                     "other selection": int(np.sum(np.any(
                         row["alpha"][0] != stored["alpha"][r], axis=1))),
                     "reach difference": int(now - then)}
    return out


def exact_table(table: dict) -> list:
    """One row per stored setting and verdict step of ``table`` (:func:`load_exact_runs`):
    {"setting", "step"} and the :func:`counts` of its runs, and the medians of "balance",
    "norm K", "moved" and "start share" (as "median balance" etc.)."""
    out = []
    for name, row in table["runs"].items():
        for r, k in enumerate(row["steps"]):
            out.append({"setting": name, "step": int(k)}
                       | counts(row["cos fro"][r], row["cos nuc"][r])
                       | {"median balance": float(np.median(row["balance"][r])),
                          "median norm K": float(np.median(row["norm K"][r])),
                          "median moved": float(np.median(row["moved"][r])),
                          "median start share": float(np.median(row["start share"][r]))})
    return out


def exact_summary(rows: list) -> str:
    """The rows of :func:`exact_table` as aligned text (percentages with Wilson intervals)."""
    lines = [f"{'setting':18s}{'step':>8s}{'reach nuclear':>22s}{'median cos nuc':>16s}"
             f"{'balance':>10s}{'||K||_F':>9s}"]
    for r in rows:
        lines.append(f"{r['setting']:18s}{r['step']:>8,d}{100 * r['reach nuclear']:>8.0f}% "
                     f"[{100 * r['reach nuclear low']:3.0f}, {100 * r['reach nuclear high']:3.0f}]%"
                     f"{r['median cos nuc']:>16.4f}{r['median balance']:>10.1e}"
                     f"{r['median norm K']:>9.0f}")
    return "\n".join(lines)


def long_panel(ax, table: dict, *, penalized: float | None = None):
    """1 - cos nuc of the stored exact-step runs (:func:`load_exact_runs`) against the step:
    median and quartile band, per-factor (vermillion) and joint (blue) normalization from the
    small starts; ``penalized``, a median correlation drawn as a dotted level."""
    for name, color, label in (("per factor, 0.01", plots.VERMILLION, "per-factor steps"),
                               ("joint, 0.01", plots.BLUE, "joint steps")):
        row = table["runs"][name]
        gap = np.maximum(1 - row["curve"], 1e-9)            # (G, count)
        low, mid, high = np.percentile(gap, [25, 50, 75], axis=1)
        ax.fill_between(row["grid"], low, high, color=color, alpha=0.2, lw=0)
        ax.plot(row["grid"], mid, color=color, lw=2.0, label=label)
    if penalized is not None:
        ax.axhline(1 - penalized, color=plots.BLACK, ls=":", lw=1.4,
                   label="penalized runs, step 2000")
    ax.set(xscale="log", yscale="log", xlabel="step k",
           ylabel=r"$1 - \cos(W_k, W^{\mathrm{mm}}_\star)$",
           title="exact normalized steps on (K, Q)")
    ax.legend(loc="lower left", fontsize=9)
    return ax


def summary_table(study: FactorStudy) -> Table:
    """The study's summary as a table, percentages with their Wilson intervals (in percent)."""
    cols = ("reach Frobenius", "reach nuclear", "closer to nuclear")

    def share(row, c):
        return (f"{100 * row[c]:.0f}% [{100 * row[c + ' low']:.0f}–"
                f"{100 * row[c + ' high']:.0f}]")

    rows = [[name, *(share(row, c) for c in cols), row["median cos nuc"]]
            for name, row in study.summary.items()]
    headers = ["setting", "reach Frob.", "reach nuclear", "closer to nuc.", "median cos nuc"]
    return table(rows, headers, [None, None, None, None, ".4f"])


def stall_comparison(inst, reference, *, scale: float = 0.01, seed: int = 1) -> dict:
    """Normalized GD on (K, Q) from the starts of :func:`four_runs` with eps = 1e-12 (the
    library's default), against ``reference``, the run of :func:`four_runs` with eps = 1e-300
    (``ngd_KQ``), for as many steps: {eps label: {"smallest gap", "cos nuc"}} at the end, each
    at its own selection."""
    n, T, d = inst.X.shape
    Z = inst.extra["queries"]
    rng = np.random.default_rng(_checks.seed(seed))
    _, K0, Q0 = (scale * rng.standard_normal((d, d)) for _ in range(3))
    run = gd_KQ(inst.X, inst.Y, inst.v, K0, Q0, Z, int(reference.steps[-1]), 0.1,
                normalized=True, eps=1e-12, record_every=None)
    out = {}
    for label, W in (("eps 1e-12", run.W[-1, 0]), ("eps 1e-300", reference.W[-1, 0])):
        sel = selection(inst.X, W, Z)
        nuc = w_svm(inst.X, sel.alpha, queries=Z, norm="nuclear")
        out[label] = {"smallest gap": sel.gap, "cos nuc": float(_cos(W, nuc.W))}
    return out


@lru_cache(maxsize=64)
def _width_run(seed: int, m: int, scale: float, steps: int):
    inst = data.query_instance(6, 8, 10, seed=seed)
    Z = inst.extra["queries"]
    rng = np.random.default_rng(1)
    K0, Q0 = (scale * rng.standard_normal((10, m)) for _ in range(2))
    run = gd_KQ(inst.X, inst.Y, inst.v, K0, Q0, Z, steps, record_every=10, **NGD)
    fro, nuc = _pair(inst.X, selection(inst.X, run.W[-1, 0], Z).alpha, Z)
    return run, fro, nuc


def width_panel(ax, *, m: int = 10, scale: float = 0.01, steps: int = 1000, seed: int = 4):
    """Explorer panel: normalized GD on (K, Q) of width ``m`` from ``scale`` times Gaussian
    factors on ``query_instance(6, 8, 10, seed)`` (chapter 7's instance): the correlation with
    the nuclear (vermillion) and the Frobenius (blue) SVM at the selection reached, against
    the step, and the bound of the best rank-m approximation of the nuclear solution (dotted).
    Returns the final correlations (nuclear, Frobenius) and the bound."""
    m = _checks.positive_int(m, "m")
    scale = _checks.positive_float(scale, "scale")
    run, fro, nuc = _width_run(int(seed), m, float(scale), int(steps))
    sv = np.linalg.svd(nuc.W, compute_uv=False)
    bound = float(np.sqrt(np.sum(sv[:m] ** 2)) / np.linalg.norm(sv))
    k = run.steps[1:]
    c_nuc, c_fro = run.cosine(nuc.W)[1:, 0], run.cosine(fro.W)[1:, 0]
    ax.plot(k, c_nuc, color=plots.VERMILLION, label="nuclear SVM")
    ax.plot(k, c_fro, color=plots.BLUE, label="Frobenius SVM")
    ax.axhline(bound, color=plots.BLACK, ls=":", lw=1.2, label=f"rank-{m} bound")
    ax.set(xscale="log", ylim=(0.0, 1.02), xlabel="step k", ylabel="correlation",
           title=f"m = {m}, start scale {scale:g}: nuclear {c_nuc[-1]:.3f}")
    ax.legend(loc="lower right", fontsize=9)
    return float(c_nuc[-1]), float(c_fro[-1]), bound


def width_explorer(*, steps: int = 1000):
    """Live explorer: sliders for the factor width m and the start scale (log)."""
    import ipywidgets

    def draw(ax, m, scale):
        width_panel(ax, m=m, scale=scale, steps=steps)

    return live(draw, width=5.5, height=4.0,
                m=ipywidgets.IntSlider(value=10, min=1, max=10, description="m"),
                scale=ipywidgets.FloatLogSlider(value=0.01, base=10, min=-3, max=2,
                                                step=0.5, description="scale"))


def path_table(inst, paths: dict) -> dict:
    """For each named :class:`~maxmargin.PenaltyPath` on ``inst`` (with ``extra["queries"]``):
    the correlations of every point with both W-SVMs at the selection the path's last point
    ranks first, the smallest logit gap of every point, and the stationarity."""
    Z = inst.extra["queries"]
    out = {}
    for name, path in paths.items():
        fro, nuc = _pair(inst.X, selection(inst.X, path.W[-1], Z).alpha, Z)
        out[name] = {"penalty": path.penalties.tolist(),
                     "cos fro": path.cosine(fro.W).tolist(),
                     "cos nuc": path.cosine(nuc.W).tolist(),
                     "gap": [round(selection(inst.X, W, Z).gap, 4) for W in path.W],
                     "stationarity": path.stationarity.tolist()}
    return out
