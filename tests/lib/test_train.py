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


def test_plain_gd_overflow_raises_naming_the_step_and_v():
    """Plain GD whose exponential-loss gradient overflows float64 raises a ValueError naming the
    step and v as the cause (issue 13: gd returned (-inf, nan, nan), and gd_W blamed a W the
    caller never passed), on every engine and for gd, gd_stack and gd_W."""
    inst = mm.data.fig2()
    v_huge = np.array([0.0, 0.0, -1e5])   # margins near -5e4: exp(-z) overflows
    calls = {
        "gd": lambda: mm.gd(inst.X, inst.Y, v_huge, inst.p0, 3, 0.1, W=inst.W,
                            loss="exponential"),
        "gd_stack": lambda: mm.gd_stack(inst.X[None], inst.Y[None], v_huge, inst.p0, 3, 0.1,
                                        W=inst.W, loss="exponential"),
        "gd_W": lambda: mm.gd_W(inst.X, inst.Y, v_huge, np.eye(3), np.array([1.0, 0.5, -0.5]),
                                3, 0.1, loss="exponential"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"^{name}: the gradient at step 0 .*scale of v"):
            call()


def test_gd_with_a_huge_lr_raises_naming_lr():
    """An iterate that leaves float64 (lr near the largest float) raises, naming lr."""
    inst = mm.data.random_instance(5, 4, 6, seed=0)
    with pytest.raises(ValueError, match=r"^gd: the gradient at step 1 .*lr = 1e\+307"):
        mm.gd(10 * inst.X, inst.Y, inst.v, np.ones(6), 5, 1e307, W=inst.W, normalized=True)


def _exp_risk_direction(X, Y, v, W, p):
    """-grad L(p) / ||grad L(p)|| for the exponential loss, in 60-digit arithmetic (mpmath)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    n, T, d = X.shape
    K = X @ W
    grad = [mpmath.mpf(0)] * d
    for i in range(n):
        logits = [mpmath.fsum(mpmath.mpf(K[i, t, e]) * mpmath.mpf(p[e]) for e in range(d))
                  for t in range(T)]
        weights = [mpmath.exp(a) for a in logits]
        total = mpmath.fsum(weights)
        s = [w / total for w in weights]
        gamma = [Y[i] * mpmath.fsum(mpmath.mpf(v[e]) * mpmath.mpf(X[i, t, e]) for e in range(d))
                 for t in range(T)]
        z = mpmath.fsum(a * b for a, b in zip(s, gamma))
        dz = -mpmath.exp(-z) / n
        for t in range(T):
            for e in range(d):
                grad[e] += dz * s[t] * (gamma[t] - z) * mpmath.mpf(K[i, t, e])
    norm = mpmath.sqrt(mpmath.fsum(g * g for g in grad))
    return np.array([float(-g / norm) for g in grad])


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_normalized_gd_stays_finite_where_the_gradient_overflows(engine, monkeypatch):
    """Normalized GD's direction is finite even where the gradient is not (exp(1e5) > float64):
    each step must be lr times the unit direction computed in arbitrary precision."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    if engine == "compiled":
        pytest.importorskip("numba")
    inst = mm.data.fig2()
    v_huge = np.array([0.0, 0.0, -1e5])
    run = mm.gd(inst.X, inst.Y, v_huge, inst.p0[:3], 2, 0.1, W=inst.W, loss="exponential",
                normalized=True)
    assert np.all(np.isfinite(run.p))
    for b in range(3):
        for k in range(2):
            step = (run.p[k + 1, b] - run.p[k, b]) / 0.1
            expected = _exp_risk_direction(inst.X, inst.Y, v_huge, inst.W, run.p[k, b])
            np.testing.assert_allclose(step, expected, atol=1e-12)
    traj = mm.gd_W(inst.X, inst.Y, v_huge, np.eye(3), np.array([1.0, 0.5, -0.5]), 2, 0.1,
                   loss="exponential", normalized=True)
    assert np.all(np.isfinite(traj.W))
