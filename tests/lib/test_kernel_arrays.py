"""Read-only inputs run the compiled kernels that are already compiled (round four, cause 7).

A read-only float64 X (with W=None its keys are X itself) reached the numba kernels as a
read-only array, another numba type: each call compiled a new specialization of the kernel
(40-125 s on a fresh cache) without the vectorizer settings the ready kernels use. Every array
passed to a kernel is now made C-contiguous and writable at one place. No timing here: the
kernels' sets of compiled signatures must not grow.
"""
import numpy as np
import pytest

import maxmargin as mm

pytest.importorskip("numba")
from maxmargin import _compiled  # noqa: E402  (after the numba check)

KERNELS = ("descend", "descend_wide", "descend_wider", "descend_joint", "descend_joint_wide",
           "descend_kq", "descend_kq_wide")


def signatures() -> dict:
    return {name: set(getattr(_compiled, name).signatures) for name in KERNELS}


def readonly(a) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.flags.writeable = False
    return a


def calls(inst, frozen):
    """Every public call that reaches a compiled kernel, its arrays through ``frozen``."""
    X, Y, v = frozen(inst.X), frozen(inst.Y), frozen(inst.v)
    n, T, d = inst.X.shape
    p0, P0 = frozen(np.full(d, 0.1)), frozen(np.full((3, d), 0.1))
    W0 = frozen(np.eye(d))
    K0, Q0 = frozen(0.5 * np.eye(d)), frozen(0.5 * np.eye(d))
    return [
        lambda: mm.gd(X, Y, v, p0, 2, 0.1),
        lambda: mm.gd(X, Y, v, P0, 2, 0.1, W=W0, normalized=True, record_every=None),
        lambda: mm.gd_stack(frozen(inst.X[None]), frozen(inst.Y[None]), v, P0, 2, 0.1),
        lambda: mm.gd_W(X, Y, v, W0, p0, 2, 0.1),          # shared query: GD on u = W p
        lambda: mm.gd_joint(X, Y, v, p0, 2, 0.1, normalized=True),
        lambda: mm.gd_joint(X, Y, v, P0, 2, 0.1, normalized=False, W=W0, track=np.zeros(n, int)),
        lambda: mm.gd_KQ(X, Y, v, K0, Q0, p0, 2, 0.1),
    ]


def test_read_only_inputs_compile_no_new_kernel(monkeypatch):
    """Each call with ordinary arrays, then the same call with read-only X, Y, v, p0, W0, K0,
    Q0: the signatures of every kernel after the read-only calls are those after the ordinary
    ones, and the runs agree bit for bit. Bug caught: a read-only (or otherwise non-writable)
    array passed to a kernel as is (np.ascontiguousarray keeps it read-only), which numba
    compiles a new specialization for (cause 7: 40-125 s per call on a fresh cache)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    inst = mm.data.random_instance(4, 3, 3, seed=5)
    plain = [call() for call in calls(inst, np.array)]
    before = signatures()
    assert any(before.values())
    frozen = [call() for call in calls(inst, readonly)]
    assert signatures() == before
    for a, b in zip(plain, frozen):
        for field in ("p", "W", "v", "K", "Q", "risk"):
            if hasattr(a, field):
                np.testing.assert_array_equal(getattr(b, field), getattr(a, field))


def test_kernel_array_copies_only_what_a_kernel_cannot_take():
    """kernel_array: C-contiguous, writable, the dtype asked; the same object when it already
    is. Bugs caught: a read-only or strided array passed through (a new numba type), a copy
    of every array (the path buffer of gd_W's shared query is written in place)."""
    a = np.arange(6.0).reshape(2, 3)
    assert _compiled.kernel_array(a) is a
    for b in (readonly(a), a.T, a[:, ::2], np.arange(6).reshape(2, 3)):
        c = _compiled.kernel_array(b)
        assert c.flags.c_contiguous and c.flags.writeable and c.dtype == np.float64
        np.testing.assert_array_equal(c, b)
    assert _compiled.kernel_array(np.array([1.0, 2.0]), np.int64).dtype == np.int64
