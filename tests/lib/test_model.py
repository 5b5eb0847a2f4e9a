"""The model's risk and analytic gradients against torch autograd and finite differences."""
import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import maxmargin as mm
from maxmargin.book import landscape

LOSS_TORCH = {
    "logistic": lambda x: torch.nn.functional.softplus(-x),
    "exponential": lambda x: torch.exp(-x),
    "correlation": lambda x: -x,
}


def instance(seed, n=5, T=4, d=3, with_W=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    W = rng.standard_normal((d, d)) if with_W else None
    return X, Y, v, W


def torch_risk(X, Y, v, p, W, loss):
    """The model written directly in torch: an independent implementation for autograd."""
    X, Y = torch.tensor(X), torch.tensor(Y)
    Wt = torch.eye(X.shape[2], dtype=torch.float64) if W is None else torch.tensor(W)
    s = torch.softmax(X @ (Wt @ p), dim=-1)
    f = (s * (X @ v)).sum(-1)
    return LOSS_TORCH[loss](Y * f).mean()


@pytest.mark.parametrize("loss", sorted(LOSS_TORCH))
@pytest.mark.parametrize("seed", range(4))
def test_gradients_match_autograd(loss, seed):
    X, Y, v, W = instance(seed, with_W=seed % 2 == 0)
    p = np.random.default_rng(100 + seed).standard_normal(3)
    pt = torch.tensor(p, requires_grad=True)
    vt = torch.tensor(v, requires_grad=True)
    value = torch_risk(X, Y, vt, pt, W, loss)
    value.backward()
    assert mm.risk(X, Y, v, p, W=W, loss=loss) == pytest.approx(value.item(), rel=1e-12)
    np.testing.assert_allclose(mm.risk_grad(X, Y, v, p, W=W, loss=loss), pt.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(mm.risk_grad_v(X, Y, v, p, W=W, loss=loss), vt.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("loss", sorted(LOSS_TORCH))
def test_gradient_matches_finite_differences(loss):
    X, Y, v, W = instance(7)
    p = np.array([0.3, -0.8, 0.5])
    h = 1e-6
    fd = np.array([(mm.risk(X, Y, v, p + h * e, W=W, loss=loss) - mm.risk(X, Y, v, p - h * e, W=W, loss=loss)) / (2 * h)
                   for e in np.eye(3)])
    # central differences: truncation h^2 |d^3 L| / 6 ~ 1e-13, rounding (each risk, ~1, off by up
    # to ~50 u, over 2 h) up to 5e-9; atol 1e-10 sat at 0.36 of the actual rounding on one machine
    np.testing.assert_allclose(mm.risk_grad(X, Y, v, p, W=W, loss=loss), fd, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("shared_query", [True, False])
def test_W_gradient_matches_autograd(shared_query):
    X, Y, v, _ = instance(3)
    rng = np.random.default_rng(5)
    W = rng.standard_normal((3, 3))
    Z = rng.standard_normal(3) if shared_query else rng.standard_normal((5, 3))
    Wt = torch.tensor(W, requires_grad=True)
    Zt = torch.tensor(np.broadcast_to(Z, (5, 3)).copy())
    logits = torch.einsum("ntd,de,ne->nt", torch.tensor(X), Wt, Zt)
    f = (torch.softmax(logits, -1) * torch.tensor(X @ v)).sum(-1)
    risk = torch.nn.functional.softplus(-torch.tensor(Y) * f).mean()
    risk.backward()
    assert mm.risk_W(X, Y, v, W, Z) == pytest.approx(risk.item(), rel=1e-12)
    np.testing.assert_allclose(mm.risk_grad_W(X, Y, v, W, Z), Wt.grad.numpy(), rtol=1e-10, atol=1e-14)
    if shared_query:  # rank one: grad_W = g p^T with g the gradient in u = W p
        assert np.linalg.svd(mm.risk_grad_W(X, Y, v, W, Z), compute_uv=False)[1] < 1e-12


def test_margin_is_attention_weighted_score():
    """Y_i f(X_i) = sum_t s_it gamma_it."""
    X, Y, v, W = instance(11)
    p = np.array([1.0, 2.0, -0.5])
    lhs = Y * mm.predict(X, v, p, W=W)
    rhs = np.sum(mm.attention(X, p, W=W) * mm.scores(X, Y, v), axis=-1)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-13)


def test_batch_axes_are_kept_and_match_single_calls():
    X, Y, v, W = instance(2)
    P = np.random.default_rng(0).standard_normal((2, 3, 3))
    risks, grads = mm.risk(X, Y, v, P, W=W), mm.risk_grad(X, Y, v, P, W=W)
    attn = mm.attention(X, P, W=W)
    assert risks.shape == (2, 3) and grads.shape == (2, 3, 3) and attn.shape == (2, 3, 5, 4)
    for idx in np.ndindex(2, 3):
        assert risks[idx] == pytest.approx(mm.risk(X, Y, v, P[idx], W=W), rel=1e-14)
        np.testing.assert_allclose(grads[idx], mm.risk_grad(X, Y, v, P[idx], W=W), rtol=1e-13)
        np.testing.assert_allclose(attn[idx], mm.attention(X, P[idx], W=W), rtol=1e-13)


MP_LOSS_DERIVATIVE = {
    "logistic": lambda z: -1 / (1 + mpmath.exp(z)),
    "exponential": lambda z: -mpmath.exp(-z),
    "correlation": lambda z: mpmath.mpf(-1),
}


def high_precision_grad(X, Y, v, p, W, loss):
    """grad_p L in arbitrary precision (mpmath), straight from the formula: the reference.

    The precision grows with the logit spread, so that z_i - gamma_it keeps ~50 digits even when
    attention weights are as small as exp(-spread).
    """
    K = X @ (np.eye(X.shape[2]) if W is None else W)
    spread = np.ptp(K @ p, axis=-1).max()
    with mpmath.workdps(50 + int(spread / np.log(10))):
        grad = [mpmath.mpf(0)] * X.shape[2]
        for Xi, Ki, yi in zip(X, K, Y):
            logit = [mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(k, p)) for k in Ki]
            top = max(logit)
            e = [mpmath.exp(l - top) for l in logit]
            s = [x / mpmath.fsum(e) for x in e]
            gamma = [mpmath.mpf(yi) * mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(x, v)) for x in Xi]
            z = mpmath.fsum(a * b for a, b in zip(s, gamma))
            weight = MP_LOSS_DERIVATIVE[loss](z) / len(Y)
            for j in range(X.shape[2]):
                grad[j] += weight * mpmath.fsum(st * (g - z) * mpmath.mpf(k[j]) for st, g, k in zip(s, gamma, Ki))
        return np.array([float(g) for g in grad])


@pytest.mark.parametrize("norm", [1e1, 1e2, 1e3, 1e4])
@pytest.mark.parametrize("loss", sorted(LOSS_TORCH))
def test_large_norm_prompts_stay_finite_and_accurate(norm, loss):
    """Directional convergence sends norm(p) to infinity: risk and gradient must stay finite and
    the gradient accurate (relative 1e-8 per entry, against arbitrary-precision arithmetic) even when
    attention is one-hot to machine precision."""
    X, Y, v, W = instance(4)
    rng = np.random.default_rng(9)
    for _ in range(3):
        direction = rng.standard_normal(3)
        p = norm * direction / np.linalg.norm(direction)
        value, grad = mm.risk(X, Y, v, p, W=W, loss=loss), mm.risk_grad(X, Y, v, p, W=W, loss=loss)
        assert np.isfinite(value) and np.all(np.isfinite(grad))
        np.testing.assert_allclose(grad, high_precision_grad(X, Y, v, p, W, loss), rtol=1e-8, atol=1e-300)


def test_optimal_risk_is_a_strict_lower_bound_on_fig2():
    """The optimal-risk lemma: L(p) > L* = mean loss(gamma_opt) for every finite p (check C7)."""
    inst = mm.data.fig2()
    L_star = mm.optimal_risk(inst.X, inst.Y, inst.v)
    assert L_star == pytest.approx(np.log1p(np.exp(-1.0)), abs=1e-7)
    P = np.random.default_rng(0).uniform(-10, 10, size=(2000, 3))
    assert np.all(mm.risk(inst.X, inst.Y, inst.v, P, W=inst.W) > L_star)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.0, 50.0))
def test_margin_lies_between_min_and_max_score(seed, scale):
    X, Y, v, W = instance(seed, n=3, T=4, d=3)
    p = scale * np.random.default_rng(seed).standard_normal(3)
    margins = Y * mm.predict(X, v, p, W=W)
    gamma = mm.scores(X, Y, v)
    assert np.all(margins <= gamma.max(axis=1) + 1e-12) and np.all(margins >= gamma.min(axis=1) - 1e-12)
    assert mm.risk(X, Y, v, p, W=W) >= mm.optimal_risk(X, Y, v) - 1e-15

# The loss backends (numpy and torch, value and derivative) are tested over the registry
# mm.LOSSES itself in tests/lib/test_losses.py, so that a new loss is covered automatically.


def _risk_by_hand(X, Y, v, W, p):
    """The logistic risk at one prompt p, written out in numpy."""
    logits = np.einsum("ntd,de,e->nt", X, np.eye(X.shape[2]) if W is None else W, p)
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    margin = Y * np.einsum("nt,ntd,d->n", s, X, v)
    return np.mean(np.logaddexp(0.0, -margin))


def _optimal_risk_by_hand(X, Y, v):
    return np.mean(np.logaddexp(0.0, -np.max(Y[:, None] * (X @ v), axis=1)))


def test_rays_are_unit_directions_times_the_radius():
    """excess_risk_on_rays at radius R along a direction of norm 5 is the excess risk at R u
    with u of norm 1 (a missing normalisation evaluates at 5 R u)."""
    rng = np.random.default_rng(4)
    X, W = rng.standard_normal((3, 4, 3)), rng.standard_normal((3, 3))
    Y, v = np.array([1.0, -1.0, 1.0]), rng.standard_normal(3)
    direction = np.array([3.0, 4.0, 0.0])
    radii, gaps = landscape.excess_risk_on_rays(X, Y, v, [direction], W=W, radii=[0.5, 2.0])
    for R, gap in zip(radii, gaps[0]):
        expected = _risk_by_hand(X, Y, v, W, R * direction / 5.0) - _optimal_risk_by_hand(X, Y, v)
        assert gap == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_circle_angles_run_counterclockwise_from_p1():
    """angle theta on the circle is p = R (cos theta, sin theta, 0): at 90 degrees p = (0, R, 0)
    (a flipped angle gives (0, -R, 0), whose risk differs on this instance)."""
    rng = np.random.default_rng(5)
    X, Y, v = rng.standard_normal((3, 4, 3)), np.array([1.0, -1.0, 1.0]), rng.standard_normal(3)
    theta, gaps = landscape.excess_risk_on_circle(X, Y, v, 2.0, num=5)   # -180, -90, 0, 90, 180
    np.testing.assert_array_equal(theta, [-180.0, -90.0, 0.0, 90.0, 180.0])
    star = _optimal_risk_by_hand(X, Y, v)
    for angle, gap in zip(theta, gaps):
        p = 2.0 * np.array([np.cos(np.radians(angle)), np.sin(np.radians(angle)), 0.0])
        assert gap == pytest.approx(_risk_by_hand(X, Y, v, None, p) - star, rel=1e-12, abs=1e-15)
    assert abs(_risk_by_hand(X, Y, v, None, [0, 2.0, 0]) - _risk_by_hand(X, Y, v, None, [0, -2.0, 0])) > 1e-3


def _vanishing_instance():
    """X (2, 3, 2), Y, v whose optimal token (token 0) also has the largest logit along
    p = r (e1 - e2): the excess risk vanishes as r grows (weights off the optimum e^-O(r))."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 3, 2))
    Y, v = np.array([1.0, -1.0]), np.array([1.0, 0.5])
    X[0, 0], X[1, 0] = [2.0, -1.0], [0.5, -3.0]
    gamma = mm.scores(X, Y, v)
    assert np.all(gamma[:, 0] > gamma[:, 1:].max(axis=1))
    assert np.all(X[:, 0] @ [1, -1] > (X[:, 1:] @ [1, -1]).max(axis=1))
    return X, Y, v


def _mp_excess(X, Y, v, p, value):
    """L(p) - L* of the loss ``value`` (an mpmath function) at the current mpmath precision."""
    reference = mpmath.mpf(0)
    for i in range(len(X)):
        logits = [mpmath.mpf(float(a)) * p[0] + mpmath.mpf(float(b)) * p[1] for a, b in X[i]]
        top = max(logits)
        weights = [mpmath.exp(lg - top) for lg in logits]
        gammas = [Y[i] * (mpmath.mpf(float(a)) * v[0] + mpmath.mpf(float(b)) * v[1])
                  for a, b in X[i]]
        z = sum(w * g for w, g in zip(weights, gammas)) / sum(weights)
        reference += (value(z) - value(max(gammas))) / len(X)
    return reference


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_excess_risk_keeps_its_relative_accuracy_as_it_vanishes(loss):
    """L(p) - L* along p = r (e1 - e2) on a random 2-sequence instance, r up to 300 (weights off
    the optimum down to about 1e-260): relative error at most 1e-12 against a 400-digit mpmath
    evaluation of the same formula. Bug caught (issue 22 review, F11): excess_risk was the
    difference of two risks, 0.0 at r = 20 where the excess is 5.7e-19 (and off by a relative
    2e-7 at r = 10)."""
    X, Y, v = _vanishing_instance()
    value = {"logistic": lambda z: mpmath.log1p(mpmath.exp(-z)), "exponential":
             lambda z: mpmath.exp(-z), "correlation": lambda z: -z}[loss]
    with mpmath.workdps(400):  # z = gamma* - delta with delta down to 1e-260: 300+ digits
        for r in (0.5, 3.0, 10.0, 20.0, 60.0, 300.0):
            p = r * np.array([1.0, -1.0])
            reference = _mp_excess(X, Y, v, p, value)
            got = float(mm.excess_risk(X, Y, v, p, loss=loss))
            assert got == pytest.approx(float(reference), rel=1e-12, abs=0), (r, got, reference)


def _doubled_logistic(**excess):
    """l(x) = log(1 + exp(-2 x)), a user's Loss (with ``excess`` if given)."""
    return mm.Loss("doubled", "log(1 + exp(-2 * x))", value=lambda x: np.logaddexp(0.0, -2.0 * x),
                   derivative=lambda x: -2.0 / (1.0 + np.exp(2.0 * x)),
                   torch_value=lambda x: torch.logaddexp(torch.zeros_like(x), -2.0 * x),
                   torch_derivative=lambda x: -2.0 * torch.sigmoid(-2.0 * x), **excess)


def test_excess_risk_takes_a_user_loss_own_excess_form():
    """A user's Loss with an ``excess`` form gets the built-ins' accuracy as the excess vanishes
    (1e-12 relative against 400 digits at r = 20 and 60, where the difference of two risks is 0
    or has no correct digit); without one, the difference (exact where it does not cancel, r =
    0.5). Bugs caught: ``Loss.excess`` ignored (the difference taken for every user loss), the
    form called with (top, delta) swapped, a user loss without a form handed a built-in's."""
    X, Y, v = _vanishing_instance()
    excess = lambda delta, top: np.log1p(np.expm1(2.0 * delta) / (1.0 + np.exp(2.0 * top)))
    with mpmath.workdps(400):
        for r in (0.5, 20.0, 60.0):
            p = r * np.array([1.0, -1.0])
            reference = float(_mp_excess(X, Y, v, p, lambda z: mpmath.log1p(mpmath.exp(-2 * z))))
            got = float(mm.excess_risk(X, Y, v, p, loss=_doubled_logistic(excess=excess)))
            assert got == pytest.approx(reference, rel=1e-12, abs=0), (r, got, reference)
            if r == 0.5:   # no form: the difference, accurate where the excess is not small
                plain = float(mm.excess_risk(X, Y, v, p, loss=_doubled_logistic()))
                assert plain == pytest.approx(reference, rel=1e-12)


def test_excess_risk_drops_a_builtin_form_that_a_copy_carries_with_other_formulas():
    """``dataclasses.replace(mm.LOGISTIC, value=...)`` keeps LOGISTIC's ``excess`` field; a loss
    with other formulas must not use it. Here l(x) = log(1 + exp(-x)) / 2: its excess risk is
    half the logistic's (against 400 digits, 1e-12 relative where the difference is accurate, r
    = 0.5 and 3). Bug caught: the stale form used, an excess risk twice the true one."""
    import dataclasses

    half = dataclasses.replace(
        mm.LOGISTIC, name="halved", value=lambda x: 0.5 * np.logaddexp(0.0, -x),
        derivative=lambda x: -0.5 / (1.0 + np.exp(x)),
        torch_value=lambda x: 0.5 * torch.logaddexp(torch.zeros_like(x), -x),
        torch_derivative=lambda x: -0.5 * torch.sigmoid(-x))
    assert half.excess is mm.LOGISTIC.excess
    X, Y, v = _vanishing_instance()
    with mpmath.workdps(400):
        for r in (0.5, 3.0):
            p = r * np.array([1.0, -1.0])
            reference = float(_mp_excess(X, Y, v, p, lambda z: mpmath.log1p(mpmath.exp(-z)) / 2))
            got = float(mm.excess_risk(X, Y, v, p, loss=half))
            assert got == pytest.approx(reference, rel=1e-12, abs=0), (r, got, reference)


def test_risk_grad_W_does_not_overflow_inside_its_contraction():
    """Exponential loss at margins near -704 (slope e^704 = 1e305.7), keys 1e3, query 1e-3: the
    gradient entries are +-1.1075e306, representable, as a 50-digit mpmath evaluation of
    l'(z) sum_t s_t (gamma_t - z) x_t z^T at W = 0 (uniform attention) says. Bug caught (issue
    22 review, F7): the three-operand contraction formed dlogit * x = 4e308 = inf before the
    query's 1e-3, and the call refused with "the gradient exceeds float64"."""
    import mpmath

    X = np.array([[[1e3, 0.0], [0.0, 1e3]]])
    v, q = np.array([-0.700, -0.708]), np.array([1e-3, 0.0])
    G = mm.risk_grad_W(X, [1.0], v, np.zeros((2, 2)), q, loss="exponential")
    with mpmath.workdps(50):
        gamma = [mpmath.mpf(float(X[0, t, t])) * mpmath.mpf(float(v[t])) for t in range(2)]
        z = (gamma[0] + gamma[1]) / 2
        slope = -mpmath.exp(-z)
        # X is diagonal: only token a has a nonzero entry a, so row a is token a's term
        expected = [[float(slope * (gamma[a] - z) / 2 * mpmath.mpf(float(X[0, a, a]))
                           * mpmath.mpf(float(q[b]))) for b in range(2)] for a in range(2)]
    np.testing.assert_allclose(G, expected, rtol=1e-12)


def test_risk_grad_W_keeps_small_entries_where_nothing_overflows():
    """Two sequences whose logit gradients differ by 1e323 in size (1e303 and 1e-20), no
    product near overflow: entry (0, 2) of the gradient, set by the small sequence, equals a
    50-digit mpmath evaluation to 1e-12 relative. Bug caught (review of the overflow fix):
    dividing every run by its largest power of two pushed the small sequence's terms into
    subnormal numbers and the entry was off by 10%."""
    import mpmath

    X = np.array([[[0.0, 1e8, 0.0], [0.0, -1e8, 0.0]],
                  [[1e290, 1e-295, 23.0], [0.0, -1e-295, -23.0]]])
    Y, v = np.array([-1.0, 1.0]), np.array([0.0, 1e295, 0.0])
    Z = np.array([[0.0, 1e-8, 0.0], [0.0, 0.0, 1.0]])
    got = mm.risk_grad_W(X, Y, v, np.eye(3), Z)
    with mpmath.workdps(50):
        F = lambda a: mpmath.mpf(float(a))  # noqa: E731
        grad = [[mpmath.mpf(0)] * 3 for _ in range(3)]
        for i in range(2):
            logits = [sum(F(X[i, t, a]) * F(Z[i, a]) for a in range(3)) for t in range(2)]
            top = max(logits)
            w = [mpmath.exp(lg - top) for lg in logits]
            s = [x / sum(w) for x in w]
            gamma = [F(Y[i]) * sum(F(v[a]) * F(X[i, t, a]) for a in range(3)) for t in range(2)]
            z = sum(st * g for st, g in zip(s, gamma))
            slope = -1 / (1 + mpmath.exp(z))  # logistic l'(z)
            for t in range(2):
                c = slope * s[t] * (gamma[t] - z) / 2  # mean over the n = 2 sequences
                for a in range(3):
                    for b in range(3):
                        grad[a][b] += c * F(X[i, t, a]) * F(Z[i, b])
    assert got[0, 2] == pytest.approx(float(grad[0][2]), rel=1e-12)
    # entries below the smallest normal number (here -5.7e-316) may underflow
    np.testing.assert_allclose(got, np.array(grad, dtype=float), rtol=1e-12,
                               atol=np.finfo(np.float64).tiny)
