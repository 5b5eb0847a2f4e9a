"""Chapter 7's helpers (``maxmargin.book.ch07``): each against an independent computation."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch07  # noqa: E402


@pytest.mark.parametrize("k, n", [(0, 100), (3, 100), (48, 100), (99, 100), (100, 100), (7, 20)])
def test_wilson_matches_scipy(k, n):
    """Bug caught: the normal (Wald) interval, which is [0, 0] at k = 0, or a wrong z."""
    stats = pytest.importorskip("scipy.stats")
    want = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = ch07.wilson(k, n)
    assert low == pytest.approx(want.low, abs=1e-9) and high == pytest.approx(want.high, abs=1e-9)


def test_selection_and_gap_by_hand():
    """Logits x^T W z worked out by hand. Bugs caught: W transposed (x^T W^T z), the gap taken
    against the selected token itself (always 0), the argmax over sequences."""
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    W = np.array([[2.0, 0.0], [1.0, 0.0]])        # W z = (2, 1) for z = (1, 0)
    sel = ch07.selection(X, W, np.array([[1.0, 0.0]]))
    assert sel.alpha.tolist() == [0] and sel.gap == pytest.approx(1.0)   # 2 - 1
    sel_t = ch07.selection(X, W.T, np.array([[1.0, 0.0]]))                # W^T z = (2, 0)
    assert sel_t.gap == pytest.approx(2.0)


def test_plane_instance_follows_the_visualization_law():
    """Two sequences of three tokens around (-1, 0) and (1, 0), unit head and queries, seeded.
    Bug caught: the shifts swapped or missing, or unnormalized queries."""
    a, b = ch07.plane_instance(seed=3), ch07.plane_instance(seed=3)
    assert np.array_equal(a.X, b.X)
    assert a.X[0, :, 0].mean() < -0.4 and a.X[1, :, 0].mean() > 0.4
    np.testing.assert_allclose(np.linalg.norm(a.extra["queries"], axis=1), 1.0, rtol=1e-14)
    assert abs(np.linalg.norm(a.v) - 1) < 1e-14 and a.Y.tolist() == [1.0, 1.0]


def test_rank_study_bounds_and_counts():
    """A small study: ranks within the proposition's bound min(n, d), computed from the SVMs
    independently here, and skipped draws counted. Bug caught: ranks of the wrong solution
    or of a fixed number of instances regardless of feasibility."""
    study = ch07.rank_study([3], [2, 4], T=3, count=3, seed=0)
    assert study.ranks.shape == (1, 2, 3, 2)
    assert np.all(study.ranks[0, 0] <= 2) and np.all(study.ranks[0, 1] <= 3)
    found, s = 0, 0
    while found < 3:                           # the first feasible draw at d = 4, re-solved
        inst = mm.data.query_instance(3, 3, 4, seed=s)
        s += 1
        try:
            nuc = mm.w_svm(inst.X, inst.optimal, queries=inst.extra["queries"], norm="nuclear")
        except ValueError:
            continue
        sv = np.linalg.svd(nuc.W, compute_uv=False)
        assert study.ranks[0, 1, found, 1] == int(np.sum(sv > 1e-5 * sv[0]))
        found += 1
    assert study.skipped[0, 1] == s - 3


def test_width_panel_respects_the_rank_bound():
    """A width-1 run cannot correlate with the nuclear solution beyond the bound of its best
    rank-one approximation (Eckart-Young), computed here from the SVD. Bug caught: the bound
    taken from the Frobenius solution, or from the m smallest singular values."""
    fig, ax = plt.subplots()
    c_nuc, c_fro, bound = ch07.width_panel(ax, m=1, scale=0.01, steps=60)
    plt.close(fig)
    run, fro, nuc = ch07._width_run(4, 1, 0.01, 60)
    sv = np.linalg.svd(nuc.W, compute_uv=False)
    assert bound == pytest.approx(sv[0] / np.linalg.norm(sv), rel=1e-12)
    assert c_nuc <= bound + 1e-12
    with pytest.raises(ValueError, match="^m"):
        ch07.width_panel(ax, m=0)


def test_factor_study_prints_a_line_per_stage_only_when_asked(capsys):
    """The chapter's factor_study(100, ...) cell shows progress: a stdout line after each batch
    of runs (three: W, the two m = d settings together, m = 1) and after each setting's SVMs,
    nothing on stderr, the same study, and nothing printed without ``progress``. Bug caught: a
    silent long cell (the issue's chapter 7 cell timed out under nbgrader with no output)."""
    quiet = ch07.factor_study(2, steps=1000, seed=3)
    assert capsys.readouterr() == ("", "")
    loud = ch07.factor_study(2, steps=1000, seed=3, progress=True)
    out, err = capsys.readouterr()
    assert err == "" and loud.summary == quiet.summary
    lines = out.splitlines()
    assert lines[:4] == ["factor_study: 1,000 steps of 2 runs done (W, 0.01)",
                         "factor_study: 1,000 steps of 4 runs done ((K, Q) m=d, 0.01, "
                         "(K, Q) m=d, 1)",
                         "factor_study: 1,000 steps of 2 runs done ((K, Q) m=1, 0.01)",
                         "factor_study: 1,000 steps of 4 runs done ((K, Q) m=d, 0.01, penalty, "
                         "(K, Q) m=d, 1, penalty)"]
    names = [name for name, *_ in ch07.SETTINGS]
    assert [line.split("setting ")[1].split(", done")[0] for line in lines[4:]] == names


def test_counts_by_hand():
    """Bugs caught: a reach counted without the 'closer than the other' clause, or 0.99
    counted as not reaching."""
    row = ch07.counts([0.995, 0.99, 0.5, 0.999], [0.999, 0.5, 0.99, 0.995])
    # reach nuclear: run 0 (0.999 > 0.995) and run 2 (0.99 >= 0.99, > 0.5); not run 3
    assert row["reach nuclear count"] == 2 and row["reach Frobenius count"] == 2
    assert row["closer to nuclear count"] == 2
    assert row["median cos nuc"] == pytest.approx(np.median([0.999, 0.5, 0.99, 0.995]))


def test_nuclear_excess_is_zero_at_any_scale_of_a_solution():
    """Bugs caught: an excess not divided by the margin (a scaled solution would score
    above 0), or computed against the Frobenius solution."""
    sd = ch07.study_data(2)
    svms = ch07._SVMs(sd)
    alphas = np.array([inst.optimal for inst in sd.instances])
    nuc = np.stack([svms(j, alphas[j])[1].W for j in range(2)])
    fro = np.stack([svms(j, alphas[j])[0].W for j in range(2)])
    excess = ch07.nuclear_excess(svms, 7.0 * nuc, alphas)
    np.testing.assert_allclose(excess, 0.0, atol=1e-5)      # the certificate's accuracy
    want = [np.linalg.svd(W, compute_uv=False).sum() / np.linalg.svd(N, compute_uv=False).sum()
            - 1 for W, N in zip(fro, nuc)]                  # fro has margin 1 exactly
    np.testing.assert_allclose(ch07.nuclear_excess(svms, 3.0 * fro, alphas), want, rtol=1e-5)


def test_penalized_stationarity_matches_finite_differences():
    """Bug caught: a penalty gradient of lam K instead of 2 lam K, or a risk that is not the
    mean logistic loss (the ratio would differ from a finite-difference gradient)."""
    sd = ch07.study_data(1)
    rng = np.random.default_rng(5)
    K, Q = rng.standard_normal((1, 5, 5)), rng.standard_normal((1, 5, 5))
    lam = 1e-3

    def F(K, Q):
        L = np.einsum("ntd,de,ne->nt", sd.X[0], K[0] @ Q[0].T, sd.Z[0])
        s = np.exp(L - L.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        f = np.einsum("nt,ntd,d->n", s, sd.X[0], sd.v[0])
        return np.mean(np.logaddexp(0, -sd.Y[0] * f)) + lam * (np.sum(K ** 2) + np.sum(Q ** 2))

    h, grads = 1e-6, []
    for A in (K, Q):
        g = np.zeros_like(A)
        for idx in np.ndindex(A.shape):
            up, down = A.copy(), A.copy()
            up[idx] += h
            down[idx] -= h
            args = (up, Q) if A is K else (K, up)
            args_down = (down, Q) if A is K else (K, down)
            g[idx] = (F(*args) - F(*args_down)) / (2 * h)
        grads.append(g)
    want = np.sqrt(sum(np.sum(g ** 2) for g in grads)) / (
        2 * lam * np.sqrt(np.sum(K ** 2) + np.sum(Q ** 2)))
    got = ch07.penalized_stationarity(K, Q, instances=sd, lam=lam)
    assert got[0] == pytest.approx(want, rel=1e-6)


def test_exact_check_sees_a_tampered_table():
    """Bug caught: a check of the stored runs that compares nothing (a file edited by hand, or
    made with other settings, would pass)."""
    settings = [("per factor, 0.01", 0.01, False, 2000)]
    runs = ch07.exact_runs(3, settings=settings)
    table = {"count": 3, "seed": 0, "settings": [list(s) for s in settings], "runs": runs}
    clean = ch07.exact_check(table)["per factor, 0.01"]
    assert clean == {"largest difference": 0.0, "other selection": 0, "reach difference": 0}
    runs["per factor, 0.01"]["cos nuc"][0, 1] -= 1e-3
    tampered = ch07.exact_check(table)["per factor, 0.01"]
    assert tampered["largest difference"] == pytest.approx(1e-3, rel=1e-6)


def test_the_stored_long_runs_are_the_current_settings():
    """Bug caught: EXACT_SETTINGS or the study's instances changed without rerunning
    scripts/ch07_long_runs.py (the chapter would read a stale file)."""
    table = ch07.load_exact_runs()
    assert [tuple(s) for s in table["settings"]] == list(ch07.EXACT_SETTINGS)
    assert table["count"] == 100 and table["seed"] == 0
    for name, scale, joint, steps in ch07.EXACT_SETTINGS:
        row = table["runs"][name]
        assert list(row["steps"]) == [k for k in ch07.EXACT_STEPS if k <= steps]
        assert row["cos nuc"].shape == (len(row["steps"]), 100)
