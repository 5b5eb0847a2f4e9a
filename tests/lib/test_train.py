"""Gradient descent: agreement with an autograd loop, and the paper's convergence claims (C3-C14).

Reference directions are the paper's closed-form ATT-SVM values, not re-solved here.
"""
import numpy as np
import pytest
import torch

import maxmargin as mm
from roundoff import assert_every_step_matches, autograd_step, noisy_spread, prompt_model

P_GLOBAL_FIG1 = np.array([-10 / 101, 100 / 101, 0.0])   # p^mm(x1), Fig. 1
P_LOCAL_FIG1 = np.array([1.0, 0.0, 0.0])                # p^mm(x2), Fig. 1
P_MM_FIG2 = np.array([0.84463, 0.17112, 0.0])           # Fig. 2, W = diag(1, 1, 0)


def ngd(inst, steps=200, **kw):
    return mm.gd(inst.X, inst.Y, inst.v, inst.p0, steps, 0.1, W=inst.W, normalized=True, **kw)


ENGINES = ["torch", "compiled"]


def use_engine(monkeypatch, engine):
    """Select the GD engine on p; the compiled one needs numba, a runtime dependency (pinned in
    pyproject.toml), so its absence fails rather than skips."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    assert mm.train.engine() == engine


LOSS_TORCH = {"logistic": lambda z: torch.nn.functional.softplus(-z),
              "exponential": lambda z: torch.exp(-z),
              "correlation": lambda z: -z}


def autograd_path(inst, p0, steps, lr, normalized, loss="logistic", eps=1e-12,
                  perturb=lambda x, atol: x):
    """(steps + 1, d) iterates and (steps + 1,) risks of a per-run torch autograd loop (on one
    thread: tiny ops on two threads of a busy machine run 30 times slower), continuing after
    each step from ``perturb(x, atol)`` (roundoff.noisy_spread)."""
    model = prompt_model(inst.X, inst.Y, inst.v, inst.W, LOSS_TORCH[loss])
    p, path, risks = np.array(p0, dtype=float), [], []
    for k in range(steps + 1):
        path.append(p)
        nxt, risk, atol, _ = autograd_step(model, p, lr, normalized, eps)
        risks.append(risk)
        p = perturb(nxt, atol)
    return np.array(path), np.array(risks)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("normalized", [False, True])
def test_every_engine_matches_the_autograd_loop_to_1e_12(engine, loss, normalized, monkeypatch):
    """Each iterate of both engines agrees with an independent autograd loop to 1e-12 relative
    (norm of the difference over the norm of the iterate), for every built-in loss; 19 starts
    (one block of 32 lanes on one thread, 13 spare; blocks of 8 on two) and two instances in one
    gd_stack call. The 8-lane blocks are checked
    against autograd in test_record_every_holds_the_right_steps and against the torch engine
    below."""
    use_engine(monkeypatch, engine)
    insts = [mm.data.random_instance(6, 5, 4, seed=s) for s in (3, 4)]
    P0 = np.random.default_rng(0).standard_normal((2, 19, 4))
    run = mm.gd_stack(np.stack([t.X for t in insts]), np.stack([t.Y for t in insts]),
                      np.stack([t.v for t in insts]), P0, 40, 0.2, W=np.stack([t.W for t in insts]),
                      loss=loss, normalized=normalized)
    # Step by step (roundoff.py): from each of the engine's iterates the autograd step gives its
    # next one to STEP_RTOL = 1e-12 of the iterate and the step (the bound of one step's
    # rounding); the whole 40-step trajectories would also compare accumulated rounding, which
    # depends on the CPU's kernels (1e-10 apart for the correlation loss on some).
    for m, inst in enumerate(insts):
        model = prompt_model(inst.X, inst.Y, inst.v, inst.W, LOSS_TORCH[loss])
        for b in range(19):
            assert_every_step_matches(run.p[:, m, b], run.risk[:, m, b], model, 0.2, normalized,
                                      1e-12, P0[m, b], risk_rtol=1e-12)


@pytest.mark.parametrize("starts", [13, 21])
def test_compiled_and_torch_engines_agree_on_every_record(monkeypatch, starts):
    """The pure-torch fallback and the compiled kernel give the same records (iterates, risks,
    tracked and other attention, final attention) to 1e-12 relative, on a run long enough for
    some attention weights to fall below 1e-30 (relative accuracy there checks the kernel's exp),
    from starts far enough out that some logits exceed 709 (exp overflows unless the softmax is
    shifted by the largest logit), with tracked tokens that are not the default; with 13 starts
    (a block of 16 lanes on one thread) and 21 (a block of 32, 11 spare lanes)."""
    inst = mm.data.random_instance(7, 6, 5, seed=11)
    P0 = np.random.default_rng(2).standard_normal((starts, 5))
    P0[:3] *= 500.0
    assert np.abs((inst.X @ inst.W) @ P0[:3].T).max() > 800
    track = np.arange(7) % 6
    runs, every = {}, {}
    for engine in ENGINES:
        use_engine(monkeypatch, engine)
        runs[engine] = mm.gd(inst.X, inst.Y, inst.v, P0, 300, 1.0, W=inst.W, normalized=True,
                             track=track)
        every[engine] = mm.gd(inst.X, inst.Y, inst.v, P0, 300, 1.0, W=inst.W, normalized=True,
                              track=track, record_every=7)
    assert runs["torch"].tracked_attention.min() < 1e-30
    # Each engine's record_every=7 run holds rows 0, 7, ..., 294, 300 of its full recording:
    # the same kernel on the same inputs (recording changes no arithmetic), so bit for bit.
    for engine in ENGINES:
        a, b = runs[engine], every[engine]
        np.testing.assert_array_equal(b.steps, list(range(0, 300, 7)) + [300])
        for name in ("p", "risk", "tracked_attention", "other_attention"):
            np.testing.assert_array_equal(getattr(b, name), getattr(a, name)[b.steps],
                                          err_msg=f"{engine} {name}")
        np.testing.assert_array_equal(b.final_attention, a.final_attention)
    # The two engines, step by step: each engine's step from every iterate of the other is that
    # engine's next iterate (whole 300-step trajectories would compare accumulated rounding: a
    # perturbation of the start grows up to 75-fold). Both compute the relative quantities
    # (softmax shifted by the largest logit, margins relative to the most-attended token), whose
    # terms do not cancel (sum |c| ~ ||g||), so a normalized step differs by at most
    # u |p| + lr (a + m) (1 + L) u with L <= 3.2 |p| here (roundoff.py): 1e-12 (|p_k| + lr) covers
    # a + m <= 1000; measured: 2e-16 (|p_k| + lr).
    for engine, other in (("torch", "compiled"), ("compiled", "torch")):
        ref = runs[other]
        use_engine(monkeypatch, engine)
        one = mm.gd(inst.X, inst.Y, inst.v, ref.p[:-1].reshape(-1, 5), 1, 1.0, W=inst.W,
                    normalized=True, track=track)
        scale = np.abs(ref.p[:-1]).max(axis=-1, keepdims=True) + 1.0   # |p_k| + lr
        error = np.abs(one.p[1].reshape(300, starts, 5) - ref.p[1:]) / scale
        assert error.max() <= 1e-12, (engine, other, error.max())
        # the records at the same iterate: single evaluations, relative accuracy ~ u times the
        # largest |logit| (~1e3 here) even for attention weights below 1e-30 (1e-300: subnormals)
        for name in ("risk", "tracked_attention", "other_attention"):
            got = getattr(one, name)[0].reshape(getattr(ref, name)[:-1].shape)
            np.testing.assert_allclose(got, getattr(ref, name)[:-1], rtol=1e-11, atol=1e-300,
                                       err_msg=f"{engine} from {other}: {name}")
    # the final attention is that of the last iterate (the library's numpy model, a third code)
    for engine in ENGINES:
        np.testing.assert_allclose(runs[engine].final_attention,
                                   mm.attention(inst.X, runs[engine].p[-1], W=inst.W),
                                   rtol=1e-11, atol=1e-300, err_msg=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_record_every_holds_the_right_steps(engine, monkeypatch):
    """record_every=k keeps steps 0, k, 2k, ... and the last; None keeps 0 and the last; each
    record is the autograd loop's iterate at that step (an off-by-one would shift them), and the
    result's methods work on any recording."""
    use_engine(monkeypatch, engine)
    inst = mm.data.random_instance(4, 3, 3, seed=5)
    P0 = np.random.default_rng(1).standard_normal((3, 3))
    path = np.stack([autograd_path(inst, p0, 30, 0.1, True)[0] for p0 in P0], axis=1)
    # the records are compared with the loop's iterates at a tolerance measured on these runs:
    # 3 times the spread of autograd loops whose every step moves by its rounding bound
    # (roundoff.noisy_spread; ~1e-12 here), far below the 0.1 between adjacent iterates
    spread = np.max([noisy_spread(lambda perturb: autograd_path(inst, p0, 30, 0.1, True,
                                                                  perturb=perturb)[0])
                     for p0 in P0], axis=0)
    for every, steps in ((7, [0, 7, 14, 21, 28, 30]), (10, [0, 10, 20, 30]), (None, [0, 30]),
                         (1, list(range(31))), (31, [0, 30])):
        run = mm.gd(inst.X, inst.Y, inst.v, P0, 30, 0.1, W=inst.W, normalized=True,
                    record_every=every)
        np.testing.assert_array_equal(run.steps, steps)
        np.testing.assert_array_equal(run.p[0], P0)
        drift = np.abs(run.p - path[steps]).max(axis=(1, 2))
        assert np.all(drift <= 3 * spread[steps]), (every, drift, spread[steps])
        assert run.risk.shape == run.norms.shape == run.cosine(np.ones(3)).shape == (len(steps), 3)
        assert run.tracked_attention.shape == run.other_attention.shape == (len(steps), 3, 4)
        assert run.selected_tokens().shape == (3, 4)


def test_record_every_on_W_and_joint_runs():
    """gd_W and gd_joint hold the steps that record_every asks for, and their last record is
    the last iterate of the full recording. (1e-13: the same torch loop on the same inputs, the
    recording changes no arithmetic; the records are in fact bit for bit equal.)"""
    inst = mm.data.fig2()
    full = mm.gd_W(inst.X, inst.Y, inst.v, np.eye(3), np.array([1.0, 0.5, -0.5]), 20, 0.1)
    few = mm.gd_W(inst.X, inst.Y, inst.v, np.eye(3), np.array([1.0, 0.5, -0.5]), 20, 0.1,
                  record_every=None)
    np.testing.assert_array_equal(few.steps, [0, 20])
    np.testing.assert_allclose(few.W, full.W[[0, 20]], rtol=1e-13)
    assert few.cosine(np.eye(3)).shape == (2, 1)
    joint = mm.data.fig3(variant="tight")
    full = mm.gd_joint(joint.X, joint.Y, joint.v0, joint.p0, 25, 0.1, normalized=True)
    few = mm.gd_joint(joint.X, joint.Y, joint.v0, joint.p0, 25, 0.1, record_every=10, normalized=True)
    np.testing.assert_array_equal(few.steps, [0, 10, 20, 25])
    for name in ("v", "p", "risk", "probability", "tracked_attention"):
        np.testing.assert_allclose(getattr(few, name), getattr(full, name)[[0, 10, 20, 25]],
                                   rtol=1e-13, err_msg=name)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (1.5, TypeError),
                                        (True, TypeError), ("3", TypeError)])
def test_record_every_is_validated(bad, error):
    inst = mm.data.fig2()
    for call in (lambda: mm.gd(inst.X, inst.Y, inst.v, inst.p0, 5, 0.1, record_every=bad),
                 lambda: mm.gd_joint(inst.X, inst.Y, inst.v, inst.p0, 5, 0.1, record_every=bad, normalized=True),
                 lambda: mm.gd_W(inst.X, inst.Y, inst.v, np.eye(3), inst.p0[0], 5, 0.1,
                                 record_every=bad)):
        with pytest.raises(error, match="^record_every"):
            call()


@pytest.mark.parametrize("normalized", [False, True])
def test_batched_gd_matches_a_per_run_autograd_loop(normalized):
    inst = mm.data.random_instance(6, 5, 4, seed=3)
    P0 = np.random.default_rng(0).standard_normal((4, 4))
    traj = mm.gd(inst.X, inst.Y, inst.v, P0, 60, 0.3, W=inst.W, normalized=normalized)
    model = prompt_model(inst.X, inst.Y, inst.v, inst.W, LOSS_TORCH["logistic"])
    for b, p0 in enumerate(P0):  # step by step, at one step's rounding bound (roundoff.py)
        assert_every_step_matches(traj.p[:, b], traj.risk[:, b], model, 0.3, normalized, 1e-12,
                                  p0, risk_rtol=1e-12)
    assert traj.p.shape == (61, 4, 4) and traj.tracked_attention.shape == (61, 4, 6)


def test_fig1a_every_start_converges_to_the_global_direction():
    """C3: equal non-optimal scores, all six starts end in the p^mm(x1) direction."""
    traj = ngd(mm.data.fig1(variant="a"))
    assert np.all(traj.cosine(P_GLOBAL_FIG1)[199] > 0.99)
    assert np.all(traj.cosine(P_LOCAL_FIG1)[199] < 0)
    assert np.all(traj.tracked_attention[199, :, 0] > 0.999)


def test_fig1b_two_starts_are_caught_by_the_local_direction():
    """C4: with scores (1, 0.9, 0) the two lowest starts select token x2 instead."""
    traj = ngd(mm.data.fig1(variant="b"))
    np.testing.assert_array_equal(traj.selected_tokens()[:, 0], [0, 0, 0, 0, 1, 1])
    assert np.all(traj.cosine(P_LOCAL_FIG1)[199, 4:] > 0.995)
    attn_x2 = mm.attention(mm.data.fig1(variant="b").X, traj.p[199, 4:], W=mm.data.fig1(variant="b").W)[:, 0, 1]
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
    assert np.all(fast.risk > L_star) and fast.risk[200, 2] - L_star < 1e-5


def test_fig2_has_no_stationary_point_along_the_svm_direction():
    """C6: <-grad L(p), p^mm> > 0 for 10^4 random p with norm(p) <= 10 (p3 = 0)."""
    inst = mm.data.fig2()
    rng = np.random.default_rng(0)
    angle, radius = rng.uniform(0, 2 * np.pi, 10_000), 10 * np.sqrt(rng.uniform(0, 1, 10_000))
    P = np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros(10_000)], axis=1)
    descent = -mm.risk_grad(inst.X, inst.Y, inst.v, P, W=inst.W) @ P_MM_FIG2
    assert descent.min() > 1e-12


def test_gd_on_W_is_rescaled_gd_on_the_prompt():
    """C9: with p fixed, W_k - W_0 stays rank one and W_k p follows GD on u = W p with step lr ||p||^2."""
    inst = mm.data.fig2()
    p = np.array([0.3, -0.2, 0.5])
    W0 = np.random.default_rng(1).standard_normal((3, 3)) * 0.1
    traj = mm.gd_W(inst.X, inst.Y, inst.v, W0, p, 1000, 0.5)
    assert np.linalg.svd(traj.W[-1, 0] - W0, compute_uv=False)[1] < 1e-10
    # step by step: from u_k = W_k p, one autograd step on the prompt with lr ||p||^2 gives
    # W_{k+1} p, to one step's rounding bound plus that of the product W_{k+1} p (roundoff.py)
    model = prompt_model(inst.X, inst.Y, inst.v, None, LOSS_TORCH["logistic"])
    U = traj.W[:, 0] @ p
    for k in range(1001):
        nxt, risk, atol, r_atol = autograd_step(model, U[k], 0.5 * p @ p, False, 1e-12)
        assert traj.risk[k, 0] == pytest.approx(risk, rel=1e-12, abs=r_atol), k
        if k < 1000:
            product = 1e-12 * np.max(np.abs(traj.W[k + 1, 0]) @ np.abs(p))
            np.testing.assert_allclose(U[k + 1], nxt, rtol=0, atol=atol + product,
                                       err_msg=f"step {k}")


def test_joint_training_follows_the_v_shaped_svm():
    """C10: tight case -> p^mm; relaxed case -> the relaxed SVM (1, 0), not the full ATT-SVM."""
    for variant, p_target, p_other in [("tight", [4 / 3, 1 / 3], None), ("relaxed", [1.0, 0.0], [1.25, 0.25])]:
        inst = mm.data.fig3(variant=variant)
        traj = mm.gd_joint(inst.X, inst.Y, inst.v0, inst.p0, 200, 0.1, eps_v=1e-9, eps_p=1e-19, normalized=True)
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
    target = mm.att_svm(inst.X, inst.optimal, W=inst.W).p
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
    with mpmath.workdps(60):   # a local context: a global mp.dps leaks into other tests
        return _exp_risk_direction_exact(mpmath, X, Y, v, W, p)


def _exp_risk_direction_exact(mpmath, X, Y, v, W, p):
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


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("normalized", [False, True])
def test_gd_W_with_a_shared_query_equals_the_loop_on_W(engine, loss, normalized, monkeypatch):
    """gd_W with one query p for every sequence runs as GD on the prompt u = W p (the gradient in
    W is a p^T, so W moves along (.) p^T only); its records equal those of the loop on W itself
    (the library's other code path, forced here) to 1e-12 relative over 60 steps, for 17 starts
    (spare lanes in the compiled engine's last block), |p| = 7.3 (so a step not scaled by
    |p|^2 or |p|, or eps not divided by |p|, shows), every 5th step recorded.

    Bugs caught: the reduction's step size or offset (lr |p|^2 plain, lr |p| and eps / |p|
    normalized), W_k rebuilt from u_k - u_0 with p / |p| instead of p / |p|^2 or transposed, the
    in-place rebuilding of W's records in the wrong order (a record overwritten before it is
    read), the risk of the wrong record."""
    use_engine(monkeypatch, engine)
    inst = mm.data.random_instance(9, 4, 5, seed=21)
    rng = np.random.default_rng(5)
    W0 = rng.standard_normal((17, 5, 5)) * 0.3
    p = rng.standard_normal(5)
    p *= 7.3 / np.linalg.norm(p)
    lr = 0.1 if normalized else 0.02
    args = (inst.X, inst.Y, inst.v, W0, p, 60, lr)
    kw = dict(loss=loss, normalized=normalized, eps=1e-3, record_every=5)
    fast = mm.gd_W(*args, **kw)
    monkeypatch.setattr(mm._engines, "_descend_W_shared", lambda *a, **k: None)
    loop = mm.gd_W(*args, **kw)
    np.testing.assert_array_equal(fast.steps, loop.steps)
    scale = np.abs(loop.W).max()
    assert np.abs(fast.W - loop.W).max() <= 1e-12 * scale
    np.testing.assert_allclose(fast.risk, loop.risk, rtol=1e-12)
    assert np.abs(loop.W[-1] - W0).max() > 0.1 * np.abs(W0).max()   # the runs moved
