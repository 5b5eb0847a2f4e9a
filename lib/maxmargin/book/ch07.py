"""Chapter 7, the key-query factorization: the studies behind its figures and their drawing.

The computations are the core's (:func:`maxmargin.gd_W`, :func:`maxmargin.gd_KQ`,
:func:`maxmargin.gd_KQ_stack`, :func:`maxmargin.w_svm`); this module runs them in the chapter's
settings, tabulates them, and draws them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import _checks, data
from ..keyquery import gd_KQ, gd_KQ_stack
from ..svm import IllConditionedError, w_svm
from ..train import gd_W
from . import plots
from .explore import live

NGD = dict(lr=0.1, normalized=True, eps=1e-300)   # the follow-up's step; no early stall
RANK_CUT = 1e-5          # singular values below this fraction of the largest count as 0
GRAY_ZONE = (1e-9, 1e-3)  # no singular value may fall here, so that RANK_CUT decides nothing
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


def wilson(k, n, *, z: float = 1.959964):
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
    """The largest singular value of W between GRAY_ZONE of the largest, relative (0 if none)."""
    sv = np.linalg.svd(W, compute_uv=False)
    rel = sv / sv[0]
    inside = rel[(rel > GRAY_ZONE[0]) & (rel < GRAY_ZONE[1])]
    return float(inside.max(initial=0.0))


def _pair(X, alpha, queries):
    return (w_svm(X, alpha, queries=queries), w_svm(X, alpha, queries=queries, norm="nuclear"))


@dataclass(frozen=True)
class RankStudy:
    """Ranks of both W-SVM solutions over random instances (:func:`rank_study`).

    ranks : (len(ns), len(ds), count, 2) ranks of the Frobenius (0) and nuclear (1) solutions;
    mean_rank : (len(ns), len(ds), 2); skipped : (len(ns), len(ds)) infeasible draws skipped;
    ill_conditioned : draws refused by the solver's certificate; gray_zone : the largest
    relative singular value inside GRAY_ZONE over all solutions; ns, ds, T.
    """

    ranks: np.ndarray
    mean_rank: np.ndarray
    skipped: np.ndarray
    ill_conditioned: int
    gray_zone: float
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
    ill, gray = 0, 0.0
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
                found += 1
    return RankStudy(ranks, ranks.mean(axis=2), skipped, ill, gray, tuple(ns), tuple(ds), T)


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


def plane_panel(ax, inst, run_W, run_KQ, fro, nuc, *, upto: int | None = None,
                legend: bool = False):
    """W_k z_i for the runs on W (solid) and on (K, Q) (dashed), records up to ``upto``
    (all by default), with the rays W^mm z_i (solid gray) and W^mm_* z_i (dashed black)."""
    Z = inst.extra["queries"]
    colors = plots.SEQUENCE_COLORS
    end = None if upto is None else upto + 1
    for i in range(len(Z)):
        for run, style, name in ((run_W, "-", "on W"), (run_KQ, "--", "on (K, Q)")):
            path = run.W[:end, 0] @ Z[i]
            ax.plot(path[:, 0], path[:, 1], style, color=colors[i], lw=1.8,
                    label=f"seq. {i}, GD {name}" if legend else None)
        plots.direction(ax, fro.W @ Z[i], color="#888888", style="-", lw=1.0,
                        label="Frobenius SVM" if legend and i == 0 else None)
        plots.direction(ax, nuc.W @ Z[i], color=plots.BLACK, style=":", lw=1.4,
                        label="nuclear SVM" if legend and i == 0 else None)
    plots.sequences(ax, inst.X, optimal=inst.optimal)
    ax.autoscale()
    ax.set(xlabel="first coordinate", ylabel="second coordinate",
           title="first steps" if upto is not None else "all steps")
    if legend:
        ax.legend(loc="best", fontsize=7)
    return ax


class FourRuns(NamedTuple):
    """Normalized GD (step 0.1) and plain GD (step 1) on W and on (K, Q), one instance."""

    ngd_W: object
    ngd_KQ: object
    gd_W: object
    gd_KQ: object


def four_runs(inst, *, steps: int = 1500, scale: float = 0.01, seed: int = 1) -> FourRuns:
    """The four runs of the chapter from ``scale`` times Gaussian starts (m = d), recorded
    every 10 steps."""
    n, T, d = inst.X.shape
    Z = inst.extra["queries"]
    rng = np.random.default_rng(_checks.seed(seed))
    W0, K0, Q0 = (scale * rng.standard_normal((d, d)) for _ in range(3))
    args = (inst.X, inst.Y, inst.v)
    plain = dict(lr=1.0, record_every=10)
    return FourRuns(gd_W(*args, W0, Z, steps, record_every=10, **NGD),
                    gd_KQ(*args, K0, Q0, Z, steps, record_every=10, **NGD),
                    gd_W(*args, W0, Z, steps, **plain),
                    gd_KQ(*args, K0, Q0, Z, steps, **plain))


RUN_NAMES = ("NGD on W", "NGD on (K, Q)", "GD on W", "GD on (K, Q)")


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
    for run, style, name in ((runs.ngd_W, "-", "W"), (runs.ngd_KQ, "--", "(K, Q)")):
        fro, nuc = _pair(inst.X, selection(inst.X, run.W[-1, 0], Z).alpha, Z)
        k = run.steps[1:]
        axes[0].plot(k, run.cosine(fro.W)[1:, 0], style, color=plots.BLUE,
                     label=f"{name}: Frobenius")
        axes[0].plot(k, run.cosine(nuc.W)[1:, 0], style, color=plots.VERMILLION,
                     label=f"{name}: nuclear")
    axes[0].set(xscale="log", xlabel="step k", ylabel="correlation", ylim=(0.4, 1.01),
                title="(a) correlation with the SVMs")
    axes[0].legend(loc="lower right", fontsize=7)
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
    runs, checked : numbers of runs, and of runs whose selection had both SVMs certified;
    frozen_kq : factorized (m = d) runs whose last two records are bitwise equal;
    frozen_step : (runs,) first recorded step from which a frozen run no longer changed (nan
        if not frozen); min_gap_frozen : smallest gap over frozen runs (inf if none);
    narrow : columns of the width-one runs, each (count,): "cos nuc", "bound", "nuclear rank",
        "reached" (bool);
    selections : {"W not optimal": count, "W and (K, Q) differ": count}.
    """

    summary: dict
    pair_median: float
    runs: int
    checked: int
    frozen_kq: int
    frozen_step: np.ndarray
    min_gap_frozen: float
    narrow: dict
    selections: dict


SETTINGS = (("W, 0.01", "W", 0.01), ("(K, Q) m=d, 0.01", "d", 0.01),
            ("(K, Q) m=d, 1", "d", 1.0), ("(K, Q) m=1, 0.01", 1, 0.01))


def factor_study(count: int, *, n: int = 3, T: int = 4, d: int = 5, steps: int = 2000,
                 seed: int = 0) -> FactorStudy:
    """Normalized GD (step 0.1, eps 1e-300) on ``count`` instances of
    :func:`maxmargin.data.query_instance` (seeds 1000 + j) in the four settings of ``SETTINGS``;
    verdicts at the selection each run ranks first at the last step."""
    count = _checks.positive_int(count, "count")
    insts = [data.query_instance(n, T, d, seed=1000 + j) for j in range(count)]
    X = np.stack([i.X for i in insts])
    Y = np.stack([i.Y for i in insts])
    v = np.stack([i.v for i in insts])
    Z = np.stack([i.extra["queries"] for i in insts])
    rng = np.random.default_rng(_checks.seed(seed))
    runs = {}
    for name, width, scale in SETTINGS:
        if width == "W":
            K0, Q0, freeze = scale * rng.standard_normal((count, d, d)), np.eye(d), True
        else:
            m = d if width == "d" else width
            K0 = scale * rng.standard_normal((count, d, m))
            Q0, freeze = scale * rng.standard_normal((count, d, m)), False
        runs[name] = gd_KQ_stack(X, Y, v, K0, Q0, Z, steps, freeze_Q=freeze,
                                 record_every=10, **NGD)
    svms, rows, frozen_step, frozen_gaps = {}, {}, [], []
    checked = 0
    for name, run in runs.items():
        res = []
        for j in range(count):
            Wj = run.W[-1, j]
            sel = selection(X[j], Wj, Z[j])
            key = (j, tuple(sel.alpha))
            if key not in svms:
                svms[key] = _pair(X[j], sel.alpha, Z[j])
            fro, nuc = svms[key]
            checked += sel.gap > 0
            cf = float(np.sum(Wj * fro.W) / np.linalg.norm(Wj) / np.linalg.norm(fro.W))
            cn = float(np.sum(Wj * nuc.W) / np.linalg.norm(Wj) / np.linalg.norm(nuc.W))
            sv = np.linalg.svd(nuc.W, compute_uv=False)
            width = run.K.shape[-1]
            res.append((cf, cn, sel.gap, _rank(nuc.W),
                        float(np.sqrt(np.sum(sv[:width] ** 2)) / np.linalg.norm(sv)),
                        sel.alpha, np.array_equal(run.W[-1, j], run.W[-2, j])))
            if name.startswith("(K, Q) m=d"):
                same = [np.array_equal(run.W[r, j], Wj) for r in range(len(run.steps))]
                frozen = res[-1][-1]
                frozen_step.append(float(run.steps[int(np.argmax(same))]) if frozen else np.nan)
                if frozen:
                    frozen_gaps.append(sel.gap)
        rows[name] = res
    summary = {}
    for name, res in rows.items():
        cf = np.array([r[0] for r in res])
        cn = np.array([r[1] for r in res])
        row = {"reach Frobenius": (cf >= REACH) & (cf > cn), "reach nuclear": (cn >= REACH) & (cn > cf),
               "closer to nuclear": cn > cf}
        summary[name] = {}
        for col, hits in row.items():
            k = int(hits.sum())
            low, high = wilson(k, count)
            summary[name] |= {col: k / count, col + " low": low, col + " high": high}
        summary[name]["median cos nuc"] = float(np.median(cn))
    pairs = [float(np.sum(f.W * u.W) / np.linalg.norm(f.W) / np.linalg.norm(u.W))
             for f, u in svms.values()]
    narrow_rows = rows["(K, Q) m=1, 0.01"]
    narrow = {"cos nuc": np.array([r[1] for r in narrow_rows]),
              "bound": np.array([r[4] for r in narrow_rows]),
              "nuclear rank": np.array([r[3] for r in narrow_rows]),
              "reached": np.array([(r[1] >= REACH) & (r[1] > r[0]) for r in narrow_rows])}
    optimal = [i.optimal for i in insts]
    sel_W = [r[5] for r in rows["W, 0.01"]]
    sel_KQ = [r[5] for r in rows["(K, Q) m=d, 0.01"]]
    selections = {"W not optimal": sum(not np.array_equal(a, o) for a, o in zip(sel_W, optimal)),
                  "W and (K, Q) differ": sum(not np.array_equal(a, b) for a, b in zip(sel_W, sel_KQ))}
    frozen_step = np.array(frozen_step)
    return FactorStudy(summary, float(np.median(pairs)), 4 * count, int(checked),
                       int(np.sum(~np.isnan(frozen_step))), frozen_step,
                       float(min(frozen_gaps, default=np.inf)), narrow, selections)


def summary_table(study: FactorStudy) -> str:
    """The study's summary as aligned text, percentages with their Wilson intervals."""
    cols = ("reach Frobenius", "reach nuclear", "closer to nuclear")
    lines = [f"{'setting':18s}" + "".join(f"{c:>26s}" for c in cols) + f"{'median cos nuc':>16s}"]
    for name, row in study.summary.items():
        cells = "".join(f"{100 * row[c]:>8.0f}% [{100 * row[c + ' low']:4.0f}, "
                        f"{100 * row[c + ' high']:4.0f}]%    " for c in cols)
        lines.append(f"{name:18s}{cells}{row['median cos nuc']:>12.4f}")
    return "\n".join(lines)


def stall_comparison(inst, *, steps: int = 1500, scale: float = 0.01, seed: int = 1) -> dict:
    """Normalized GD on (K, Q) from the starts of :func:`four_runs` with eps = 1e-12 (the
    library's default) and eps = 1e-300: {eps label: {"smallest gap", "cos nuc"}} at the end."""
    n, T, d = inst.X.shape
    Z = inst.extra["queries"]
    rng = np.random.default_rng(_checks.seed(seed))
    _, K0, Q0 = (scale * rng.standard_normal((d, d)) for _ in range(3))
    out = {}
    for label, eps in (("eps 1e-12", 1e-12), ("eps 1e-300", 1e-300)):
        run = gd_KQ(inst.X, inst.Y, inst.v, K0, Q0, Z, steps, 0.1, normalized=True, eps=eps,
                    record_every=None)
        sel = selection(inst.X, run.W[-1, 0], Z)
        nuc = w_svm(inst.X, sel.alpha, queries=Z, norm="nuclear")
        out[label] = {"smallest gap": sel.gap, "cos nuc": float(run.cosine(nuc.W)[-1, 0])}
    return out
