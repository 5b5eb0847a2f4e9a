"""The torch.nn.Module layer trains the same function as the library's formulas."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import maxmargin as mm
from maxmargin.nn import PromptAttention, logistic_risk
from roundoff import prompt_model, step_bounds


def test_module_matches_library_forward_and_gradients():
    inst = mm.data.fig2()
    p = np.array([0.4, -1.2, 0.3])
    layer = PromptAttention(3, p=p, v=inst.v, W=inst.W)
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    np.testing.assert_allclose(layer.W.detach().numpy(), inst.W, atol=0)
    np.testing.assert_allclose(layer(X).detach().numpy(), mm.predict(inst.X, inst.v, p, W=inst.W), rtol=1e-13)
    risk = logistic_risk(layer, X, Y)
    risk.backward()
    assert risk.item() == pytest.approx(mm.risk(inst.X, inst.Y, inst.v, p, W=inst.W), rel=1e-14)
    np.testing.assert_allclose(layer.p.grad.numpy(), mm.risk_grad(inst.X, inst.Y, inst.v, p, W=inst.W), rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(layer.v.grad.numpy(), mm.risk_grad_v(inst.X, inst.Y, inst.v, p, W=inst.W), rtol=1e-11, atol=1e-15)


def test_sgd_on_the_prompt_is_the_library_gd():
    """Step by step: torch's SGD step of the module from each of gd's iterates gives the next,
    to one step's rounding bound (roundoff.py; 25 steps compared whole would compare rounding
    accumulated differently by two implementations)."""
    inst = mm.data.fig1(variant="b")
    traj = mm.gd(inst.X, inst.Y, inst.v, inst.p0[4], 25, 0.5, W=inst.W)
    model = prompt_model(inst.X, inst.Y, inst.v, inst.W, lambda z: torch.nn.functional.softplus(-z))
    atol = step_bounds(model, traj.p[:, 0], 0.5, False, 1e-12)
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    for k in range(25):
        layer = PromptAttention(3, p=traj.p[k, 0], v=inst.v, W=inst.W)
        opt = torch.optim.SGD([layer.p], lr=0.5)
        opt.zero_grad()
        logistic_risk(layer, X, Y).backward()
        opt.step()
        np.testing.assert_allclose(layer.p.detach().numpy(), traj.p[k + 1, 0], rtol=0,
                                   atol=atol[k], err_msg=f"step {k}")


def test_layer_with_a_non_symmetric_W_is_the_formula():
    """f(X_i) = sum_t softmax(X_i W p)_t v^T x_it written out in numpy, with a W whose transpose
    gives other logits (fig2's W is diagonal, so a layer using W^T for W passed that test)."""
    rng = np.random.default_rng(3)
    X, W = rng.standard_normal((4, 5, 3)), rng.standard_normal((3, 3))
    p, v = rng.standard_normal(3), rng.standard_normal(3)
    logits = np.einsum("ntd,de,e->nt", X, W, p)
    assert np.abs(logits - np.einsum("ntd,ed,e->nt", X, W, p)).max() > 0.1   # W^T differs
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    expected = np.einsum("nt,ntd,d->n", s, X, v)
    layer = PromptAttention(3, p=p, v=v, W=W)
    np.testing.assert_allclose(layer.W.detach().numpy(), W, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(layer(torch.tensor(X)).detach().numpy(), expected, rtol=1e-12)


def exact_attention(X: np.ndarray, p: np.ndarray) -> np.ndarray:
    """softmax(X p) in 50-digit mpmath from the exact float64 inputs (W = I), rounded."""
    import mpmath

    with mpmath.workdps(50):
        weights = []
        for seq in X:
            logits = [mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in zip(x, p))
                      for x in seq]
            top = max(logits)
            e = [mpmath.exp(l - top) for l in logits]
            weights.append([float(w / mpmath.fsum(e)) for w in e])
    return np.array(weights)


@given(k=st.integers(-300, 300), j=st.integers(-150, 150))
@settings(max_examples=30, deadline=None, derandomize=True)
def test_attention_of_the_layer_is_right_at_every_scale(k, j):
    """Bug caught (issue 22, cause 5): logits beyond float64 (prompt 1e200 on tokens 1e150) gave
    inf - inf = NaN weights and a NaN output where the exact attention is one-hot and the output
    finite. Reference: the softmax in 50-digit arithmetic (a tie between tokens 0 and 2 too)."""
    X = np.array([[[1.0, 0.0], [0.5, 1.0], [1.0, 0.0]], [[0.2, -1.0], [0.3, 0.4], [-2.0, 0.1]]]) * 10.0 ** j
    p = np.array([1.0, -0.7]) * 10.0 ** k
    layer = PromptAttention(2, p=p, v=[1.0, 0.5])
    weights = layer.attention(torch.tensor(X)).detach().numpy()
    np.testing.assert_allclose(weights, exact_attention(X, p), rtol=1e-12, atol=1e-14)
    out = layer(torch.tensor(X)).detach().numpy()
    assert np.all(np.isfinite(out))
