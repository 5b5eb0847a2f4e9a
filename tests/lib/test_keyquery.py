"""``mm.gd_KQ``: gradient descent on the key-query factors (K, Q) of W = K Q^T.

The reference is a plain torch autograd loop written here from the model's formula (logits
x_it^T K Q^T z_i, softmax over t, f_i = sum_t s_it v^T x_it, risk mean_i l(Y_i f_i) with l from
the formula string of the loss's registry entry, plus reg (||K||_F^2 + ||Q||_F^2)), compared
step by step at one step's rounding bound as in test_reference_gd.py (see roundoff.py: a
whole-trajectory tolerance would depend on how a CPU's kernels round along the trajectory).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import maxmargin as mm
from roundoff import STEP_RTOL, one_thread, risk_atol, step_atol

STEPS = 20
LR = 0.3
EPS = 1e-9


def torch_loss(name: str):
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


def instance(seed: int = 0, n: int = 4, T: int = 3, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    Z = rng.standard_normal((n, d))
    return X, Y, v, Z


def reference_step(X, Y, v, Z, K, Q, lr, normalized, eps, reg, loss):
    """One step of GD on (K, Q) by autograd from (K, Q) (numpy): (K', Q', risk without the
    penalty, rounding bound of the K step, of the Q step, of the risk). ``Z`` (n, d) or (d,)."""
    with one_thread():
        Xt, Yt, vt = torch.tensor(X), torch.tensor(Y), torch.tensor(v)
        Zt = torch.tensor(np.broadcast_to(Z, (X.shape[0], X.shape[2])).copy())
        Kt = torch.tensor(K, requires_grad=True)
        Qt = torch.tensor(Q, requires_grad=True)
        gamma = Yt[:, None] * (Xt @ vt)
        logits = torch.einsum("ntd,de,ne->nt", Xt, Kt @ Qt.T, Zt)
        s = torch.softmax(logits, dim=-1)
        margin = Yt * (s * (Xt @ vt)).sum(-1)
        risk = torch_loss(loss)(margin).mean()
        total = risk + reg * ((Kt ** 2).sum() + (Qt ** 2).sum())
        gK, gQ, weight = torch.autograd.grad(total, (Kt, Qt, margin))
        with torch.no_grad():
            if normalized:
                K1 = Kt - lr * gK / (gK.norm() + eps)
                Q1 = Qt - lr * gQ / (gQ.norm() + eps)
            else:
                K1, Q1 = Kt - lr * gK, Qt - lr * gQ
        # rounding bounds (roundoff.py): the terms of G = sum_it w_i s_it (gamma_it - z_i) x_it z_i^T
        # in absolute value, through the products G Q and G^T K, plus the penalty's
        w, s_, g_, z_ = (a.detach().numpy() for a in (weight, s, gamma, margin))
        size = np.abs(w)[:, None] * s_ * (np.abs(g_) + np.abs(z_)[:, None])
        Zn = Zt.numpy()
        G_abs = np.einsum("nt,ntd,ne->de", size, np.abs(X), np.abs(Zn))
        terms_K = G_abs @ np.abs(Q) + 2 * reg * np.abs(K)
        terms_Q = G_abs.T @ np.abs(K) + 2 * reg * np.abs(Q)
        L = float(np.max(np.einsum("ntd,de,ne->nt", np.abs(X), np.abs(K) @ np.abs(Q).T, np.abs(Zn))))
        atol_K = step_atol(K, lr, terms_K, L, gK.norm().item() if normalized else None, eps)
        atol_Q = step_atol(Q, lr, terms_Q, L, gQ.norm().item() if normalized else None, eps)
        return (K1.numpy(), Q1.numpy(), risk.item(), atol_K, atol_Q,
                risk_atol(w, g_, L))


def assert_matches_reference(run, X, Y, v, Z, K0, Q0, normalized, eps, reg, loss, lr=LR):
    np.testing.assert_array_equal(run.K[0], K0)
    np.testing.assert_array_equal(run.Q[0], Q0)
    for b in range(K0.shape[0]):
        for k in range(len(run.steps)):
            K1, Q1, risk, atol_K, atol_Q, r_atol = reference_step(
                X, Y, v, Z, run.K[k, b], run.Q[k, b], lr, normalized, eps, reg, loss)
            assert run.risk[k, b] == pytest.approx(risk, rel=1e-12, abs=r_atol), (b, k)
            if k + 1 < len(run.steps):
                np.testing.assert_allclose(run.K[k + 1, b], K1, rtol=0, atol=atol_K,
                                           err_msg=f"K, run {b}, step {k} -> {k + 1}")
                np.testing.assert_allclose(run.Q[k + 1, b], Q1, rtol=0, atol=atol_Q,
                                           err_msg=f"Q, run {b}, step {k} -> {k + 1}")


# ----------------------------------------------------------------------------------------------
# 1. against an autograd loop
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reg", [0.0, 0.05])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_gd_KQ_matches_an_autograd_loop(loss, normalized, reg):
    """Every loss, plain and normalized, with and without the penalty, one shared query and one
    query per sequence, B = 3 starts, m < d, m = d, m > d: each step from the library's iterate
    equals the autograd step at its rounding bound (about 1e-12 relative, roundoff.py), and
    each recorded risk is the penalty-free risk. Bugs caught: dQ = G K instead of G^T K, dK =
    G^T Q, the penalty gradient reg K instead of 2 reg K (or the penalty dropped), one
    normalization of (K, Q) jointly instead of each factor by its own norm, a normalization
    across runs, the logits x^T Q K^T z, a query of the wrong sequence, the penalty included in
    the recorded risk."""
    X, Y, v, Z = instance(21)
    d = X.shape[2]
    rng = np.random.default_rng(22)
    for queries in (Z, Z[0]):
        for m in (2, d, d + 2):
            K0 = 0.7 * rng.standard_normal((3, d, m))
            Q0 = 0.7 * rng.standard_normal((3, d, m))
            run = mm.gd_KQ(X, Y, v, K0, Q0, queries, STEPS, LR, loss=loss,
                           normalized=normalized, eps=EPS, reg=reg)
            assert run.K.shape == run.Q.shape == (STEPS + 1, 3, d, m)
            assert run.risk.shape == (STEPS + 1, 3) and run.W.shape == (STEPS + 1, 3, d, d)
            assert (run.lr, run.normalized, run.reg) == (LR, normalized, reg)
            assert_matches_reference(run, X, Y, v, queries, K0, Q0, normalized, EPS, reg, loss)


def test_a_single_start_of_shape_d_m_is_a_batch_of_one():
    """(d, m) starts give B = 1, the same run as the (1, d, m) batch. Bug caught: a 2-D start
    read as B = d starts of width m... or refused."""
    X, Y, v, Z = instance(3)
    rng = np.random.default_rng(4)
    K0, Q0 = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    one = mm.gd_KQ(X, Y, v, K0, Q0, Z, 5, 0.1)
    batch = mm.gd_KQ(X, Y, v, K0[None], Q0[None], Z, 5, 0.1)
    assert one.K.shape == (6, 1, 3, 2)
    np.testing.assert_array_equal(one.K, batch.K)
    np.testing.assert_array_equal(one.Q, batch.Q)


# ----------------------------------------------------------------------------------------------
# 2. finite differences
# ----------------------------------------------------------------------------------------------

H = 1e-5


@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_the_step_is_minus_lr_times_the_gradient_of_the_penalized_risk(loss):
    """The plain step from (K, Q) with lr = 1 is (K - dK, Q - dQ), and dK, dQ are the gradients
    of F = risk + reg (||K||^2 + ||Q||^2) by central differences of the recorded risks (F at
    K +- h e_j, all 2 (2 d m) perturbed starts run as one batch).

    Tolerance 1e-8 max(1, |F|), from h = 1e-5: the truncation error is h^2 |F'''| / 6, at most
    1.7e-9 max(1, |F|) for third derivatives up to 100 max(1, |F|) (these O(1) instances have
    O(1) ones; the exponential loss's grow with F itself), the rounding error of
    (F(+h) - F(-h)) / 2h at most about 100 u |F| / h = 2e-9 |F| (100 roundings in F);
    recovering dK = K - K' costs u |K| ~ 1e-16. Every bug named in the autograd test changes
    some entry by 1e-2 or more. Bugs caught: a gradient that is not the risk's (a transposed
    factor, a wrong penalty weight, a wrong loss derivative), a recorded risk at the wrong
    iterate."""
    X, Y, v, Z = instance(31)
    n, T, d = X.shape
    m, reg = 2, 0.05
    rng = np.random.default_rng(32)
    K, Q = 0.7 * rng.standard_normal((d, m)), 0.7 * rng.standard_normal((d, m))
    step = mm.gd_KQ(X, Y, v, K, Q, Z, 1, 1.0, loss=loss, reg=reg)
    dK, dQ = K - step.K[1, 0], Q - step.Q[1, 0]
    starts_K, starts_Q = [], []
    for which in range(2):
        for j in range(d * m):
            for sign in (1.0, -1.0):
                e = np.zeros(d * m)
                e[j] = sign * H
                starts_K.append(K + (e.reshape(d, m) if which == 0 else 0.0))
                starts_Q.append(Q + (e.reshape(d, m) if which == 1 else 0.0))
    starts_K, starts_Q = np.array(starts_K), np.array(starts_Q)
    probe = mm.gd_KQ(X, Y, v, starts_K, starts_Q, Z, 1, 1.0, loss=loss, reg=reg,
                     record_every=None)
    F = probe.risk[0] + reg * (np.sum(starts_K ** 2, axis=(1, 2)) + np.sum(starts_Q ** 2, axis=(1, 2)))
    central = (F[0::2] - F[1::2]) / (2 * H)
    atol = 1e-8 * max(1.0, float(np.abs(F).max()))
    np.testing.assert_allclose(central[:d * m].reshape(d, m), dK, rtol=0, atol=atol)
    np.testing.assert_allclose(central[d * m:].reshape(d, m), dQ, rtol=0, atol=atol)
    assert np.abs(dQ).max() > 1e-2 and np.abs(dK).max() > 1e-2  # the check is not vacuous


# ----------------------------------------------------------------------------------------------
# 3. the result's fields and methods
# ----------------------------------------------------------------------------------------------


def test_W_cosine_singular_values_and_recording():
    """W is K Q^T; cosine is the Frobenius cosine computed by hand (and is scale-free: factors
    beyond where K Q^T overflows give the same cosines); singular_values are the top min(d, m)
    singular values of K Q^T by numpy's SVD, for m < d, m = d, m > d; record_every=None keeps
    the first and the last iterate of the full run; the arrays are read-only. Bugs caught: W as
    Q K^T, a cosine over the wrong axes, singular values of the wrong matrix (K alone, or the
    core R_K R_Q instead of R_K R_Q^T), the last record off by one."""
    X, Y, v, Z = instance(41)
    d = X.shape[2]
    rng = np.random.default_rng(42)
    D = rng.standard_normal((d, d))
    for m in (1, 2, d, d + 2):
        K0, Q0 = rng.standard_normal((2, d, m)), rng.standard_normal((2, d, m))
        run = mm.gd_KQ(X, Y, v, K0, Q0, Z, 12, 0.2, normalized=True)
        W = np.einsum("rbdm,rbem->rbde", run.K, run.Q)
        np.testing.assert_allclose(run.W, W, rtol=1e-14, atol=1e-14 * np.abs(W).max())
        by_hand = np.sum(W * D, axis=(2, 3)) / (np.linalg.norm(W, axis=(2, 3)) * np.linalg.norm(D))
        np.testing.assert_allclose(run.cosine(D), by_hand, rtol=1e-13, atol=1e-15)
        huge = dataclasses.replace(run, K=run.K * 1e200, Q=run.Q * 1e200)
        np.testing.assert_allclose(huge.cosine(D), by_hand, rtol=1e-13, atol=1e-15)
        sv = run.singular_values()
        expected = np.linalg.svd(W, compute_uv=False)[..., :min(d, m)]
        assert sv.shape == (13, 2, min(d, m))
        np.testing.assert_allclose(sv, expected, rtol=0, atol=1e-13 * expected.max())
        few = mm.gd_KQ(X, Y, v, K0, Q0, Z, 12, 0.2, normalized=True, record_every=None)
        np.testing.assert_array_equal(few.steps, [0, 12])
        np.testing.assert_allclose(few.K, run.K[[0, 12]], rtol=1e-13)
        np.testing.assert_allclose(few.Q, run.Q[[0, 12]], rtol=1e-13)
        np.testing.assert_allclose(few.risk, run.risk[[0, 12]], rtol=1e-13)
    some = mm.gd_KQ(X, Y, v, K0, Q0, Z, 12, 0.2, normalized=True, record_every=5)
    np.testing.assert_array_equal(some.steps, [0, 5, 10, 12])
    for name in ("K", "Q", "risk", "steps"):
        assert not getattr(run, name).flags.writeable, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.lr = 1.0
    with pytest.raises(ValueError, match="^direction: a zero vector"):
        run.cosine(np.zeros((d, d)))
    with pytest.raises(ValueError, match=r"^direction: expected a \(3, 3\) matrix"):
        run.cosine(np.ones(d))


# ----------------------------------------------------------------------------------------------
# 4. what a shared query implies
# ----------------------------------------------------------------------------------------------


def _off_line(A, u):
    """The part of the columns of A (..., d, m) orthogonal to u (d,), relative to |A|."""
    u = u / np.linalg.norm(u)
    rest = A - u[:, None] * np.einsum("d,...dm->...m", u, A)[..., None, :]
    return np.linalg.norm(rest, axis=(-2, -1)) / np.maximum(np.linalg.norm(A, axis=(-2, -1)), 1e-300)


@pytest.mark.parametrize("normalized", [False, True])
def test_a_shared_query_keeps_the_factors_on_lines(normalized):
    """With one query p for every sequence, G = dL/dW = g p^T (g = sum_it c_it x_it), so
    dQ = G^T K = p (K^T g)^T has every column along p, and dK = G Q = g (Q^T p)^T has rank one.
    Hence, proved by induction on the steps (plain or normalized, any reg >= 0, as the penalty
    2 reg Q only rescales Q):

    * from Q0 = 0: Q_k = p a_k^T, so W_k = (K_k a_k) p^T has rank <= 1 and rows along p;
    * from K0 = 0: K_k = b_k c^T with c = Q0^T p (dK = g (Q^T p)^T, and Q^T p stays along c
      because Q_k = mu_k Q0 + p a_k^T with a_k along c), so W_k has rank <= 1;
    * from any start, with reg = 0: each step of Q is along p and each step of K has rank one.

    Tolerance 1e-10 relative: rounding adds about u |step| per step to the parts that vanish,
    and nothing feeds them back faster than linearly over 40 steps. Bug caught: dQ computed as
    G K (its columns are not along p); tests/mutants.py checks that it is."""
    X, Y, v, _ = instance(51, d=4)
    d, m, B = 4, 3, 3
    rng = np.random.default_rng(52)
    p = rng.standard_normal(d)
    K0, Q0 = rng.standard_normal((B, d, m)), rng.standard_normal((B, d, m))

    run = mm.gd_KQ(X, Y, v, K0, np.zeros((B, d, m)), p, 40, 0.2, normalized=normalized, reg=0.01)
    assert np.all(_off_line(run.Q[1:], p) <= 1e-10)
    assert np.all(_off_line(np.swapaxes(run.W[1:], -1, -2), p) <= 1e-10)  # the rows of W
    sv = run.singular_values()[1:]
    assert np.all(sv[..., 1:] <= 1e-10 * sv[..., :1]) and np.all(sv[..., 0] > 0)

    run = mm.gd_KQ(X, Y, v, np.zeros((B, d, m)), Q0, p, 40, 0.2, normalized=normalized, reg=0.01)
    c = np.einsum("bdm,d->bm", Q0, p)
    for b in range(B):
        assert np.all(_off_line(np.swapaxes(run.K[1:, b], -1, -2), c[b]) <= 1e-10)  # rows along c
    sv = run.singular_values()[1:]
    assert np.all(sv[..., 1:] <= 1e-10 * sv[..., :1]) and np.all(sv[..., 0] > 0)

    run = mm.gd_KQ(X, Y, v, K0, Q0, p, 40, 0.2, normalized=normalized)
    dQ, dK = np.diff(run.Q, axis=0), np.diff(run.K, axis=0)
    assert np.all(_off_line(dQ, p) <= 1e-10)
    step_sv = np.linalg.svd(dK, compute_uv=False)
    assert np.all(step_sv[..., 1:] <= 1e-10 * step_sv[..., :1])


# ----------------------------------------------------------------------------------------------
# 5. bad inputs
# ----------------------------------------------------------------------------------------------

BX, BY, Bv, BZ = instance(61)
BK = np.ones((3, 2))


@pytest.mark.parametrize("name, call, error, message", [
    ("K0 1-D", lambda: mm.gd_KQ(BX, BY, Bv, np.ones(3), BK, BZ, 2, 0.1), ValueError,
     r"^K0: expected shape \(3, m\) or \(B, 3, m\)"),
    ("Q0 1-D", lambda: mm.gd_KQ(BX, BY, Bv, BK, np.ones(3), BZ, 2, 0.1), ValueError, r"^Q0: expected shape"),
    ("K0 wrong d", lambda: mm.gd_KQ(BX, BY, Bv, np.ones((2, 2)), BK, BZ, 2, 0.1), ValueError, r"^K0: expected shape"),
    ("K0 4-D", lambda: mm.gd_KQ(BX, BY, Bv, np.ones((1, 1, 3, 2)), BK, BZ, 2, 0.1), ValueError, r"^K0: "),
    ("different m", lambda: mm.gd_KQ(BX, BY, Bv, BK, np.ones((3, 3)), BZ, 2, 0.1), ValueError,
     r"^Q0: width m = 3 differs from K0's m = 2"),
    ("different B", lambda: mm.gd_KQ(BX, BY, Bv, np.ones((2, 3, 2)), np.ones((3, 3, 2)), BZ, 2, 0.1),
     ValueError, r"^Q0: 3 starts do not pair with the 2 starts of K0"),
    ("B = 0", lambda: mm.gd_KQ(BX, BY, Bv, np.ones((0, 3, 2)), np.ones((0, 3, 2)), BZ, 2, 0.1),
     ValueError, r"^K0: expected shape"),
    ("m = 0", lambda: mm.gd_KQ(BX, BY, Bv, np.ones((3, 0)), np.ones((3, 0)), BZ, 2, 0.1), ValueError,
     r"^K0: the factor width m must be >= 1"),
    ("K0 NaN", lambda: mm.gd_KQ(BX, BY, Bv, np.full((3, 2), np.nan), BK, BZ, 2, 0.1), ValueError,
     r"^K0: non-finite"),
    ("Q0 inf", lambda: mm.gd_KQ(BX, BY, Bv, BK, np.full((3, 2), np.inf), BZ, 2, 0.1), ValueError,
     r"^Q0: non-finite"),
    ("K0 complex", lambda: mm.gd_KQ(BX, BY, Bv, BK + 1j, BK, BZ, 2, 0.1), TypeError, r"^K0: complex"),
    ("reg < 0", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, reg=-1e-3), ValueError, r"^reg: must be >= 0"),
    ("reg inf", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, reg=np.inf), ValueError, r"^reg: must be finite"),
    ("reg str", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, reg="0"), TypeError, r"^reg: "),
    ("queries (n, d + 1)", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, np.ones((4, 4)), 2, 0.1), ValueError,
     r"^queries: expected shape \(4, 3\) or \(3,\)"),
    ("queries (n - 1, d)", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, np.ones((3, 3)), 2, 0.1), ValueError,
     r"^queries: expected shape"),
    ("queries NaN", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, np.full(3, np.nan), 2, 0.1), ValueError,
     r"^queries: non-finite"),
    ("steps = 0", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 0, 0.1), ValueError, r"^steps: must be >= 1"),
    ("steps float", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2.0, 0.1), TypeError, r"^steps: "),
    ("lr = 0", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.0), ValueError, r"^lr: must be a finite positive"),
    ("eps = 0", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, eps=0.0), ValueError, r"^eps: "),
    ("normalized 'yes'", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, normalized="yes"), TypeError,
     r"^normalized: "),
    ("record_every 0", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, record_every=0), ValueError,
     r"^record_every: "),
    ("loss hinge", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 2, 0.1, loss="hinge"), ValueError, r"^loss: "),
    ("Y not +-1", lambda: mm.gd_KQ(BX, np.zeros(4), Bv, BK, BK, BZ, 2, 0.1), ValueError, r"^Y: "),
    ("too costly", lambda: mm.gd_KQ(BX, BY, Bv, BK, BK, BZ, 10**10, 0.1), ValueError,
     r"^steps: .*(GB|operations)"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_bad_inputs_raise_naming_the_argument(name, call, error, message):
    """Bugs caught: a validation dropped (a start of the wrong shape, a negative penalty, a
    zero step accepted and run), or an error naming another argument than the bad one."""
    with pytest.raises(error, match=message):
        call()


def test_overflow_raises_naming_the_step_and_the_cause():
    """As gd_W: plain GD whose exponential-loss gradient overflows names the step and v; an
    iterate that leaves float64 names lr; normalized GD rescales the overflowing weights and
    runs, each factor stepping by lr. There the loss's gradient is about exp(1e5) times the
    penalty's, so the run with reg = 0.01 is the run with reg = 0 (to rounding); and from
    Q0 = 0 the zero gradient of K is a zero step although eps times the rescaling underflows
    to 0. Bugs caught: an inf or NaN iterate returned, the rescaled weights not used (a
    spurious error), the penalty's gradient not rescaled with the loss's (it would dominate),
    a zero gradient divided by a zero offset (0 / 0 raised as an overflow)."""
    X, Y, v, Z = instance(71)
    K0, Q0 = np.eye(3)[:, :2], np.eye(3)[:, :2]
    v_huge = 1e5 * v
    with pytest.raises(ValueError, match=r"^gd_KQ: the gradient at step 0 .*scale of v"):
        mm.gd_KQ(X, Y, v_huge, K0, Q0, Z, 3, 0.1, loss="exponential")
    run = mm.gd_KQ(X, Y, v_huge, K0, Q0, Z, 3, 0.1, loss="exponential", normalized=True, reg=0.01)
    assert np.all(np.isfinite(run.K)) and np.all(np.isfinite(run.Q))
    for A in (run.K, run.Q):
        lengths = np.linalg.norm(np.diff(A, axis=0), axis=(-2, -1))
        np.testing.assert_allclose(lengths, 0.1, rtol=1e-12)
    plain = mm.gd_KQ(X, Y, v_huge, K0, Q0, Z, 3, 0.1, loss="exponential", normalized=True)
    np.testing.assert_allclose(run.K, plain.K, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(run.Q, plain.Q, rtol=1e-12, atol=1e-14)
    zero = mm.gd_KQ(X, Y, v_huge, K0, np.zeros_like(Q0), Z, 2, 0.1, loss="exponential",
                    normalized=True)
    np.testing.assert_array_equal(zero.K[1], zero.K[0])
    np.testing.assert_allclose(np.linalg.norm(zero.Q[1, 0]), 0.1, rtol=1e-12)
    with pytest.raises(ValueError, match=r"^gd_KQ: the gradient at step \d+ .*lr = 1e\+307"):
        mm.gd_KQ(10 * X, Y, v, K0, Q0, Z, 5, 1e307, normalized=True)


def test_a_normalized_step_of_a_tiny_gradient_has_length_lr():
    """With the correlation loss the gradient is linear in v, so v c and eps c (c = 2^-700)
    give the same normalized run as v and eps, although the gradients' squares underflow.
    Bug caught: the normalization by a norm computed naively (0, a huge step, or NaN)."""
    X, Y, v, Z = instance(81)
    rng = np.random.default_rng(82)
    K0, Q0 = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2))
    c = 2.0 ** -700
    base = mm.gd_KQ(X, Y, v, K0, Q0, Z, 10, 0.1, loss="correlation", normalized=True, eps=1e-12)
    tiny = mm.gd_KQ(X, Y, v * c, K0, Q0, Z, 10, 0.1, loss="correlation", normalized=True,
                    eps=1e-12 * c)
    np.testing.assert_allclose(tiny.K, base.K, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tiny.Q, base.Q, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# 6. the follow-up's small instance
# ----------------------------------------------------------------------------------------------


def test_the_visualization_instance_of_the_follow_up(capsys):
    """n = 2, T = 3, d = 2, one query per sequence, normalized GD at lr 0.1 for 2000 steps from
    K0 = 0.1 randn, Q0 = 0 (the follow-up paper's figure). Printed, not asserted: the
    correlation of W_k with W^mm of the selection alpha_i = argmax_t Y_i v^T x_it, and the
    singular values of W_k (nothing proves how far 2000 steps get). Asserted, because they are
    true by construction: the first step leaves K at K0 (Q0 = 0 gives dK = 0) and moves Q by
    lr; every 10th step is the autograd step from the library's iterate (at its rounding bound,
    as in the autograd test); no step of a factor is longer than lr (||g|| / (||g|| + eps) < 1).
    Bugs caught: a zero factor's zero gradient normalized into a NaN or a step, a joint
    normalization of (K, Q) (each factor's step would be shorter than lr)."""
    rng = np.random.default_rng(0)
    n, T, d, m = 2, 3, 2, 2
    X = 0.3 * rng.standard_normal((n, T, d))
    X[0] += np.array([-1.0, 0.0])
    X[1] += np.array([1.0, 0.0])
    Y = np.array([1.0, 1.0])
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    K0, Q0 = 0.1 * rng.standard_normal((d, m)), np.zeros((d, m))
    run = mm.gd_KQ(X, Y, v, K0, Q0, Z, 2000, 0.1, normalized=True)
    np.testing.assert_array_equal(run.K[1, 0], K0)
    np.testing.assert_allclose(np.linalg.norm(run.Q[1, 0]), 0.1, rtol=1e-9)
    for k in range(0, 2000, 10):
        K1, Q1, _, atol_K, atol_Q, _ = reference_step(X, Y, v, Z, run.K[k, 0], run.Q[k, 0], 0.1,
                                                      True, 1e-12, 0.0, "logistic")
        np.testing.assert_allclose(run.K[k + 1, 0], K1, rtol=0, atol=atol_K, err_msg=f"K, step {k}")
        np.testing.assert_allclose(run.Q[k + 1, 0], Q1, rtol=0, atol=atol_Q, err_msg=f"Q, step {k}")
    for A in (run.K, run.Q):
        assert np.all(np.linalg.norm(np.diff(A, axis=0), axis=(-2, -1)) <= 0.1 * (1 + 1e-12))
    alpha = np.argmax(Y[:, None] * (X @ v), axis=1)
    svm = mm.w_svm(X, alpha, queries=Z)
    with capsys.disabled():
        print(f"\nfollow-up instance: alpha = {alpha}, ||W^mm|| = {np.linalg.norm(svm.W):.4f}")
        for r in (0, 1, 10, 100, 500, 1000, 2000):
            k = int(run.steps[r])
            cos = float(run.cosine(svm.W)[r, 0])  # 0 at W = 0
            print(f"  step {k:4d}: corr(W_k, W^mm) = {cos:.6f}, singular values "
                  f"{np.array2string(run.singular_values()[r, 0], precision=4)}, "
                  f"risk {run.risk[r, 0]:.3e}")


# ----------------------------------------------------------------------------------------------
# gd_KQ_stack: a stack of instances, one run each
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "exponential"])
def test_gd_KQ_stack_matches_the_autograd_loop_instance_by_instance(loss, normalized):
    """Three different instances, each with its own start, queries and head, reg > 0: every
    step of run j equals the autograd step on instance j alone at its rounding bound. Bugs
    caught: one instance's tokens or queries used for another's run (a wrong batch axis in the
    einsums), a normalization across instances (one norm for the whole stack), a mean over all
    M n sequences instead of each instance's n, the penalty dropped."""
    insts = [instance(40 + j) for j in range(3)]
    X, Y, v, Z = (np.stack([inst[k] for inst in insts]) for k in range(4))
    d = X.shape[-1]
    rng = np.random.default_rng(41)
    K0 = 0.7 * rng.standard_normal((3, d, 2))
    Q0 = 0.7 * rng.standard_normal((3, d, 2))
    run = mm.gd_KQ_stack(X, Y, v, K0, Q0, Z, STEPS, LR, loss=loss, normalized=normalized,
                         eps=EPS, reg=0.05)
    assert run.K.shape == (STEPS + 1, 3, d, 2) and run.risk.shape == (STEPS + 1, 3)
    for j in range(3):
        one = dataclasses.replace(run, K=run.K[:, j:j + 1], Q=run.Q[:, j:j + 1],
                                  risk=run.risk[:, j:j + 1])
        assert_matches_reference(one, X[j], Y[j], v[j], Z[j], K0[j:j + 1], Q0[j:j + 1],
                                 normalized, EPS, 0.05, loss)


def test_gd_KQ_stack_with_frozen_Q_is_gradient_descent_on_W():
    """freeze_Q=True from Q0 = I trains W = K: each step equals the autograd step on W of the
    model x^T W z (written here), and Q never moves. Bugs caught: Q updated anyway, or K's
    step computed with a stale Q."""
    insts = [instance(50 + j) for j in range(2)]
    X, Y, v, Z = (np.stack([inst[k] for inst in insts]) for k in range(4))
    d = X.shape[-1]
    W0 = 0.5 * np.random.default_rng(51).standard_normal((2, d, d))
    run = mm.gd_KQ_stack(X, Y, v, W0, np.eye(d), Z, 10, LR, normalized=True, freeze_Q=True)
    np.testing.assert_array_equal(run.Q, np.broadcast_to(np.eye(d), run.Q.shape))
    for j in range(2):
        for k in range(10):
            with one_thread():
                Wt = torch.tensor(run.K[k, j], requires_grad=True)
                Xt, Yt, vt, Zt = (torch.tensor(a[j]) for a in (X, Y, v, Z))
                s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, Wt, Zt), dim=-1)
                margin = Yt * (s * (Xt @ vt)).sum(-1)
                risk = torch.log1p(torch.exp(-margin)).mean()
                (g,) = torch.autograd.grad(risk, (Wt,))
                want = (Wt - LR * g / (g.norm() + 1e-12)).detach().numpy()
            np.testing.assert_allclose(run.K[k + 1, j], want, rtol=0, atol=1e-12)


def test_gd_KQ_stack_refuses_bad_inputs_naming_them():
    """Each bad input raises ValueError (or TypeError) starting with its name. Bug caught: a
    shape mismatch broadcast silently (a (d, m) Q0 against (M, d, m) K0 of another width, or
    queries shared across instances that the stack requires per instance)."""
    X, Y, v, Z = instance(60)
    Xs, Ys, Zs = np.stack([X, X]), np.stack([Y, Y]), np.stack([Z, Z])
    d = X.shape[-1]
    K0 = np.zeros((2, d, 2))
    cases = {
        "X": lambda: mm.gd_KQ_stack(X, Ys, v, K0, K0, Zs, 3, 0.1),
        "Y": lambda: mm.gd_KQ_stack(Xs, Y, v, K0, K0, Zs, 3, 0.1),
        "v": lambda: mm.gd_KQ_stack(Xs, Ys, np.ones((3, d)), K0, K0, Zs, 3, 0.1),
        "K0": lambda: mm.gd_KQ_stack(Xs, Ys, v, np.zeros((3, d, 2)), K0, Zs, 3, 0.1),
        "Q0": lambda: mm.gd_KQ_stack(Xs, Ys, v, K0, np.zeros((2, d, 3)), Zs, 3, 0.1),
        "queries": lambda: mm.gd_KQ_stack(Xs, Ys, v, K0, K0, Z, 3, 0.1),
        "freeze_Q": lambda: mm.gd_KQ_stack(Xs, Ys, v, K0, K0, Zs, 3, 0.1, freeze_Q=1),
    }
    for name, call in cases.items():
        with pytest.raises((ValueError, TypeError), match=f"^{name}"):
            call()


# ----------------------------------------------------------------------------------------------
# penalty_path: stationary points of L(K Q^T) + lam (||K||^2 + ||Q||^2)
# ----------------------------------------------------------------------------------------------


def _penalized_fd_gradient(X, Y, v, Z, K, Q, lam, freeze_Q, h=1e-6):
    """Central differences of F(K, Q) = risk_W(K Q^T) + lam (||K||^2 + ||Q||^2), the risk
    from ``mm.risk_W`` (numpy, not the torch autograd of ``penalty_path``)."""
    def F(Kx, Qx):
        pen = np.sum(Kx ** 2) + (0.0 if freeze_Q else np.sum(Qx ** 2))
        return float(mm.risk_W(X, Y, v, Kx @ Qx.T, Z)) + lam * pen
    grads = []
    for which in ((0,) if freeze_Q else (0, 1)):
        A = (K, Q)[which]
        g = np.zeros_like(A)
        for idx in np.ndindex(A.shape):
            E = np.zeros_like(A)
            E[idx] = h
            args_p = (K + E, Q) if which == 0 else (K, Q + E)
            args_m = (K - E, Q) if which == 0 else (K, Q - E)
            g[idx] = (F(*args_p) - F(*args_m)) / (2 * h)
        grads.append(g)
    return np.concatenate([g.ravel() for g in grads])


@pytest.mark.parametrize("freeze_Q", [False, True])
def test_penalty_path_returns_stationary_points_by_finite_differences(freeze_Q):
    """At every returned point the penalized gradient, by central differences of a numpy risk,
    is small against the penalty's own gradient 2 lam (K, Q), and the reported stationarity
    agrees. Bugs caught: the penalty on K only (or on Q when frozen), lam (instead of 2 lam) in
    the stationarity's scale, a path that returns its starts."""
    inst = mm.data.query_instance(3, 4, 3, seed=1)
    Z = inst.extra["queries"]
    rng = np.random.default_rng(2)
    Q0 = np.eye(3) if freeze_Q else 0.5 * rng.standard_normal((3, 3))
    path = mm.penalty_path(inst.X, inst.Y, inst.v, 0.5 * rng.standard_normal((3, 3)), Q0, Z,
                           [1e-2, 1e-3], freeze_Q=freeze_Q)
    assert path.penalties.tolist() == [1e-2, 1e-3]
    for j, lam in enumerate(path.penalties):
        K, Q = path.K[j], path.Q[j]
        fd = _penalized_fd_gradient(inst.X, inst.Y, inst.v, Z, K, Q, lam, freeze_Q)
        pen = 2 * lam * np.sqrt(np.sum(K ** 2) + (0.0 if freeze_Q else np.sum(Q ** 2)))
        # finite differences with h = 1e-6 on values ~1: error ~1e-10 / 1e-6 = 1e-4 of 1
        assert np.linalg.norm(fd) < 1e-3 * pen + 1e-8, (j, np.linalg.norm(fd), pen)
        assert path.stationarity[j] < 1e-5, path.stationarity
        assert np.linalg.norm(K) > 0.1                      # moved away from 0
    if freeze_Q:
        np.testing.assert_array_equal(path.Q, np.broadcast_to(np.eye(3), path.Q.shape))


def test_penalty_path_refuses_bad_inputs_naming_them():
    """Bug caught: a zero or negative penalty (no minimizer, or a maximization) accepted."""
    X, Y, v, Z = instance(70)
    d = X.shape[-1]
    K0 = np.zeros((d, 2))
    cases = {
        "penalties": lambda: mm.penalty_path(X, Y, v, K0, K0, Z, [1e-2, 0.0]),
        "K0": lambda: mm.penalty_path(X, Y, v, np.zeros((d + 1, 2)), K0, Z, [1e-2]),
        "Q0": lambda: mm.penalty_path(X, Y, v, K0, np.zeros((d, 3)), Z, [1e-2]),
        "queries": lambda: mm.penalty_path(X, Y, v, K0, K0, Z[:, :1], [1e-2]),
        "gtol": lambda: mm.penalty_path(X, Y, v, K0, K0, Z, [1e-2], gtol=0.0),
        "max_iter": lambda: mm.penalty_path(X, Y, v, K0, K0, Z, [1e-2], max_iter=0),
    }
    for name, call in cases.items():
        with pytest.raises((ValueError, TypeError), match=f"^{name}"):
            call()
