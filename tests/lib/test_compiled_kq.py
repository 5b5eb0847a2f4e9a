"""The compiled engine of gd_KQ (one shared prompt, reg = 0): the same runs as the torch loop
``_engines._descend_KQ_torch`` and as an independent autograd loop, the same errors, and the
torch loop
wherever the kernel does not apply (a query per sequence, reg > 0, a custom loss, |p| = 0) or
meets a value outside its range.

20 steps throughout: the factor dynamics amplify rounding (two float64 loops drift apart from
about 1e-14 at step 30 to 1e-2 at step 100), so longer runs would compare accumulated rounding.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import _engines
from roundoff import one_thread

pytest.importorskip("numba")

STEPS = 20
LR = 0.3
EPS = 1e-9
LOSS_TORCH = {"logistic": lambda z: torch.nn.functional.softplus(-z),
              "exponential": lambda z: torch.exp(-z),
              "correlation": lambda z: -z}


def instance(seed: int = 0, n: int = 5, T: int = 4, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    p = rng.standard_normal(d)
    return X, Y, v, p


def relative(a, b) -> float:
    """max |a - b| over max |b|, per array (the norm-wise relative difference)."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


@pytest.fixture
def torch_calls(monkeypatch):
    """Counts the calls of the torch loop _engines._descend_KQ_torch (then runs it)."""
    calls = []
    loop = _engines._descend_KQ_torch

    def counted(*args, **kwargs):
        calls.append(args)
        return loop(*args, **kwargs)

    monkeypatch.setattr(_engines, "_descend_KQ_torch", counted)
    return calls


def use_engine(monkeypatch, engine: str) -> None:
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    assert mm.train.engine(kernel="gd_KQ") == engine


def autograd_run(X, Y, v, Z, K0, Q0, steps, lr, normalized, eps, reg=0.0,
                 loss=LOSS_TORCH["logistic"]):
    """(steps + 1, d, m) K and Q and (steps + 1,) risks of one run by torch autograd on (K, Q),
    queries Z (n, d) or (d,) shared: written from the model's definition, independently of both
    engines."""
    with one_thread():
        Xt, Yt, vt = torch.tensor(X), torch.tensor(Y), torch.tensor(v)
        Zt = torch.tensor(np.broadcast_to(Z, (X.shape[0], X.shape[2])).copy())
        K = torch.tensor(K0, requires_grad=True)
        Q = torch.tensor(Q0, requires_grad=True)
        Ks, Qs, risks = [], [], []
        for k in range(steps + 1):
            s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, K @ Q.T, Zt), dim=-1)
            risk = loss(Yt * (s * (Xt @ vt)).sum(-1)).mean()
            Ks.append(K.detach().numpy().copy())
            Qs.append(Q.detach().numpy().copy())
            risks.append(risk.item())
            if k == steps:
                break
            gK, gQ = torch.autograd.grad(risk + reg * ((K ** 2).sum() + (Q ** 2).sum()), (K, Q))
            with torch.no_grad():
                if normalized:
                    K1, Q1 = K - lr * gK / (gK.norm() + eps), Q - lr * gQ / (gQ.norm() + eps)
                else:
                    K1, Q1 = K - lr * gK, Q - lr * gQ
            K, Q = K1.requires_grad_(True), Q1.requires_grad_(True)
    return np.array(Ks), np.array(Qs), np.array(risks)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_compiled_engine_matches_the_torch_engine(loss, normalized, monkeypatch, torch_calls):
    """K, Q and the risks of both engines agree to 1e-12 relative over 20 steps, for B = 1, 7, 8
    (blocks of 8 lanes: 7, 1, 0 spare) and 17 (spare lanes in the last block), record_every 1, 3 and
    None, m < d and m > d; the compiled run never calls the torch loop and returns read-only
    arrays of the same shapes. Bugs caught: a sign or factor of the K or Q step (b = K^T a after
    K's update instead of before, the K step with the new q, |p| instead of |p|^2 in q's step),
    a normalization by the wrong norm, a lane read from or written to another start (spare
    lanes writing over real ones), a record at the wrong step, the risk not divided by n, Q
    reconstructed off the line Q0 + p D^T, and a dispatch that never takes the compiled path
    (then this test would compare the torch loop with itself)."""
    X, Y, v, p = instance(1)
    rng = np.random.default_rng(2)
    for B, every, m in ((1, 1, 2), (7, 3, 5), (8, None, 2), (17, 1, 2), (17, 3, 5), (1, None, 5)):
        K0 = 0.7 * rng.standard_normal((B, 3, m))
        Q0 = 0.7 * rng.standard_normal((B, 3, m))
        runs = {}
        for engine in ("torch", "compiled"):
            use_engine(monkeypatch, engine)
            torch_calls.clear()
            runs[engine] = mm.gd_KQ(X, Y, v, K0, Q0, p, STEPS, LR, loss=loss,
                                    normalized=normalized, eps=EPS, record_every=every)
            assert len(torch_calls) == (engine == "torch"), (engine, B)
        t, c = runs["torch"], runs["compiled"]
        np.testing.assert_array_equal(c.steps, t.steps)
        for name in ("K", "Q", "risk"):
            got, want = getattr(c, name), getattr(t, name)
            assert got.shape == want.shape and not got.flags.writeable, (name, B)
            assert relative(got, want) <= 1e-12, (name, B, every, m, relative(got, want))
        np.testing.assert_array_equal(c.K[0], K0)
        np.testing.assert_array_equal(c.Q[0], Q0)
        assert (c.lr, c.normalized, c.reg) == (LR, normalized, 0.0)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_compiled_engine_matches_an_autograd_loop(loss, normalized, monkeypatch, torch_calls):
    """3 runs of 20 steps against a per-run autograd loop on (K, Q): every recorded K, Q and
    risk within 1e-12 relative. Bugs caught as above, independently of the torch loop (a bug
    shared by the torch loop and the kernel, e.g. in a helper both use, is caught here)."""
    X, Y, v, p = instance(3)
    rng = np.random.default_rng(4)
    K0, Q0 = 0.7 * rng.standard_normal((3, 3, 2)), 0.7 * rng.standard_normal((3, 3, 2))
    use_engine(monkeypatch, "compiled")
    lr = 0.1   # at 0.3 plain GD on this instance amplifies rounding 1e5-fold by step 20 (any loop)
    run = mm.gd_KQ(X, Y, v, K0, Q0, p, STEPS, lr, loss=loss, normalized=normalized, eps=EPS)
    assert not torch_calls
    for b in range(3):
        K, Q, risk = autograd_run(X, Y, v, p, K0[b], Q0[b], STEPS, lr, normalized, EPS,
                                  loss=LOSS_TORCH[loss])
        assert relative(run.K[:, b], K) <= 1e-12, (b, relative(run.K[:, b], K))
        assert relative(run.Q[:, b], Q) <= 1e-12, (b, relative(run.Q[:, b], Q))
        np.testing.assert_allclose(run.risk[:, b], risk, rtol=1e-12, atol=1e-14)


CUSTOM = mm.Loss("doubled logistic", "log(1 + exp(-2 * x))",
                 value=lambda x: np.logaddexp(0.0, -2.0 * x),
                 derivative=lambda x: -2.0 * mm.losses.expit(-2.0 * x),
                 torch_value=lambda x: torch.nn.functional.softplus(-2.0 * x),
                 torch_derivative=lambda x: -2.0 * torch.sigmoid(-2.0 * x))


@pytest.mark.parametrize("case", ["queries per sequence", "reg > 0", "custom loss", "p = 0",
                                  "|p|^2 subnormal", "Q0 of 1e200 off p"])
def test_other_runs_take_the_torch_loop_and_match_autograd(case, monkeypatch, torch_calls):
    """With MAXMARGIN_ENGINE=compiled, a query per sequence, a penalty reg > 0, a custom Loss, a
    zero prompt, a prompt of size 1e-160 and a Q0 with entries of 1e200 in rows where p is 0
    run on the torch loop, and still match the autograd loop (1e-12). Bugs caught: the kernel
    taking runs it does not compute (it would drop the penalty, use the first query for every
    sequence, the logistic loss for the custom one, divide by |p|^2 = 0, move q by a subnormal
    |p|^2 that has lost its digits, or miss an overflow of Q0 - p D^T that q does not see)."""
    X, Y, v, p = instance(5)
    rng = np.random.default_rng(6)
    Z = {"queries per sequence": rng.standard_normal((5, 3)), "p = 0": np.zeros(3),
         "|p|^2 subnormal": 1e-160 * p}.get(case, p)
    reg = 0.05 if case == "reg > 0" else 0.0
    loss = CUSTOM if case == "custom loss" else "logistic"
    torch_loss = LOSS_TORCH["logistic"] if case != "custom loss" else CUSTOM.torch_value
    K0, Q0 = 0.7 * rng.standard_normal((2, 3, 2)), 0.7 * rng.standard_normal((2, 3, 2))
    if case == "Q0 of 1e200 off p":
        Z = np.array([0.0, 1.3, 0.0])
        Q0[:, 0] *= 1e200
    use_engine(monkeypatch, "compiled")
    run = mm.gd_KQ(X, Y, v, K0, Q0, Z, STEPS, LR, loss=loss, normalized=True, eps=EPS, reg=reg)
    assert len(torch_calls) == 1
    for b in range(2):
        K, Q, risk = autograd_run(X, Y, v, Z, K0[b], Q0[b], STEPS, LR, True, EPS, reg=reg,
                                  loss=torch_loss)
        assert relative(run.K[:, b], K) <= 1e-12, (case, b, relative(run.K[:, b], K))
        assert relative(run.Q[:, b], Q) <= 1e-12, (case, b, relative(run.Q[:, b], Q))
        np.testing.assert_allclose(run.risk[:, b], risk, rtol=1e-12, atol=1e-14)


def test_an_overflow_raises_the_torch_engines_error(monkeypatch, torch_calls):
    """v scaled by 1e300 (plain GD, logistic and exponential), and an lr that carries the
    iterates beyond float64: the compiled engine raises the torch engine's ValueError, word for
    word (it marks the run and re-runs the call on the torch loop). Bugs caught: the kernel's
    inf or NaN records returned as a result, a mark ignored by the driver, a different message
    (another step or cause) than the torch engine's."""
    X, Y, v, p = instance(7)
    rng = np.random.default_rng(8)
    K0, Q0 = 0.7 * rng.standard_normal((9, 3, 2)), 0.7 * rng.standard_normal((9, 3, 2))
    calls = [dict(v=1e300 * v, lr=LR, loss="logistic"), dict(v=1e300 * v, lr=LR, loss="exponential"),
             dict(v=v, lr=1e306, loss="logistic")]
    for kw in calls:
        messages = {}
        for engine in ("torch", "compiled"):
            use_engine(monkeypatch, engine)
            torch_calls.clear()
            with pytest.raises(ValueError, match=r"^gd_KQ: the gradient at step \d+") as error:
                mm.gd_KQ(X, Y, kw["v"], K0, Q0, p, STEPS, kw["lr"], loss=kw["loss"])
            messages[engine] = str(error.value)
            assert len(torch_calls) == 1, (engine, kw)   # the compiled engine fell back
        assert messages["compiled"] == messages["torch"], kw


@pytest.mark.parametrize("case", ["exponential weights beyond float64", "tiny gradient"])
def test_values_outside_the_kernels_range_give_the_torch_engines_run(case, monkeypatch,
                                                                   torch_calls):
    """Normalized GD on the exponential loss with v * 1e5 (the weights exp(-z) overflow; the
    torch loop rescales them and steps), and on the correlation loss with v * 2^-700 (the
    gradients' squares underflow): the compiled engine marks the runs and returns the torch
    loop's run, bit for bit. Bugs caught: the kernel stepping with inf or NaN weights, or
    normalizing by a norm whose squares underflowed (a huge step), instead of falling back."""
    X, Y, v, p = instance(9)
    rng = np.random.default_rng(10)
    K0, Q0 = 0.7 * rng.standard_normal((3, 3, 2)), 0.7 * rng.standard_normal((3, 3, 2))
    v, loss, eps = ((1e5 * v, "exponential", EPS) if case.startswith("exponential")
                    else (2.0 ** -700 * v, "correlation", 1e-12 * 2.0 ** -700))
    runs = {}
    for engine in ("torch", "compiled"):
        use_engine(monkeypatch, engine)
        torch_calls.clear()
        runs[engine] = mm.gd_KQ(X, Y, v, K0, Q0, p, STEPS, 0.1, loss=loss, normalized=True,
                                eps=eps)
        assert len(torch_calls) == 1, engine
    for name in ("K", "Q", "risk"):
        np.testing.assert_array_equal(getattr(runs["compiled"], name), getattr(runs["torch"], name))
    for A in (runs["compiled"].K, runs["compiled"].Q):
        np.testing.assert_allclose(np.linalg.norm(np.diff(A, axis=0), axis=(-2, -1)), 0.1,
                                   rtol=1e-9)


def test_two_threads_give_the_one_thread_run(monkeypatch):
    """40 starts in blocks of 16 on two threads (disjoint ranges of blocks) equal the run on one
    thread bit for bit. Bug caught: threads writing over each other's records, a range of
    blocks skipped or run twice."""
    X, Y, v, p = instance(11)
    rng = np.random.default_rng(12)
    K0, Q0 = 0.7 * rng.standard_normal((40, 3, 2)), 0.7 * rng.standard_normal((40, 3, 2))
    use_engine(monkeypatch, "compiled")
    threads = torch.get_num_threads()
    runs = []
    try:
        for k in (1, 2):
            torch.set_num_threads(k)
            runs.append(mm.gd_KQ(X, Y, v, K0, Q0, p, STEPS, LR, normalized=True, eps=EPS))
    finally:
        torch.set_num_threads(threads)
    for name in ("K", "Q", "risk"):
        np.testing.assert_array_equal(getattr(runs[1], name), getattr(runs[0], name))


def test_every_call_runs_the_kernels_compiled_by_ready_kq(monkeypatch, torch_calls):
    """A shared query given as (d,) (read-only, broadcast by the validation) or as (n, d) equal
    rows, B = 3 and 20 (both kernels): each kernel keeps the one numba specialization that
    ready_kq() compiled with the SLP vectorizer. Bug caught: a read-only or non-contiguous
    array passed to the kernel, which numba compiles again (10 s) without the vectorizer."""
    from maxmargin import _compiled

    X, Y, v, p = instance(13)
    rng = np.random.default_rng(14)
    use_engine(monkeypatch, "compiled")
    for B in (3, 20):
        K0, Q0 = rng.standard_normal((B, 3, 2)), rng.standard_normal((B, 3, 2))
        for queries in (p, np.tile(p, (5, 1)), p[::-1].copy()[::-1]):
            mm.gd_KQ(X, Y, v, K0, Q0, queries, 3, 0.1, normalized=True)
    assert not torch_calls
    assert len(_compiled.descend_kq.signatures) == 1, _compiled.descend_kq.signatures
    assert len(_compiled.descend_kq_wide.signatures) == 1, _compiled.descend_kq_wide.signatures


def test_a_mark_stops_every_block(monkeypatch):
    """The kernel alone, 40 starts in blocks of 8 of which only start 0 leaves float64 (K0 near
    1e150, lr huge): that run is marked, the halt flag set, and every later block stops at
    once, so their records stay untouched (NaN here). Bug caught: the other blocks running all
    their steps for nothing (the call is re-run on the torch loop anyway)."""
    from maxmargin import _compiled

    X, Y, v, p = instance(15)
    rng = np.random.default_rng(16)
    K0, Q0 = rng.standard_normal((40, 3, 2)), rng.standard_normal((40, 3, 2))
    K0[0] *= 1e150
    _compiled.ready_kq()
    out = _compiled.empty_kq_records(2, 40, 3, 2)
    out.K[:] = np.nan
    gamma = Y[:, None] * (X @ v)
    run = _compiled.KQSettings(1000, 1e10, _compiled.LOGISTIC_CODE, False, 1e-12,
                               np.array([0, 1000]), float(p @ p), float(np.linalg.norm(p)),
                               float(np.abs(p).max()))
    _compiled.descend_kq(0, 5, X, gamma, p, K0, Q0, np.einsum("bdm,d->bm", Q0, p), run, out)
    assert out.marked[0] == 1 and out.halt[0] == 1
    assert np.all(np.isnan(out.K[:, 8:])), "a block after the mark ran"
