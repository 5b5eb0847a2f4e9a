"""One records object (issue 38): every engine entry point of :mod:`maxmargin._engines`, on the
torch loop and on the compiled kernels, returns a :class:`maxmargin._descent.Records` with the
layout its docstring states (iterates (R, *runs, *block), the risk (R, *runs), and None for what
that parameterization does not record), and the two engines' records agree.

Bugs caught: a wrapper returning its kernel's own layout (batch-last, or (v, p) in one array),
or a field the trainer reads left as another engine's placeholder (gd_W's u-path recorded
attention it never computed; gd_joint's attention on tokens chosen after the run left unset),
so that one trainer's result depends on the engine that ran it.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from maxmargin import _engines
from maxmargin._descent import Descent, Records
from maxmargin.losses import get_loss

pytest.importorskip("numba")

n, T, d, m, B, STEPS = 3, 4, 3, 2, 5, 6
RECORD = np.array([0, 2, 4, 6])
R = len(RECORD)


def run(blocks: int = 1) -> Descent:
    return Descent(STEPS, 0.3, get_loss("logistic"), True, (1e-12,) * blocks, RECORD, "test")


def data():
    rng = np.random.default_rng(40)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    return rng, X, Y, v, Y[:, None] * (X @ v)


def calls():
    """name: (call, expected iterate shapes, fields that must be None, fields that must be set)."""
    rng, X, Y, v, gamma = data()
    P = rng.standard_normal((2, B, d))
    tracked = np.argmax(gamma, axis=1)
    W0 = rng.standard_normal((B, d, d))
    p = rng.standard_normal(d)
    Z = np.broadcast_to(p, (n, d)).copy()
    K0, Q0 = rng.standard_normal((B, d, m)), rng.standard_normal((B, d, m))
    V, Pj = rng.standard_normal((B, d)), rng.standard_normal((B, d))
    Xs = np.stack([X, X[:, ::-1]])
    return {
        "p": (lambda: _engines._descend(np.stack([X, X[:, ::-1]]), np.stack([gamma, gamma[:, ::-1]]),
                                        P, np.stack([tracked, T - 1 - tracked]), run()),
              [(R, 2, B, d)], ("probability",), ("on", "off", "final", "tracked")),
        "p without attention": (lambda: _engines._descend(X[None], gamma[None], P[:1],
                                                          tracked[None], run(), attention=False),
                                [(R, 1, B, d)], ("on", "off", "final", "probability", "tracked"), ()),
        "W shared": (lambda: _engines._descend_W(X, gamma, W0, Z, True, run()),
                     [(R, B, d, d)], ("on", "off", "final", "probability", "tracked"), ()),
        "(v, p)": (lambda: _engines._descend_joint(X, Y, X, V, Pj, tracked, run(2)),
                   [(R, B, d), (R, B, d)], ("off", "final"), ("on", "probability", "tracked")),
        "(v, p) tracked after the run": (
            lambda: _engines._descend_joint(X, Y, X, V, Pj, None, run(2)),
            [(R, B, d), (R, B, d)], ("off", "final"), ("on", "probability", "tracked")),
        "(K, Q)": (lambda: _engines._descend_KQ(X, gamma, Z, K0, Q0, 0.0, True, run()),
                   [(R, B, d, m), (R, B, d, m)], ("on", "off", "final", "probability", "tracked"), ()),
        "(K, Q) stack": (lambda: _engines._descend_KQ_stack(Xs, np.stack([gamma, gamma[:, ::-1]]),
                                                            np.stack([Z, Z]), K0[:2], Q0[:2], 0.0,
                                                            False, run()),
                         [(R, 2, d, m), (R, 2, d, m)], ("on", "off", "final", "probability", "tracked"), ()),
    }


@pytest.mark.parametrize("name", sorted(calls()))
def test_every_engine_returns_the_one_records_object(name, monkeypatch):
    call, shapes, unset, filled = calls()[name]
    records = {}
    for engine in ("torch", "compiled"):
        monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
        out = call()
        assert isinstance(out, Records)
        assert [a.shape for a in out.iterates] == shapes
        runs = shapes[0][:3] if name.startswith("p") else shapes[0][:2]   # (R, *runs)
        assert out.risk.shape == runs
        for field in unset:
            assert getattr(out, field) is None, field
        for field in filled:
            assert getattr(out, field) is not None, field
        records[engine] = out
    torch_out, compiled_out = records["torch"], records["compiled"]
    for field in dataclasses.fields(Records):
        a, b = getattr(torch_out, field.name), getattr(compiled_out, field.name)
        for x, y in (zip(a, b) if field.name == "iterates" else [(a, b)]):
            if x is None:
                continue
            np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-12, err_msg=f"{name}: {field.name}")
