"""Every trainer records the risk mm.risk computes (round four, cause 2).

Exponential loss, margins near -709.5: each loss exp(-z) is about 1.4e308, finite, but the sum
of two overflows, while their mean does not. The torch recorders took np.mean of the raw losses
and the joint kernel summed them before dividing by n: the recorded risk was inf where mm.risk
is finite. Every recorder now goes through losses.rounded_mean (the kernels add loss / n).
"""
import mpmath
import numpy as np
import pytest

import maxmargin as mm

# n = 2 sequences, T = 2 tokens, d = 1: scores Y v x = -709.5 and -709.2 (W = I), so the margins
# lie in [-709.5, -709.2] for every prompt, and no single loss overflows (exp(709.78) would).
X = np.array([[[1.0], [709.2 / 709.5]], [[709.2 / 709.5], [1.0]]])
Y = np.array([1.0, 1.0])
V = np.array([-709.5])
STEPS, LR = 3, 1e-3


def own_margins(v: float, u: np.ndarray) -> np.ndarray:
    """(n,) margins sum_t s_t Y_i v x_it with s = softmax_t(x_it u), numpy, own loop (keys X:
    W = I for gd, the query-contracted W u for gd_W and gd_KQ)."""
    logits = X[..., 0] * u
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    return np.sum(s * Y[:, None] * X[..., 0] * v, axis=1)


def mp_risk(margins: np.ndarray) -> float:
    """The mean of exp(-z) in 50 digits, rounded once."""
    with mpmath.workdps(50):
        return float(mpmath.fsum(mpmath.exp(-mpmath.mpf(float(z))) for z in margins)
                     / len(margins))


def runs(engine):
    """(name, recorded risks (R,), iterates -> (v, u) per record) of each trainer."""
    p0 = np.array([0.3])
    query = np.array([1.0])
    out = []
    run = mm.gd(X, Y, V, p0, STEPS, LR, loss="exponential", normalized=True)
    out.append(("gd", run.risk[:, 0], [(V[0], p[0, 0]) for p in run.p]))
    stack = mm.gd_stack(np.stack([X, X]), np.stack([Y, Y]), V, p0, STEPS, LR,
                        loss="exponential", normalized=True)
    out.append(("gd_stack", stack.risk[:, 1, 0], [(V[0], p[1, 0, 0]) for p in stack.p]))
    run = mm.gd_W(X, Y, V, p0[:, None], query, STEPS, LR, loss="exponential", normalized=True)
    out.append(("gd_W shared", run.risk[:, 0], [(V[0], (W[0] @ query)[0]) for W in run.W]))
    run = mm.gd_W(X, Y, V, p0[:, None], np.array([[1.0], [1.0 + 1e-9]]), STEPS, LR,
                  loss="exponential", normalized=True)   # two queries: the loop on W
    out.append(("gd_W loop", run.risk[:, 0], None))
    run = mm.gd_joint(X, Y, V, p0, STEPS, LR, loss="exponential", normalized=True)
    out.append(("gd_joint", run.risk[:, 0], [(v[0, 0], p[0, 0]) for v, p in zip(run.v, run.p)]))
    for reg in (0.0, 1e-3):        # reg > 0: the torch loop on either engine
        run = mm.gd_KQ(X, Y, V, p0[:, None], np.ones((1, 1)), query, STEPS, LR,
                       loss="exponential", normalized=True, reg=reg)
        out.append((f"gd_KQ reg={reg}", run.risk[:, 0],
                    [(V[0], (K[0] @ Q[0].T @ query)[0]) for K, Q in zip(run.K, run.Q)]))
    run = mm.gd_KQ_stack(X[None], Y[None], V, p0[:, None], np.ones((1, 1)),
                         np.ones((1, 2, 1)), STEPS, LR, loss="exponential", normalized=True)
    out.append(("gd_KQ_stack", run.risk[:, 0],
                [(V[0], (K[0] @ Q[0].T @ query)[0]) for K, Q in zip(run.K, run.Q)]))
    return out


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_recorded_risk_is_the_risk_though_the_sum_of_losses_overflows(engine, monkeypatch):
    """At every record of every trainer, the recorded risk is finite and equals mm.risk at the
    recorded iterate (a few ulp) and the mpmath mean of exp(-z) over the own margins (1e-12: the
    margins' rounding, times |z| = 709). Bugs caught: np.mean of the raw losses in the torch
    recorders (inf: gd's torch engine, gd_W's loop, gd_KQ's torch loop, gd_KQ_stack,
    gd_joint's torch loop), the joint kernel's sum of losses divided by n at the end (inf)."""
    if engine == "compiled":
        pytest.importorskip("numba")
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.sum(np.exp(-own_margins(V[0], np.array([0.3])))))
    for name, risks, iterates in runs(engine):
        assert np.all(np.isfinite(risks)), (name, risks)
        if iterates is None:
            assert np.all(risks > 1e308), (name, risks)
            continue
        for risk, (v, u) in zip(risks, iterates):
            exact = mp_risk(own_margins(v, np.array([u])))
            library = float(mm.risk(X, Y, [v], [u], loss="exponential"))
            assert risk == pytest.approx(library, rel=4e-16), name
            assert risk == pytest.approx(exact, rel=1e-12), name


def test_rounded_mean_never_raises_and_matches_mpmath():
    """losses.rounded_mean: a sum of finite losses that overflows (rescaled), a loss that
    overflows alone (log domain), a mean beyond float64 (inf, no error), NaN margins (NaN);
    mm.risk's mean_loss still raises for the last two. Bugs caught: a rescale applied to the
    whole array when one entry needed it (other entries rounded differently), inf where the log
    domain gives a finite mean, an error instead of the rounded value."""
    from maxmargin.losses import EXPONENTIAL, mean_loss, rounded_mean

    z = np.array([[-709.5, -709.7, 1.0], [-709.6, -712.0, 2.0]])   # (n, 3): mean over axis 0
    got = rounded_mean(EXPONENTIAL, z, axis=0)
    expected = [mp_risk(z[:, j]) for j in range(2)] + [float(np.mean(np.exp(-z[:, 2])))]
    np.testing.assert_allclose(got[:2], expected[:2], rtol=1e-15)
    assert got[2] == expected[2]                     # a plain mean where it is finite, exactly
    assert np.isinf(rounded_mean(EXPONENTIAL, np.array([-720.0, -720.0])))
    assert np.isnan(rounded_mean(EXPONENTIAL, np.array([np.nan, 0.0])))
    with pytest.raises(ValueError, match="^v: with the exponential loss the risk is about 10"):
        mean_loss(EXPONENTIAL, np.array([-720.0, -720.0]))
    with pytest.raises(ValueError, match="^v: "):
        mean_loss(EXPONENTIAL, np.array([np.nan, 0.0]))


# One loss beyond float64 at the last record only (a margin of -710.3: exp(710.3) = 3.0e308),
# the mean of three finite: e^710.3 / 3 = 1.005e308. Every earlier step's slopes were finite,
# so no kernel fell back to the torch loop (issue 38, L38: the risk recorded three ways).
TOKEN = np.array([1.0, 0.0])


def joint_case():
    """gd_joint, one step from v = 0 with identical tokens (attention plays no part): v moves
    by lr (2 - 1) e1 / 3 = 710.3 e1, margins Y_i v_1 = 710.3, 710.3, -710.3."""
    X3 = np.array([[TOKEN, TOKEN]] * 3)
    Y3 = np.array([1.0, 1.0, -1.0])
    run = mm.gd_joint(X3, Y3, np.zeros(2), np.zeros(2), 1, 3 * 710.3, loss="exponential",
                      normalized=False)
    return run.risk[:, 0], Y3 * run.v[-1, 0, 0]


def kq_case():
    """gd_KQ, one step from W p = (20, 0): sequences 0 and 1 (margin -50, weight e^50) turn the
    logits around, and sequence 2 moves from its token of score 1 to its token of score -710.3."""
    s01, s2 = [[1.0, -50.0], [-1.0, 50.0]], [[1.0, 1.0], [-1.0, -710.3]]
    X3, Y3, v = np.array([s01, s01, s2]), np.ones(3), np.array([0.0, 1.0])
    root = np.array([[[np.sqrt(20.0)], [0.0]]])
    run = mm.gd_KQ(X3, Y3, v, root, root, TOKEN, 1, 1e-6, loss="exponential")
    u = run.K[-1, 0] @ run.Q[-1, 0].T @ TOKEN
    logits = X3 @ u
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    return run.risk[:, 0], np.sum(s * Y3[:, None] * (X3 @ v), axis=1)


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("case", [joint_case, kq_case], ids=["gd_joint", "gd_KQ"])
def test_recorded_risk_is_finite_where_one_loss_overflows_at_the_last_record(case, engine,
                                                                            monkeypatch, request):
    """The last record's risk is the mpmath mean of exp(-z) over own margins (1e-12), finite
    though one loss is not. Bug caught (compiled engine): the joint and KQ kernels' sum of
    l(z_i) / n is inf there, and, unlike gd's (_engines._rerecord_risks), their callers kept
    the inf: the recorded risk depended on the engine."""
    if engine == "compiled":
        pytest.importorskip("numba")
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    risks, margins = case()
    assert margins.min() < -709.79                   # exp(-z) itself beyond float64
    assert risks[-1] == pytest.approx(mp_risk(margins), rel=1e-12), (risks, margins)
