"""``mm.gd_stack`` and ``mm.gd_W`` against plain torch autograd loops written here.

``gd_stack`` runs M instances x B starts as one array program, each instance with its own v and
its own (non-symmetric) W; ``gd_W`` trains the key-query matrix with one query per sequence.
The references replay every run on its own: the model written out in torch, the loss from the
formula string of its registry entry, autograd for the gradient. They are compared step by step
(the reference's step from each of the library's iterates, at the rounding bound of one step,
see roundoff.py), so that no tolerance depends on how a CPU's kernels round along a trajectory.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import maxmargin as mm
from roundoff import assert_every_step_matches, prompt_model

STEPS = 25


def torch_loss(name: str):
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_gd_stack_matches_an_autograd_loop_per_instance(loss, normalized):
    """Bugs caught: a per-instance W used as W.T, instances mixed up (v, W or starts of the wrong
    instance), a normalization across instances or runs, the risk averaged over the wrong axis."""
    rng = np.random.default_rng(11)
    M, B, n, T, d = 3, 2, 4, 3, 3
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    V = rng.standard_normal((M, d))
    W = rng.standard_normal((M, d, d)) + np.eye(d)
    P0 = 0.5 * rng.standard_normal((M, B, d))
    traj = mm.gd_stack(X, Y, V, P0, STEPS, 0.3, W=W, loss=loss, normalized=normalized, eps=1e-9)
    assert traj.p.shape == (STEPS + 1, M, B, d) and traj.risk.shape == (STEPS + 1, M, B)
    for m in range(M):
        model = prompt_model(X[m], Y[m], V[m], W[m], torch_loss(loss))  # logits x_it^T W_m p
        for b in range(B):
            assert_every_step_matches(traj.p[:, m, b], traj.risk[:, m, b], model, 0.3,
                                      normalized, 1e-9, P0[m, b])


def test_gd_stack_shared_W_and_v_are_broadcast():
    """A (d, d) W and a (d,) v are shared by every instance. Bug caught: the shared W transposed
    or applied to one instance only."""
    rng = np.random.default_rng(12)
    M, n, T, d = 2, 3, 4, 3
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    v, W = rng.standard_normal(d), rng.standard_normal((d, d))
    p0 = rng.standard_normal(d)
    traj = mm.gd_stack(X, Y, v, p0, STEPS, 0.2, W=W, normalized=True, eps=1e-9)
    for m in range(M):
        model = prompt_model(X[m], Y[m], v, W, lambda z: torch.nn.functional.softplus(-z))
        assert_every_step_matches(traj.p[:, m, 0], traj.risk[:, m, 0], model, 0.2, True, 1e-9, p0)


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("queries", ["per sequence", "shared (d,)", "shared (n, d)"])
@pytest.mark.parametrize("normalized", [False, True])
def test_gd_W_with_one_query_per_sequence_matches_an_autograd_loop(normalized, queries, engine,
                                                                 monkeypatch):
    """Bugs caught: the W-gradient transposed (x z^T vs z x^T), a query of the wrong sequence, a
    Frobenius normalization over the wrong axes, a wrong risk record; and in the shared-query
    path (one prompt p for every sequence, given as (d,) or as n equal rows: GD on u = W p, on
    the torch or the compiled engine), W p taken as W^T p, the step of u not scaled by ||p||^2
    (plain) or ||p|| and eps / ||p|| (normalized), W rebuilt as p u^T instead of u p^T."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    rng = np.random.default_rng(13)
    n, T, d, B = 4, 3, 3, 2
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    Z = rng.standard_normal((n, d))
    if queries != "per sequence":
        Z = np.broadcast_to(Z[0], (n, d)).copy()
    W0 = rng.standard_normal((B, d, d))
    given = Z[0] if queries == "shared (d,)" else Z
    traj = mm.gd_W(X, Y, v, W0, given, STEPS, 0.4, normalized=normalized, eps=1e-9)
    assert traj.W.shape == (STEPS + 1, B, d, d)
    Xt, Yt, Zt = torch.tensor(X), torch.tensor(Y), torch.tensor(Z)
    values = Yt[:, None] * (Xt @ torch.tensor(v))
    keys = torch.einsum("ntd,ne->ntde", Xt, Zt)  # d logit_it / dW = x_it z_i^T

    def model(W):
        s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, W, Zt), dim=-1)  # x_it^T W z_i
        margin = (s * values).sum(-1)
        return torch.nn.functional.softplus(-margin).mean(), margin, s, values, keys

    for b in range(B):
        assert_every_step_matches(traj.W[:, b], traj.risk[:, b], model, 0.4, normalized, 1e-9,
                                  W0[b])
