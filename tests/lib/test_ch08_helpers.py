"""Chapter 8's helpers (maxmargin.book.ch08) against independent computations."""
import numpy as np
import pytest

import maxmargin as mm
from maxmargin.book import ch08


def test_authors_instance_follows_the_law():
    """Bugs caught: tokens, head or queries not scaled to unit norm, labels not +-1, a seed
    that does not change the draw."""
    inst = ch08.authors_instance(3)
    Z = inst.extra["queries"]
    assert inst.X.shape == (6, 8, 10) and Z.shape == (6, 10)
    np.testing.assert_allclose(np.linalg.norm(inst.X, axis=2), 1.0, rtol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-14)
    assert np.linalg.norm(inst.v) == pytest.approx(1.0, rel=1e-14)
    assert set(np.unique(inst.Y)) <= {-1.0, 1.0}
    assert np.array_equal(ch08.authors_instance(3).X, inst.X)
    assert not np.allclose(ch08.authors_instance(4).X, inst.X)


def test_naive_gradient_is_the_plain_gradient_before_saturation():
    """Bug caught: a naive gradient with another formula (it must be the autograd form, equal
    to the plain reference where nothing saturates), or a dtype not honoured."""
    inst = ch08.authors_instance(1)
    Z = inst.extra["queries"]
    W = np.random.default_rng(0).standard_normal((10, 10))
    want = mm.reference.risk_grad_W(inst.X, inst.Y, inst.v, W, Z)
    np.testing.assert_allclose(ch08.naive_gradient(inst.X, inst.Y, inst.v, W, Z), want,
                               rtol=1e-10, atol=1e-15)
    assert ch08.naive_gradient(inst.X, inst.Y, inst.v, W, Z, dtype=np.float32).dtype == np.float32


def test_exact_direction_matches_mpmath_where_float64_weights_vanish():
    """Bug caught: an exact direction that loses the top token's term or scales wrongly (two
    codes: the library's scaled gradient and a plain mpmath sum)."""
    inst = ch08.authors_instance(2)
    Z = inst.extra["queries"]
    fro = mm.w_svm(inst.X, inst.optimal, queries=Z)
    a = np.sort(np.einsum("ntd,de,ne->nt", inst.X, fro.W, Z), axis=1)
    W = 400 / np.min(a[:, -1] - a[:, -2]) * fro.W                # smallest gap 400
    exact = ch08.exact_gradient_direction(inst.X, inst.Y, inst.v, W, Z)
    reference = ch08.mpmath_gradient_direction(inst.X, inst.Y, inst.v, W, Z)
    np.testing.assert_allclose(exact, reference, atol=1e-12)
    assert np.linalg.norm(ch08.naive_gradient(inst.X, inst.Y, inst.v, W, Z)) == 0


def test_absorption_onsets():
    """Bug caught: a naive gradient that cannot lose its direction (absorption not modelled),
    or an exact one that does."""
    inst = ch08.authors_instance(1)
    Z = inst.extra["queries"]
    fro = mm.w_svm(inst.X, inst.optimal, queries=Z)
    cos = ch08.absorption(inst, fro.W, [10, 30, 45, 800])
    assert np.all(cos["float64"][:2] > 0.9999) and cos["float64"][2] < 0.9
    assert np.isnan(cos["float64"][3])
    assert cos["float32"][0] > 0.99 and cos["float32"][1] < 0.9


def test_bregman_and_density_by_hand():
    """Bugs caught: a divergence not 1 - cos at p = 2, not 0 along the same direction, or
    normalized in another norm; a density off its two extremes."""
    rng = np.random.default_rng(1)
    W, S = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    cos = np.sum(W * S) / np.linalg.norm(W) / np.linalg.norm(S)
    assert ch08.bregman(W, S, 2.0) == pytest.approx(1 - cos, abs=1e-14)
    assert ch08.bregman(W, 3 * W, 1.75) == pytest.approx(0.0, abs=1e-14)
    p = 3.0
    Wn = W / np.sum(np.abs(W) ** p) ** (1 / p)
    Sn = S / np.sum(np.abs(S) ** p) ** (1 / p)
    want = np.sum(np.abs(Sn) ** p) / p - np.sum(np.abs(Wn) ** p) / p - np.sum(
        np.sign(Wn) * np.abs(Wn) ** (p - 1) * (Sn - Wn))       # the Bregman divergence itself
    assert ch08.bregman(W, S, p) == pytest.approx(want, abs=1e-13)
    assert ch08.density(np.ones((3, 3))) == pytest.approx(1.0)
    E = np.zeros((3, 3))
    E[1, 2] = -5.0
    assert ch08.density(E) == pytest.approx(1 / 9)


def test_dual_norm_scaled_and_plain():
    """Bug caught: a scaled dual norm that is not the norm, or a plain one that does not
    underflow (the chapter's example would then show nothing)."""
    G = np.random.default_rng(2).standard_normal((5, 5))
    q = 7 / 3
    want = np.sum(np.abs(G) ** q) ** (1 / q)
    assert ch08.dual_norm(G, q) == pytest.approx(want, rel=1e-14)
    assert ch08.dual_norm(G, q, scaled=False) == pytest.approx(want, rel=1e-14)
    tiny = 1e-140 * G
    assert ch08.dual_norm(tiny, q, scaled=False) == 0.0
    assert ch08.dual_norm(tiny, q) == pytest.approx(1e-140 * want, rel=1e-13, abs=0)


def test_bootstrap_intervals():
    """Bug caught: an interval that does not contain its statistic, or has width on constant
    data."""
    x = np.random.default_rng(3).standard_normal(20)
    for est, stat in ((ch08.bootstrap_mean(x), x.mean()), (ch08.bootstrap_median(x), np.median(x))):
        assert est.value == pytest.approx(stat) and est.low < est.value < est.high
    flat = ch08.bootstrap_mean(np.full(10, 2.5))
    assert flat == (2.5, 2.5, 2.5)


def test_check_studies_sees_a_tampered_file(monkeypatch):
    """Bug caught: a check of the stored studies that compares nothing (a file edited by hand
    or made with other settings would pass)."""
    M = 3
    fake = {"md": {"cos": np.ones((3, 3, M)), "ratio": np.ones((3, 3, M))},
            "md authors": {"bregman": np.zeros((3, 3, M))},
            "rates": {"NGD": {"error": np.full((4, M), 0.1)}},
            "steepest": {"ratio": np.ones((4, 3, M))},
            "throttle": {"0.95": {"gap": np.full((5, 2), 10.0)}}}
    monkeypatch.setattr(ch08, "compute_studies", lambda **kw: fake)
    stored = {k: {kk: (vv.copy() if isinstance(vv, np.ndarray) else
                       {kkk: vvv.copy() for kkk, vvv in vv.items()}) for kk, vv in v.items()}
              for k, v in fake.items()}
    assert max(ch08.check_studies(stored).values()) == 0
    stored["md"]["cos"][1, 2, 0] -= 0.01
    stored["rates"]["NGD"]["error"][2, 1] *= 2
    diff = ch08.check_studies(stored)
    assert diff["md cos"] == pytest.approx(0.01) and diff["rates NGD"] == pytest.approx(np.log(2))


def test_the_stored_studies_are_the_current_settings():
    """Bug caught: the seeds, potentials, step counts or methods changed without rerunning
    scripts/ch08_studies.py (the chapter would read a stale file)."""
    st = ch08.load_studies()
    md = st["md"]
    assert tuple(md["seeds"]) == ch08.SEEDS and tuple(md["potentials"]) == ch08.MD_POTENTIALS
    assert {float(k): v for k, v in md["steps"].items()} == ch08.MD_STEPS
    assert md["cos"].shape == (3, 3, len(ch08.SEEDS))
    assert tuple(st["md authors"]["seeds"]) == ch08.AUTHORS_SEEDS
    assert list(st["rates"]) == [name for name, _, _ in ch08.RATE_METHODS]
    assert tuple(st["steepest"]["algorithms"]) == tuple(n for n, _ in ch08.STEEPEST)
