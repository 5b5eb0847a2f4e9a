"""Edges of the compiled engines (issue 38): every block width against every parity of T and d,
with a batch B that is not a multiple of the width, step by step against the plain reference
``mm.reference`` (the rounding bounds of tests/lib/test_reference.py), each kernel checked to
have really run (not handed the call to the torch loop, which would agree for the wrong
reason); and the factors of W = K Q^T checked for finiteness on both engines.

The block width is forced by giving ``_engines._block_lanes`` a single width's cost (as
test_compiled.py does); the kernel that ran is seen through ``_run_blocks``.
"""
from __future__ import annotations

import numpy as np
import pytest

import maxmargin as mm
from maxmargin import _engines, train
from maxmargin import reference as ref
from roundoff import attention_terms, logit_size, step_atol
from test_reference import W_terms, _weights, assert_step, p_step_atol

pytest.importorskip("numba")
from maxmargin import _compiled  # noqa: E402

SHAPES = [(4, 4), (4, 5), (5, 4), (5, 3)]   # (T, d): every parity of each
STEPS = 5
LR, EPS = 0.1, 1e-9                          # normalized steps


def instance(T: int, d: int, seed: int = 38):
    rng = np.random.default_rng(seed + 10 * T + d)
    n = 3
    X = rng.standard_normal((n, T, d))
    Y = np.array([1.0, -1.0, 1.0])
    v = rng.standard_normal(d)
    W = rng.standard_normal((d, d)) + np.eye(d)
    return X, Y, v, W, rng


@pytest.fixture
def kernels_run(monkeypatch):
    """The kernels passed to _engines._run_blocks (gd, gd_joint, gd_KQ), in order;
    and the torch loops made to fail, so that a call handed to them cannot pass unseen."""
    seen = []
    run_blocks = _engines._run_blocks

    def spy(kernel, jobs, *args):
        seen.append(kernel)
        return run_blocks(kernel, jobs, *args)

    def refused(*args, **kwargs):
        raise AssertionError("the torch loop ran: the kernel handed the call over")

    monkeypatch.setattr(_engines, "_run_blocks", spy)
    monkeypatch.setattr(_engines, "_descend_torch", refused)
    monkeypatch.setattr(_engines, "_descend_joint_torch", refused)
    monkeypatch.setattr(_engines, "_descend_KQ_torch", refused)
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    return seen


@pytest.mark.parametrize("T,d", SHAPES)
@pytest.mark.parametrize("lanes", [8, 16, 32])
def test_every_gd_block_width_takes_the_reference_step(lanes, T, d, kernels_run, monkeypatch):
    """B = lanes + 3 starts: a full block and one with lanes - 3 spare lanes. Every run takes the
    reference's normalized step from its own iterate (the rounding bound of test_reference.py),
    and the risk recorded is the reference's. Bugs caught: a remainder row (odd T or d) of a
    wide block's spelled-out sums dropped or read twice, a spare lane's start written into a real
    run's records, a lane of the last block reading another lane's prompt; and the kernel of
    another width running (or none: the torch loop), so the width would not be tested."""
    monkeypatch.setattr(_engines, "_GD_LANE_COSTS", {lanes: 1.0})
    X, Y, v, W, rng = instance(T, d)
    B = lanes + 3
    P0 = 0.5 * rng.standard_normal((B, d))
    run = mm.gd(X, Y, v, P0, STEPS, LR, W=W, normalized=True, eps=EPS)
    expected = {8: _compiled.descend, 16: _compiled.descend_wide, 32: _compiled.descend_wider}
    assert kernels_run == [expected[lanes]]
    np.testing.assert_array_equal(run.p[0], P0)
    for b in range(B):
        for k in range(STEPS + 1):
            p = run.p[k, b]
            atol, r_atol = p_step_atol(X, Y, v, W, p, LR, "logistic", True, EPS)
            assert run.risk[k, b] == pytest.approx(ref.risk(X, Y, v, p, W=W), rel=1e-10,
                                                   abs=r_atol), (b, k)
            if k < STEPS:
                assert_step(run.p[k + 1, b], ref.gd_step(X, Y, v, p, LR, W=W, normalized=True,
                            eps=EPS), atol, f"run {b} step {k}")


@pytest.mark.parametrize("T,d", SHAPES)
@pytest.mark.parametrize("lanes", [8, 16])
def test_every_gd_joint_block_width_takes_the_reference_step(lanes, T, d, kernels_run,
                                                             monkeypatch):
    """gd_joint's kernel, B = lanes + 3, each run against the reference's joint step (v and p,
    each with its own rounding bound). Bugs caught as in the gd test, for the (v, p) kernel, whose
    scores differ per lane."""
    monkeypatch.setattr(_engines, "_TWO_LANE_COSTS", {lanes: 1.0})
    X, Y, _, W, rng = instance(T, d)
    B = lanes + 3
    V0, P0 = 0.5 * rng.standard_normal((B, d)), 0.5 * rng.standard_normal((B, d))
    run = mm.gd_joint(X, Y, V0, P0, STEPS, LR, W=W, normalized=True, eps_v=EPS, eps_p=2 * EPS)
    expected = {8: _compiled.descend_joint, 16: _compiled.descend_joint_wide}
    assert kernels_run == [expected[lanes]]
    for b in range(B):
        for k in range(STEPS):
            v, p = run.v[k, b], run.p[k, b]
            s = ref.attention(X, p, W=W)
            weight, gamma, z = _weights(X, Y, v, s, "logistic")
            L = logit_size(X @ W, p)
            g_v = ref.risk_grad_v(X, Y, v, p, W=W)
            g_p = ref.risk_grad(X, Y, v, p, W=W)
            atol_v = step_atol(v, LR, attention_terms(weight, s, 0 * gamma, 1 + 0 * z,
                               Y[:, None, None] * X), L, np.linalg.norm(g_v), EPS)
            atol_p = step_atol(p, LR, attention_terms(weight, s, gamma, z, X @ W), L,
                               np.linalg.norm(g_p), 2 * EPS)
            step = ref.gd_joint_step(X, Y, v, p, LR, normalized=True, W=W, eps_v=EPS,
                                     eps_p=2 * EPS)
            assert_step(run.v[k + 1, b], step.v, atol_v, f"v: run {b} step {k}")
            assert_step(run.p[k + 1, b], step.p, atol_p, f"p: run {b} step {k}")


@pytest.mark.parametrize("T,d", SHAPES)
@pytest.mark.parametrize("lanes", [8, 16])
def test_every_gd_KQ_block_width_takes_the_reference_step(lanes, T, d, kernels_run, monkeypatch):
    """gd_KQ's kernel (one shared query), B = lanes + 3, m = 2, each run against the reference's
    (K, Q) step. Bugs caught as in the gd test, for the factor kernel (K and D per lane)."""
    monkeypatch.setattr(_engines, "_TWO_LANE_COSTS", {lanes: 1.0})
    X, Y, v, _, rng = instance(T, d)
    n, B, m = X.shape[0], lanes + 3, 2
    z = rng.standard_normal(d)
    K0, Q0 = 0.5 * rng.standard_normal((B, d, m)), 0.5 * rng.standard_normal((B, d, m))
    run = mm.gd_KQ(X, Y, v, K0, Q0, z, STEPS, LR, normalized=True, eps=EPS)
    expected = {8: _compiled.descend_kq, 16: _compiled.descend_kq_wide}
    assert kernels_run == [expected[lanes]]
    for b in range(B):
        for k in range(STEPS):
            K, Q = run.K[k, b], run.Q[k, b]
            terms, _, r_atol = W_terms(X, Y, v, K @ Q.T, z, "logistic")
            L = logit_size(np.einsum("ntd,ne->ntde", X, np.broadcast_to(z, (n, d))).reshape(
                n, T, d * d), (np.abs(K) @ np.abs(Q).T).reshape(-1))
            g = ref.risk_grad_KQ(X, Y, v, K, Q, z)
            atol_K = step_atol(K, LR, terms @ np.abs(Q), L, np.linalg.norm(g.K), EPS)
            atol_Q = step_atol(Q, LR, terms.T @ np.abs(K), L, np.linalg.norm(g.Q), EPS)
            assert run.risk[k, b] == pytest.approx(ref.risk_W(X, Y, v, K @ Q.T, z), rel=1e-10,
                                                   abs=r_atol)
            step = ref.gd_KQ_step(X, Y, v, K, Q, z, LR, normalized=True, eps=EPS)
            assert_step(run.K[k + 1, b], step.K, atol_K, f"K: run {b} step {k}")
            assert_step(run.Q[k + 1, b], step.Q, atol_Q, f"Q: run {b} step {k}")


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("factor", ["K", "Q"])
def test_a_factor_that_overflows_after_a_step_is_refused(factor, engine, monkeypatch):
    """One factor is 1e100 I and the other 1e-100 I (W = I: moderate logits), so the other
    factor's gradient (G Q or G^T K) is near 1e100 and a plain step of lr = 1e210 takes it past
    float64 while every logit of the start, and the gradient in W, is finite. Both engines refuse
    at step 0 naming lr, never returning a factor that is inf or NaN. The reference's step
    (numpy) shows the factor really leaves float64. Bug caught: a factor that is not finite
    recorded as an iterate (the finiteness check of K, or of Q, which the kernel sees only
    through q = Q^T p, dropped)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, v, _, rng = instance(4, 3)
    big, small = 1e100 * np.eye(3), 1e-100 * np.eye(3)
    K0, Q0 = (small, big) if factor == "K" else (big, small)
    p = np.array([1.0, 0.5, -0.25])
    with np.errstate(over="ignore", invalid="ignore"):
        step = ref.gd_KQ_step(X, Y, v, K0, Q0, p, 1e210)
    assert not np.all(np.isfinite(getattr(step, factor)))
    assert np.all(np.isfinite(getattr(step, "Q" if factor == "K" else "K")))
    with pytest.raises(ValueError, match=r"^gd_KQ: the gradient at step 0 .*lr = 1e\+210"):
        mm.gd_KQ(X, Y, v, K0, Q0, p, 3, 1e210)


TRAINERS = {   # name: (call on a small instance, the torch loop's module and name)
    "gd": (lambda X, Y, v: mm.gd(X, Y, v, np.zeros((3, 3)), 3, 0.1, normalized=True),
           _engines, "_descend_torch"),
    "gd_W shared": (lambda X, Y, v: mm.gd_W(X, Y, v, np.eye(3), np.ones(3), 3, 0.1),
                    _engines, "_descend_torch"),
    "gd_joint": (lambda X, Y, v: mm.gd_joint(X, Y, v, np.zeros(3), 3, 0.1, normalized=True),
                 _engines, "_descend_joint_torch"),
    "gd_KQ": (lambda X, Y, v: mm.gd_KQ(X, Y, v, np.eye(3), np.eye(3), np.ones(3), 3, 0.1),
              _engines, "_descend_KQ_torch"),
}


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_each_engine_setting_really_runs_its_engine(trainer, engine, monkeypatch):
    """MAXMARGIN_ENGINE=torch runs the torch loop and no kernel; =compiled runs a kernel and not
    the torch loop (on an ordinary input). The engine-agreement tests compare the two settings:
    if one setting ran the other's engine they would agree for the wrong reason. Bug caught: a
    setting ignored (e.g. "torch" taking the compiled kernel), so that the torch loop, the
    reference of the kernels' tests, never runs under them."""
    call, module, loop = TRAINERS[trainer]
    kernels, loops = [], []
    run_blocks, torch_loop = _engines._run_blocks, getattr(module, loop)
    monkeypatch.setattr(_engines, "_run_blocks", lambda *a: kernels.append(a[0]) or run_blocks(*a))
    monkeypatch.setattr(module, loop, lambda *a, **k: loops.append(1) or torch_loop(*a, **k))
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, v, _, _ = instance(4, 3)
    call(X, Y, v)
    if engine == "torch":
        assert (len(loops), kernels) == (1, [])
    else:
        assert (len(loops), len(kernels)) == (0, 1)


def test_the_cvxpy_solver_really_runs_cvxpy(monkeypatch):
    """solver="cvxpy" (the reference the fast solvers are tested against) solves with cvxpy in
    att_svm, v_svm and w_svm (a query per sequence, and shared), and solver="fast" does not.
    Bug caught: the reference path taking the fast solver, so that fast and "cvxpy" agree
    because they are the same code."""
    cp = pytest.importorskip("cvxpy")
    solves = []
    solve = cp.Problem.solve
    monkeypatch.setattr(cp.Problem, "solve", lambda self, *a, **k: solves.append(1) or solve(
        self, *a, **k))
    rng = np.random.default_rng(38)
    X, Y, W = rng.standard_normal((2, 3, 4)), np.array([1.0, -1.0]), rng.standard_normal((4, 4))
    alpha = [0, 2]   # 4 generic constraints in d = 4: feasible
    calls = {"att_svm": lambda s: mm.att_svm(X, alpha, W=W, solver=s),
             "v_svm": lambda s: mm.v_svm(X[:, 0], Y, solver=s),
             "w_svm per sequence": lambda s: mm.w_svm(X, alpha, queries=rng.standard_normal((2, 4)),
                                                      solver=s),
             "w_svm shared": lambda s: mm.w_svm(X, alpha, queries=np.ones(4), solver=s)}
    for name, call in calls.items():
        for solver in ("fast", "cvxpy"):
            solves.clear()
            call(solver)
            assert bool(solves) == (solver == "cvxpy"), (name, solver, len(solves))


@pytest.mark.parametrize("c", [1e200, 1e-300])
def test_the_gd_kernel_takes_scaled_normalized_steps_itself(c, kernels_run):
    """The compiled gd kernel takes, without handing the call to the torch loop, a normalized
    step whose gradient is finite but whose squares overflow (v * 1e200: entries near 1e200) or
    whose terms are subnormal (v * 1e-300): with the correlation loss the gradient is linear in
    v, so the run with v * c and eps * c follows the unscaled run's path (test_scale_gd.py's
    reference, to 1e-12). Since a marked lane now reruns the call on the torch loop (issue 38),
    a kernel that marked these lanes would still give the right result, and only this test sees
    that its own handling was dropped. Bug caught: the kernel refusing (marking) a finite gradient
    whose squares overflow, or one whose terms are subnormal."""
    inst = mm.data.fig2()
    V, P0 = np.array(inst.v, dtype=float), np.array([[0.5, 0.0, 0.0], [-1.0, 2.0, 0.5]])
    kw = dict(W=inst.W, loss="correlation", normalized=True)
    expected = mm.gd(inst.X, inst.Y, V, P0, 6, 0.1, eps=1e-12, **kw).p
    run = mm.gd(inst.X, inst.Y, V * c, P0, 6, 0.1, eps=1e-12 * c, **kw)
    assert len(kernels_run) == 2
    np.testing.assert_allclose(run.p, expected, rtol=1e-12, atol=1e-12)
