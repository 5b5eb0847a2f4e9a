"""Gradient descent on the prompt p, on the key-query matrix W, and jointly on (v, p).

Every routine runs many initializations at once as one array program: ``p0`` of shape (B, d)
gives B trajectories. A step is plain, ``x <- x - lr * g``, or normalized,
``x <- x - lr * g / (||g|| + eps)`` (each parameter normalized separately, as in the paper's runs).

``record_every`` chooses which iterates a result holds: every step (1, the default), every k-th
step and the last (k), or only the start and the last (None); ``result.steps`` lists them.
GD on p runs on a compiled kernel (:mod:`._compiled`, numba) when numba is installed, else on the
one torch loop (:func:`maxmargin._torchdescent.descend`), and joint GD on (v, p) likewise, as
:func:`~maxmargin.gd_KQ` with one shared prompt; the environment variable ``MAXMARGIN_ENGINE``
(``auto``, ``compiled`` or ``torch``) chooses (:mod:`._engines`), and tests check that both
engines give the same iterates. This module is the public layer: validation, settings
(:class:`~maxmargin._descent.Descent`) and results.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks, _kernels
from ._descent import STEP_OVERHEAD  # noqa: F401  (train.STEP_OVERHEAD, as before)
from ._descent import (Descent, _affordable_descent, _queries_shared, _record_count,
                       _record_steps, _settings)
from ._engines import COMPILED_MIN_WORK, ENGINES, engine, load_compiled_engine  # noqa: F401
from ._engines import _descend, _descend_joint, _descend_W
from ._stepping import TINY_GRADIENT  # noqa: F401  (train.TINY_GRADIENT, as _compiled names it)
from .losses import Loss
from .problem import keyed, problem, stacked


@dataclass(frozen=True)
class Trajectory:
    """A batch of B gradient-descent runs on p, recorded at R of its steps.

    Attributes
    ----------
    p : (R, B, d) iterates at the recorded steps; p[0] is the initialization, p[-1] the last.
    risk : (R, B) the risk L(p) (the mean loss) at each recorded iterate.
    tracked_attention : (R, B, n) attention weight on token ``tracked[i]`` of sequence i.
    other_attention : (R, B, n) attention on all the other tokens, summed; computed from
        the small weights themselves, so it stays accurate far below 1e-16.
    tracked : (n,) token indices whose attention is recorded (default: the highest-score tokens).
    final_attention : (B, n, T) attention weights at the last iterate.
    lr : the step size of the run.
    normalized : whether the steps were normalized.
    steps : (R,) the step index of each record (0, ..., steps with the default record_every=1).
    norms : (property) (R, B) Euclidean norms of the recorded iterates.

    Methods ``cosine(direction)``, (R, B) cosines of the iterates with a (d,) direction (see
    :func:`cosine`), and ``selected_tokens()``, (B, n) the token with the largest final attention.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd(X, [1.0], [1.0, 0.5], [0.0, 0.0], 100, 1.0)
    >>> run.p.shape, run.risk.shape, run.tracked  # 101 iterates of one run
    ((101, 1, 2), (101, 1), array([0]))
    >>> np.round(run.tracked_attention[-1], 3), run.selected_tokens()
    (array([[0.957]]), array([[0]]))
    """

    p: np.ndarray
    risk: np.ndarray
    tracked_attention: np.ndarray
    other_attention: np.ndarray
    tracked: np.ndarray
    final_attention: np.ndarray
    lr: float
    normalized: bool
    steps: np.ndarray

    loss = _checks.renamed("Trajectory", "loss", "risk", "the risk at each recorded iterate")

    @property
    def norms(self) -> np.ndarray:
        """(R, B) Euclidean norms of the recorded iterates (finite up to float64's limit)."""
        return _kernels.norms(self.p)

    def cosine(self, direction) -> np.ndarray:
        """(R, B) cosine of each recorded iterate with ``direction`` (d,) (see :func:`cosine`)."""
        d = self.p.shape[-1]
        return _kernels.cosine(self.p, _checks.direction(direction, self.p.shape, f"({d},)"))

    def selected_tokens(self) -> np.ndarray:
        """(B, n) index of the token with the largest final attention in each sequence."""
        return np.argmax(self.final_attention, axis=-1)


def cosine(a, b) -> np.ndarray:
    """Cosine similarity along the last axis, broadcasting; defined as 0 where a vector is 0.

    Finite vectors of any size (each is first divided by its largest entry, so no norm
    overflows); NaN or inf, or shapes that do not broadcast, raise a ValueError naming a or b.
    The ``cosine(direction)`` methods of the results follow the same rule for their iterates
    (0 at an iterate equal to 0) and refuse a zero ``direction``, which has no angle.

    Parameters
    ----------
    a, b : (..., d) arrays whose shapes broadcast, with the same last axis d.

    Returns
    -------
    (...) array : the cosine of each pair of vectors (a 0-d array for two (d,) vectors).

    Raises
    ------
    ValueError : a or b holds NaN or inf, is 0-d, their last axes differ, or their shapes do not
        broadcast (naming a or b).
    TypeError : a or b is None, complex or not numeric.

    Examples
    --------
    >>> round(float(mm.cosine([1.0, 0.0], [1.0, 1.0])), 4)
    0.7071
    >>> mm.cosine([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]], [0.0, 1.0])  # 0 for the zero vector
    array([0., 1., 0.])
    """
    a = _checks.finite(_checks.as_float_array(a, "a"), "a")
    b = _checks.finite(_checks.as_float_array(b, "b"), "b")
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"b: expected vectors along the last axis of the same length as a's, "
                         f"got shapes {a.shape} and {b.shape}")
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"b: shape {b.shape} does not broadcast against a's {a.shape}") from None
    return _kernels.cosine(a, b)


def gd(X, Y, v, p0, steps: int, lr: float, *, W=None, loss: str | Loss = "logistic",
       normalized: bool = False, eps: float = 1e-12, track=None,
       record_every: int | None = 1) -> Trajectory:
    """Gradient descent on the prompt p with v and W fixed, batched over initializations.

    Raises ``ValueError`` if plain GD's gradient overflows float64, naming the step and the cause
    (the scale of v, or lr). Normalized GD rescales an overflowing slope of the exponential loss
    (its direction is finite), but it too raises when the gradient itself leaves float64.

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,), (d,), (d, d) or None (W keyword-only,
        default None: the identity).
    p0 : (d,) or (B, d) initial prompts; a (d,) start is a batch of one.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    normalized : keyword-only, divide each gradient by (its norm + eps) before stepping (default
        False).
    eps : keyword-only, the offset of the normalization (default 1e-12).
    track : keyword-only, (n,) token indices whose attention to record; default (None)
        `argmax_t gamma_it`.
    record_every : keyword-only, keep every k-th iterate and the last (k = 1, the default: all);
        None keeps the first and the last only, so memory does not grow with ``steps``.

    Returns
    -------
    Trajectory : the recorded iterates, risks and attention of the B runs.

    Raises
    ------
    ValueError : bad data (shapes, labels, NaN or inf; p0 not (d,) or (B, d) with B >= 1;
        ``track`` not one index in [0, T) per sequence),
        ``steps`` < 1, ``lr`` or ``eps`` not a finite positive number,
        ``record_every`` < 1, an unknown loss name, or a run whose estimated cost exceeds the
        library's limits (about 1e12 operations or 2 GiB of records, naming steps); or a
        gradient that is not finite in float64 at some step (the message names the step and
        the likely cause).
    TypeError : a non-numeric array, ``track`` not integers,
        ``steps`` or ``record_every`` not an integer, ``lr`` or ``eps`` not a
        number, ``normalized`` not a bool, or ``loss`` neither a string nor a ``Loss``.

    Examples
    --------
    The counterexample to global convergence (``mm.data.trap_counterexample()``): from
    (0, 0, 0) GD selects both optimal tokens (token 0); from (4, 0, 0) sequence 0 stays on its
    token 1:

    >>> inst = mm.data.trap_counterexample()
    >>> run = mm.gd(inst.X, inst.Y, inst.v, inst.p0, 500, 1.0, W=inst.W)
    >>> run.selected_tokens()  # (B, n): one row per start
    array([[0, 0],
           [1, 0]])
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd(X, [1.0], [1.0, 0.5], [0.0, 0.0], 100, 0.1, normalized=True, record_every=50)
    >>> run.steps, np.round(run.cosine(mm.att_svm(X, [0]).p)[-1], 4)  # along p^mm
    (array([  0,  50, 100]), array([1.]))
    """
    prob = problem(X, Y, v, W)
    n, T, d = prob.shape
    P = _initial_batch(p0, d, "p0")
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    tracked = None if track is None else _checks.indices(track, n, T, "track")
    gamma, K = prob.scores, prob.keys
    _affordable_descent(steps, _record_count(steps, record_every),
                        len(P), n * T * d, d + 2 * n + 1, n * T)
    run = Descent(steps, lr, loss, normalized, (eps,), _record_steps(steps, record_every), "gd")
    tracked = np.argmax(gamma, axis=1) if tracked is None else tracked
    out = _descend(K[None], gamma[None], P[None], tracked[None], run)
    return Trajectory(out.iterates[0][:, 0], out.risk[:, 0], out.on[:, 0], out.off[:, 0], tracked,
                      out.final[0], lr, normalized, run.record)


@dataclass(frozen=True)
class StackTrajectory(Trajectory):
    """B gradient-descent runs on p for each of M instances of the same shape (n, T, d).

    The fields of :class:`Trajectory` with an instance axis after the record axis: ``p`` is
    (R, M, B, d), ``risk`` (R, M, B), ``tracked_attention`` and ``other_attention``
    (R, M, B, n), ``tracked`` (M, n), ``final_attention`` (M, B, n, T), ``steps`` (R,).

    Attributes
    ----------
    p : (R, M, B, d) iterates at the recorded steps.
    risk : (R, M, B) the risk of each instance at each recorded iterate.
    tracked_attention, other_attention : (R, M, B, n) attention on the tracked token of each
        sequence, and on all the others summed.
    tracked : (M, n) the tracked token indices of each instance.
    final_attention : (M, B, n, T) attention weights at the last iterate.
    lr, normalized : the step size and whether the steps were normalized.
    steps : (R,) the step index of each record.

    Methods ``cosine(direction)``, (R, M, B), with ``direction`` (M, d), (M, B, d) or (d,), and
    ``selected_tokens()``, (M, B, n).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> stack = mm.gd_stack(np.stack([X, X[:, ::-1]]), np.ones((2, 1)), [1.0, 0.5], [0.0, 0.0],
    ...                     100, 1.0)
    >>> stack.p.shape, stack.selected_tokens()[:, 0]  # instance 1 has its tokens swapped
    ((101, 2, 1, 2), array([[0],
           [1]]))
    """

    def cosine(self, direction) -> np.ndarray:
        """(R, M, B) cosine of each iterate with its instance's direction (see :func:`cosine`):
        ``direction`` is (M, d), (M, B, d) for one direction per run, or (d,) shared by all."""
        _, M, B, d = self.p.shape
        u = _checks.as_float_array(direction, "direction")   # _checks.direction: finite, no 0
        if u.ndim == 2:
            u = u[:, None, :]
        u = _checks.direction(u, self.p.shape, f"({M}, {d}), ({M}, {B}, {d}) or ({d},)")
        return _kernels.cosine(self.p, u)


def gd_stack(X, Y, v, p0, steps: int, lr: float, *, W=None, loss: str | Loss = "logistic",
             normalized: bool = False, eps: float = 1e-12, track=None,
             record_every: int | None = 1) -> StackTrajectory:
    """Gradient descent on p for a stack of M instances, B starts each, as one array program.

    Run ``m`` is exactly ``gd(X[m], Y[m], v[m], p0[m], ...)`` (the risk of each instance is its own
    mean over its n sequences; a normalized step divides by the norm of that run's gradient).

    Parameters
    ----------
    X : (M, n, T, d) tokens of M instances.
    Y : (M, n) labels in {-1, +1}.
    v : (M, d) heads, or (d,) shared.
    p0 : (M, B, d) starts, or (B, d) / (d,) shared by every instance.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    W : keyword-only, (M, d, d), (d, d) shared, or None (the default: the identity).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    normalized : keyword-only, divide each gradient by (its norm + eps) (default False).
    eps : keyword-only, the offset of the normalization (default 1e-12).
    track : keyword-only, (M, n) token indices whose attention to record; default (None)
        `argmax_t gamma_it`.
    record_every : keyword-only, as in :func:`gd` (default 1).

    Returns
    -------
    StackTrajectory : the runs, with an instance axis after the record axis.

    Raises
    ------
    ValueError : bad data (X not (M, n, T, d) with M, n, d >= 1 and T >= 2, Y not (M, n) or a
        label other than -1 and +1, v neither (d,) nor (M, d), W neither (d, d) nor (M, d, d),
        p0 not (d,), (B, d) or (M, B, d) with B >= 1, track not (M, n) indices in [0, T), NaN or
        inf),
        ``steps`` < 1, ``lr`` or ``eps`` not a finite positive number,
        ``record_every`` < 1, an unknown loss name, or a run whose estimated cost exceeds the
        library's limits (about 1e12 operations or 2 GiB of records, naming steps); or a gradient
        that is not finite in float64 (naming the step and the likely cause).
    TypeError : a non-numeric array, ``track`` not integers,
        ``steps`` or ``record_every`` not an integer, ``lr`` or ``eps`` not a
        number, ``normalized`` not a bool, or ``loss`` neither a string nor a ``Loss``.

    Examples
    --------
    Two instances, the second with its tokens swapped: each run is the run of :func:`gd` on its
    own instance.

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> stack = mm.gd_stack(np.stack([X, X[:, ::-1]]), np.ones((2, 1)), [1.0, 0.5], [0.0, 0.0],
    ...                     100, 1.0)
    >>> single = mm.gd(X[:, ::-1], [1.0], [1.0, 0.5], [0.0, 0.0], 100, 1.0)
    >>> stack.tracked[1], bool(np.allclose(stack.p[:, 1], single.p))
    (array([1]), True)
    """
    problems = stacked(X, Y, v, W)
    M, (n, T, d) = len(problems), problems[0].shape
    gamma = np.stack([prob.scores for prob in problems])
    K = np.stack([prob.keys for prob in problems])
    P = _checks.batched_vector(p0, d, "p0")
    if P.ndim == 1:
        P = P[None]
    if P.ndim == 2:
        P = np.broadcast_to(P, (M,) + P.shape)
    if P.ndim != 3 or P.shape[0] != M:
        raise ValueError(f"p0: expected shape ({d},), (B, {d}) or ({M}, B, {d}), got {P.shape}")
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    if P.shape[1] < 1:
        raise ValueError(f"p0: needs at least one start (B >= 1), got shape {P.shape}")
    _affordable_descent(steps, _record_count(steps, record_every),
                        M * P.shape[1], n * T * d, d + 2 * n + 1, n * T)
    run = Descent(steps, lr, loss, normalized, (eps,), _record_steps(steps, record_every),
                  "gd_stack")
    if track is None:
        tracked = np.argmax(gamma, axis=-1)
    else:
        track = _checks.as_array(track, "track")
        if track.shape != (M, n):
            raise ValueError(f"track: expected shape ({M}, {n}), one token index per sequence of "
                             f"each instance, got {track.shape}")
        tracked = np.stack([_checks.indices(t, n, T, "track") for t in track])

    out = _descend(K, gamma, np.ascontiguousarray(P), tracked, run)
    return StackTrajectory(out.iterates[0], out.risk, out.on, out.off, tracked, out.final, lr,
                           normalized, run.record)


@dataclass(frozen=True)
class WTrajectory:
    """A batch of B gradient-descent runs on W recorded at R steps: ``W`` is (R, B, d, d),
    ``risk`` (R, B), ``steps`` (R,) the step index of each record.

    Attributes
    ----------
    W : (R, B, d, d) iterates at the recorded steps.
    risk : (R, B) the risk at each recorded iterate.
    lr, normalized : the step size and whether the steps were normalized.
    steps : (R,) the step index of each record.

    Method ``cosine(direction)``: (R, B) Frobenius cosines with a (d, d) matrix (see
    :func:`cosine`).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd_W(X, [1.0], [1.0, 0.5], np.zeros((2, 2)), [1.0, 0.0], 100, 0.1,
    ...               normalized=True, record_every=None)
    >>> run.steps, run.W.shape
    (array([  0, 100]), (2, 1, 2, 2))
    """

    W: np.ndarray
    risk: np.ndarray
    lr: float
    normalized: bool
    steps: np.ndarray

    loss = _checks.renamed("WTrajectory", "loss", "risk", "the risk at each recorded iterate")

    def cosine(self, direction) -> np.ndarray:
        """(R, B) Frobenius cosine of each recorded iterate with the matrix ``direction`` (d, d)
        (see :func:`cosine`)."""
        flat = self.W.reshape(self.W.shape[:2] + (-1,))
        d = self.W.shape[-1]
        u = _checks.as_float_array(direction, "direction")   # _checks.direction: finite, no 0
        if u.shape != (d, d):
            raise ValueError(f"direction: expected a ({d}, {d}) matrix, got shape {u.shape}")
        return _kernels.cosine(flat, _checks.direction(u.reshape(-1), flat.shape, f"({d}, {d})"))


def gd_W(X, Y, v, W0, queries, steps: int, lr: float, *, loss: str | Loss = "logistic",
         normalized: bool = False, eps: float = 1e-12,
         record_every: int | None = 1) -> WTrajectory:
    """Gradient descent on the key-query matrix W with fixed queries, batched over initializations.

    ``W0`` is (d, d) or (B, d, d); ``queries`` is (n, d) (one query `z_i` per sequence) or (d,)
    (the prompt p shared by every sequence); ``record_every`` as in :func:`gd`. Raises
    ``ValueError`` naming the step and the cause (v's scale or lr) if the gradient overflows.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    W0 : (d, d) or (B, d, d) initial key-query matrices.
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query p shared by all.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    normalized : keyword-only, divide each gradient by (its Frobenius norm + eps) (default False).
    eps : keyword-only, the offset of the normalization (default 1e-12).
    record_every : keyword-only, as in :func:`gd` (default 1).

    Returns
    -------
    WTrajectory : the recorded iterates and risks of the B runs.

    Raises
    ------
    ValueError : bad data (shapes, labels, NaN or inf; W0 not (d, d) or (B, d, d) with B >= 1;
        queries neither (n, d) nor (d,)),
        ``steps`` < 1, ``lr`` or ``eps`` not a finite positive number,
        ``record_every`` < 1, an unknown loss name, or a run whose estimated cost exceeds the
        library's limits (about 1e12 operations or 2 GiB of records, naming steps); or a
        gradient or iterate that is not finite in float64 (naming the step and the likely cause).
    TypeError : a non-numeric array,
        ``steps`` or ``record_every`` not an integer, ``lr`` or ``eps`` not a
        number, ``normalized`` not a bool, or ``loss`` neither a string nor a ``Loss``.

    Examples
    --------
    With one query p = (1, 0), normalized GD on W heads for `W^mm` of :func:`w_svm`, and the risk
    approaches `L* = log(1 + exp(-1))`:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd_W(X, [1.0], [1.0, 0.5], np.zeros((2, 2)), [1.0, 0.0], 100, 0.1, normalized=True)
    >>> run.W.shape, np.round(run.cosine(mm.w_svm(X, [0], queries=[1.0, 0.0]).W)[-1], 4)
    ((101, 1, 2, 2), array([1.]))
    >>> round(float(run.risk[-1, 0]), 4)
    0.3133
    """
    prob = problem(X, Y, v)
    X, gamma = prob.X, prob.scores
    n, T, d = prob.shape
    Z = _checks.queries(queries, n, d)
    Wk = _checks.as_float_array(W0, "W0")
    if Wk.shape == (d, d):
        Wk = Wk[None]
    if Wk.ndim != 3 or Wk.shape[1:] != (d, d) or Wk.shape[0] < 1:
        raise ValueError(f"W0: expected shape ({d}, {d}) or (B, {d}, {d}) with B >= 1, got {Wk.shape}")
    _checks.finite(Wk, "W0")
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    shared = _queries_shared(queries, Z)
    _affordable_descent(steps, _record_count(steps, record_every),
                        Wk.shape[0], n * T * d * (d + 2), d * d + 1, 0)
    run = Descent(steps, lr, loss, normalized, (eps,), _record_steps(steps, record_every), "gd_W")
    out = _descend_W(X, gamma, Wk, Z, shared, run)
    return WTrajectory(out.iterates[0], out.risk, lr, normalized, run.record)


@dataclass(frozen=True)
class JointTrajectory:
    """A batch of B joint runs on (v, p), recorded at R steps.

    ``v`` and ``p`` are (R, B, d); ``risk`` and ``probability`` (the mean over sequences of
    `sigmoid(Y_i f(X_i))`) are (R, B); ``tracked_attention`` is (R, B, n); ``steps`` (R,) the step
    index of each record.

    Attributes
    ----------
    v, p : (R, B, d) iterates of the head and of the prompt at the recorded steps.
    risk : (R, B) the risk at each recorded iterate.
    probability : (R, B) the mean over sequences of `sigmoid(Y_i f(X_i))`.
    tracked_attention : (R, B, n) attention on token ``tracked[i]`` of sequence i.
    tracked : (n,) the tracked token indices.
    lr, normalized : the step size and whether the steps were normalized.
    steps : (R,) the step index of each record.

    Examples
    --------
    >>> inst = mm.data.fig3()
    >>> run = mm.gd_joint(inst.X, inst.Y, inst.v0, inst.p0, 500, 0.1, normalized=True)
    >>> run.v.shape, np.round(run.probability[[0, -1], 0], 3)
    ((501, 1, 2), array([0.525, 1.   ]))
    """

    v: np.ndarray
    p: np.ndarray
    risk: np.ndarray
    probability: np.ndarray
    tracked_attention: np.ndarray
    tracked: np.ndarray
    lr: float
    normalized: bool
    steps: np.ndarray

    loss = _checks.renamed("JointTrajectory", "loss", "risk", "the risk at each recorded iterate")


def gd_joint(X, Y, v0, p0, steps: int, lr: float, *, normalized: bool, W=None,
             loss: str | Loss = "logistic", eps_v: float = 1e-12, eps_p: float = 1e-12,
             track=None, record_every: int | None = 1) -> JointTrajectory:
    """Gradient descent on v and p together, batched over initializations.

    ``v0`` and ``p0`` are (d,) or (B, d) (broadcast against each other). ``normalized`` (no
    default: the paper's joint runs normalize, :func:`gd`'s default does not) normalizes the two
    gradients separately. ``track`` (n,) are the token indices whose attention is
    recorded; by default the highest-score tokens under the final v (of the first run when
    B > 1). ``record_every`` as in :func:`gd`.

    Parameters
    ----------
    X, Y : the instance, shapes (n, T, d), (n,) in {-1, +1}.
    v0, p0 : (d,) or (B, d) initial heads and prompts (equal numbers of starts, or one for either).
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    normalized : keyword-only and required, True or False.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    eps_v, eps_p : keyword-only, the offsets of the two normalizations (default 1e-12 each).
    track : keyword-only, (n,) token indices whose attention to record, or None (the default).
    record_every : keyword-only, as in :func:`gd` (default 1).

    Returns
    -------
    JointTrajectory : the recorded heads, prompts, risks, probabilities and attention.

    Raises
    ------
    ValueError : bad data (shapes, labels, NaN or inf; v0 or p0 not (d,) or (B, d) with B >= 1,
        or numbers of starts that do not pair; ``track`` not one index in [0, T) per sequence),
        ``steps`` < 1, ``lr``, ``eps_v`` or ``eps_p`` not a finite positive number,
        ``record_every`` < 1, an unknown loss name, a run above the library's cost limits
        (naming steps); or a gradient that is not finite in float64 (naming the step and the
        likely cause).
    TypeError : a non-numeric array, ``track`` not integers, ``steps`` or ``record_every`` not an
        integer, ``lr``, ``eps_v`` or ``eps_p`` not a number, ``normalized`` not a bool, or
        ``loss`` neither a string nor a ``Loss``.

    Examples
    --------
    Fig. 3a: the joint run aligns v with `v^mm = (0, 1)` and p with the ATT-SVM direction, equal to
    `p^relax` here (every sequence is a support vector of the v-SVM):

    >>> inst = mm.data.fig3()
    >>> run = mm.gd_joint(inst.X, inst.Y, inst.v0, inst.p0, 500, 0.1, normalized=True)
    >>> svms = mm.joint_svms(inst.X, inst.Y, [1, 1, 1])
    >>> round(float(mm.cosine(run.v[-1, 0], svms.v.v)), 3)
    1.0
    >>> round(float(mm.cosine(run.p[-1, 0], svms.relaxed.p)), 3)
    1.0
    """
    prob = keyed(X, W)
    X, K = prob.X, prob.keys
    n, T, d = prob.shape
    Y = _checks.labels(Y, n)
    V = _initial_batch(v0, d, "v0")
    P = _initial_batch(p0, d, "p0")
    if len(V) != len(P) and 1 not in (len(V), len(P)):
        raise ValueError(f"v0: {len(V)} starts do not pair with the {len(P)} starts of p0 (give "
                         f"equal numbers of starts, or one start for either)")
    V, P = (np.array(a) for a in np.broadcast_arrays(V, P))
    steps, lr, loss, eps_v, eps_p = _settings(steps, lr, loss, eps_v=eps_v, eps_p=eps_p)
    normalized = _checks.flag(normalized, "normalized")
    tracked = None if track is None else _checks.indices(track, n, T, "track")
    # records: v, p (d each), the attention on the tracked tokens (n), the risk and probability
    _affordable_descent(steps, _record_count(steps, record_every), len(P), n * T * d,
                        2 * d + n + 2, 0)
    record = _record_steps(steps, record_every)
    run = Descent(steps, lr, loss, normalized, (eps_v, eps_p), record, "gd_joint")
    out = _descend_joint(X, Y, K, V, P, tracked, run)
    return JointTrajectory(*out.iterates, out.risk, out.probability, out.on, out.tracked, lr,
                           normalized, record)


def _initial_batch(x0, d: int, name: str) -> np.ndarray:
    x0 = _checks.batched_vector(x0, d, name)
    if x0.ndim == 1:
        return x0[None].copy()
    if x0.ndim != 2 or len(x0) < 1:
        raise ValueError(f"{name}: expected shape ({d},) or (B, {d}) with B >= 1, got {x0.shape}")
    return x0.copy()

