"""The exact-step normalized GD on (K, Q) (maxmargin.exactstep) against an mpmath computation of
the same step from the plain softmax, and against the torch engine where neither underflows."""
import mpmath
import numpy as np
import pytest

import maxmargin as mm
from maxmargin.exactstep import ngd_KQ_exact


def _instance(seed, M=2, n=2, T=3, d=3, m=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    v = rng.standard_normal((M, d))
    Z = rng.standard_normal((M, n, d))
    K = rng.standard_normal((M, d, m))
    Q = rng.standard_normal((M, d, m))
    return X, Y, v, Z, K, Q


def _mp_directions(X, Y, v, Z, K, Q, joint, freeze_Q):
    """One instance: the normalized steps (dK/|dK|, dQ/|dQ|) of the logistic risk from the
    softmax as written, s_it = e^(a_it) / sum_u e^(a_iu), with 50 digits more than the spread
    of the logits needs (1 - s_ir of order e^(-gap) must not round away)."""
    spread = np.ptp(np.einsum("ntd,dk,ek,ne->nt", X, K, Q, Z))
    with mpmath.workdps(int(50 + spread / np.log(10))):
        n, T, d = X.shape
        m = K.shape[1]
        mK, mQ = mpmath.matrix(K.tolist()), mpmath.matrix(Q.tolist())
        W = mK * mQ.T
        G = mpmath.zeros(d, d)
        for i in range(n):
            z = mpmath.matrix(Z[i].tolist())
            xs = [mpmath.matrix(X[i, t].tolist()) for t in range(T)]
            a = [(x.T * W * z)[0] for x in xs]
            e = [mpmath.exp(ai) for ai in a]
            s = [ei / sum(e) for ei in e]
            gam = [Y[i] * (mpmath.matrix(v.tolist()).T * x)[0] for x in xs]
            margin = sum(st * g for st, g in zip(s, gam))
            slope = -1 / (1 + mpmath.exp(margin))          # l'(z) of log(1 + e^(-z))
            for t in range(T):
                G += (slope / n) * s[t] * (gam[t] - margin) * xs[t] * z.T
        dK = G * mQ
        dQ = mpmath.zeros(d, m) if freeze_Q else G.T * mK
        nK, nQ = mpmath.mnorm(dK, "f"), mpmath.mnorm(dQ, "f")
        if joint:
            nK = nQ = mpmath.sqrt(nK ** 2 + nQ ** 2)
        to = lambda A, nA: np.array((A / nA).tolist() if nA != 0 else A.tolist(), dtype=float)
        return to(dK, nK), to(dQ, nQ)


@pytest.mark.parametrize("joint, freeze_Q", [(False, False), (True, False), (False, True)])
def test_step_matches_mpmath_at_any_gap(joint, freeze_Q):
    # Instance 0 at gaps of hundreds to thousands (softmax weights of 0 in float64), instance 1
    # at gaps of order one: a step that underflowed, or one scale for both instances, or the top
    # token's derivative formed by cancellation, would miss the mpmath direction.
    X, Y, v, Z, K, Q = _instance(1)
    K[0] *= 100.0
    Q[0] *= 100.0
    a = np.einsum("mntd,mdk,mek,mne->mnt", X, K, Q, Z)
    gaps = np.sort(a, axis=2)[..., -1] - np.sort(a, axis=2)[..., -2]
    assert gaps[0].min() > 745 and gaps[1].max() < 30, gaps   # every weight of 0 underflows
    lr = 1e-3
    run = ngd_KQ_exact(X, Y, v, K, Q, Z, 1, lr, joint=joint, freeze_Q=freeze_Q, record_every=1)
    for j in range(2):
        want_K, want_Q = _mp_directions(X[j], Y[j], v[j], Z[j], K[j], Q[j], joint, freeze_Q)
        got_K = (run.K[0, j] - run.K[1, j]) / lr
        got_Q = (run.Q[0, j] - run.Q[1, j]) / lr
        # the step is read back from K - lr D: its rounding is ulp(|K|) / lr
        tol = 4e-16 * np.abs(K[j]).max() / lr
        np.testing.assert_allclose(got_K, want_K, atol=tol, rtol=0)
        np.testing.assert_allclose(got_Q, want_Q, atol=tol, rtol=0)


def test_agrees_with_the_torch_engine_below_the_ceiling():
    # Where no weight underflows, gd_KQ_stack (eps = 1e-300, its own torch code) takes the same
    # steps: a wrong sign, a missing 1/n or a per-factor norm taken jointly would separate them.
    X, Y, v, Z, K, Q = _instance(2, M=3)
    ours = ngd_KQ_exact(X, Y, v, 0.1 * K, 0.1 * Q, Z, 40, 0.1)
    theirs = mm.gd_KQ_stack(X, Y, v, 0.1 * K, 0.1 * Q, Z, 40, 0.1, normalized=True, eps=1e-300)
    np.testing.assert_allclose(ours.W, theirs.W, rtol=0, atol=1e-11)
    np.testing.assert_allclose(ours.risk, theirs.risk, rtol=1e-12)
    frozen = ngd_KQ_exact(X, Y, v, 0.1 * K, np.eye(3)[:, :2], Z, 40, 0.1, freeze_Q=True)
    other = mm.gd_KQ_stack(X, Y, v, 0.1 * K, np.eye(3)[:, :2], Z, 40, 0.1, normalized=True,
                           eps=1e-300, freeze_Q=True)
    np.testing.assert_allclose(frozen.W, other.W, rtol=0, atol=1e-11)


def test_runs_on_past_the_float64_ceiling():
    # The torch engine stops moving once every non-selected weight underflows (gaps past ~745);
    # the exact step keeps each factor's step at length lr (to rounding).
    X, Y, v, Z, K, Q = _instance(3, M=1)
    run = ngd_KQ_exact(X, Y, v, 30 * K, 30 * Q, Z, 20, 0.5, record_every=1)
    a = np.einsum("ntd,de,ne->nt", X[0], run.W[-1, 0], Z[0])
    assert np.min(np.max(a, axis=1)[:, None] - np.sort(a, axis=1)[:, :-1]) > 745
    steps = np.linalg.norm(np.diff(run.K[:, 0], axis=0), axis=(1, 2))
    np.testing.assert_allclose(steps, 0.5, rtol=1e-9)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(joint=1), TypeError, "joint"), (dict(freeze_Q="no"), TypeError, "freeze_Q"),
    (dict(steps=0), ValueError, "steps"), (dict(lr=-0.1), ValueError, "lr"),
    (dict(queries=np.ones((2, 2, 2))), ValueError, "queries"),
    (dict(Q0=np.ones((2, 3, 3))), ValueError, "Q0"),
])
def test_bad_inputs_name_the_argument(kwargs, error, name):
    X, Y, v, Z, K, Q = _instance(4)
    args = dict(X=X, Y=Y, v=v, K0=K, Q0=Q, queries=Z, steps=3, lr=0.1) | kwargs
    with pytest.raises(error, match=name):
        ngd_KQ_exact(**args)


def test_the_docstring_example_runs():
    """The module's examples are doctests (the API page shows them): a changed step would
    print other gaps."""
    import doctest

    import maxmargin.exactstep as module

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, globs={"np": np, "mm": mm}) if t.examples]
    assert tests, "no examples found"
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
