"""Round four's independent review (helper J): what the re-derivation of round four's fixes found.

1. gd_W, gd_KQ, gd_KQ_stack and gd_joint returned a NaN last risk, with no error, when the last
   iterate was finite but its logits overflowed (gd refused it, naming "the gradient at step N").
2. The compiled engine recorded an inf risk where one loss is beyond float64 but the mean is not.
"""
import numpy as np
import pytest

import maxmargin as mm

X = np.array([[[10.0, 0.0], [0.0, 10.0]], [[3.0, 1.0], [-2.0, 5.0]]])
Y = np.array([1.0, -1.0])
V = np.array([1.0, 0.5])
LR = 1e308


def first_step_gradient(U, v=V):
    """Own numpy: at logits x_it^T u_i (U (n, d)), the logistic risk's gradient in u_i, a (n, d),
    and in v, (d,)."""
    logits = np.einsum("ntd,nd->nt", X, U)
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    gamma = Y[:, None] * (X @ v)
    z = np.sum(s * gamma, axis=1)
    slope = -1.0 / (1.0 + np.exp(z)) / len(Y)
    a = slope[:, None] * np.einsum("nt,ntd->nd", s * (gamma - z[:, None]), X)
    grad_v = np.einsum("n,nt,ntd->d", slope * Y, s, X)
    return a, grad_v


def last_logits_overflow(U_last) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return not np.all(np.isfinite(np.einsum("ntd,nd->nt", X, U_last)))


def both_engines(monkeypatch, call) -> list[str]:
    pytest.importorskip("numba")
    messages = []
    for engine in ("torch", "compiled"):
        monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
        with pytest.raises(ValueError) as error:
            call()
        messages.append(str(error.value))
    return messages


@pytest.mark.parametrize("name", ["gd", "gd_W", "gd_W shared", "gd_KQ", "gd_KQ shared",
                                  "gd_KQ_stack", "gd_joint"])
def test_logits_of_a_finite_last_iterate_that_overflow_are_refused(name, monkeypatch):
    """One plain step of lr = 1e308 from p = 0, W = 0, or K = Q = I: own numpy arithmetic shows
    the last iterate finite and its logits beyond float64. Bug caught: gd_W (both query forms),
    gd_KQ, gd_KQ_stack and gd_joint returned a NaN last risk with no error on both engines (only
    gd checked the last iterate's margins); gd's message called it "the gradient at step 1"."""
    I, Z = np.eye(2), np.eye(2)
    shared = name.endswith("shared")
    queries = np.array([1.0, 0.0]) if shared else Z
    Zs = np.broadcast_to(queries, (2, 2))
    if name == "gd":
        a, _ = first_step_gradient(np.zeros((2, 2)))
        p1 = -LR * a.sum(axis=0)
        U_last, call = np.stack([p1, p1]), lambda: mm.gd(X, Y, V, [0.0, 0.0], 1, LR)
    elif name.startswith("gd_W"):
        a, _ = first_step_gradient(np.zeros((2, 2)))
        W1 = -LR * np.einsum("nd,ne->de", a, Zs)
        U_last = Zs @ W1.T
        call = lambda: mm.gd_W(X, Y, V, np.zeros((2, 2)), queries, 1, LR)
    elif name.startswith("gd_KQ"):
        a, _ = first_step_gradient(Zs)
        G = np.einsum("nd,ne->de", a, Zs)
        K1, Q1 = I - LR * G, I - LR * G.T
        assert np.all(np.isfinite(K1)) and np.all(np.isfinite(Q1))
        with np.errstate(over="ignore", invalid="ignore"):
            U_last = (K1 @ (Q1.T @ Zs.T)).T
        if name == "gd_KQ_stack":
            call = lambda: mm.gd_KQ_stack(X[None], Y[None], V, I, I, Z[None], 1, LR)
        else:
            call = lambda: mm.gd_KQ(X, Y, V, I, I, queries, 1, LR)
    else:
        a, grad_v = first_step_gradient(np.zeros((2, 2)))
        p1 = -LR * a.sum(axis=0)
        U_last = np.stack([p1, p1])
        call = lambda: mm.gd_joint(X, Y, V, [0.0, 0.0], 1, LR, normalized=False)
    assert name.startswith("gd_KQ") or np.all(np.isfinite(U_last))   # (KQ: the factors are)
    assert last_logits_overflow(U_last)
    torch_message, compiled_message = both_engines(monkeypatch, call)
    assert compiled_message == torch_message
    caller = name.split()[0]
    assert torch_message.startswith(f"{caller}: the logits of the iterate after step 1 (the "
                                    f"last) overflow float64")
    assert "lr = 1e+308 is too large" in torch_message


def scores_instance(zs, T=2):
    """Every token of sequence i scores z_i (v = (1, 0), labels +1): the margins are z_i
    whatever the attention; the second feature makes the keys differ (attention moves)."""
    Xz = np.zeros((len(zs), T, 2))
    Xz[:, :, 0] = np.asarray(zs)[:, None]
    Xz[:, :, 1] = np.arange(T) * 1e-3
    return Xz, np.ones(len(zs)), np.array([1.0, 0.0])


def exponential_risk_mp(zs) -> float:
    import mpmath
    with mpmath.workdps(50):
        return float(mpmath.fsum(mpmath.exp(-mpmath.mpf(z)) for z in zs) / len(zs))


@pytest.mark.parametrize("name", ["gd", "gd_stack", "gd_W shared"])
def test_a_finite_mean_with_one_loss_beyond_float64_is_recorded_alike(name, monkeypatch):
    """Exponential loss, margins (-710, 0, 0): e^710 is beyond float64, the mean (e^710 + 2) / 3
    = 7.4466e307 is not (mpmath). Bug caught: the compiled engine recorded inf (its kernel sums
    l(z_i) / n) where the torch engine records the mean, silently."""
    pytest.importorskip("numba")
    zs = [-710.0, 0.0, 0.0]
    Xz, Yz, vz = scores_instance(zs)
    calls = {
        "gd": lambda: mm.gd(Xz, Yz, vz, [[0.0, 0.0], [0.0, 1.0]], 2, 0.1, loss="exponential",
                            normalized=True).risk,
        "gd_stack": lambda: mm.gd_stack(Xz[None], Yz[None], vz, [0.0, 0.0], 2, 0.1,
                                        loss="exponential", normalized=True).risk[:, 0],
        "gd_W shared": lambda: mm.gd_W(Xz, Yz, vz, np.zeros((2, 2)), [0.0, 1.0], 2, 0.1,
                                       loss="exponential", normalized=True).risk}
    risks = {}
    for engine in ("torch", "compiled"):
        monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
        risks[engine] = calls[name]()
    expected = exponential_risk_mp(zs)
    for engine, risk in risks.items():
        assert np.all(np.isfinite(risk)), engine
        np.testing.assert_allclose(risk, expected, rtol=1e-12, err_msg=engine)
    np.testing.assert_allclose(risks["compiled"], risks["torch"], rtol=1e-15)


def normalized_W_step_mp(Xs, Ys, vs, Z, eps) -> np.ndarray:
    """Own mpmath: one normalized step of lr 1 from W = 0 on the logistic risk,
    -G / (||G||_F + eps), G = (1/n) sum_it l'(z_i) s_it (gamma_it - z_i) x_it z_i^T."""
    import mpmath
    n, T, d = Xs.shape
    with mpmath.workdps(60):
        G = [[mpmath.mpf(0)] * d for _ in range(d)]
        for i in range(n):
            gam = [Ys[i] * mpmath.fsum(mpmath.mpf(float(a)) * float(b)
                                       for a, b in zip(vs, Xs[i, t])) for t in range(T)]
            z = mpmath.fsum(gam) / T                          # W = 0: uniform attention
            slope = -1 / (1 + mpmath.exp(z))
            for t in range(T):
                c = slope * (gam[t] - z) / (T * n)
                for a in range(d):
                    for b in range(d):
                        G[a][b] += c * mpmath.mpf(float(Xs[i, t, a])) * float(Z[i, b])
        norm = mpmath.sqrt(mpmath.fsum(g * g for row in G for g in row))
        return np.array([[float(-g / (norm + mpmath.mpf(eps))) for g in row] for row in G])


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("query_scale", [1.0, 3.0])
def test_shared_query_with_a_subnormal_eps_keeps_eps(engine, query_scale, monkeypatch):
    """Keys near 1e-160 make the gradient's norm about 1e-321, so eps = 5e-324 matters. Bug
    caught: gd_W with one query p, run as GD on u = W p with offset eps / ||p||, rounded that
    offset in the subnormal range (to 5e-324 for ||p|| = 1.09, to 0 for ||p|| > 2): iterates
    1e-4 off the mpmath step (the loop on W, forced with rows perturbed by 1e-300, was right)."""
    if engine == "compiled":
        pytest.importorskip("numba")
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    rng = np.random.default_rng(5)
    Xs = rng.normal(size=(3, 3, 3)) * 1e-160
    Ys = rng.choice([-1.0, 1.0], 3)
    vs = rng.normal(size=3)
    p = rng.normal(size=3) * query_scale
    Z = np.tile(p, (3, 1))
    expected = normalized_W_step_mp(Xs, Ys, vs, Z, 5e-324)
    shared = mm.gd_W(Xs, Ys, vs, np.zeros((3, 3)), p, 1, 1.0, normalized=True, eps=5e-324)
    rows = Z.copy()
    rows[1:, 0] += 1e-300                                    # not shared: the loop on W
    loop = mm.gd_W(Xs, Ys, vs, np.zeros((3, 3)), rows, 1, 1.0, normalized=True, eps=5e-324)
    np.testing.assert_allclose(loop.W[1, 0], expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(shared.W[1, 0], expected, rtol=0, atol=1e-12)


X1 = np.array([[[1.0, 0.0], [0.0, 1.0]]])


@pytest.mark.parametrize("case, words", [
    ("X 1e200", "reduce the scale of X or v"),
    ("v 1e200", "reduce the scale of X or v"),
    ("exponential -800", "reduce the scale of v"),
    ("three losses e^709", "reduce the scale of v"),
    ("K0 1e200", "K0: "),
    ("Q0 1e200", "Q0: "),
])
def test_penalty_path_refuses_a_penalized_risk_beyond_float64(case, words):
    """Own arithmetic: with X or v scaled by 1e200 the Hessian's terms (gamma x z)^2 exceed
    1e400; scores -800 (exponential) give exp(800); e^709 three times sums beyond float64 (the
    objective's mean of torch); ||1e200 ones||^2 = 4e400. Bugs caught: numpy's "Eigenvalues did
    not converge" (LinAlgError) with no argument named; with K0 = 1e200 ones the start returned
    unchanged with stationarity NaN and no error."""
    zeros = np.zeros((2, 2))
    Xz = np.zeros((3, 2, 2))
    Xz[:, :, 0], Xz[:, :, 1] = -709.0, [0.0, 1e-3]
    with np.errstate(over="ignore"):
        assert not np.isfinite(3 * np.exp(709.0)) and not np.isfinite(4 * np.float64(1e200) ** 2)
    calls = {
        "X 1e200": lambda: mm.penalty_path(X1 * 1e200, [1.0], [1.0, 0.5], zeros, zeros,
                                           [1.0, 0.0], [1.0]),
        "v 1e200": lambda: mm.penalty_path(X1, [1.0], [1e200, 0.5e200], zeros, zeros,
                                           [1.0, 0.0], [1.0]),
        "exponential -800": lambda: mm.penalty_path(X1, [1.0], [-800.0, -800.0], zeros, zeros,
                                                    [1.0, 0.0], [1.0], loss="exponential"),
        "three losses e^709": lambda: mm.penalty_path(Xz, np.ones(3), [1.0, 0.0], zeros + 1e-3,
                                                      zeros + 1e-3, [0.0, 1.0], [1.0],
                                                      loss="exponential"),
        "K0 1e200": lambda: mm.penalty_path(X1, [1.0], [1.0, 0.5], np.ones((2, 2)) * 1e200,
                                            np.ones((2, 2)), [1.0, 0.0], [1.0]),
        "Q0 1e200": lambda: mm.penalty_path(X1, [1.0], [1.0, 0.5], np.ones((2, 2)),
                                            np.ones((2, 2)) * 1e200, [1.0, 0.0], [1.0])}
    with pytest.raises(ValueError) as error:
        calls[case]()
    message = str(error.value)
    assert words in message
    assert message.startswith(words if words.endswith(": ") else "penalty_path: ")



@pytest.mark.parametrize("norm", ["frobenius", "nuclear"])
def test_w_svm_tol_message_states_the_real_bound(norm):
    """tol = nextafter(0.5, 0) is refused on these data; the message must print that tol exactly
    and a bound that is the real one: a tol just below it is accepted, the bound itself is not.
    Bugs caught: the message printed "tol = 0.5" (:g) and "tol must be at most 0.25", a merely
    sufficient bound (0.45 is accepted). The third token of the first sequence is (0.6, 0.6):
    with (0.5, 0.5) the constraint's distance from its right side was 1/2 to rounding (the bound
    0.49999999999999994, tol itself), and on another CPU (OPENBLAS_CORETYPE=Prescott) the
    solver's last bits put it above 1/2, so nothing was refused; here the bound is 0.48."""
    import re
    Xw = np.array([[[1, 0], [0, 1], [0.6, 0.6]], [[0.2, 1], [1, -1], [0, 0.3]]])
    Zw = np.array([[1, 0.2], [0.3, 1]])
    tol = float(np.nextafter(0.5, 0.0))
    with pytest.raises(ValueError) as error:
        mm.w_svm(Xw, [0, 1], queries=Zw, norm=norm, tol=tol)
    message = str(error.value)
    assert message.startswith(f"tol: tol = {tol!r} counts as support")
    bound = float(re.search(r"tol must be below ([0-9.e+-]+)", message).group(1))
    assert 0.45 < bound <= tol
    mm.w_svm(Xw, [0, 1], queries=Zw, norm=norm, tol=bound * (1 - 1e-12))   # accepted
    with pytest.raises(ValueError, match="tol must be below"):
        mm.w_svm(Xw, [0, 1], queries=Zw, norm=norm, tol=bound)


def test_zero_d_arrays_are_accepted_as_scalar_settings():
    """np.array(0.1) is the number 0.1, as np.float64(0.1) is: the same run as with the float
    (tol, lr, eps, steps, normalized, seed). Bug caught: a TypeError "expected a number" for a
    0-d array while the numpy scalar was accepted. A 0-d complex or bool array is still refused."""
    Xw = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    a = mm.att_svm(Xw, [0], tol=np.array(0.1))
    np.testing.assert_array_equal(a.p, mm.att_svm(Xw, [0], tol=0.1).p)
    run = mm.gd(Xw, [1.0], [1.0, 0.5], [0.0, 0.0], np.array(3), np.array(0.1),
                normalized=np.array(True), eps=np.array(1e-12))
    ref = mm.gd(Xw, [1.0], [1.0, 0.5], [0.0, 0.0], 3, 0.1, normalized=True, eps=1e-12)
    np.testing.assert_array_equal(run.p, ref.p)
    with pytest.raises(TypeError, match="^lr: "):
        mm.gd(Xw, [1.0], [1.0, 0.5], [0.0, 0.0], 3, np.array(0.1 + 0j))
    with pytest.raises(TypeError, match="^steps: "):
        mm.gd(Xw, [1.0], [1.0, 0.5], [0.0, 0.0], np.array(True), 0.1)


def test_risk_beyond_one_loss_overflow_keeps_float64_accuracy():
    """Exponential loss, margins with losses beyond float64 (e^710 ...) but a finite mean:
    mm.risk within a few ulp of mpmath. Bug caught: exp(log of the mean) carried the absolute
    rounding of a log near 709 into the result, 5.4e-14 relative (about 250 ulp) for
    (-710, 0, 0), while rounded_mean's docstring promises the mean rounded to float64."""
    rng = np.random.default_rng(3)
    cases = [[-710.0, 0.0, 0.0], [-709.9, -709.9, -3.0]]
    cases += [list(rng.uniform(-711.0, -709.0, size=4)) for _ in range(5)]
    for zs in cases:
        Xz, Yz, vz = scores_instance(zs)
        expected = exponential_risk_mp(zs)
        if not np.isfinite(expected):
            continue
        got = mm.risk(Xz, Yz, vz, [0.0, 0.0], loss="exponential")
        np.testing.assert_allclose(got, expected, rtol=1e-15, err_msg=str(zs))


LOGITS_NAMED = {"gd": "k_it^T p", "gd_joint": "k_it^T p or scores Y_i v^T x_it",
                "gd_W": "x_it^T W z_i", "gd_KQ": "x_it^T K Q^T z_i", "gd_KQ_stack": "x_it^T K Q^T z_i"}


@pytest.mark.parametrize("name", ["gd", "gd_W", "gd_W shared", "gd_KQ", "gd_KQ shared",
                                  "gd_KQ_stack", "gd_joint"])
def test_logits_that_leave_float64_mid_run_are_named_as_the_trainer_writes_them(name,
                                                                                monkeypatch):
    """The run of the test above with two steps: the iterate after step 1 is finite (checked
    there by own arithmetic) and its logits overflow, so the gradient at step 1, not the last,
    is not finite: lr is the cause, and the message names the trainer's logits. Bug caught: the
    message said "its logits k_it^T p" for W and (K, Q) too, whose logits are x_it^T W z_i and
    x_it^T K Q^T z_i (R38b); for (v, p), whose scores move with v (here to 1e308 times the
    gradient), it blamed the scale of X or v "whatever the iterate and lr", from the bound on the
    gradient at the current scores (step 1's, not the data's). Both engines give the same
    message."""
    I, Z = np.eye(2), np.eye(2)
    queries = np.array([1.0, 0.0]) if name.endswith("shared") else Z
    caller = name.split()[0]
    call = {"gd": lambda: mm.gd(X, Y, V, [0.0, 0.0], 2, LR),
            "gd_W": lambda: mm.gd_W(X, Y, V, np.zeros((2, 2)), queries, 2, LR),
            "gd_KQ": lambda: mm.gd_KQ(X, Y, V, I, I, queries, 2, LR),
            "gd_KQ_stack": lambda: mm.gd_KQ_stack(X[None], Y[None], V, I, I, Z[None], 2, LR),
            "gd_joint": lambda: mm.gd_joint(X, Y, V, [0.0, 0.0], 2, LR, normalized=False)}[caller]
    torch_message, compiled_message = both_engines(monkeypatch, call)
    assert compiled_message == torch_message
    assert torch_message.startswith(f"{caller}: the gradient at step 1 is not finite in float64; "
                                    f"the iterate or its logits {LOGITS_NAMED[caller]} left "
                                    f"float64: lr = 1e+308 is too large")


def test_gd_joint_blames_the_data_when_the_scores_of_its_start_bound_the_gradient_past_float64(
        monkeypatch):
    """R40a's counterexample to a rule that blamed lr at every step > 0 of gd_joint: scores of
    v0 = (-1e307, 1e307) on keys 8 e_t reach 8e307, so 2 max|gamma| max|k| = 1.3e309 whatever
    p; lr = 3.3e-307 leaves v unchanged (v1 == v0 bit for bit, checked below with numpy) and the
    attention moving off one-hot at step 1 makes the p-gradient infinite. Bug caught: gd_joint
    said "lr = 3.34e-307 is too large" where gd, on the same data, names the scale of X or v."""
    Xd, Yd = np.array([[[8.0, 0.0], [0.0, 8.0]]]), np.array([1.0])
    v0, p0 = np.array([-1e307, 1e307]), np.array([np.log(999.0) / 8, 0.0])
    lr = 3.3404849835132034e-307
    gamma = Yd[:, None] * (Xd @ v0)                              # (1, 2): -8e307, 8e307
    s = np.exp(Xd @ p0 - np.max(Xd @ p0))
    s /= s.sum()
    grad_v = -1.0 / (1.0 + np.exp(np.sum(s * gamma))) * np.einsum("nt,ntd->d", s, Xd)
    assert np.array_equal(v0 - lr * grad_v, v0)                  # v does not move
    assert np.log10(2 * 8e307 * 8) >= 308
    for caller, call in (("gd_joint", lambda: mm.gd_joint(Xd, Yd, v0, p0, 10, lr, normalized=False)),
                         ("gd", lambda: mm.gd(Xd, Yd, v0, p0, 10, lr))):
        for message in both_engines(monkeypatch, call):
            assert message.startswith(f"{caller}: the gradient at step "), message
            assert "whatever the iterate and lr: reduce the scale of X or v" in message, message
