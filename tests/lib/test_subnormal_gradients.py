"""Normalized GD whose gradient's terms are subnormal products (keys and scores near 1e-160,
eps = 5e-324): every engine and trainer must keep the direction, against an mpmath reference
(50 digits) written here; ordinary inputs keep the iterates of a plain numpy loop."""
import mpmath
import numpy as np
import pytest

import maxmargin as mm

ENGINES = ["torch", "compiled"]
N, T, D = 3, 4, 4
EPS = 5e-324


def _instance(seed=0, scale=1e-160):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, T, D)) * scale
    Y = np.array([1.0, -1.0, 1.0])
    return X, Y, rng


def _mp(a):
    return np.vectorize(lambda x: mpmath.mpf(float(x)), otypes=[object])(np.asarray(a))


def _dlogits(L, G):
    """c_it = s_it (gamma_it - z_i) l'(z_i) / n (logistic loss) for mpmath logits and scores
    (n, T); also the weights s_it l'(z_i) / n (the joint v-gradient's)."""
    n, T = L.shape
    C, S = np.empty((n, T), dtype=object), np.empty((n, T), dtype=object)
    for i in range(n):
        top = max(L[i])
        e = [mpmath.exp(x - top) for x in L[i]]
        s = [x / sum(e) for x in e]
        z = sum(s[t] * G[i, t] for t in range(T))
        w = -1 / (1 + mpmath.exp(z)) / n
        for t in range(T):
            C[i, t] = s[t] * (G[i, t] - z) * w
            S[i, t] = s[t] * w
    return C, S


def _unit(g, eps):
    norm = mpmath.sqrt(sum(x * x for x in g.ravel()))
    return g / (norm + eps)


def _to_float(a):
    return np.vectorize(float)(a)


def _steps_close(got, want):
    """Each step got[k+1] - got[k] along want's (cosine 1 - 1e-12), iterates within 1e-12."""
    for k in range(len(want) - 1):
        a, b = (got[k + 1] - got[k]).ravel(), (want[k + 1] - want[k]).ravel()
        assert float(mm.cosine(a, b)) > 1 - 1e-12, k   # the direction (lost: ~1e-6 off)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def _reference_gd(X, Y, v, p0, steps, lr):
    with mpmath.workdps(50):
        Xm, p = _mp(X), _mp(p0)
        G = np.einsum("nte,e->nt", Xm, _mp(v)) * _mp(Y)[:, None]
        out = [p]
        for _ in range(steps):
            C, _ = _dlogits(np.einsum("nte,e->nt", Xm, p), G)
            p = p - lr * _unit(np.einsum("nt,nte->e", C, Xm), EPS)
            out.append(p)
        return _to_float(np.array(out))


@pytest.mark.parametrize("engine", ENGINES)
def test_gd_subnormal_terms_keep_direction(engine, monkeypatch):
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, rng = _instance()
    v, p0 = rng.standard_normal(D), rng.standard_normal(D)
    run = mm.gd(X, Y, v, p0, 3, 0.5, normalized=True, eps=EPS)
    _steps_close(run.p[:, 0], _reference_gd(X, Y, v, p0, 3, 0.5))


@pytest.mark.parametrize("engine", ENGINES)
def test_gd_W_subnormal_terms_keep_direction(engine, monkeypatch):
    """Queries (n, d) (the loop on W) and one tiny shared query (|p|^2 < 1e-150: the loop too)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, rng = _instance(1)
    v, W0 = rng.standard_normal(D), rng.standard_normal((D, D))
    tiny = np.tile(rng.standard_normal(D) * 1e-80, (N, 1))   # terms x x z near 1e-320
    for X, Z in ((X, rng.standard_normal((N, D))), (X * 1e40, tiny)):
        run = mm.gd_W(X, Y, v, W0, Z, 3, 0.5, normalized=True, eps=EPS)
        with mpmath.workdps(50):
            Xm, Zm, W = _mp(X), _mp(Z), _mp(W0)
            G = np.einsum("nte,e->nt", Xm, _mp(v)) * _mp(Y)[:, None]
            want = [W]
            for _ in range(3):
                C, _ = _dlogits(np.einsum("nte,ef,nf->nt", Xm, W, Zm), G)
                W = W - 0.5 * _unit(np.einsum("nt,nte,nf->ef", C, Xm, Zm), EPS)
                want.append(W)
            want = _to_float(np.array(want))
        _steps_close(run.W[:, 0], want)


@pytest.mark.parametrize("engine", ENGINES)
def test_gd_joint_subnormal_terms_keep_direction(engine, monkeypatch):
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, rng = _instance(2)
    v0, p0 = rng.standard_normal(D), rng.standard_normal(D)
    run = mm.gd_joint(X, Y, v0, p0, 3, 0.5, normalized=True, eps_v=EPS, eps_p=EPS)
    with mpmath.workdps(50):
        Xm, v, p = _mp(X), _mp(v0), _mp(p0)
        want_v, want_p = [v], [p]
        for _ in range(3):
            G = np.einsum("nte,e->nt", Xm, v) * _mp(Y)[:, None]
            C, S = _dlogits(np.einsum("nte,e->nt", Xm, p), G)
            gv = np.einsum("nt,n,nte->e", S, _mp(Y), Xm)
            gp = np.einsum("nt,nte->e", C, Xm)
            v, p = v - 0.5 * _unit(gv, EPS), p - 0.5 * _unit(gp, EPS)
            want_v.append(v)
            want_p.append(p)
        want_v, want_p = _to_float(np.array(want_v)), _to_float(np.array(want_p))
    _steps_close(run.v[:, 0], want_v)
    _steps_close(run.p[:, 0], want_p)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shared", [True, False])
def test_gd_KQ_subnormal_terms_keep_direction(engine, shared, monkeypatch):
    """Keys 1e-160, factors of order one: the gradient in W = K Q^T has subnormal terms, and
    so do grad_K = G Q and grad_Q = G^T K."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X, Y, rng = _instance(3)
    m = 2
    v, K0, Q0 = rng.standard_normal(D), rng.standard_normal((D, m)), rng.standard_normal((D, m))
    Z = np.tile(rng.standard_normal(D), (N, 1)) if shared else rng.standard_normal((N, D))
    queries = Z[0] if shared else Z
    run = mm.gd_KQ(X, Y, v, K0, Q0, queries, 3, 0.5, normalized=True, eps=EPS)
    with mpmath.workdps(50):
        Xm, Zm, K, Q = _mp(X), _mp(Z), _mp(K0), _mp(Q0)
        G = np.einsum("nte,e->nt", Xm, _mp(v)) * _mp(Y)[:, None]
        want_K, want_Q = [K], [Q]
        for _ in range(3):
            W = K @ Q.T
            C, _ = _dlogits(np.einsum("nte,ef,nf->nt", Xm, W, Zm), G)
            GW = np.einsum("nt,nte,nf->ef", C, Xm, Zm)
            K, Q = K - 0.5 * _unit(GW @ Q, EPS), Q - 0.5 * _unit(GW.T @ K, EPS)
            want_K.append(K)
            want_Q.append(Q)
        want_K, want_Q = _to_float(np.array(want_K)), _to_float(np.array(want_Q))
    _steps_close(run.K[:, 0], want_K)
    _steps_close(run.Q[:, 0], want_Q)


@pytest.mark.parametrize("engine", ENGINES)
def test_gd_ordinary_inputs_unchanged(engine, monkeypatch):
    """Ordinary instances (keys of order one, default and tiny eps): the iterates of a plain
    numpy normalized-GD loop, to 1e-12 relative (the rescaled path must not touch them)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    for seed, eps in ((4, 1e-12), (5, EPS), (6, 1e-3)):
        X, Y, rng = _instance(seed, scale=1.0)
        v, P0 = rng.standard_normal(D), rng.standard_normal((3, D))
        run = mm.gd(X, Y, v, P0, 20, 0.3, normalized=True, eps=eps)
        G = np.einsum("nte,e->nt", X, v) * Y[:, None]
        P, want = P0.copy(), [P0.copy()]
        for _ in range(20):
            L = np.einsum("nte,be->bnt", X, P)
            S = np.exp(L - L.max(-1, keepdims=True))
            S /= S.sum(-1, keepdims=True)
            z = np.sum(S * G, -1)
            C = S * (G - z[..., None]) * (-1.0 / (1.0 + np.exp(z)) / N)[..., None]
            g = np.einsum("bnt,nte->be", C, X)
            P = P - 0.3 * g / (np.linalg.norm(g, axis=-1, keepdims=True) + eps)
            want.append(P)
        np.testing.assert_allclose(run.p, np.array(want), rtol=1e-12, atol=1e-14)
