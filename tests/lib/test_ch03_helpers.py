"""Chapter 03 helpers: gd_stack against per-instance mm.gd and an autograd loop, its bad inputs,
the basin sweep against single runs, and the chapter's plot and explorer helpers."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch03, landscape, plots  # noqa: E402
from maxmargin.train import StackTrajectory, gd_stack
from roundoff import assert_every_step_matches, prompt_model  # noqa: E402


def stack(instances):
    return (np.stack([i.X for i in instances]), np.stack([i.Y for i in instances]),
            np.stack([i.v for i in instances]), np.stack([i.W for i in instances]))


@pytest.mark.parametrize("normalized", [False, True])
def test_gd_stack_equals_gd_on_each_instance(normalized):
    instances = [mm.data.random_instance(3, 4, 5, seed=s, equal_scores=s % 2 == 0) for s in range(4)]
    X, Y, v, W = stack(instances)
    P0 = np.random.default_rng(1).standard_normal((4, 3, 5))
    run = gd_stack(X, Y, v, P0, 80, 0.5, W=W, normalized=normalized)
    assert isinstance(run, StackTrajectory)
    assert run.p.shape == (81, 4, 3, 5) and run.risk.shape == (81, 4, 3)
    assert run.tracked_attention.shape == (81, 4, 3, 3) and run.final_attention.shape == (4, 3, 3, 4)
    for m, inst in enumerate(instances):
        # step by step against torch autograd on instance m's own model (not the library's
        # engine): its step from every iterate gives the next to within the step's rounding
        # bound, and the recorded risk is the model's; 80 steps compared whole would compare
        # accumulated rounding
        model = prompt_model(inst.X, inst.Y, inst.v, inst.W,
                             lambda z: torch.nn.functional.softplus(-z))
        for b in range(3):
            assert_every_step_matches(run.p[:, m, b], run.risk[:, m, b], model, 0.5, normalized,
                                      1e-12, P0[m, b])
        # tracked attention at each iterate, from the tokens by hand
        logits = np.einsum("ntd,de,rbe->rbnt", inst.X, inst.W, run.p[:, m])
        s = np.exp(logits - logits.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        tracked = np.argmax(inst.Y[:, None] * (inst.X @ inst.v), axis=1)
        np.testing.assert_allclose(run.tracked_attention[:, m], s[..., np.arange(3), tracked],
                                   atol=1e-13)
        final = s[-1]   # (3, n, T) at the last iterate
        np.testing.assert_allclose(run.final_attention[m], final, rtol=1e-11, atol=1e-300)
        np.testing.assert_array_equal(run.selected_tokens()[m], final.argmax(axis=-1))
    np.testing.assert_allclose(run.tracked_attention + run.other_attention, 1.0, atol=1e-13)


def test_gd_stack_matches_an_autograd_loop_with_shared_inputs():
    """Shared v, W and starts broadcast over instances; reference: torch autograd, W = identity."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((2, 3, 4, 3))
    Y = np.array([[1.0, -1.0, 1.0], [-1.0, -1.0, 1.0]])
    v = rng.standard_normal(3)
    p0 = rng.standard_normal((2, 3))
    run = gd_stack(X, Y, v, p0, 30, 0.2)
    for m in range(2):  # step by step, at one step's rounding bound (roundoff.py)
        model = prompt_model(X[m], Y[m], v, None, lambda z: torch.nn.functional.softplus(-z))
        for b in range(2):
            assert_every_step_matches(run.p[:, m, b], run.risk[:, m, b], model, 0.2, False,
                                      1e-12, p0[b], risk_rtol=1e-11)


def test_gd_stack_other_attention_is_accurate_below_machine_epsilon():
    from scipy.special import logsumexp

    inst = mm.data.fig2()
    p = np.array([60.0, 12.0, 0.0])
    run = gd_stack(inst.X[None], inst.Y[None], inst.v, p, 1, 0.1, W=inst.W)
    logits = inst.X @ inst.W @ p
    exact = np.exp(logits[:, 1:] - logsumexp(logits, axis=1, keepdims=True)).sum(axis=1)
    assert np.all(exact < 1e-20)
    np.testing.assert_allclose(run.other_attention[0, 0, 0], exact, rtol=1e-12)


def test_gd_stack_cosine_takes_one_direction_per_instance():
    instances = [mm.data.random_instance(2, 3, 4, seed=s, equal_scores=True) for s in range(2)]
    X, Y, v, W = stack(instances)
    run = gd_stack(X, Y, v, np.zeros(4), 5, 0.1, W=W, normalized=True)
    dirs = np.stack([mm.att_svm(i.X, i.optimal, W=i.W).p for i in instances])
    cos = run.cosine(dirs)
    assert cos.shape == (6, 2, 1)
    np.testing.assert_allclose(cos[-1, 1, 0], mm.cosine(run.p[-1, 1, 0], dirs[1]))


@pytest.mark.parametrize("kwargs, match", [
    (dict(X=np.zeros((2, 3, 4))), "X: expected shape"),
    (dict(Y=np.ones((2, 2))), "Y: expected shape"),
    (dict(Y=np.full((2, 3), 2.0)), "Y: labels"),
    (dict(v=np.ones(5)), "v: expected shape"),
    (dict(v=np.ones((3, 4))), "v: expected shape"),
    (dict(W=np.eye(5)), "W: expected shape"),
    (dict(p0=np.zeros((3, 1, 4))), "p0: expected shape"),
    (dict(p0=np.full(4, np.nan)), "p0: non-finite"),
    (dict(steps=0), "steps"),
    (dict(lr=-1.0), "lr"),
    (dict(track=np.full((2, 3), 9)), "track"),
])
def test_gd_stack_rejects_bad_input(kwargs, match):
    args = dict(X=np.random.default_rng(0).standard_normal((2, 3, 4, 4)), Y=np.ones((2, 3)),
                v=np.ones(4), p0=np.zeros(4), steps=3, lr=0.1, W=None, track=None)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        gd_stack(args["X"], args["Y"], args["v"], args["p0"], args["steps"], args["lr"], W=args["W"],
                 track=args["track"])


def test_basin_agrees_with_single_runs():
    inst = mm.data.fig1(variant="b")
    grid, selected = landscape.selection_basin(inst.X, inst.Y, inst.v, W=inst.W, extent=4.0, num=5, steps=120)
    assert grid.shape == (5,) and selected.shape == (5, 5)
    # an independent batched loop: normalized GD by torch autograd from the same 25 starts
    A, B = np.meshgrid(grid, grid)
    P = torch.tensor(np.stack([A.ravel(), B.ravel(), np.zeros(25)], axis=1), requires_grad=True)
    X, W = torch.tensor(inst.X), torch.tensor(inst.W)
    gamma = torch.tensor(inst.Y[:, None] * (inst.X @ inst.v))
    for _ in range(120):
        s = torch.softmax(torch.einsum("ntd,de,be->bnt", X, W, P), dim=-1)
        risks = torch.nn.functional.softplus(-(s * gamma).sum(-1)).mean(-1)
        (g,) = torch.autograd.grad(risks.sum(), P)   # row b: the gradient of run b's risk
        with torch.no_grad():
            P -= 0.1 * g / (g.norm(dim=1, keepdim=True) + 1e-12)
    s = torch.softmax(torch.einsum("ntd,de,be->bnt", X, W, P), dim=-1).detach().numpy()[:, 0]
    top2 = np.sort(s, axis=1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 1e-6)   # no near-tie that rounding could flip
    np.testing.assert_array_equal(selected.ravel(), np.argmax(s, axis=1))
    # the paper's Fig. 1 (b) outcome: far along (1, 0) is local (x2), far along (0, 1) is global (x1)
    assert selected[2, 4] == 1 and selected[4, 2] == 0


def test_draw_basin_shares_and_equal_scores_remove_the_local_basin():
    fig, axes = plots.panels(ncols=2)
    share_b = ch03.draw_basin(axes[0], x3_score=0.0, num=21, steps=150, max_steps=2400)
    share_a = ch03.draw_basin(axes[1], x3_score=0.9, num=21, steps=150, max_steps=2400)
    plt.close(fig)
    # shares of (settled at x1, settled at x2, not settled)
    assert share_b.sum() == pytest.approx(1.0) and share_b[1] > 0.2
    assert share_a[1] == 0 and share_a[0] == pytest.approx(1.0)


def test_score_explorer_panel_reports_the_settled_token():
    fig, (ax,) = plots.panels()
    assert ch03.draw_score_explorer(ax, x3_score=0.0, angle=-90.0, norm=1.5) == 1  # start (0, -1.5)
    assert "settled at x2" in ax.get_title()
    assert ch03.draw_score_explorer(ax, x3_score=0.9, angle=-90.0, norm=1.5) == 0  # Fig. 1 (a)
    plt.close(fig)


# ---- the settling criterion (ch03.settled_tokens, ch03.settle), against mpmath ------------------

mp = pytest.importorskip("mpmath")


@pytest.fixture(autouse=True)
def _fifty_digits():
    """50 digits for this module's tests only: a global mp.dps set at import made other
    modules' results depend on which test file was imported first."""
    with mp.workdps(50):
        yield


KEYS = [(-0.1, 1.0), (1.0, 0.0), (0.0, 0.0)]


def neg_grad_exact(a, b, g):
    """-grad L of the Fig. 1 family at p = (a, b) from the model's definition, in 50 digits:
    logistic loss of the margin sum_t s_t gamma_t, written out with no library code."""
    gam = [mp.mpf(1), mp.mpf("0.9"), mp.mpf(g)]
    a, b = mp.mpf(a), mp.mpf(b)
    logits = [mp.mpf(k0) * a + mp.mpf(k1) * b for k0, k1 in KEYS]
    top = max(logits)
    e = [mp.e ** (x - top) for x in logits]
    s = [x / sum(e) for x in e]
    margin = sum(si * gi for si, gi in zip(s, gam))
    slope = 1 / (1 + mp.e ** margin)                     # -l'(margin) of the logistic loss
    return [slope * sum(s[t] * (gam[t] - margin) * mp.mpf(KEYS[t][j]) for t in range(3))
            for j in range(2)]


def exact_label(a, b, g):
    """The proposition's two conditions, evaluated with the 50-digit gradient."""
    l1, l2 = -mp.mpf("0.1") * mp.mpf(a) + mp.mpf(b), mp.mpf(a)
    if l1 > l2 and l1 > 0:
        return 0
    c1, c2 = neg_grad_exact(a, b, g)
    if l2 > l1 and l2 > 0 and c1 > 0 and c2 <= mp.mpf("0.1") * c1:
        return 1
    return ch03.NOT_SETTLED


@pytest.mark.parametrize("g", [0.0, 0.5, 0.89, 0.9, 0.95])
def test_settled_tokens_is_the_criterion_computed_exactly(g):
    """Catches a wrong closed form for (c1, c2) in settled_tokens (a coefficient, a sign, the
    score of x3 entering the wrong term), against the criterion with a 50-digit gradient."""
    inst = mm.data.fig1_moved(x3_score=g)
    rng = np.random.default_rng(3)
    P = np.zeros((300, 3))
    P[:, :2] = rng.uniform(-25, 25, (300, 2))
    if g < 0.9:   # and pairs of prompts just either side of the boundary c2 = 0.1 c1
        edge = []
        for a in (1.0, 3.0, 6.0, 10.0, 18.0, 25.0):
            f = lambda b: (lambda c: c[1] - mp.mpf("0.1") * c[0])(neg_grad_exact(a, b, g))
            if f(-a) < 0 < f(0.1 * a):
                b0 = float(mp.findroot(f, (-a, 0.1 * a), solver="bisect"))
                edge += [[a, b0 - 1e-6, 0.0], [a, b0 + 1e-6, 0.0]]
        assert len(edge) >= 8, edge
        P = np.concatenate([P, edge])
    got = ch03.settled_tokens(inst, P)
    for p, label in zip(P, got):
        c1, c2 = neg_grad_exact(p[0], p[1], g)
        if abs(c2 - mp.mpf("0.1") * c1) <= mp.mpf("1e-9") * max(abs(c1), abs(c2)):
            continue                                    # too close to the boundary to call
        assert label == exact_label(p[0], p[1], g), (g, p, label)
    assert set(got) >= {0, 1} if g < 0.9 else set(got) >= {0}


@pytest.mark.parametrize("g", [0.0, 0.8, 0.9])
def test_no_step_along_the_exact_gradient_leaves_a_settled_region(g):
    """The proposition: from a settled prompt, a step of any length along -grad L (computed
    exactly) lands on a prompt settled on the same token. Catches a criterion that is not
    invariant (e.g. c2 <= 0.2 c1, or 'x2 leads' alone), including just inside the boundary."""
    inst = mm.data.fig1_moved(x3_score=g)
    rng = np.random.default_rng(5)
    P = np.zeros((400, 3))
    P[:, :2] = rng.uniform(-25, 25, (400, 2))
    labels = ch03.settled_tokens(inst, P)
    points = [p[:2] for p, lab in zip(P, labels) if lab != ch03.NOT_SETTLED][:80]
    if g < 0.9:   # prompts just inside the boundary c2 = 0.1 c1 of condition 2
        for a in (3.0, 10.0, 25.0):
            f = lambda b: (lambda c: c[1] - mp.mpf("0.1") * c[0])(neg_grad_exact(a, b, g))
            b0 = mp.findroot(f, (-a, 0.1 * a), solver="bisect")
            points.append(np.array([a, float(b0) - 1e-9]))
    for a, b in points:
        start = ch03.settled_tokens(inst, [a, b, 0.0])
        assert start != ch03.NOT_SETTLED
        c = neg_grad_exact(a, b, g)
        norm = mp.sqrt(c[0] ** 2 + c[1] ** 2)
        for t in (1e-8, 1e-3, 0.1, 1.0, 30.0):
            a2 = float(mp.mpf(a) + t * c[0] / norm)
            b2 = float(mp.mpf(b) + t * c[1] / norm)
            assert exact_label(a2, b2, g) == start, (g, a, b, t)


def test_settle_labels_agree_with_long_independent_runs():
    """Runs settled by ch03.settle keep their token in an independent float64 NGD loop (numpy,
    no library code) continued 10 times longer; unsettled runs are reported as such. Catches a
    run labelled by the token that leads when it is stopped (2 (1, 0, 0) leads with x2 at step
    200 and ends at x1) and a settle that stops continuing runs too early."""
    inst = mm.data.fig1(variant="b")
    starts = np.array([[2.0, 0.0, 0.0], [4.0, 0.0, 0.0], [0.0, -1.5, 0.0], [0.0, 1.0, 0.0],
                       [8 * np.cos(0.085), 8 * np.sin(0.085), 0.0]])
    found = ch03.settle(inst, starts, 200, 3200)
    assert found.tokens[:4].tolist() == [0, 1, 1, 0]
    assert found.leading[0] == 1 and found.settled_by[0] > 200   # led by x2 at step 200
    assert set(found.checked) <= {200, 800, 3200} and found.horizon <= 3200
    K = np.array(KEYS)
    gam = np.array([1.0, 0.9, 0.0])
    P = starts[:, :2].copy()
    for _ in range(32_000):
        z = P @ K.T
        s = np.exp(z - z.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        margin = s @ gam
        grad = (-1 / (1 + np.exp(margin)))[:, None] * ((s * (gam - margin[:, None])) @ K)
        P -= 0.1 * grad / (np.linalg.norm(grad, axis=1, keepdims=True) + 1e-9)
    lead = np.argmax(P @ K.T, axis=1)
    done = found.tokens != ch03.NOT_SETTLED
    assert (lead[done] == found.tokens[done]).all(), (lead, found.tokens)
    assert (found.settled_by[~done] == -1).all()


@pytest.mark.parametrize("make, match", [
    (lambda: mm.data.fig2(), "inst: the settling criterion is derived for the Fig. 1 keys"),
    (lambda: mm.data.fig1_moved(x3_score=0.0, x2=(1.0, 0.5)), "inst: the settling criterion is derived"),
    (lambda: mm.data.fig1_moved(x3_score=1.2), "inst: the settling criterion needs"),
    (lambda: mm.data.fig1_moved(x3_score=-0.5), "inst: the settling criterion needs"),
])
def test_settling_refuses_instances_outside_the_fig1_family(make, match):
    """The closed forms hold only for the Fig. 1 keys and scores (1, 0.9, g), 0 <= g < 1."""
    with pytest.raises(ValueError, match=match):
        ch03.settled_tokens(make(), np.zeros(3))


def test_settle_rejects_bad_arguments():
    inst = mm.data.fig1(variant="b")
    with pytest.raises(ValueError, match="p0"):
        ch03.settle(inst, np.zeros((2, 2)), 10, 20)
    with pytest.raises(ValueError, match="max_steps"):
        ch03.settle(inst, np.zeros(3), 10, 5)
    with pytest.raises(ValueError, match="P:"):
        ch03.settled_tokens(inst, np.zeros((4, 2)))


def test_plot_helpers_draw_and_validate():
    fig, axes = plots.panels(ncols=3)
    xs, ys = np.arange(4.0), np.arange(3.0)
    labels = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1]])
    ax, handles = plots.selection_map(axes[0], xs, ys, labels, ["a", "b"])
    assert ax is axes[0] and [h.get_label() for h in handles] == ["a", "b"]
    mesh = plots.signed_log_map(axes[1], xs, ys, np.linspace(-1, 1, 12).reshape(3, 4))
    assert mesh.norm.vmin == -1 and mesh.norm.vmax == 1
    plots.quantile_curves(axes[2], xs, np.arange(8.0).reshape(4, 2) + 1)
    np.testing.assert_allclose(axes[2].lines[0].get_ydata(), [1.5, 3.5, 5.5, 7.5])
    with pytest.raises(ValueError, match="selected: expected shape"):
        plots.selection_map(axes[0], xs, ys, labels.T, ["a", "b"])
    with pytest.raises(ValueError, match="selected: labels"):
        plots.selection_map(axes[0], xs, ys, labels + 1, ["a", "b"])
    with pytest.raises(ValueError, match="colors"):
        plots.selection_map(axes[0], xs, ys, labels, ["a", "b"], colors=["red"])
    with pytest.raises(ValueError, match="values: expected shape"):
        plots.signed_log_map(axes[1], xs, ys, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="values: expected shape"):
        plots.quantile_curves(axes[2], xs, np.zeros(4))
    plt.close(fig)


def test_settle_prints_a_line_per_round_only_when_asked(capsys):
    """The chapter's long settle cell shows progress: one stdout line per round, with the steps
    done and the runs settled by then (counted here from settled_by), nothing on stderr, and
    nothing at all without ``progress``. Bugs caught: a silent long cell (issue: 93 s with no
    output), a count of the runs still active printed as settled, a line before the round."""
    inst = mm.data.fig1(variant="b")
    starts = np.array([[2.0, 0.0, 0.0], [4.0, 0.0, 0.0], [0.0, -1.5, 0.0], [0.0, 1.0, 0.0]])
    quiet = ch03.settle(inst, starts, 200, 3200)
    assert capsys.readouterr() == ("", "")
    found = ch03.settle(inst, starts, 200, 3200, progress=True)
    out, err = capsys.readouterr()
    assert err == ""
    assert np.array_equal(found.tokens, quiet.tokens)
    rounds = [200, 800, 3200]
    expected = []
    for done in rounds[:len(out.splitlines())]:
        settled = sum(1 for b in found.settled_by if 0 < b <= done)
        expected.append(f"settle: {done:,} of at most 3,200 steps, {settled} of 4 runs settled")
    assert out.splitlines() == expected
    assert len(expected) >= 2 and "800" in out    # x2's start from (2, 0, 0) settles after 200
