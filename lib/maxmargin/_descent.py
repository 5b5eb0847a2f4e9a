"""The bookkeeping every gradient descent of the library shares (gd, gd_stack, gd_W, gd_joint,
gd_KQ, gd_KQ_stack, the exact step and the optimizers), outside its loop: the validated step
settings, the recorded steps, the cost limit, the one risk recorder of the torch loops, the
error that names why a gradient left float64, the records every engine returns, and the
read-only arrays of the results.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from . import _checks
from .losses import EXPONENTIAL, Loss, get_loss, rounded_mean


@dataclass(frozen=True)
class Descent:
    """The validated settings of one descent, for every engine and parameterization: ``steps``
    updates of size ``lr`` on ``loss``, ``normalized`` or plain, with ``eps`` the normalization
    offsets of the blocks (``(eps,)``; ``(eps_v, eps_p)`` for (v, p)), ``record`` (R,) the
    recorded step indices (the last one ``steps``) and ``caller`` the public function that error
    messages name. The compiled wrappers turn it into the kernels' NamedTuples."""

    steps: int
    lr: float
    loss: Loss
    normalized: bool
    eps: tuple
    record: np.ndarray
    caller: str


@dataclass(frozen=True)
class Records:
    """What a descent records at the R steps ``run.record``, the same object for every engine
    (the torch loop, the compiled kernels) and every parameterization:

    ``iterates``: one array per gradient block, (R, *runs, *block): p (R, M, B, d) for M
    instances x B runs; W (R, B, d, d); v and p (R, B, d) each; K and Q (R, B, d, m) each
    (R, M, d, m) for the stack of M instances). ``risk`` (R, *runs): the mean loss. What only
    some trainers record, else None: ``on`` (R, *runs, n) the attention on the ``tracked``
    tokens (p: (M, n) given; (v, p): (n,), given or chosen after the run), ``off`` (R, *runs, n)
    on all other tokens, summed (p), ``final`` (*runs, n, T) the attention at the last iterate
    (p), ``probability`` (R, *runs) the mean of expit(z_i) ((v, p))."""

    iterates: tuple
    risk: np.ndarray
    on: np.ndarray | None = None
    off: np.ndarray | None = None
    final: np.ndarray | None = None
    probability: np.ndarray | None = None
    tracked: np.ndarray | None = None


def _overflow(caller: str, step: int, gamma, lr: float, loss: Loss, normalized: bool, *,
              start: str, start_logits: Callable[[], np.ndarray], sizes: tuple,
              logits: str, start_scores: Callable[[], np.ndarray] | None = None,
              last: bool = False) -> ValueError:
    """The error for a gradient or iterate that left float64 at ``step``, naming the cause
    (``last``: the logits of the last iterate, ``step`` = steps, overflow, though the iterate is
    finite: lr, or the scale of the inputs, carried it too far):

    * the exponential loss's derivative exp(-z) (the scale of v);
    * at step 0, logits of the start beyond float64 (the argument ``start``, e.g. p0 or W0);
    * a gradient too large for float64 whatever the iterate: its entries are bounded by
      2 max|gamma_it| times the product of ``sizes`` (the largest |key| entry, and the largest
      |query| entry for W), as softmax weights are at most 1 and |l'| at most 1 for the logistic
      and correlation losses (the scale of X or v); the bound is taken at ``start_scores()``
      where given (GD on (v, p), whose scores move with v: the data are to blame when the
      scores of the start v0 already reach it, lr when a step carried v there), else at gamma;
    * otherwise the iterate or its ``logits`` (as the parameterization writes them, e.g.
      "x_it^T W z_i") left float64 along the way (lr, for these inputs).

    ``start_logits`` computes the start's logits; it is called only at step 0.
    """
    if last:
        return ValueError(f"{caller}: the logits of the iterate after step {step} (the last) "
                          f"overflow float64, though the iterate is finite: lr = {lr:g} is too "
                          f"large for these inputs (or the scale of v or X is)")
    low = float(np.min(gamma))
    with np.errstate(over="ignore", invalid="ignore"):    # (scores of v0 may overflow: inf)
        top = _largest(gamma if start_scores is None else start_scores())
    bound = (np.log10(2.0) + np.log10(top) + sum(np.log10(size) for size in sizes)  # (2 top: inf)
             if top > 0 and all(size > 0 for size in sizes) else -np.inf)
    if EXPONENTIAL.same_function(loss) and low < -700.0:
        cause = (f"the exponential loss's derivative exp(-z) overflows for margins z below "
                 f"-709.8, and the scores Y_i v^T x_it reach {low:.3g}: reduce the scale of v"
                 + ("" if normalized else ", or use normalized=True (its direction is finite)"))
    elif step == 0 and not _all_finite(start_logits):
        cause = (f"the logits of the start {start} leave float64: start from a smaller {start} "
                 f"(the logits are {start} times the keys)")
    elif bound >= 308.0:
        cause = (f"its entries reach up to 2 max|Y_i v^T x_it| times the largest key entries, "
                 f"about 10^{bound:.0f}, whatever the iterate and lr: reduce the scale of X or v")
    else:
        cause = (f"the iterate or its logits {logits} left float64: lr = {lr:g} is too large "
                 f"for these inputs (or the scale of v or X is)")
    return ValueError(f"{caller}: the gradient at step {step} is not finite in float64; {cause}")


def _all_finite(compute: Callable[[], np.ndarray]) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.all(np.isfinite(compute())))


def _largest(a) -> float:
    return float(np.max(np.abs(a), initial=0.0))


def _record_count(steps: int, record_every) -> int:
    """How many steps a run records (see :func:`_record_steps`), without allocating them."""
    if record_every is None:
        return 2
    k = _checks.positive_int(record_every, "record_every")
    return -(-steps // k) + 1


def _record_steps(steps: int, record_every) -> np.ndarray:
    """(R,) the step indices a run records: 0, k, 2k, ... and ``steps``; (0, steps) for None."""
    if record_every is None:
        return np.array([0, steps])
    record_every = _checks.positive_int(record_every, "record_every")
    kept = np.arange(0, steps + 1, record_every)
    return kept if kept[-1] == steps else np.append(kept, steps)


def _queries_shared(given, Z: np.ndarray) -> bool:
    """Whether one query serves every sequence: ``queries`` given as (d,), or (n, d) rows all
    equal to the first (then W z is computed once instead of n times)."""
    return np.ndim(given) == 1 or bool(np.all(Z == Z[:1]))


def _risk_of(margin, loss: Loss) -> np.ndarray:
    """(..., B) the risk, the mean loss over the sequences, of margins (..., n, B) (a tensor or
    an array): computed at each record from the (n, B) margins of that step, so no (R, n, B)
    margins are kept. The one recorder of every torch loop, the risk of ``mm.risk``
    (:func:`~maxmargin.losses.rounded_mean`): finite wherever the mean is, though the sum of
    the losses, or one loss, may overflow; inf beyond float64; NaN margins (logits of a start
    beyond float64) give NaN, refused right after by the gradient's check with the cause named."""
    values = margin.numpy() if isinstance(margin, torch.Tensor) else margin
    return rounded_mean(loss, values, axis=-2)


def _settings(steps, lr, loss, **eps) -> tuple:
    """The validated step settings shared by every descent: (steps, lr, loss, *eps values).

    ``eps`` are the named normalization offsets (``eps``, or ``eps_v`` and ``eps_p``), each a
    positive float, returned in the order given.
    """
    steps = _checks.positive_int(steps, "steps")
    lr = _checks.positive_float(lr, "lr")
    offsets = [_checks.positive_float(value, name) for name, value in eps.items()]
    return (steps, lr, get_loss(loss), *offsets)


STEP_OVERHEAD = 10_000  # the fixed cost of one step (Python and torch calls), in multiply-adds


def _recording_bytes(n_records: int, batch: int, per_run: int) -> float:
    """Bytes of the arrays a descent records: ``n_records`` recorded steps (today steps + 1) of
    ``batch`` runs, ``per_run`` float64 numbers per run and recorded step (d for the iterate, n
    per recorded attention or margin, 1 for the loss)."""
    return 8.0 * n_records * batch * per_run


def _affordable_descent(steps: int, records: int, batch: int, step_work: int, per_run: int,
                        final: int) -> None:
    """Refuse a descent whose estimated cost exceeds the library's limits (_checks.affordable):
    ``steps`` steps of ``batch`` runs, each ``step_work`` multiply-adds per run and step (plus a
    fixed overhead per step), recording ``per_run`` numbers per run at each of ``records``
    recorded steps, and ``final`` numbers per run at the end."""
    operations = float(steps) * (4.0 * batch * step_work + STEP_OVERHEAD)
    nbytes = _recording_bytes(records, batch, per_run) + 8.0 * batch * final
    _checks.affordable("steps", steps, operations, nbytes, f"a descent of {batch} run(s)")


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a
