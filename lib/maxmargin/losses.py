"""Loss functions l(x) of the margin x = Y f(X), with their derivatives.

All three satisfy the paper's loss assumption (strictly decreasing, differentiable, with a bounded
Lipschitz derivative on bounded intervals). Values are computed in overflow-free forms.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


def expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x)), elementwise (SciPy's, imported on first use)."""
    from scipy.special import expit as sigmoid  # deferred: importing SciPy costs about 0.5 s

    return sigmoid(x)


@dataclass(frozen=True)
class Loss:
    """A margin loss: ``value(x)`` is l(x), ``derivative(x)`` is l'(x) (< 0); elementwise.

    ``torch_value`` and ``torch_derivative`` are the same formulas on float64 tensors, for the
    training loops (a test checks that the two backends agree).
    """

    name: str
    formula: str
    value: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    torch_value: Callable[[torch.Tensor], torch.Tensor]
    torch_derivative: Callable[[torch.Tensor], torch.Tensor]


LOGISTIC = Loss(
    "logistic", "log(1 + exp(-x))",
    value=lambda x: np.logaddexp(0.0, -x),
    derivative=lambda x: -expit(-x),
    torch_value=lambda x: torch.logaddexp(torch.zeros_like(x), -x),
    torch_derivative=lambda x: -torch.sigmoid(-x),
)
EXPONENTIAL = Loss(
    "exponential", "exp(-x)",
    value=lambda x: np.exp(-x),
    derivative=lambda x: -np.exp(-x),
    torch_value=lambda x: torch.exp(-x),
    torch_derivative=lambda x: -torch.exp(-x),
)
CORRELATION = Loss(
    "correlation", "-x",
    value=lambda x: -np.asarray(x, dtype=np.float64),
    derivative=lambda x: -np.ones_like(x, dtype=np.float64),
    torch_value=lambda x: -x,
    torch_derivative=lambda x: -torch.ones_like(x),
)

LOSSES: dict[str, Loss] = {loss.name: loss for loss in (LOGISTIC, EXPONENTIAL, CORRELATION)}


def get_loss(loss: str | Loss) -> Loss:
    """Look a loss up by name ("logistic", "exponential", "correlation"), or pass a ``Loss`` through."""
    if isinstance(loss, Loss):
        return loss
    if not isinstance(loss, str):
        raise TypeError(f"loss: expected one of {sorted(LOSSES)} or a Loss, got {type(loss).__name__}")
    if loss not in LOSSES:
        raise ValueError(f"loss: unknown loss {loss!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[loss]
