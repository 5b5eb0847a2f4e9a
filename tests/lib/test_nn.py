"""The torch.nn.Module layer trains the same function as the library's formulas."""
import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin.nn import PromptAttention, logistic_risk


def test_module_matches_library_forward_and_gradients():
    inst = mm.data.fig2()
    p = np.array([0.4, -1.2, 0.3])
    layer = PromptAttention(3, p=p, v=inst.v, W=inst.W)
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    np.testing.assert_allclose(layer.W.detach().numpy(), inst.W, atol=0)
    np.testing.assert_allclose(layer(X).detach().numpy(), mm.predict(inst.X, inst.v, p, inst.W), rtol=1e-13)
    risk = logistic_risk(layer, X, Y)
    risk.backward()
    assert risk.item() == pytest.approx(mm.risk(inst.X, inst.Y, inst.v, p, inst.W), rel=1e-14)
    np.testing.assert_allclose(layer.p.grad.numpy(), mm.risk_grad(inst.X, inst.Y, inst.v, p, inst.W), rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(layer.v.grad.numpy(), mm.risk_grad_v(inst.X, inst.Y, inst.v, p, inst.W), rtol=1e-11, atol=1e-15)


def test_sgd_on_the_prompt_is_the_library_gd():
    inst = mm.data.fig1("b")
    layer = PromptAttention(3, p=inst.p0[4], v=inst.v, W=inst.W)
    opt = torch.optim.SGD([layer.p], lr=0.5)
    X, Y = torch.tensor(inst.X), torch.tensor(inst.Y)
    for _ in range(25):
        opt.zero_grad()
        logistic_risk(layer, X, Y).backward()
        opt.step()
    traj = mm.gd(inst.X, inst.Y, inst.v, inst.p0[4], 25, 0.5, W=inst.W)
    np.testing.assert_allclose(layer.p.detach().numpy(), traj.p[-1, 0], rtol=1e-11)
