"""The compiled engine of ``mm.gd_joint`` (``_compiled``, section gd_joint) against its torch loop
and against an independent autograd loop; its fallback to the torch loop, and its errors.

Each test names (in its docstring) the bug it catches. The compiled runs assert that the kernel
ran to the end (no rerun on the torch loop), so that a comparison is not the torch loop against
itself.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import _engines, train
from roundoff import one_thread

pytest.importorskip("numba")

RTOL = 1e-12
FIELDS = ("v", "p", "risk", "probability", "tracked_attention")


def instance(seed: int = 0, n: int = 7, T: int = 4, d: int = 5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    W = rng.standard_normal((d, d)) + np.eye(d)
    return X, Y, W, rng


def relative(a, b) -> float:
    scale = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / scale) if scale > 0 else float(np.max(np.abs(a)))


def compiled_run(monkeypatch, **kw):
    """gd_joint on the compiled engine; fails if the call fell back to the torch loop."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    calls = []
    original = _engines._descend_joint_torch
    monkeypatch.setattr(_engines, "_descend_joint_torch",
                        lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    run = mm.gd_joint(**kw)
    monkeypatch.setattr(_engines, "_descend_joint_torch", original)
    assert not calls, "the compiled call reran on the torch loop"
    return run


def torch_run(monkeypatch, **kw):
    monkeypatch.setenv("MAXMARGIN_ENGINE", "torch")
    return mm.gd_joint(**kw)


def assert_same_runs(a, b, rtol=RTOL, what=""):
    """Every record of runs a and b within rtol relative (rtol = 0: equal, inf and NaN too)."""
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert x.shape == y.shape, (what, field, x.shape, y.shape)
        if rtol == 0.0:   # the same loop twice: numpy's sums may differ in the last bit with
            # the alignment of their operand, so 1e-15 (inf equal to inf)
            np.testing.assert_allclose(x, y, rtol=1e-15, atol=0.0, err_msg=f"{what} {field}")
        else:
            assert relative(x, y) <= rtol, (what, field, relative(x, y))
    np.testing.assert_array_equal(a.tracked, b.tracked)
    np.testing.assert_array_equal(a.steps, b.steps)


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("normalized", [False, True])
def test_compiled_matches_the_torch_engine(loss, normalized, monkeypatch):
    """Iterates, risks, probabilities and tracked attention of the compiled engine equal the torch
    loop's to 1e-12 relative, for B = 1, 7, 8 (one 8-lane block, 7 to 0 spare lanes) and 17 (blocks
    of 8 or 16, as _blocks._block_lanes chooses: spare lanes in the last), record_every 1, 3 and None, track given and None, and eps_v far
    from eps_p under normalized GD.
    Bugs caught: a lane reading another lane's head or prompt (scores shared across lanes, as in
    gd's kernel), spare lanes written into the records, a record at the wrong step or row, the
    tracked attention read at the wrong token or lane, the risk or probability summed instead of
    averaged, the v gradient contracted with the keys, the sign of the centring in the p gradient,
    eps_v and eps_p swapped, a missing 1/n."""
    X, Y, W, rng = instance(1)
    n, T, d = X.shape
    lr = 0.1
    for B in (1, 7, 8, 17):
        V0, P0 = 0.5 * rng.standard_normal((B, d)), 0.5 * rng.standard_normal((B, d))
        for record_every, track in ((1, None), (3, rng.integers(0, T, n)), (None, None),
                                    (1, rng.integers(0, T, n))):
            kw = dict(X=X, Y=Y, v0=V0, p0=P0, steps=12, lr=lr, W=W, loss=loss,
                      normalized=normalized, record_every=record_every, track=track,
                      eps_v=0.3 if normalized else 1e-12, eps_p=1e-3 if normalized else 1e-12)
            with one_thread():
                a, b = compiled_run(monkeypatch, **kw), torch_run(monkeypatch, **kw)
            assert_same_runs(a, b, what=(B, record_every, track is None))


def test_one_and_two_threads_give_the_same_runs(monkeypatch):
    """40 starts run as blocks on two threads equal the one-thread run bit for bit, and the torch
    loop to 1e-12 (B = 16 on two threads takes two 8-lane blocks, B = 40 three 16-lane blocks).
    Bugs caught: overlapping or skipped block ranges, a block's lanes written at another block's
    starts, scratch shared between threads."""
    X, Y, W, rng = instance(2)
    d = X.shape[2]
    for B in (16, 40):
        V0, P0 = 0.5 * rng.standard_normal((B, d)), 0.5 * rng.standard_normal((B, d))
        kw = dict(X=X, Y=Y, v0=V0, p0=P0, steps=10, lr=0.1, W=W, normalized=True)
        before = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = compiled_run(monkeypatch, **kw)
            torch.set_num_threads(2)
            two = compiled_run(monkeypatch, **kw)
        finally:
            torch.set_num_threads(before)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(one, field), getattr(two, field))
        with one_thread():
            assert_same_runs(two, torch_run(monkeypatch, **kw))


def autograd_joint(X, Y, W, v, p, steps, lr, loss, normalized, eps):
    """(steps + 1, d) heads and prompts of one run by torch autograd, written out from the model
    f(X) = v^T X^T softmax(X W p) and the loss's formula, sharing no code with the library."""
    formulas = {"logistic": lambda z: torch.nn.functional.softplus(-z),
                "exponential": lambda z: torch.exp(-z), "correlation": lambda z: -z}
    Xt, Yt, Wt = torch.tensor(X), torch.tensor(Y), torch.tensor(W)
    vs, ps = [v.copy()], [p.copy()]
    for _ in range(steps):
        vt = torch.tensor(vs[-1], requires_grad=True)
        pt = torch.tensor(ps[-1], requires_grad=True)
        s = torch.softmax(Xt @ (Wt @ pt), dim=-1)
        risk = formulas[loss](Yt * (s * (Xt @ vt)).sum(-1)).mean()
        gv, gp = torch.autograd.grad(risk, (vt, pt))
        with torch.no_grad():
            if normalized:
                gv, gp = gv / (gv.norm() + eps), gp / (gp.norm() + eps)
            vs.append((vt - lr * gv).numpy())
            ps.append((pt - lr * gp).numpy())
    return np.array(vs), np.array(ps)


@pytest.mark.parametrize("loss, normalized", [("logistic", True), ("exponential", False),
                                              ("correlation", True)])
def test_compiled_matches_an_autograd_loop(loss, normalized, monkeypatch):
    """Three runs of 50 steps equal an independent per-run autograd loop to 1e-12 relative at
    every step. Bugs caught: a mistake shared by the kernel and the torch loop (both compared
    above only with each other), e.g. the margin relative to the wrong token or the softmax of
    the wrong logits. (Instance 10: its runs amplify rounding little, both engines within 1e-15
    of autograd; on instances 3, 8 and 9 normalized logistic runs pass near a vanishing gradient,
    where the torch engine too drifts 1e-11 to 1e-8 from autograd.)"""
    X, Y, W, rng = instance(10, n=5, T=3, d=3)
    V0, P0 = 0.3 * rng.standard_normal((3, 3)), 0.3 * rng.standard_normal((3, 3))
    with one_thread():
        run = compiled_run(monkeypatch, X=X, Y=Y, v0=V0, p0=P0, steps=50, lr=0.05, W=W,
                           loss=loss, normalized=normalized)
        for b in range(3):
            vs, ps = autograd_joint(X, Y, W, V0[b], P0[b], 50, 0.05, loss, normalized, 1e-12)
            assert relative(run.v[:, b], vs) <= RTOL, relative(run.v[:, b], vs)
            assert relative(run.p[:, b], ps) <= RTOL, relative(run.p[:, b], ps)


def test_a_custom_loss_takes_the_torch_loop(monkeypatch):
    """A Loss that is not built-in (the logistic loss with new function objects) runs on the torch
    loop under MAXMARGIN_ENGINE=compiled, with the torch engine's result.
    Bug caught: the compiled kernel chosen by the engine setting alone (it would run some built-in
    loss, or fail on a loss code None)."""
    X, Y, W, rng = instance(4)
    logistic = mm.LOSSES["logistic"]
    custom = dataclasses.replace(logistic, name="mine", value=lambda x: logistic.value(x),
                                 derivative=lambda x: logistic.derivative(x),
                                 torch_value=lambda x: logistic.torch_value(x),
                                 torch_derivative=lambda x: 2.0 * logistic.torch_derivative(x))
    kw = dict(X=X, Y=Y, v0=rng.standard_normal(5), p0=rng.standard_normal(5), steps=5, lr=0.1,
              W=W, loss=custom, normalized=False)
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    monkeypatch.setattr(_engines, "_descend_joint_compiled",
                        lambda *a: pytest.fail("a custom loss ran on the compiled kernel"))
    run = mm.gd_joint(**kw)
    assert_same_runs(run, torch_run(monkeypatch, **kw), rtol=0.0)


@pytest.mark.parametrize("case", ["v 1e300, X 1e10, plain", "p0 1e300", "X 1e160, plain",
                                  "exponential, v 1e5, plain"])
def test_an_overflow_raises_the_torch_engines_error(case, monkeypatch):
    """Where the torch loop refuses, the compiled engine raises the same ValueError, message for
    message (the kernel marks the lane, the call reruns on the torch loop).
    Bug caught: the kernel's check of non-finite margins, slopes and iterates dropped (the run
    would return NaN records), or an error raised by the compiled driver with another step or
    cause."""
    X, Y, W, rng = instance(5, n=4, T=3, d=3)
    v, p = rng.standard_normal(3), rng.standard_normal(3)
    kw = dict(X=X, Y=Y, v0=v, p0=p, steps=4, lr=0.1, W=W, normalized=False)
    if case == "v 1e300, X 1e10, plain":            # step 0, "lr is too large"
        kw.update(X=X * 1e10, v0=v * 1e300)
    elif case == "p0 1e300":                         # step 0, "the start p0"
        kw.update(X=X * 1e10, p0=np.ones(3) * 1e300, normalized=True)
    elif case == "X 1e160, plain":                   # step 1
        kw.update(X=X * 1e160, Y=-np.ones(4))
    else:
        kw.update(v0=np.sign(v) * 1e5, loss="exponential")
    monkeypatch.setenv("MAXMARGIN_ENGINE", "torch")
    with pytest.raises(ValueError) as expected:
        mm.gd_joint(**kw)
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    with pytest.raises(ValueError) as got:
        mm.gd_joint(**kw)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("case", ["exponential, v 1e5", "X 1e160"])
def test_rescaled_steps_of_the_torch_loop_are_taken_by_the_rerun(case, monkeypatch):
    """Normalized GD where the torch loop steps along a finite direction of a gradient that is
    not finite: the exponential loss with scores near -1e5 (slopes exp(-z) overflow: log-domain
    weights), and X near 1e160 with Y = -1 (the contraction overflows: the F6 retry). The compiled
    engine gives the same run, bit for bit, through the rerun.
    Bug caught: the compiled engine refusing (or recording NaN for) a run the torch engine takes."""
    X, Y, W, rng = instance(5, n=4, T=3, d=3)
    kw = dict(X=X, Y=Y, v0=rng.standard_normal(3), p0=rng.standard_normal((3, 3)), steps=3,
              lr=0.1, W=W, normalized=True)
    if case == "X 1e160":
        kw.update(X=X * 1e160, Y=-np.ones(4))
    else:
        kw.update(v0=np.array([0.0, 0.0, -1e5]), loss="exponential")
    expected = torch_run(monkeypatch, **kw)
    assert np.all(np.isfinite(expected.p)) and np.all(np.isfinite(expected.v))
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    assert_same_runs(mm.gd_joint(**kw), expected, rtol=0.0)


def test_gradients_whose_squares_under_or_overflow_are_normalized_in_the_kernel(monkeypatch):
    """Normalized GD where |grad|^2 underflows (exponential loss, margins near 690: gradients near
    1e-300, eps 1e-310 below them) and where it overflows while the gradient is finite (scores
    near 1e160 with keys near 1, X 1e80 and W 1e-80: gradient entries near 1e160): the kernel takes
    each step itself (no rerun), a step of length lr, and equals the torch loop to 1e-12.
    Bugs caught: the kernel's normalization dividing by the sqrt of an underflowed 0 (+ eps: a
    step 1e10 times too long) or of an overflowed inf (a zero step); such lanes sent to the torch
    loop instead of stepped."""
    X, Y, W, rng = instance(7, n=4, T=3, d=3)
    near = Y[:, None, None] * (np.array([1.0, 0.0, 0.0]) + 0.01 * X)   # scores 690 (1 +- 0.03)
    cases = [dict(X=near, Y=Y, v0=np.array([690.0, 0.0, 0.0]), W=W, loss="exponential",
                  eps_v=1e-310, eps_p=1e-310),
             dict(X=X * 1e80, Y=Y, v0=rng.standard_normal(3) * 1e80, W=W * 1e-80,
                  loss="logistic")]
    for case in cases:
        kw = dict(case, p0=0.1 * rng.standard_normal((2, 3)), steps=4, lr=0.1, normalized=True)
        with one_thread():
            a, b = compiled_run(monkeypatch, **kw), torch_run(monkeypatch, **kw)
        assert np.all(np.isfinite(a.p)) and np.all(np.isfinite(a.v))
        assert_same_runs(a, b)
        np.testing.assert_allclose(np.linalg.norm(a.p[1] - a.p[0], axis=-1), 0.1, rtol=1e-9)


def test_auto_uses_the_joint_kernel_once_loaded_or_for_large_runs(monkeypatch):
    """MAXMARGIN_ENGINE=auto: a small run takes the compiled engine only when the joint kernel
    is loaded, a large one always. Bug caught: gd_joint consulting gd's loaded flag (a small
    joint run would then compile the joint kernel, about 15 s, after any gd run)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", "auto")
    from maxmargin import _compiled

    _compiled.ready()
    monkeypatch.setattr(_compiled, "_READY_JOINT", [])
    assert not _engines._compiled_loaded("gd_joint")
    assert train.engine(work=1, kernel="gd_joint") == "torch"
    assert train.engine(work=train.COMPILED_MIN_WORK, kernel="gd_joint") == "compiled"
    _compiled.ready_joint()
    assert _engines._compiled_loaded("gd_joint")
    assert train.engine(work=1, kernel="gd_joint") == "compiled"
