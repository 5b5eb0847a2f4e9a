"""Chapter 7, the key-query factorization: the studies behind its figures and their drawing.

The computations are the core's (:func:`maxmargin.gd_W`, :func:`maxmargin.gd_KQ`,
:func:`maxmargin.gd_KQ_stack`, :func:`maxmargin.w_svm`); this module runs them in the chapter's
settings, tabulates them, and draws them.
"""
from __future__ import annotations

import re
from functools import lru_cache
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
    runs, checked : numbers of runs, and of runs whose selection is strict (every gap > 0)
        with both SVMs certified there;
    gaps : {setting: (count,)} smallest logit gap of each run at the last step;
    moved : {setting: (count,)} change of the correlation with the run's own closer SVM over
        the last 500 steps;
    narrow : columns of the width-one runs, each (count,): "cos nuc", "bound", "nuclear rank",
        "reached" (bool);
    selections : {"W not optimal": count, "W and (K, Q) differ": count}.
    """

    summary: dict
    pair_median: float
    runs: int
    checked: int
    gaps: dict
    moved: dict
    narrow: dict
    selections: dict


SETTINGS = (("W, 0.01", "W", 0.01), ("(K, Q) m=d, 0.01", "d", 0.01),
            ("(K, Q) m=d, 1", "d", 1.0), ("(K, Q) m=1, 0.01", 1, 0.01))


def _cos(A, B) -> np.ndarray:
    """Frobenius cosines of matrices A (..., d, d) with one B (d, d)."""
    return np.sum(A * B, axis=(-2, -1)) / np.linalg.norm(A, axis=(-2, -1)) / np.linalg.norm(B)


def factor_study(count: int, *, n: int = 3, T: int = 4, d: int = 5, steps: int = 2000,
                 seed: int = 0, progress: bool = False) -> FactorStudy:
    """Normalized GD (step 0.1, eps 1e-300) on ``count`` instances of
    :func:`maxmargin.data.query_instance` (seeds 1000 + j) in the four settings of ``SETTINGS``;
    verdicts at the selection each run ranks first at the last step. ``progress``: print a
    line on stdout after each stage (each batch of runs, each setting's SVMs)."""
    count = _checks.positive_int(count, "count")
    steps = _checks.positive_int(steps, "steps", minimum=1000)
    insts = [data.query_instance(n, T, d, seed=1000 + j) for j in range(count)]
    X = np.stack([i.X for i in insts])
    Y = np.stack([i.Y for i in insts])
    v = np.stack([i.v for i in insts])
    Z = np.stack([i.extra["queries"] for i in insts])
    rng = np.random.default_rng(_checks.seed(seed))
    svms, rows, gaps, moved = {}, {}, {}, {}
    checked = 0
    starts = {}
    for name, width, scale in SETTINGS:
        m = d if width in ("W", "d") else width
        starts[name] = (scale * rng.standard_normal((count, d, m)),
                        np.eye(d) if width == "W" else scale * rng.standard_normal((count, d, m)))
    # One array program per kind of run: W (Q frozen at I), the two m = d settings together
    # (2 count instances), and m = 1.
    both = [name for name, width, _ in SETTINGS if width == "d"]
    batches = {"W": [n_ for n_, w_, _ in SETTINGS if w_ == "W"], "d": both,
               "narrow": [n_ for n_, w_, _ in SETTINGS if w_ not in ("W", "d")]}
    runs_W = {}
    for kind, names in batches.items():
        K0 = np.concatenate([starts[n_][0] for n_ in names])
        Q0 = np.concatenate([np.broadcast_to(starts[n_][1], starts[n_][0].shape) for n_ in names])
        reps = len(names)
        run = gd_KQ_stack(np.tile(X, (reps, 1, 1, 1)), np.tile(Y, (reps, 1)), np.tile(v, (reps, 1)),
                          K0, Q0, np.tile(Z, (reps, 1, 1)), steps, freeze_Q=kind == "W",
                          record_every=500, **NGD)
        W_all = run.W[-2:]                                    # (2, reps count, d, d)
        for r, n_ in enumerate(names):
            runs_W[n_] = (W_all[:, r * count:(r + 1) * count], run.K.shape[-1])
        if progress:
            print(f"factor_study: {steps:,} steps of {reps * count} runs done "
                  f"({', '.join(names)})", flush=True)
    for name, width, scale in SETTINGS:
        Ws, m = runs_W[name]
        res, gap_row, moved_row = [], [], []
        for j in range(count):
            sel = selection(X[j], Ws[-1, j], Z[j])
            key = (j, tuple(sel.alpha))
            if key not in svms:
                svms[key] = _pair(X[j], sel.alpha, Z[j])
            fro, nuc = svms[key]
            checked += sel.gap > 0
            cf, cn = (_cos(Ws[-2:, j], res_.W) for res_ in (fro, nuc))
            sv = np.linalg.svd(nuc.W, compute_uv=False)
            bound = float(np.sqrt(np.sum(sv[:m] ** 2)) / np.linalg.norm(sv))
            res.append((float(cf[-1]), float(cn[-1]), _rank(nuc.W), bound, sel.alpha))
            gap_row.append(sel.gap)
            own = cn if cn[-1] > cf[-1] else cf
            moved_row.append(float(own[-1] - own[-2]))
        rows[name], gaps[name], moved[name] = res, np.array(gap_row), np.array(moved_row)
        if progress:
            print(f"factor_study: the SVMs of {count} instances, setting {name}, done "
                  f"({len(svms)} pairs solved so far)", flush=True)
    summary = {}
    for name, res in rows.items():
        cf = np.array([r[0] for r in res])
        cn = np.array([r[1] for r in res])
        row = {"reach Frobenius": (cf >= REACH) & (cf > cn),
               "reach nuclear": (cn >= REACH) & (cn > cf), "closer to nuclear": cn > cf}
        summary[name] = {}
        for col, hits in row.items():
            k = int(hits.sum())
            low, high = wilson(k, count)
            summary[name] |= {col: k / count, col + " low": low, col + " high": high}
        summary[name]["median cos nuc"] = float(np.median(cn))
    pairs = [float(_cos(f.W, u.W)) for f, u in svms.values()]
    narrow_rows = rows["(K, Q) m=1, 0.01"]
    narrow = {"cos nuc": np.array([r[1] for r in narrow_rows]),
              "bound": np.array([r[3] for r in narrow_rows]),
              "nuclear rank": np.array([r[2] for r in narrow_rows]),
              "reached": np.array([(r[1] >= REACH) & (r[1] > r[0]) for r in narrow_rows])}
    optimal = [i.optimal for i in insts]
    sel_W = [r[4] for r in rows["W, 0.01"]]
    sel_KQ = [r[4] for r in rows["(K, Q) m=d, 0.01"]]
    selections = {"W not optimal": sum(not np.array_equal(a, o) for a, o in zip(sel_W, optimal)),
                  "W and (K, Q) differ": sum(not np.array_equal(a, b)
                                             for a, b in zip(sel_W, sel_KQ))}
    return FactorStudy(summary, float(np.median(pairs)), len(SETTINGS) * count, int(checked),
                       gaps, moved, narrow, selections)


def summary_table(study: FactorStudy) -> str:
    """The study's summary as aligned text, percentages with their Wilson intervals."""
    cols = ("reach Frobenius", "reach nuclear", "closer to nuclear")
    lines = [f"{'setting':18s}" + "".join(f"{c:>26s}" for c in cols) + f"{'median cos nuc':>16s}"]
    for name, row in study.summary.items():
        cells = "".join(f"{100 * row[c]:>8.0f}% [{100 * row[c + ' low']:4.0f}, "
                        f"{100 * row[c + ' high']:4.0f}]%    " for c in cols)
        lines.append(f"{name:18s}{cells}{row['median cos nuc']:>12.4f}")
    return "\n".join(lines)


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
    ax.legend(loc="lower right", fontsize=7)
    return float(c_nuc[-1]), float(c_fro[-1]), bound


def width_explorer(*, steps: int = 1000):
    """Live explorer: sliders for the factor width m and the start scale (log)."""
    import ipywidgets

    def draw(ax, m, scale):
        width_panel(ax, m=m, scale=scale, steps=steps)

    return live(draw, width=5.5, height=4.0,
                m=ipywidgets.IntSlider(value=10, min=1, max=10, description="m"),
                scale=ipywidgets.FloatLogSlider(value=0.01, base=10, min=-3, max=0.5,
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
