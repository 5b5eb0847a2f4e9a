"""Optimizers on W beyond gradient descent, exact at every logit gap: ``mm.optimizers.descend``.

One function runs a stack of M instances (one run each) with one of seven update rules on the
key-query matrix W (d, e), the logits being `a_it = x_it^T W z_i` with queries `z_i` (e,):

* "gd":       W <- W - lr grad L (the true gradient: it underflows, genuinely, once every
              non-selected softmax weight does, past logit gaps of about 745);
* "ngd":      `W <- W - lr G / ||G||_F` (normalized GD, no eps);
* "md":       normalized mirror descent with the potential `psi(W) = ||W||_p^p / p` (entrywise):
              `psi'(W_next) = psi'(W) - lr G / ||G||_q`, `q = p / (p - 1)`, `psi'(W) = sign(W) |W|^(p-1)`;
              p = 2 is "ngd";
* "sign":     W <- W - lr sign(G) (sign(0) = 0): steepest descent in the entrywise max-norm;
* "spectral": `W <- W - lr U V^T`, `G = U S V^T` truncated (singular values below 1e-10 times the
              largest dropped): steepest descent in the spectral norm;
* "adam":     PyTorch's Adam (betas, eps, bias correction, no weight decay);
* "polyak":   a step of length `(L - L*) / ||grad L||_F` along `-G / ||G||_F`, `L*` the risk with every
              sequence attending only to its current top token; an "ngd" step of lr where
              `L - L* <= 0` (counted in ``fallbacks``).

With e = 1 and every query 1 (queries (n, 1) of ones), W (d, 1) is the prompt p of the paper and
"gd" / "ngd" are :func:`~maxmargin.gd` (plain / normalized) on p.

How it stays exact. Every step starts from :func:`maxmargin.exactstep.scaled_logit_gradient`:
`G = e^(-c) grad L` with c the log of the largest non-selected softmax weight of the instance,
exact to rounding at any gap (the weights are formed relative to the top token, never by
subtraction from 1). The scale-free rules use G only: NGD, MD, sign, spectral, the Polyak ratio,
and Adam, whose moments are carried in units `e^(b)` of a running scale b (notes, section 4.4).
Norms are taken after dividing G by its largest entry, so that `||G||_q` cannot underflow
(q = 7/3 of a gradient of 1e-140 is 0 in plain float64). "gd" uses `e^c G`, which underflows
where the true gradient does, and Adam with eps > 0 freezes where eps dominates `e^(b) sqrt(v)`:
both genuinely, as in exact arithmetic rounded to float64.

This is a deliberate deviation from the other descent engines (``mm.gd_W``, the torch and
compiled engines stay as they are): the loop is plain numpy, vectorized over the M instances
and written to be read beside the maths; its own reference is ``mm.reference`` (mirror_step,
sign_step, spectral_step, adam_step, polyak_step), against which the tests check it step by step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _checks, _kernels
from ._descent import _affordable_descent, _readonly, _record_count, _record_steps, _settings
from .exactstep import scaled_logit_gradient
from .losses import Loss, rounded_mean
from .problem import stacked

METHODS = ("gd", "ngd", "md", "sign", "spectral", "adam", "polyak")

#: Singular values below this fraction of the largest are dropped by "spectral" (rank G <= n).
SPECTRAL_CUTOFF = 1e-10

#: Below this |z_i - gamma_ir| the Polyak excess l(z_i) - l(gamma_ir) is taken by Simpson's rule
#: on l' (relative error about delta^4 / 2880), above it as the plain difference.
SIMPSON_BELOW = 1e-3


@dataclass(frozen=True)
class OptimizerTrajectory:
    """M runs of :func:`descend` recorded at R steps. The arrays are read-only.

    Attributes
    ----------
    W : (R, M, d, e) iterates at the recorded steps.
    risk : (R, M) the risk L(W) (the mean loss).
    scale : (R, M) c, the log of the largest non-selected softmax weight (over sequences and
        tokens): the gradient is `e^c` times a matrix of order one, so -c is about the smallest gap.
    log_grad_norm : (R, M) `log ||grad L||_F`, finite where the gradient itself underflows
        (-inf only where it is exactly 0).
    log_excess : (R, M) `log(L - L*)` with `L*` the risk at the current top tokens (exact at any
        gap), NaN where `L - L* <= 0`.
    steps : (R,) the step index of each record.
    fallbacks : (M,) how many steps of "polyak" fell back to an NGD step of lr (0 otherwise).
    method, lr, p, betas, eps : the settings (p None unless "md"; betas, eps None unless "adam").

    Methods ``cosine(direction)``, (R, M) Frobenius cosines with a (d, e) or (M, d, e) matrix,
    ``selected_tokens()``, (M, n) each sequence's top token at the last iterate, and the property
    ``norms``, (R, M) Frobenius norms.

    Examples
    --------
    >>> X = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    >>> run = mm.optimizers.descend(X, [[1.0]], [1.0, 0.5], np.zeros((2, 1)), np.ones((1, 1)),
    ...                             100, 0.1, method="ngd", record_every=50)
    >>> run.W.shape, run.steps, run.selected_tokens()
    ((3, 1, 2, 1), array([  0,  50, 100]), array([[0]]))
    >>> np.round(run.cosine([[1.0], [-1.0]])[-1], 6)       # the prompt's SVM direction
    array([1.])
    """

    W: np.ndarray
    risk: np.ndarray
    scale: np.ndarray
    log_grad_norm: np.ndarray
    log_excess: np.ndarray
    steps: np.ndarray
    fallbacks: np.ndarray
    method: str
    lr: float
    p: float | None = None
    betas: tuple | None = None
    eps: float | None = None
    _last_top: np.ndarray = field(default=None, repr=False)

    @property
    def norms(self) -> np.ndarray:
        """(R, M) Frobenius norms of the recorded iterates (without overflow)."""
        return _kernels.norms(self.W.reshape(self.W.shape[:2] + (-1,)))

    def cosine(self, direction) -> np.ndarray:
        """(R, M) Frobenius cosine of each recorded W with ``direction``, (d, e) or (M, d, e) (one
        per instance, e.g. each instance's SVM); 0 at a zero iterate."""
        R, M, d, e = self.W.shape
        u = _checks.as_float_array(direction, "direction")
        if u.shape not in ((d, e), (M, d, e)):
            raise ValueError(f"direction: expected shape ({d}, {e}) or ({M}, {d}, {e}), got "
                             f"{u.shape}")
        flat = self.W.reshape(R, M, d * e)
        u = _checks.direction(u.reshape(u.shape[:-2] + (d * e,)), flat.shape,
                              f"({d}, {e}) or ({M}, {d}, {e})")
        return _kernels.cosine(flat, u)

    def selected_tokens(self) -> np.ndarray:
        """(M, n) `argmax_t x_it^T W z_i` at the last iterate."""
        return self._last_top.copy()


def _unit_max(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """G (M, d, e) divided by its largest |entry| per instance (a zero G kept), and those (M,)."""
    top = np.max(np.abs(G), axis=(1, 2))
    return G / np.where(top > 0, top, 1.0)[:, None, None], top


def _per(x: np.ndarray, A: np.ndarray) -> np.ndarray:
    """A (M, d, e) divided by x (M,), 0 where x is 0."""
    return np.where((x > 0)[:, None, None], A / np.where(x > 0, x, 1.0)[:, None, None], 0.0)


def q_norm(G, q: float) -> np.ndarray:
    """The entrywise q-norm of each matrix of a stack, without under- or overflow.

    Computed as `m ||G / m||_q` with `m = max |G|` per matrix: the plain `(sum |G_ij|^q)^(1/q)` is 0
    in float64 once `|G_ij|^q` underflows (for q = 7/3, entries below about 1e-139), and mirror
    descent's step `G / ||G||_q` then divides by 0.

    Parameters
    ----------
    G : (M, d, e) a stack of matrices (finite).
    q : the exponent (> 0; the dual exponent p / (p - 1) of mirror descent).

    Returns
    -------
    numpy.ndarray : (M,) the q-norms.

    Examples
    --------
    >>> G = np.full((1, 10, 10), 1e-140)
    >>> float(np.sum(np.abs(G) ** (7 / 3)) ** (3 / 7))         # the plain formula: underflow
    0.0
    >>> float(mm.optimizers.q_norm(G, 7 / 3)[0] / 1e-140)      # 100^(3/7)
    7.196856730011519
    """
    G = np.asarray(G, dtype=float)
    unit, top = _unit_max(G)
    return top * np.sum(np.abs(unit) ** q, axis=(1, 2)) ** (1.0 / q)


def _mirror_map(W: np.ndarray, p: float) -> np.ndarray:
    """psi'(W) = sign(W) |W|^(p-1) (not W |W|^(p-2), which is NaN at 0 for p < 2)."""
    return np.sign(W) * np.abs(W) ** (p - 1.0)


def _inverse_mirror_map(U: np.ndarray, p: float) -> np.ndarray:
    """(psi')^(-1)(U) = sign(U) |U|^(1/(p-1))."""
    return np.sign(U) * np.abs(U) ** (1.0 / (p - 1.0))


def _spectral_direction(G: np.ndarray) -> np.ndarray:
    """U V^T of the SVD of each G (M, d, e), singular values at most SPECTRAL_CUTOFF times the
    largest dropped (0 for G = 0)."""
    U, S, Vt = np.linalg.svd(G, full_matrices=False)
    keep = S > SPECTRAL_CUTOFF * S[:, :1]
    return (U * keep[:, None, :]) @ Vt


def _mean_slope(loss: Loss, gamma: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """(l(gamma + delta) - l(gamma)) / delta, elementwise: Simpson's rule on l' for small |delta|
    (exact where delta underflows), the plain difference quotient above SIMPSON_BELOW."""
    small = np.abs(delta) < SIMPSON_BELOW
    slope = loss.derivative
    simpson = (slope(gamma) + 4.0 * slope(gamma + delta / 2) + slope(gamma + delta)) / 6.0
    with np.errstate(divide="ignore", invalid="ignore"):
        quotient = (loss.value(gamma + delta) - loss.value(gamma)) / delta
    return np.where(small, simpson, quotient)


def _scaled_excess(step, loss: Loss) -> np.ndarray:
    """(M,) e^(-c) (L - L*), L* = (1/n) sum_i l(gamma_ir): each term is
    e^(-c) (z_i - gamma_ir) times the mean slope of l over [gamma_ir, z_i] (notes 5.4)."""
    terms = step.scaled_offset * _mean_slope(loss, step.top_score, step.offset)
    return np.mean(terms, axis=1)


def _validate_settings(method, p, betas, eps):
    if not isinstance(method, str):
        raise TypeError(f"method: expected one of {list(METHODS)}, got {type(method).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; choose one of {list(METHODS)}")
    if method == "md":
        if p is None:
            raise ValueError("p: method='md' needs the potential's exponent p > 1")
        p = _checks.real(p, "p")
        if not p > 1:
            raise ValueError(f"p: the potential ||W||_p^p / p needs p > 1, got {p:g}")
    elif p is not None:
        raise ValueError(f"p: only method='md' takes p, got p={p!r} with method={method!r}")
    if method == "adam":
        betas = (0.9, 0.999) if betas is None else betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas: expected a pair (beta1, beta2), got {betas!r}")
        betas = tuple(_checks.real(b, "betas") for b in betas)
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas: each must be in [0, 1), got {betas}")
        eps = 1e-8 if eps is None else _checks.real(eps, "eps", minimum=0.0)
    elif betas is not None or eps is not None:
        name = "betas" if betas is not None else "eps"
        raise ValueError(f"{name}: only method='adam' takes {name} (the other rules have no "
                         f"offset), got method={method!r}")
    return p, betas, eps


def descend(X, Y, v, W0, queries, steps: int, lr: float, *, method: str, p: float | None = None,
            betas: tuple | None = None, eps: float | None = None,
            loss: str | Loss = "logistic", record_every: int | None = 1) -> OptimizerTrajectory:
    """Run one of seven optimizers on W for a stack of M instances, exact at every logit gap.

    Parameters
    ----------
    X, Y, v : a stack of M instances: (M, n, T, d), (M, n) in {-1, +1}, (d,) or (M, d).
    W0 : (d, e) or (M, d, e) the starts.
    queries : (n, e) or (M, n, e), the query `z_i` of each sequence (logits `x_it^T W z_i`); with
        e = 1 and ones, W is the prompt p.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    method : keyword-only, one of "gd", "ngd", "md", "sign", "spectral", "adam", "polyak" (see
        the module docstring).
    p : keyword-only, the exponent of the mirror potential `||W||_p^p / p` (`p > 1`), for "md" only.
    betas, eps : keyword-only, Adam's settings (default (0.9, 0.999) and 1e-8, PyTorch's), for
        "adam" only; eps = 0 makes Adam scale-free.
    loss : keyword-only, a loss name or :class:`~maxmargin.Loss` (default "logistic").
    record_every : keyword-only, as in :func:`~maxmargin.gd` (default 1).

    Returns
    -------
    OptimizerTrajectory : W (R, M, d, e), risk, scale, log_grad_norm, log_excess (R, M), steps
        (R,), fallbacks (M,) and the settings.

    Raises
    ------
    ValueError, TypeError : bad data or settings, naming the argument (shapes, NaN or inf,
        steps < 1, lr <= 0, an unknown method, p <= 1 or p without "md", betas outside [0, 1),
        eps < 0, betas or eps without "adam"), a run beyond the library's cost limits (naming
        steps), or iterates that leave float64 (naming lr).

    Examples
    --------
    Sign descent on one sequence whose second token keeps its key: past a gap of 745 every
    non-selected weight is 0 in float64 and the steps go on, at the gradient's true sign.

    >>> X = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    >>> run = mm.optimizers.descend(X, [[1.0]], [1.0, -1.0], np.zeros((2, 2)), np.ones((1, 1, 2)),
    ...                             1000, 0.5, method="sign", record_every=500)
    >>> run.W[-1, 0]
    array([[ 500.,  500.],
           [-500., -500.]])
    >>> [round(float(c)) for c in run.scale[:, 0]]      # -c: the gap, 0 -> 1000 -> 2000
    [-1, -1000, -2000]
    """
    problems = stacked(X, Y, v)
    M, (n, T, d) = len(problems), problems[0].shape
    gamma = np.stack([prob.scores for prob in problems])
    X = np.stack([prob.X for prob in problems])
    Z = _checks.as_float_array(queries, "queries")
    if Z.ndim == 2:
        Z = np.broadcast_to(Z, (M,) + Z.shape)
    if Z.ndim != 3 or Z.shape[:2] != (M, n) or Z.shape[2] < 1:
        raise ValueError(f"queries: expected shape ({n}, e) or ({M}, {n}, e) with e >= 1, got "
                         f"{np.shape(queries)}")
    Z = _checks.finite(Z, "queries")
    e = Z.shape[2]
    W = _checks.as_float_array(W0, "W0")
    if W.shape == (d, e):
        W = np.broadcast_to(W, (M, d, e))
    if W.shape != (M, d, e):
        raise ValueError(f"W0: expected shape ({d}, {e}) or ({M}, {d}, {e}) (e from queries), "
                         f"got {W.shape}")
    W = _checks.finite(W, "W0").copy()
    steps, lr, loss = _settings(steps, lr, loss)
    p, betas, eps = _validate_settings(method, p, betas, eps)
    work = n * T * d * e * 3 + (10 * d * e * min(d, e) if method == "spectral" else 8 * d * e)
    _affordable_descent(steps, _record_count(steps, record_every), M, work, d * e + 4, n)
    record = _record_steps(steps, record_every)
    R = len(record)
    Ws, risks, scales = np.empty((R, M, d, e)), np.empty((R, M)), np.empty((R, M))
    log_grads, log_excess = np.empty((R, M)), np.empty((R, M))
    fallbacks = np.zeros(M, dtype=np.int64)
    if method == "md":
        q = p / (p - 1.0)
        U = _mirror_map(W, p)                      # the dual iterate, carried (not re-derived)
    if method == "adam":
        beta1, beta2 = betas
        with np.errstate(divide="ignore"):       # log 0 = -inf: no memory
            log_b1, log_b2 = np.log(beta1), 0.5 * np.log(beta2)
        decay = max(log_b1, log_b2)               # the slower moment's log-decay per step
        b = np.full(M, -np.inf)                   # moments m = e^b m_, sqrt(v) = e^b r_
        m_, r_ = np.zeros_like(W), np.zeros_like(W)
    r = 0
    for k in range(steps + 1):
        logits = np.einsum("mntd,mde,mne->mnt", X, W, Z)
        if not np.isfinite(logits).all():
            raise ValueError(f"lr: the logits x^T W z left float64 at step {k} (lr = {lr:g}); "
                             f"the start W0 or lr is too large for these tokens and queries")
        step = scaled_logit_gradient(logits, gamma, loss)
        c = step.scale
        G = np.einsum("mnt,mntd,mne->mde", step.dlogits, X, Z)   # e^(-c) grad L, (M, d, e)
        unit, top = _unit_max(G)                  # G / max|G|: norms without under/overflow
        size = np.linalg.norm(unit, axis=(1, 2))  # ||G||_F / max|G|
        if record[r] == k:
            Ws[r], risks[r], scales[r] = W, rounded_mean(loss, step.margin, axis=1), c
            with np.errstate(divide="ignore", invalid="ignore"):
                log_grads[r] = c + np.log(top) + np.log(size)
                excess = _scaled_excess(step, loss)
                log_excess[r] = np.where(excess > 0, c + np.log(excess), np.nan)
            r += 1
        if k == steps:
            break
        if method == "gd":
            W = W - lr * (G * np.exp(c)[:, None, None])          # underflows with the gradient
        elif method == "ngd":
            W = W - lr * _per(size, unit)
        elif method == "md":
            U = U - lr * _per(q_norm(unit, q), unit)
            W = _inverse_mirror_map(U, p)
        elif method == "sign":
            W = W - lr * np.sign(G)
        elif method == "spectral":
            W = W - lr * _spectral_direction(unit)
        elif method == "adam":
            t = k + 1
            b_new = np.maximum(c, b + decay)      # the moments' unit: they stay below ~1
            # beta1 e^(b - b_new), sqrt(beta2) e^(b - b_new) and e^(c - b_new) are all <= 1,
            # formed as one exponential each (beta e^(+710) would be 0 * inf for beta = 0)
            keep1 = np.exp(log_b1 + b - b_new)[:, None, None]
            keep2 = np.exp(log_b2 + b - b_new)[:, None, None]
            new = np.exp(c - b_new)[:, None, None]
            b = b_new
            m_ = keep1 * m_ + (1.0 - beta1) * new * G
            # sqrt(v) carried by hypot: entries 1e-200 below the largest do not underflow squared
            r_ = np.hypot(keep2 * r_, np.sqrt(1.0 - beta2) * new * G)
            with np.errstate(over="ignore", divide="ignore"):
                offset = np.exp(np.log(eps) - b) if eps > 0 else np.zeros(M)   # eps e^(-b)
            denom = r_ / np.sqrt(1.0 - beta2 ** t) + offset[:, None, None]
            ratio = np.where(denom > 0, m_ / np.where(denom > 0, denom, 1.0), 0.0)
            W = W - (lr / (1.0 - beta1 ** t)) * ratio
        else:  # polyak
            excess = _scaled_excess(step, loss)  # e^(-c) (L - L*)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                length = (excess / top) / size     # (L - L*) / ||grad L||_F
            fall = ~(np.isfinite(length) & (excess > 0))
            fallbacks += fall & (size > 0)
            W = W - np.where(fall, lr, length)[:, None, None] * _per(size, unit)
        if not np.isfinite(W).all():
            raise ValueError(f"lr: the iterates left float64 at step {k + 1} (lr = {lr:g}, "
                             f"method {method!r}); lower lr or the number of steps")
    last_top = np.argmax(logits, axis=2)
    return OptimizerTrajectory(_readonly(Ws), _readonly(risks), _readonly(scales),
                               _readonly(log_grads), _readonly(log_excess), _readonly(record),
                               _readonly(fallbacks), method, lr, p, betas, eps,
                               _readonly(last_top))
