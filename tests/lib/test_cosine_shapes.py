"""The trajectories' cosine methods: a direction of the wrong shape is refused, and a path
whose factors are too large to multiply still gives its cosines (issue 38)."""
import numpy as np
import pytest

import maxmargin as mm


def _small():
    X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.5]]])
    return X, np.array([1.0, -1.0]), np.array([1.0, 0.5]), np.array([[1.0, 0.0], [0.3, 1.0]])


@pytest.mark.parametrize("kind", ["gd_W", "gd_KQ", "penalty_path"])
def test_a_vector_is_not_a_matrix(kind):
    """Bug caught: a (4,) vector accepted as a (2, 2) direction (the size matched), read in
    an order the caller did not mean."""
    X, Y, v, Z = _small()
    if kind == "gd_W":
        run = mm.gd_W(X, Y, v, np.zeros((2, 2)), Z, 3, 0.1)
    elif kind == "gd_KQ":
        run = mm.gd_KQ(X, Y, v, np.eye(2), np.eye(2), Z, 3, 0.1)
    else:
        run = mm.penalty_path(X, Y, v, np.eye(2), np.eye(2), Z, [1e-2])
    with pytest.raises(ValueError, match="direction"):
        run.cosine(np.array([1.0, 0.0, 0.0, 1.0]))
    assert np.all(np.isfinite(run.cosine(np.eye(2))))


def test_penalty_path_cosine_does_not_overflow():
    """Bug caught: K Q^T formed as it is, which overflows for factors of 1e160 (the cosine is
    scale-free: it must be that of the unit-scaled product)."""
    rng = np.random.default_rng(0)
    K, Q = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 3))
    small = mm.PenaltyPath(np.array([1e-2, 1e-3]), K, Q, np.zeros(2), np.zeros(2), False,
                           np.zeros(2, int), np.zeros(2))
    big = mm.PenaltyPath(np.array([1e-2, 1e-3]), 1e160 * K, 1e160 * Q, np.zeros(2), np.zeros(2),
                         False, np.zeros(2, int), np.zeros(2))
    D = rng.standard_normal((3, 3))
    want = [np.sum(k @ q.T * D) / np.linalg.norm(k @ q.T) / np.linalg.norm(D) for k, q in zip(K, Q)]
    np.testing.assert_allclose(small.cosine(D), want, rtol=1e-12)
    np.testing.assert_allclose(big.cosine(D), want, rtol=1e-12)
