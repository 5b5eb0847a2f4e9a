"""The last update of a run is checked as every other (round four, cause 1).

The compiled GD kernel checked the gradient before each update, never the iterate after one, so
an update that overflowed on the last step returned p[-1] = +-inf and a NaN risk with no error,
while the torch engine refused the same input; an overflow earlier in the run was reported one
step late. Both engines must now give the same error, naming the step whose update left float64.
"""
import numpy as np
import pytest

import maxmargin as mm

# One feature: keys are x W = 1e-308 x (so the logits stay near 1 while p nears 1e308) and the
# scores Y v x = -1e308 x, so the gradient stays near -0.2 and a step of lr = 1.7e308 moves p by
# about -3e307 per step: the step at which p leaves float64 is set by the start p0.
X1 = np.array([[[1.0], [0.0]], [[1.0], [0.0]]])
Y1 = np.array([1.0, 1.0])
V1 = np.array([-1e308])
W1 = np.array([[1e-308]])
LR = 1.7e308


def overflow_step(p0: float, steps: int) -> int | None:
    """The first step whose update of p leaves float64, from an own numpy loop of plain GD with
    the logistic loss (keys k_t = 1e-308 x_t, scores gamma_t = Y v x_t), or None."""
    keys = X1[..., 0] * W1[0, 0]                    # (n, T)
    gamma = Y1[:, None] * X1[..., 0] * V1[0]        # (n, T)
    n = len(Y1)
    p = p0
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(steps):
            logits = keys * p
            s = np.exp(logits - logits.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            z = np.sum(s * gamma, axis=1)
            slope = -1.0 / (1.0 + np.exp(z))        # logistic l'(z), z <= 0 here
            grad = np.sum(slope[:, None] * s * (gamma - z[:, None]) * keys) / n
            p = p - LR * grad
            if not np.isfinite(p):
                return k
    return None


def both_engines(monkeypatch, call) -> list[str]:
    """The ValueError messages of ``call`` on the torch and on the compiled engine."""
    pytest.importorskip("numba")
    messages = []
    for engine in ("torch", "compiled"):
        monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
        with pytest.raises(ValueError) as error:
            call()
        messages.append(str(error.value))
    return messages


@pytest.mark.parametrize("name", ["gd", "gd_stack"])
@pytest.mark.parametrize("steps, p0", [(1, -1.6e308), (3, -1.1e308), (3, -1.4e308)])
@pytest.mark.parametrize("record_every", [1, None])
def test_an_update_that_overflows_is_refused_alike_by_both_engines(name, steps, p0, record_every,
                                                                   monkeypatch):
    """p leaves float64 in the last update (steps 1 and 3), or in the middle (p0 = -1.4e308).
    Bugs caught: the compiled engine returning p[-1] = -inf and a NaN risk with no error (the
    kernel checked only the gradient, before an update); the compiled engine naming the step
    after the overflowing update (its gradient, NaN, was the first thing checked); the cause
    blamed on the scale of X or v as "about 10^inf" (2 max|gamma| overflowed in the bound) where
    lr is the cause."""
    step = overflow_step(p0, steps)
    assert step is not None and step < steps
    if name == "gd":
        call = lambda: mm.gd(X1, Y1, V1, [p0], steps, LR, W=W1, record_every=record_every)
    else:
        call = lambda: mm.gd_stack(X1[None], Y1[None], V1, [p0], steps, LR, W=W1,
                                   record_every=record_every)
    torch_message, compiled_message = both_engines(monkeypatch, call)
    assert compiled_message == torch_message
    assert torch_message.startswith(f"{name}: the gradient at step {step} is not finite")
    assert "lr = 1.7e+308 is too large" in torch_message


@pytest.mark.parametrize("name", ["gd", "gd_stack"])
@pytest.mark.parametrize("record_every", [1, None])
def test_logits_of_the_last_iterate_beyond_float64_are_refused(name, record_every, monkeypatch):
    """Keys (1, 1) and (1, 0), p0 = (1.797e308, 0), correlation loss, scores (1e290, 0): the one
    step moves p_2 by lr s_0 s_1 1e290 = 2.5e305 (own arithmetic: s = (1/2, 1/2), slope -1), so
    the last iterate is finite but its logit 1.797e308 + 2.5e305 is not, and its attention and
    risk are NaN. Bug caught: both engines returned that NaN risk with no error (the margins of
    the last iterate were never checked; every earlier step's are, through the gradient)."""
    X = np.array([[[1.0, 1.0], [1.0, 0.0]]])
    p0, v, lr = [1.797e308, 0.0], [0.0, 1e290], 1e16
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.float64(p0[0]) + np.float64(lr * 0.25 * 1e290))
    if name == "gd":
        call = lambda: mm.gd(X, [1.0], v, p0, 1, lr, loss="correlation", record_every=record_every)
    else:
        call = lambda: mm.gd_stack(X[None], [[1.0]], v, p0, 1, lr, loss="correlation",
                                   record_every=record_every)
    torch_message, compiled_message = both_engines(monkeypatch, call)
    assert compiled_message == torch_message
    assert torch_message.startswith(f"{name}: the logits of the iterate after step 1 (the "
                                    f"last) overflow float64")
    assert "lr = 1e+16 is too large" in torch_message


@pytest.mark.parametrize("name", ["gd_W", "gd_joint", "gd_KQ"])
def test_the_other_trainers_refuse_a_last_update_alike(name, monkeypatch):
    """One step of lr = 1e300 from 0 on scores -1e10 x: the update leaves float64 (own
    arithmetic: the gradient is about 0.25 1e10 / 2 per sequence). gd_W with a shared query runs
    GD on u = W p on the compiled kernel; gd_joint's and gd_KQ's kernels hand such a run to the
    torch loop: the message is the torch engine's in each case."""
    v, lr = [-1e10], 1e300
    calls = {"gd_W": lambda: mm.gd_W(X1, Y1, v, np.zeros((1, 1)), [1.0], 1, lr),
             "gd_joint": lambda: mm.gd_joint(X1, Y1, v, [0.0], 1, lr, normalized=False),
             "gd_KQ": lambda: mm.gd_KQ(X1, Y1, v, np.ones((1, 1)), np.ones((1, 1)), [1.0], 1, lr)}
    torch_message, compiled_message = both_engines(monkeypatch, calls[name])
    assert compiled_message == torch_message
    assert torch_message.startswith(f"{name}: the gradient at step 0 is not finite")
    assert "lr = 1e+300 is too large" in torch_message
