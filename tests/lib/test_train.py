"""Gradient descent: agreement with an autograd loop, and the paper's convergence claims (C3-C14).

Reference directions are the paper's closed-form ATT-SVM values, not re-solved here.
"""
import numpy as np
import pytest
import torch

import maxmargin as mm

P_GLOBAL_FIG1 = np.array([-10 / 101, 100 / 101, 0.0])   # p^mm(x1), Fig. 1
P_LOCAL_FIG1 = np.array([1.0, 0.0, 0.0])                # p^mm(x2), Fig. 1
P_MM_FIG2 = np.array([0.84463, 0.17112, 0.0])           # Fig. 2, W = diag(1, 1, 0)


def ngd(inst, steps=200, **kw):
    return mm.gd(inst.X, inst.Y, inst.v, inst.p0, steps, 0.1, W=inst.W, normalized=True, **kw)


@pytest.mark.parametrize("normalized", [False, True])
def test_batched_gd_matches_a_per_run_autograd_loop(normalized):
    inst = mm.data.random_instance(6, 5, 4, seed=3)
    P0 = np.random.default_rng(0).standard_normal((4, 4))
    traj = mm.gd(inst.X, inst.Y, inst.v, P0, 60, 0.3, W=inst.W, normalized=normalized)
    X, Y, v, W = (torch.tensor(a) for a in (inst.X, inst.Y, inst.v, inst.W))
    for b, p0 in enumerate(P0):
        p = torch.tensor(p0, requires_grad=True)
        for k in range(60):
            np.testing.assert_allclose(traj.p[k, b], p.detach().numpy(), rtol=1e-11, atol=1e-12)
            risk = torch.nn.functional.softplus(-Y * (torch.softmax(X @ (W @ p), -1) * (X @ v)).sum(-1)).mean()
            assert traj.loss[k, b] == pytest.approx(risk.item(), rel=1e-12)
            (g,) = torch.autograd.grad(risk, p)
            with torch.no_grad():
                p -= 0.3 * (g / (g.norm() + 1e-12) if normalized else g)
    assert traj.p.shape == (61, 4, 4) and traj.tracked_attention.shape == (61, 4, 6)


def test_fig1a_every_start_converges_to_the_global_direction():
    """C3: equal non-optimal scores, all six starts end in the p^mm(x1) direction."""
    traj = ngd(mm.data.fig1("a"))
    assert np.all(traj.cosine(P_GLOBAL_FIG1)[199] > 0.99)
    assert np.all(traj.cosine(P_LOCAL_FIG1)[199] < 0)
    assert np.all(traj.tracked_attention[199, :, 0] > 0.999)


def test_fig1b_two_starts_are_caught_by_the_local_direction():
    """C4: with scores (1, 0.9, 0) the two lowest starts select token x2 instead."""
    traj = ngd(mm.data.fig1("b"))
    np.testing.assert_array_equal(traj.selected_tokens()[:, 0], [0, 0, 0, 0, 1, 1])
    assert np.all(traj.cosine(P_LOCAL_FIG1)[199, 4:] > 0.995)
    attn_x2 = mm.attention(mm.data.fig1("b").X, traj.p[199, 4:], mm.data.fig1("b").W)[:, 0, 1]
    assert np.all(attn_x2 > 0.999)
    assert np.all(traj.cosine(P_GLOBAL_FIG1)[199, :4] > 0.99)


def test_fig2_normalized_gd_and_gd():
    """C5 and C7 on the Fig. 2 data."""
    inst = mm.data.fig2()
    fast = ngd(inst)
    plain = mm.gd(inst.X, inst.Y, inst.v, inst.p0, 200, 1.0, W=inst.W)
    assert np.all(fast.cosine(P_MM_FIG2)[199] >= 0.999)
    assert np.all(fast.tracked_attention[199].mean(axis=-1) > 0.9999)
    cos_plain, norm_plain = plain.cosine(P_MM_FIG2)[199], plain.norms[199]
    assert np.all((0.94 <= cos_plain) & (cos_plain <= 0.99)), cos_plain
    assert np.all((2.5 <= norm_plain) & (norm_plain <= 4.5)), norm_plain
    k = np.arange(10, 201)
    ratio = fast.norms[k, 2] / (0.1 * k)  # start 2 is the origin
    assert np.all((0.99 <= ratio) & (ratio <= 1.0))
    assert np.all(fast.tracked_attention[1:201].mean(-1) >= plain.tracked_attention[1:201].mean(-1))
    L_star = mm.optimal_risk(inst.X, inst.Y, inst.v)
    assert np.all(fast.loss > L_star) and fast.loss[200, 2] - L_star < 1e-5


def test_fig2_has_no_stationary_point_along_the_svm_direction():
    """C6: <-grad L(p), p^mm> > 0 for 10^4 random p with norm(p) <= 10 (p3 = 0)."""
    inst = mm.data.fig2()
    rng = np.random.default_rng(0)
    angle, radius = rng.uniform(0, 2 * np.pi, 10_000), 10 * np.sqrt(rng.uniform(0, 1, 10_000))
    P = np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros(10_000)], axis=1)
    descent = -mm.risk_grad(inst.X, inst.Y, inst.v, P, inst.W) @ P_MM_FIG2
    assert descent.min() > 1e-12


def test_gd_on_W_is_rescaled_gd_on_the_prompt():
    """C9: with p fixed, W_k - W_0 stays rank one and W_k p follows GD on u = W p with step lr ||p||^2."""
    inst = mm.data.fig2()
    p = np.array([0.3, -0.2, 0.5])
    W0 = np.random.default_rng(1).standard_normal((3, 3)) * 0.1
    traj = mm.gd_W(inst.X, inst.Y, inst.v, W0, p, 1000, 0.5)
    assert np.linalg.svd(traj.W[-1, 0] - W0, compute_uv=False)[1] < 1e-10
    prompt = mm.gd(inst.X, inst.Y, inst.v, W0 @ p, 1000, 0.5 * p @ p)
    np.testing.assert_allclose(traj.W[:, 0] @ p, prompt.p[:, 0], atol=1e-10)
    np.testing.assert_allclose(traj.loss[:, 0], prompt.loss[:, 0], rtol=1e-12)


def test_joint_training_follows_the_v_shaped_svm():
    """C10: tight case -> p^mm; relaxed case -> the relaxed SVM (1, 0), not the full ATT-SVM."""
    for variant, p_target, p_other in [("tight", [4 / 3, 1 / 3], None), ("relaxed", [1.0, 0.0], [1.25, 0.25])]:
        inst = mm.data.fig3(variant)
        traj = mm.gd_joint(inst.X, inst.Y, inst.v0, inst.p0, 200, 0.1, eps_v=1e-9, eps_p=1e-19)
        assert mm.cosine(traj.p[200, 0], p_target) > 0.999, variant
        assert mm.cosine(traj.v[200, 0], [0.0, 1.0]) > 0.999, variant
        if p_other is not None:
            assert mm.cosine(traj.p[200, 0], p_other) < 0.99
        np.testing.assert_array_equal(traj.tracked, [1, 1, 1])


def test_loss_function_shapes_the_transient_not_the_limit():
    """C11 on the Fig. 4 data at iteration 199."""
    Cs = [1, 2, 5, 10, 100]
    end = {loss: np.array([ngd(mm.data.fig4(C), loss=loss).p[199, 0] for C in Cs])
           for loss in ("correlation", "logistic")}
    lin, log = end["correlation"][:, 1], end["logistic"][:, 1]
    assert np.all(np.diff(lin) > 0) and np.all(lin[1:] > 0)
    assert np.all(np.diff(log) < 0) and np.all(log[1:] < 0)
    assert end["logistic"][-1, 1] / end["logistic"][-1, 0] == pytest.approx(-1, abs=1e-3)


@pytest.mark.parametrize("seed", range(5))
def test_random_equal_score_instances_converge_globally(seed):
    """C14: n=3, T=5, d=16 with equal non-optimal scores; NGD from 0 reaches the ATT-SVM direction."""
    inst = mm.data.random_instance(3, 5, 16, seed, equal_scores=True, margin=None)
    target = mm.att_svm(inst.X, inst.optimal, inst.W).p
    traj = mm.gd(inst.X, inst.Y, inst.v, np.zeros(16), 300, 0.1, W=inst.W, normalized=True)
    assert traj.cosine(target)[100, 0] >= 0.985
    assert traj.cosine(target)[300, 0] >= 0.99


def test_gd_W_refuses_to_return_an_overflowed_trajectory():
    """A step so large that W overflows must raise, not return NaN iterates (the refactor once
    dropped the per-step finiteness check and returned NaN silently)."""
    inst = mm.data.fig2()
    v_huge = np.array([0.0, 0.0, -1e5])   # exponential loss of -1e5 overflows
    with pytest.warns(RuntimeWarning), \
            pytest.raises(ValueError, match="gd_W: W overflowed at step 1"):
        mm.gd_W(inst.X, inst.Y, v_huge, np.eye(3), np.array([1.0, 0.5, -0.5]), 3, 0.1,
                loss="exponential")
