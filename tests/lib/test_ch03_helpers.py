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
from maxmargin.book import ch03, plots  # noqa: E402
from maxmargin.train import StackTrajectory, gd_stack
from roundoff import assert_every_step_matches, prompt_model, step_bounds  # noqa: E402


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
    assert run.p.shape == (81, 4, 3, 5) and run.loss.shape == (81, 4, 3)
    assert run.tracked_attention.shape == (81, 4, 3, 3) and run.final_attention.shape == (4, 3, 3, 4)
    for m, inst in enumerate(instances):
        # step by step: mm.gd from every iterate of instance m (one batch, one step) gives the
        # next; 80 steps of two engines compared whole would compare accumulated rounding
        ref = mm.gd(inst.X, inst.Y, inst.v, run.p[:, m].reshape(-1, 5), 1, 0.5, W=inst.W,
                    normalized=normalized)
        np.testing.assert_array_equal(run.p[0, m], P0[m])
        model = prompt_model(inst.X, inst.Y, inst.v, inst.W,
                             lambda z: torch.nn.functional.softplus(-z))
        for b in range(3):
            atol = step_bounds(model, run.p[:, m, b], 0.5, normalized, 1e-12)
            error = np.abs(ref.p[1].reshape(81, 3, 5)[:-1, b] - run.p[1:, m, b]).max(axis=-1)
            assert np.all(error <= atol), (m, b, np.max(error / atol))
        # the records at the same iterate: single evaluations
        np.testing.assert_allclose(run.loss[:, m], ref.loss[0].reshape(81, 3), rtol=1e-12)
        np.testing.assert_allclose(run.tracked_attention[:, m],
                                   ref.tracked_attention[0].reshape(81, 3, 3), atol=1e-13)
        final = mm.attention(inst.X, run.p[-1, m], inst.W)   # (3, n, T) at the last iterate
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
            assert_every_step_matches(run.p[:, m, b], run.loss[:, m, b], model, 0.2, False,
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
    inst = mm.data.fig1("b")
    grid, selected = mm.selection_basin(inst.X, inst.Y, inst.v, inst.W, extent=4.0, num=5, steps=120)
    assert grid.shape == (5,) and selected.shape == (5, 5)
    for j, b in enumerate(grid):
        for i, a in enumerate(grid):
            run = mm.gd(inst.X, inst.Y, inst.v, [a, b, 0.0], 120, 0.1, W=inst.W, normalized=True)
            assert selected[j, i] == run.selected_tokens()[0, 0]
    # the paper's Fig. 1 (b) outcome: far along (1, 0) is local (x2), far along (0, 1) is global (x1)
    assert selected[2, 4] == 1 and selected[4, 2] == 0


def test_draw_basin_shares_and_equal_scores_remove_the_local_basin():
    fig, axes = plots.panels(2)
    share_b = ch03.draw_basin(axes[0], 0.0, num=21, steps=150)
    share_a = ch03.draw_basin(axes[1], 0.9, num=21, steps=150)
    plt.close(fig)
    assert share_b.sum() == pytest.approx(1.0) and share_b[1] > 0.2
    assert share_a[1] == 0 and share_a[0] == pytest.approx(1.0)


def test_score_explorer_panel_selects_like_the_paper():
    fig, (ax,) = plots.panels()
    assert ch03.draw_score_explorer(ax, 0.0, angle=-90.0, norm=1.5) == 1  # start (0, -1.5)
    assert ch03.draw_score_explorer(ax, 0.9, angle=-90.0, norm=1.5) == 0  # Fig. 1 (a)
    plt.close(fig)


def test_plot_helpers_draw_and_validate():
    fig, axes = plots.panels(3)
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
