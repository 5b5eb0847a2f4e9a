"""mm.optimizers.descend against the plain one-step reference (mm.reference), torch.optim.Adam,
the other engines (mm.gd on p, the exact normalized step of mm.exactstep) and, at gaps where every
float64 softmax weight is 0, an mpmath computation of each step from the softmax as written."""
import mpmath
import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import reference as ref
from maxmargin.optimizers import descend, q_norm


def _instance(seed, M=3, n=2, T=4, d=3, e=3, scale=0.3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    v = rng.standard_normal((M, d))
    Z = rng.standard_normal((M, n, e))
    W0 = scale * rng.standard_normal((M, d, e))
    return X, Y, v, Z, W0


# ---- against the plain reference, step by step, where nothing saturates ------------------------

STEPS, LR = 20, 0.05
# Each step's rounding is a few ulp of the step and of |W|; over 20 steps of a smooth map with
# Lipschitz constant of order 1 the differences stay below 20 * 100 ulp of max(|W|, 1): 1e-12.
TOL = 1e-12


def _reference_run(method, X, Y, v, W, Z, lr, **kw):
    """The iterates W_0 .. W_STEPS of one instance from the reference's one-step functions."""
    path, state = [W], None
    for _ in range(STEPS):
        if method == "gd":
            W = ref.gd_W_step(X, Y, v, W, Z, lr)
        elif method == "ngd":
            W = ref.gd_W_step(X, Y, v, W, Z, lr, normalized=True, eps=0.0)
        elif method == "md":
            W = ref.mirror_step(X, Y, v, W, Z, lr, p=kw["p"])
        elif method == "sign":
            W = ref.sign_step(X, Y, v, W, Z, lr)
        elif method == "spectral":
            W = ref.spectral_step(X, Y, v, W, Z, lr)
        elif method == "adam":
            W, state = ref.adam_step(X, Y, v, W, Z, lr, state=state, **kw)
        else:
            W = ref.polyak_step(X, Y, v, W, Z, lr)
        path.append(W)
    return np.array(path)


@pytest.mark.parametrize("method, kw", [
    ("gd", {}), ("ngd", {}), ("md", dict(p=1.75)), ("md", dict(p=3.0)), ("sign", {}),
    ("spectral", {}), ("adam", {}), ("adam", dict(betas=(0.5, 0.9), eps=1e-3)),
    ("adam", dict(betas=(0.8, 0.95), eps=0.0)), ("polyak", {}),
])
def test_each_method_follows_the_reference_loop(method, kw):
    # n = 2 < d: rank G <= 2 of 3, so "spectral" must drop the third (rounding) singular
    # direction; the three instances have their own scale c, moments and norms. Bugs caught: a
    # wrong mirror exponent or dual norm, a step in the primal space, a missing bias correction,
    # a moment rescaled with the wrong scale, a Polyak length off by the gradient's norm, a
    # full (untruncated) polar factor, one instance's scale used for another.
    X, Y, v, Z, W0 = _instance(1)
    run = descend(X, Y, v, W0, Z, STEPS, LR, method=method, **kw)
    if method == "polyak":   # Polyak steps, not only NGD fallbacks, are checked
        assert max(_check_polyak_steps(run, X[j], Y[j], v[j], Z[j], j) for j in range(3)) > 2 * LR
        return
    for j in range(len(X)):
        want = _reference_run(method, X[j], Y[j], v[j], W0[j], Z[j], LR, **kw)
        if method == "sign":   # sign descent is discontinuous: the test needs |G_ij| >> rounding
            grads = [ref.risk_grad_W(X[j], Y[j], v[j], W, Z[j]) for W in want[:-1]]
            assert min(np.min(np.abs(g)) / np.max(np.abs(g)) for g in grads) > 1e-6
        np.testing.assert_allclose(run.W[:, j], want, rtol=0,
                                   atol=TOL * max(1.0, np.max(np.abs(want))))
        risks = [ref.risk_W(X[j], Y[j], v[j], W, Z[j]) for W in want]
        np.testing.assert_allclose(run.risk[:, j], risks, rtol=1e-12)


def _check_polyak_steps(run, X, Y, v, Z, j):
    """Each recorded Polyak step against the reference's from the same W. The reference forms
    L - L* by subtraction, good to about ulp(L) / (L - L*) relatively (1e-10 by step 20 here):
    the tolerance of each step is that, times its length."""
    value, _ = ref.LOSSES["logistic"]
    lengths = []
    for k in range(STEPS):
        W = run.W[k, j]
        want = ref.polyak_step(X, Y, v, W, Z, LR)
        top = np.argmax(np.einsum("ntd,de,ne->nt", X, W, Z), axis=1)
        L = ref.risk_W(X, Y, v, W, Z)
        excess = L - np.mean(value(ref.scores(X, Y, v)[np.arange(len(X)), top]))
        length = np.linalg.norm(want - W)
        lengths.append(length)
        tol = 4e-16 * (1 + abs(L / excess)) * length + 4e-16 * np.abs(W).max()
        np.testing.assert_allclose(run.W[k + 1, j], want, rtol=0, atol=tol)
    return max(lengths)


@pytest.mark.parametrize("p", [1.5, 1.75])
def test_md_starts_from_zero(p):
    # The authors' single-instance start W = 0: psi'(W) = W |W|^(p-2) is 0 * inf = NaN at 0 for
    # p < 2 (notes, pitfall 1). Bug caught: the mirror map written that way.
    X, Y, v, Z, _ = _instance(13)
    run = descend(X, Y, v, np.zeros((3, 3)), Z, STEPS, LR, method="md", p=p)
    for j in range(len(X)):
        want = _reference_run("md", X[j], Y[j], v[j], np.zeros((3, 3)), Z[j], LR, p=p)
        np.testing.assert_allclose(run.W[:, j], want, rtol=0,
                                   atol=TOL * max(1.0, np.max(np.abs(want))))


@pytest.mark.parametrize("method, kw", [("sign", {}), ("spectral", {}), ("adam", dict(eps=0.0)),
                                        ("ngd", {}), ("md", dict(p=1.75)), ("polyak", {})])
def test_exactly_zero_gradient_entries_do_not_move(method, kw):
    # With the last query coordinate 0 in every sequence, the last column of G is exactly 0:
    # sign(0) = 0, and Adam with eps = 0 takes 0 / 0 as 0 there. Bugs caught: sign(0) taken as
    # +1, Adam's 0 / 0 left as NaN (the run then stops with an error), a column of zeros that a
    # full polar factor would fill.
    X, Y, v, Z, W0 = _instance(14)
    Z[..., 2] = 0.0
    run = descend(X, Y, v, W0, Z, 10, 0.1, method=method, **kw)
    # md maps W0 to the dual and back once: a few ulp
    np.testing.assert_allclose(run.W[:, :, :, 2], np.broadcast_to(W0[:, :, 2], (11, 3, 3)),
                               rtol=1e-15 if method == "md" else 0, atol=0)
    assert np.all(np.abs(run.W[-1, :, :, :2] - W0[:, :, :2]) > 0)   # the others move


def test_polyak_counts_its_fallbacks():
    # The instances start where some steps have L - L* <= 0 (the top tokens score worse than the
    # attention-weighted mean): those steps are lr-long NGD steps, and are counted. Bug caught:
    # a fallback taken (or counted) on the wrong sign of the excess.
    X, Y, v, Z, W0 = _instance(5, M=4, scale=1.0)
    run = descend(X, Y, v, W0, Z, STEPS, LR, method="polyak")
    value, _ = ref.LOSSES["logistic"]
    for j in range(len(X)):
        count = 0
        for W in run.W[:-1, j]:
            top = np.argmax(np.einsum("ntd,de,ne->nt", X[j], W, Z[j]), axis=1)
            star = np.mean(value(ref.scores(X[j], Y[j], v[j])[np.arange(2), top]))
            count += ref.risk_W(X[j], Y[j], v[j], W, Z[j]) - star <= 0
        assert run.fallbacks[j] == count
    assert 0 < run.fallbacks.sum() < STEPS * len(X)      # both branches are exercised


def test_md_with_p_2_is_ngd():
    # Bug caught: the mirror map's exponent p - 1 or the dual exponent q off by one somewhere.
    X, Y, v, Z, W0 = _instance(2)
    md = descend(X, Y, v, W0, Z, 30, 0.1, method="md", p=2.0)
    ngd = descend(X, Y, v, W0, Z, 30, 0.1, method="ngd")
    np.testing.assert_allclose(md.W, ngd.W, rtol=0, atol=1e-13)


def test_ngd_is_the_exact_factor_step_with_Q_frozen_at_the_identity():
    # Two codes: exactstep's (K, Q) step with Q = I is NGD on W = K. Bugs caught: a transposed
    # gradient (W z against W^T z), a per-instance norm taken over the whole stack.
    X, Y, v, Z, W0 = _instance(3)
    ours = descend(X, Y, v, W0, Z, 40, 0.2, method="ngd")
    theirs = mm.exactstep.ngd_KQ_exact(X, Y, v, W0, np.eye(3), Z, 40, 0.2, freeze_Q=True)
    np.testing.assert_allclose(ours.W, theirs.K, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.risk, theirs.risk, rtol=1e-12)


@pytest.mark.parametrize("method", ["gd", "ngd"])
def test_the_prompt_is_e_1_with_queries_of_ones(method):
    # W (d, 1) with every z_i = 1 is the prompt p: mm.gd's own torch code on p takes the same
    # steps. Bug caught: the queries contracted on the wrong side of W.
    X, Y, v, _, _ = _instance(4)
    p0 = np.array([0.2, -0.1, 0.3])
    run = descend(X, Y, v, p0[:, None], np.ones((2, 1)), 30, 0.3, method=method)
    for j in range(len(X)):
        other = mm.gd(X[j], Y[j], v[j], p0, 30, 0.3, normalized=method == "ngd", eps=1e-300)
        np.testing.assert_allclose(run.W[:, j, :, 0], other.p[:, 0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(run.risk[:, j], other.risk[:, 0], rtol=1e-12)


# ---- Adam against torch.optim.Adam --------------------------------------------------------------


def _torch_adam(X, Y, v, W0, Z, steps, lr, betas, eps):
    """torch.optim.Adam on the risk written in torch (autograd), one instance: (steps+1, d, e)."""
    X, Y, v, Z = (torch.tensor(a, dtype=torch.float64) for a in (X, Y, v, Z))
    W = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([W], lr=lr, betas=betas, eps=eps)
    path = [W.detach().clone()]
    for _ in range(steps):
        opt.zero_grad()
        s = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W, Z), dim=1)
        f = torch.sum((X @ v) * s, dim=1)
        torch.nn.functional.softplus(-Y * f).mean().backward()
        opt.step()
        path.append(W.detach().clone())
    return torch.stack(path).numpy()


@pytest.mark.parametrize("betas, eps", [((0.9, 0.999), 1e-8), ((0.5, 0.7), 0.1),
                                        ((0.0, 0.99), 1e-8)])
def test_adam_is_torch_adam(betas, eps):
    # Bugs caught: no bias correction (or the wrong power), eps inside the square root, eps
    # not rescaled with the moments' unit, beta1 and beta2 swapped.
    X, Y, v, Z, W0 = _instance(6)
    run = descend(X, Y, v, W0, Z, 60, 0.05, method="adam", betas=betas, eps=eps)
    for j in range(len(X)):
        want = _torch_adam(X[j], Y[j], v[j], W0[j], Z[j], 60, 0.05, betas, eps)
        np.testing.assert_allclose(run.W[:, j], want, rtol=0, atol=1e-12)


def test_adam_without_memory_or_eps_is_sign_descent():
    X, Y, v, Z, W0 = _instance(7)
    adam = descend(X, Y, v, W0, Z, 30, 0.1, method="adam", betas=(0.0, 0.0), eps=0.0)
    sign = descend(X, Y, v, W0, Z, 30, 0.1, method="sign")
    np.testing.assert_array_equal(adam.W, sign.W)
    # steps so long that the scale c falls by more than 709 from one step to the next: a moment
    # rescaled by beta1 * e^(b - b_next) = 0 * inf would be NaN
    X, Y, v, Z, W0 = _saturated(2)
    adam = descend(X, Y, v, W0, Z, 3, 2000.0, method="adam", betas=(0.0, 0.0), eps=0.0)
    sign = descend(X, Y, v, W0, Z, 3, 2000.0, method="sign")
    assert np.min(np.diff(adam.scale[:, 0])) < -709
    np.testing.assert_array_equal(adam.W, sign.W)


# ---- at saturation: mpmath ------------------------------------------------------------------------


def _mp_state(X, Y, v, W, Z):
    """One instance, the softmax as written in mpmath (digits enough for e^(-spread)): the
    gradient G (mp matrix), L and L* (the risk at the top tokens)."""
    spread = np.ptp(np.einsum("ntd,de,ne->nt", X, W, Z))
    n, T, d = X.shape
    e = Z.shape[1]
    with mpmath.workdps(int(60 + spread / np.log(10))):
        G = mpmath.zeros(d, e)
        L = Lstar = mpmath.mpf(0)
        mW = mpmath.matrix(W.tolist())
        for i in range(n):
            z = mpmath.matrix(Z[i].tolist())
            xs = [mpmath.matrix(X[i, t].tolist()) for t in range(T)]
            a = [(x.T * mW * z)[0] for x in xs]
            ex = [mpmath.exp(ai - max(a)) for ai in a]
            s = [u / sum(ex) for u in ex]
            gam = [Y[i] * (mpmath.matrix(v.tolist()).T * x)[0] for x in xs]
            margin = sum(st * g for st, g in zip(s, gam))
            L += mpmath.log(1 + mpmath.exp(-margin)) / n
            Lstar += mpmath.log(1 + mpmath.exp(-gam[a.index(max(a))])) / n
            slope = -1 / (1 + mpmath.exp(margin))
            for t in range(T):
                G += (slope / n) * s[t] * (gam[t] - margin) * xs[t] * z.T
        return G, L, Lstar


def _saturated(seed):
    """One instance of two with every gap beyond 745 (float64 weights all 0), one of order one."""
    X, Y, v, Z, W0 = _instance(seed, M=2, n=2, T=3, d=3, e=3, scale=1.0)
    def gaps():
        srt = np.sort(np.einsum("mntd,mde,mne->mnt", X, W0, Z), axis=2)
        return srt[..., -1] - srt[..., -2]
    W0[0] *= 800.0 / gaps()[0].min()
    assert gaps()[0].min() > 745 and gaps()[1].max() < 30, gaps()
    assert np.abs(W0[0]).max() < 2000, W0[0]      # not a degenerate start
    return X, Y, v, Z, W0


def _mp_float(A, scale=1):
    with mpmath.workdps(60):
        return np.array((A * scale).tolist(), dtype=float)


@pytest.mark.parametrize("method, kw", [("ngd", {}), ("md", dict(p=1.75)), ("sign", {}),
                                        ("spectral", {}), ("polyak", {})])
def test_scale_free_steps_are_exact_past_the_float64_ceiling(method, kw):
    # One step from a W whose gaps exceed 745 (instance 0) and one of moderate gaps (instance 1)
    # against mpmath. Bugs caught: a step that underflows to 0, one scale c for the stack, the
    # dual norm taken unscaled, the Polyak excess computed as a plain difference (0 there).
    X, Y, v, Z, W0 = _saturated(2)
    lr = 0.5
    run = descend(X, Y, v, W0, Z, 1, lr, method=method, **kw)
    for j in range(2):
        G, L, Lstar = _mp_state(X[j], Y[j], v[j], W0[j], Z[j])
        with mpmath.workdps(60):
            norm_F = mpmath.mnorm(G, "f")
            unit = _mp_float(G / norm_F)
            length = float((L - Lstar) / norm_F)          # < 0 in instance 1: a fallback
            if method == "md":
                q = kw["p"] / (kw["p"] - 1)
                norm_q = sum(abs(g) ** q for g in G) ** (1 / q)
                dual = _mp_float(G / norm_q)
        if method == "ngd":
            want, tol = W0[j] - lr * unit, 4e-16 * np.abs(W0[j]).max()
        elif method == "sign":
            want, tol = W0[j] - lr * np.sign(unit), 4e-16 * np.abs(W0[j]).max()
        elif method == "spectral":
            U, S, Vt = np.linalg.svd(unit)
            keep = S > 1e-10 * S[0]
            want, tol = W0[j] - lr * U[:, keep] @ Vt[keep], 1e-12 * np.abs(W0[j]).max()
        elif method == "polyak":
            assert (length > 0) == (j == 0) and run.fallbacks[j] == j   # both branches
            step = length if length > 0 else lr
            want, tol = W0[j] - step * unit, 1e-13 * np.abs(W0[j]).max()
        else:  # md: compare in the dual space, psi'(W) = sign(W)|W|^(p-1)
            p = kw["p"]
            dual_of = lambda W: np.sign(W) * np.abs(W) ** (p - 1)
            got = (dual_of(W0[j]) - dual_of(run.W[1, j])) / lr
            np.testing.assert_allclose(got, dual, rtol=0,
                                       atol=1e-14 * np.abs(dual_of(W0[j])).max() / lr)
            continue
        np.testing.assert_allclose(run.W[1, j], want, rtol=0, atol=tol)


def test_the_recorded_gradient_norm_and_excess_are_exact_at_saturation():
    # log ||grad L||_F and log(L - L*) near -1000 (both 0 in float64): the chapter's plots of
    # tiny gradients and loss excesses. Bugs caught: the scale c dropped from the log, the
    # excess taken as l(z) - l(gamma_top) (0 here), a sign flip of the excess.
    X, Y, v, Z, W0 = _saturated(2)
    run = descend(X, Y, v, W0, Z, 1, 0.1, method="ngd")
    for j in range(2):
        G, L, Lstar = _mp_state(X[j], Y[j], v[j], W0[j], Z[j])
        with mpmath.workdps(60):
            log_norm = float(mpmath.log(mpmath.mnorm(G, "f")))
            excess = L - Lstar
            log_excess = float(mpmath.log(excess)) if excess > 0 else np.nan
        assert log_norm < -745 and excess > 0 if j == 0 else log_norm > -50 and excess < 0
        np.testing.assert_allclose(run.log_grad_norm[0, j], log_norm, rtol=1e-13)
        np.testing.assert_allclose(run.log_excess[0, j], log_excess, rtol=1e-12)   # NaN for j=1


def test_adam_without_eps_is_exact_past_the_ceiling_and_gd_and_adam_with_eps_stop():
    # Three Adam steps (lr 2: the gaps, and so the gradient's scale, change by many orders
    # between steps, so the moments must be carried in one unit) against an mpmath Adam loop;
    # plain GD and Adam with eps = 1e-8 do not move (their true steps are far below an ulp of W).
    X, Y, v, Z, W0 = _saturated(6)
    lr, betas = 2.0, (0.9, 0.999)
    run = descend(X, Y, v, W0, Z, 3, lr, method="adam", betas=betas, eps=0.0)
    W = W0[0].copy()
    with mpmath.workdps(60):
        m = mpmath.zeros(3, 3)
        s = mpmath.zeros(3, 3)
        for k in range(1, 4):
            G, _, _ = _mp_state(X[0], Y[0], v[0], W, Z[0])
            m = betas[0] * m + (1 - betas[0]) * G
            s = betas[1] * s + (1 - betas[1]) * G.apply(lambda g: g * g)
            step = mpmath.matrix(3, 3)
            for a in range(3):
                for b in range(3):
                    step[a, b] = (m[a, b] / (1 - betas[0] ** k)) / mpmath.sqrt(
                        s[a, b] / (1 - betas[1] ** k))
            W = W - lr * _mp_float(step)
            np.testing.assert_allclose(run.W[k, 0], W, rtol=0, atol=1e-13 * np.abs(W).max())
    assert np.ptp(np.sort(run.W[-1, 0] - W0[0], axis=None)) > 0    # it moved
    for method, kw in [("gd", {}), ("adam", dict(eps=1e-8))]:
        frozen = descend(X, Y, v, W0, Z, 3, 1.0, method=method, **kw)
        np.testing.assert_array_equal(frozen.W[:, 0], np.broadcast_to(W0[0], (4, 3, 3)))
        assert np.all(frozen.log_grad_norm[:, 0] < -745)          # the true gradient is below
        assert not np.array_equal(frozen.W[1, 1], W0[1])          # the other instance moves


def test_the_dual_norm_of_a_tiny_gradient():
    # v of size 1e-140 makes every gradient entry about 1e-140: (sum |g|^(7/3))^(3/7) is 0 in
    # float64, so an unscaled dual norm divides by 0. The mirror step must match mpmath.
    X, Y, v, Z, W0 = _instance(10, M=1)
    v = v * 1e-140
    G_plain = ref.risk_grad_W(X[0], Y[0], v[0], W0[0], Z[0])
    assert 0 < np.abs(G_plain).max() < 1e-138
    assert np.sum(np.abs(G_plain) ** (7 / 3)) == 0.0               # the plain q-norm underflows
    np.testing.assert_allclose(q_norm(G_plain[None], 7 / 3), float(
        sum(mpmath.mpf(float(abs(g))) ** (mpmath.mpf(7) / 3) for g in G_plain.flat)
        ** (mpmath.mpf(3) / 7)), rtol=1e-14)
    p, lr = 1.75, 0.1                                               # q = 7/3
    run = descend(X, Y, v, W0, Z, 1, lr, method="md", p=p)
    G, _, _ = _mp_state(X[0], Y[0], v[0], W0[0], Z[0])
    with mpmath.workdps(60):
        norm_q = sum(abs(g) ** (mpmath.mpf(7) / 3) for g in G) ** (mpmath.mpf(3) / 7)
        dual = _mp_float(G / norm_q)
    dual_of = lambda W: np.sign(W) * np.abs(W) ** (p - 1)
    got = (dual_of(W0[0]) - dual_of(run.W[1, 0])) / lr
    np.testing.assert_allclose(got, dual, rtol=0, atol=1e-14 / lr)


# ---- inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(method="adamw"), ValueError, "method"), (dict(method=None), TypeError, "method"),
    (dict(method="md"), ValueError, "p"), (dict(method="md", p=1.0), ValueError, "p"),
    (dict(method="ngd", p=2.0), ValueError, "p"),
    (dict(method="adam", betas=(0.9, 1.0)), ValueError, "betas"),
    (dict(method="adam", betas=(-0.1, 0.9)), ValueError, "betas"),
    (dict(method="adam", betas=0.9), TypeError, "betas"),
    (dict(method="adam", eps=-1e-8), ValueError, "eps"),
    (dict(method="sign", eps=1e-8), ValueError, "eps"),
    (dict(method="ngd", betas=(0.9, 0.99)), ValueError, "betas"),
    (dict(steps=0), ValueError, "steps"), (dict(lr=0.0), ValueError, "lr"),
    (dict(lr=np.nan), ValueError, "lr"),
    (dict(queries=np.ones((3, 3))), ValueError, "queries"),
    (dict(queries=np.full((2, 3), np.nan)), ValueError, "queries"),
    (dict(W0=np.ones((3, 2))), ValueError, "W0"), (dict(W0=np.full((3, 3), np.inf)), ValueError, "W0"),
    (dict(Y=np.ones((3, 3))), ValueError, "Y"), (dict(record_every=0), ValueError, "record_every"),
    (dict(steps=10 ** 9), ValueError, "steps"),
])
def test_bad_inputs_name_the_argument(kwargs, error, name):
    X, Y, v, Z, W0 = _instance(11)
    args = dict(X=X, Y=Y, v=v, W0=W0, queries=Z, steps=3, lr=0.1, method="ngd") | kwargs
    with pytest.raises(error, match=f"^{name}"):
        descend(**args)


def test_iterates_leaving_float64_name_lr():
    X, Y, v, Z, W0 = _instance(12)
    with pytest.raises(ValueError, match="^lr"):
        descend(X, Y, v, W0, Z, 3, 1e308, method="sign")


def test_the_docstring_examples_run():
    import doctest

    import maxmargin.optimizers as module

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, globs={"np": np, "mm": mm}) if t.examples]
    assert len(tests) >= 3, "examples missing"
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
