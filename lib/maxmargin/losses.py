"""Loss functions `l(x)` of the margin `x = Y f(X)`, with their derivatives.

All three satisfy the paper's loss assumption (strictly decreasing, differentiable, with a bounded
Lipschitz derivative on bounded intervals). Values are computed in overflow-free forms; a loss whose
value itself can exceed float64 at a finite margin (the exponential) also gives its logarithms,
so that a mean of losses (the risk) and its gradient are computed in the log domain when needed
(:func:`mean_loss`).
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
    """A margin loss: ``value(x)`` is `l(x)`, ``derivative(x)`` is `l'(x) < 0`; elementwise.

    ``torch_value`` and ``torch_derivative`` are the same formulas on float64 tensors, for the
    training loops (a test checks that the two backends agree). ``log_value`` and ``log_slope``
    (numpy) are `log l(x)` and `log(-l'(x))`, given by losses whose value or slope overflows float64
    at finite margins (None otherwise). ``excess(delta, top)`` is `l(top - delta) - l(top)` for
    `0 <= delta <= 1` without the subtraction (accurate where the two values agree in every digit),
    for :func:`~maxmargin.excess_risk`; None (the default) takes the difference. A built-in's
    ``excess`` serves only that built-in's formulas: a ``dataclasses.replace`` copy with other
    formulas takes the difference.

    The built-in losses are ``LOGISTIC``, ``EXPONENTIAL`` and ``CORRELATION``, by name in
    ``LOSSES``; every ``loss=`` argument takes a name or a ``Loss``.

    Attributes
    ----------
    name : the name, e.g. "logistic".
    formula : `l(x)` written with ``log``, ``exp`` and ``x`` only, e.g. "log(1 + exp(-x))".
    value, derivative : numpy functions, `l(x)` and `l'(x)` elementwise.
    torch_value, torch_derivative : the same on float64 tensors.
    log_value, log_slope : numpy functions `log l(x)` and `log(-l'(x))`, or None (the default).
    excess : numpy function ``excess(delta, top)`` (broadcasting), `l(top - delta) - l(top)`
        for `0 <= delta <= 1`, or None (the default).

    Examples
    --------
    >>> loss = mm.get_loss("logistic")
    >>> round(float(loss.value(0.0)), 4), float(loss.derivative(0.0))  # log 2 and -1/2
    (0.6931, -0.5)
    >>> mm.EXPONENTIAL.formula, sorted(mm.LOSSES)
    ('exp(-x)', ['correlation', 'exponential', 'logistic'])
    """

    name: str
    formula: str
    value: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    torch_value: Callable[[torch.Tensor], torch.Tensor]
    torch_derivative: Callable[[torch.Tensor], torch.Tensor]
    log_value: Callable[[np.ndarray], np.ndarray] | None = None
    log_slope: Callable[[np.ndarray], np.ndarray] | None = None
    excess: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def same_function(self, other) -> bool:
        """Whether ``other`` is a Loss with the same six formulas (its name, text and ``excess``
        aside): how the engines recognise a built-in loss, so that a copy runs where the original
        does. ``excess`` restates ``value``, and no engine reads it."""
        fields = ("value", "derivative", "torch_value", "torch_derivative", "log_value", "log_slope")
        return isinstance(other, Loss) and all(getattr(self, f) is getattr(other, f) for f in fields)


LOGISTIC = Loss(
    "logistic", "log(1 + exp(-x))",
    value=lambda x: np.logaddexp(0.0, -x),
    derivative=lambda x: -expit(-x),
    torch_value=lambda x: torch.logaddexp(torch.zeros_like(x), -x),
    torch_derivative=lambda x: -torch.sigmoid(-x),
    # log((1 + e^(delta - top)) / (1 + e^-top)) = log1p(expm1(delta) sigmoid(-top))
    excess=lambda delta, top: np.log1p(np.expm1(delta) / (1.0 + np.exp(top))),
)
EXPONENTIAL = Loss(
    "exponential", "exp(-x)",
    value=lambda x: np.exp(-x),
    derivative=lambda x: -np.exp(-x),
    torch_value=lambda x: torch.exp(-x),
    torch_derivative=lambda x: -torch.exp(-x),
    log_value=lambda x: -np.asarray(x, dtype=np.float64),
    log_slope=lambda x: -np.asarray(x, dtype=np.float64),
    excess=lambda delta, top: np.exp(-top) * np.expm1(delta),
)
CORRELATION = Loss(
    "correlation", "-x",
    value=lambda x: -np.asarray(x, dtype=np.float64),
    derivative=lambda x: -np.ones_like(x, dtype=np.float64),
    torch_value=lambda x: -x,
    torch_derivative=lambda x: -torch.ones_like(x),
    excess=lambda delta, top: delta + 0.0 * top,
)

# The built-in losses by name (documented on chapters/appendix-api.md).
LOSSES: dict[str, Loss] = {loss.name: loss for loss in (LOGISTIC, EXPONENTIAL, CORRELATION)}


def get_loss(loss: str | Loss) -> Loss:
    """Look a loss up by name ("logistic", "exponential", "correlation"), or pass a ``Loss`` through.

    Parameters
    ----------
    loss : a name from ``LOSSES`` or a ``Loss`` (returned as is).

    Returns
    -------
    Loss : the loss.

    Raises
    ------
    ValueError : ``loss`` is a string that names no loss.
    TypeError : ``loss`` is neither a string nor a ``Loss``.

    Examples
    --------
    >>> mm.get_loss("logistic") is mm.LOGISTIC
    True
    >>> mm.get_loss(mm.EXPONENTIAL).name
    'exponential'
    """
    if isinstance(loss, Loss):
        return loss
    if not isinstance(loss, str):
        raise TypeError(f"loss: expected one of {sorted(LOSSES)} or a Loss, got {type(loss).__name__}")
    if loss not in LOSSES:
        raise ValueError(f"loss: unknown loss {loss!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[loss]


def rounded_mean(loss: Loss, margins, *, axis: int = 0) -> np.ndarray:
    """The mean of l(margins) along ``axis``, rounded to float64: finite wherever the mean is
    representable, inf where it is beyond float64, NaN for NaN margins. Never raises.

    Each value l(x) may overflow (exp(-x) beyond x = -709.8) while the mean does not, and a sum of
    finite values may overflow while their mean does not: where the plain mean is not finite it
    is rescaled by the largest value, or taken in the log domain with ``loss.log_value`` (as
    2^k e^r m: a few ulp, tested against mpmath). The one
    risk of the library: :func:`mean_loss` (``mm.risk``) and every trainer's recorded risk.
    """
    x = np.asarray(margins, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        values = loss.value(x)
        mean = np.asarray(np.mean(values, axis=axis))
        if np.all(np.isfinite(mean)):
            return mean
        bad = ~np.isfinite(mean)
        # the sum of finite values overflowed: divide by the largest value first
        top = np.max(np.abs(values), axis=axis, keepdims=True)
        top = np.where((top > 0) & np.isfinite(top), top, 1.0)
        scaled = np.squeeze(top, axis=axis) * np.mean(values / top, axis=axis)
        mean = np.where(bad & np.isfinite(scaled), scaled, mean)
        if loss.log_value is not None and not np.all(np.isfinite(mean)):
            mean = np.where(np.isfinite(mean), mean, _mean_from_logs(loss, x, axis))
    return mean


# ln 2 in two parts (fdlibm's): LN2_HI has 32 significant bits, so k LN2_HI is exact for |k| < 2^20
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10


def _mean_from_logs(loss: Loss, x: np.ndarray, axis: int) -> np.ndarray:
    """The mean of l(x) along ``axis`` from ``loss.log_value``, without overflow: e^top m with
    top the largest log and m = mean(e^(log - top)) in [1/n, 1], e^top taken as 2^k e^r, top =
    k ln 2 + r with ln 2 in two parts (Cody-Waite), so r, and the mean, keep float64's accuracy
    (exp(log of the mean) loses the absolute error of a log near 709, 250 ulp)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logs = loss.log_value(x)
        top = np.max(logs, axis=axis, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        m = np.mean(np.exp(logs - top), axis=axis)
        top = np.clip(np.squeeze(top, axis=axis), -1100.0, 1100.0)   # beyond: 0 or inf anyway
        k = np.rint(top / np.log(2.0))
        r = (top - k * LN2_HI) - k * LN2_LO
        return np.ldexp(np.exp(r) * m, k.astype(np.int64))


def _log_mean(loss: Loss, x: np.ndarray, axis: int) -> np.ndarray:
    """log of the mean of l(x) along ``axis``, from ``loss.log_value`` (no overflow): the size
    of a mean beyond float64, for messages."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logs = loss.log_value(x)
        top = np.max(logs, axis=axis, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        return np.squeeze(top, axis=axis) + np.log(np.mean(np.exp(logs - top), axis=axis))


def mean_loss(loss: Loss, margins, *, axis: int = 0, blame: str = "v") -> np.ndarray:
    """The mean of l(margins) along ``axis`` (:func:`rounded_mean`), finite whenever the mean is
    representable; a mean beyond float64 raises a ValueError naming ``blame`` (the argument
    whose scale sets the margins).
    """
    x = np.asarray(margins, dtype=np.float64)
    mean = rounded_mean(loss, x, axis=axis)
    if np.all(np.isfinite(mean)):
        return mean
    if loss.log_value is not None and not np.any(np.isnan(x)):
        worst = float(np.max(_log_mean(loss, x, axis))) / np.log(10.0)
        raise ValueError(f"{blame}: with the {loss.name} loss the risk is about 10^{worst:.0f}, "
                         f"beyond float64 (at most 1.8e308); scale {blame} or X down, or use "
                         f"loss='logistic'")
    raise ValueError(f"{blame}: the mean {loss.name} loss is not representable in float64; "
                     f"scale {blame} or X down")
