"""Gradient descent on the prompt p, on the key-query matrix W, and jointly on (v, p).

Every routine runs many initializations at once as one array program: ``p0`` of shape (B, d)
gives B trajectories. A step is plain, ``x <- x - lr * g``, or normalized,
``x <- x - lr * g / (||g|| + eps)`` (each parameter normalized separately, as in the paper's runs).

``record_every`` chooses which iterates a result holds: every step (1, the default), every k-th
step and the last (k), or only the start and the last (None); ``result.steps`` lists them.
GD on p runs on a compiled kernel (:mod:`._compiled`, numba) when numba is installed, else on the
pure-torch loop :func:`_descend_torch`, and joint GD on (v, p) likewise (its torch loop:
:func:`_descend_joint_torch`), as :func:`~maxmargin.gd_KQ` with one shared prompt (the kernels
are in the same module); the environment variable ``MAXMARGIN_ENGINE`` (``auto``, ``compiled``
or ``torch``) chooses, and tests check that both engines give the same iterates.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from . import _checks, _kernels
from ._blocks import _TWO_LANE_COSTS, _block_lanes, _loss_code, _run_blocks
from ._descent import STEP_OVERHEAD  # noqa: F401  (train.STEP_OVERHEAD, as before)
from ._descent import (_affordable_descent, _largest, _overflow, _queries_shared, _record_count,
                       _record_steps, _risk_of, _settings)
from ._stepping import TINY_GRADIENT  # noqa: F401  (train.TINY_GRADIENT, as _compiled names it)
from ._stepping import _scaled_contraction, _step_direction, _times_power_of_two, _up_exponent
from .losses import Loss, expit
from .problem import Problem, keyed, problem, stacked


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
    return _gd(prob, P, steps, lr, loss, normalized, eps, tracked, record_every)


def _gd(prob: Problem, P: np.ndarray, steps: int, lr: float, loss: Loss, normalized: bool,
        eps: float, tracked: np.ndarray | None, record_every) -> Trajectory:
    """:func:`gd` on a validated problem (with its head), starts P (B, d) and settings;
    ``tracked`` (n,) or None (the highest-score tokens)."""
    n, T, d = prob.shape
    gamma, K = prob.scores, prob.keys
    _affordable_descent(steps, _record_count(steps, record_every),
                        len(P), n * T * d, d + 2 * n + 1, n * T)
    record = _record_steps(steps, record_every)
    tracked = np.argmax(gamma, axis=1) if tracked is None else tracked
    run = _descend(K[None], gamma[None], P[None], steps, lr, loss, normalized, eps, tracked[None],
                   record, "gd")
    return Trajectory(run.path[:, 0], run.risk[:, 0], run.on[:, 0], run.off[:, 0], tracked,
                      run.final[0], lr, normalized, record)


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
    record = _record_steps(steps, record_every)
    if track is None:
        tracked = np.argmax(gamma, axis=-1)
    else:
        track = _checks.as_array(track, "track")
        if track.shape != (M, n):
            raise ValueError(f"track: expected shape ({M}, {n}), one token index per sequence of "
                             f"each instance, got {track.shape}")
        tracked = np.stack([_checks.indices(t, n, T, "track") for t in track])

    run = _descend(K, gamma, np.ascontiguousarray(P), steps, lr, loss, normalized, eps, tracked,
                   record, "gd_stack")
    return StackTrajectory(run.path, run.risk, run.on, run.off, tracked, run.final, lr, normalized,
                           record)


@dataclass(frozen=True)
class _Records:
    """What :func:`_descend` records for M instances x B runs at R steps."""

    path: np.ndarray   # (R, M, B, d)
    risk: np.ndarray   # (R, M, B)
    on: np.ndarray     # (R, M, B, n) attention on the tracked tokens
    off: np.ndarray    # (R, M, B, n) attention on all other tokens, summed
    final: np.ndarray  # (M, B, n, T) attention at the last iterate


ENGINES = ("auto", "compiled", "torch")
# "auto" compiles only for runs of at least this many multiply-adds (B (steps + 1) n T d summed
# over instances), about 0.3 s of the torch loop, until the kernel is loaded: loading it from
# numba's cache costs about a second per process, which small runs (explorers, chapters' figures)
# would not win back.
COMPILED_MIN_WORK = 10**7


def engine(*, work: float = float("inf"), kernel: str = "gd") -> str:
    """The GD engine for a run of ``work`` multiply-adds: "compiled" (numba) or "torch".

    Chosen by the environment variable MAXMARGIN_ENGINE: "auto" (the default: compiled when numba
    can be imported, and the compiled ``kernel`` ("gd": GD on p, "gd_joint": on (v, p),
    "gd_KQ": on the factors) is already loaded or ``work`` >= COMPILED_MIN_WORK), "compiled" or
    "torch".
    """
    choice = os.environ.get("MAXMARGIN_ENGINE", "auto").strip().lower() or "auto"
    if choice not in ENGINES:
        raise ValueError(f"MAXMARGIN_ENGINE: expected one of {ENGINES}, got {choice!r}")
    if choice == "torch":
        return "torch"
    if choice == "auto" and work < COMPILED_MIN_WORK and not _compiled_loaded(kernel):
        return "torch"
    try:
        import numba  # noqa: F401  (deferred: importing numba costs about 0.3 s)
    except ImportError:
        if choice == "compiled":
            raise ImportError("MAXMARGIN_ENGINE=compiled needs numba (pip install numba)") from None
        return "torch"
    return "compiled"


def load_compiled_engine() -> None:
    """Load the compiled GD kernel now (about a second from numba's cache) when the engine setting
    allows it (numba installed, MAXMARGIN_ENGINE not "torch"): afterwards "auto" picks it for
    small runs too. Worth it before many small runs of many steps, where the torch loop's fixed
    cost per step dominates (chapters 03 and 04)."""
    if engine() != "compiled":
        return
    from . import _compiled

    _compiled.ready()


def _descend(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record, caller, *,
             attention: bool = True, path: np.ndarray | None = None) -> _Records:
    """The GD engine behind :func:`gd`, :func:`gd_stack` and :func:`gd_W` (shared query): keys K
    (M, n, T, d), scores gamma (M, n, T), starts P (M, B, d), tracked tokens (M, n), recorded
    steps ``record`` (R,); validated inputs. Runs the compiled kernel for the three built-in
    losses when numba is there, the torch loop otherwise; ``caller`` names the public function in
    error messages. ``attention=False``: no attention records (``on``, ``off``, ``final`` empty);
    ``path``: a C-contiguous (R, M, B, d) buffer for the iterates (default: a new one)."""
    M, n, T, d = K.shape
    work = M * P.shape[1] * (steps + 1) * n * T * d
    if _loss_code(loss) is not None and engine(work=work) == "compiled":
        return _descend_compiled(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record,
                                 caller, attention, path)
    return _descend_torch(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record, caller,
                          attention, path)


_READY_FLAGS = {"gd": "_READY", "gd_joint": "_READY_JOINT", "gd_KQ": "_READY_KQ"}  # in _compiled


def _compiled_loaded(kernel: str = "gd") -> bool:
    module = sys.modules.get(__package__ + "._compiled")
    return module is not None and bool(getattr(module, _READY_FLAGS[kernel]))


def _start_of(K: np.ndarray, P: np.ndarray) -> dict:
    """The start arguments of :func:`_overflow` for GD on p: keys K (M, n, T, d), starts P (M, B, d)."""
    return dict(start="p0", start_logits=lambda: np.einsum("mntd,mbd->mntb", K, P),
                sizes=(_largest(K),))


def _descend_compiled(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record,
                      caller, attention=True, path=None) -> _Records:
    from . import _compiled  # deferred: numba compiles (or loads from its cache) on first use

    _compiled.ready()
    M, n, T, d = K.shape
    B = P.shape[1]
    lanes = _block_lanes(B, M, _GD_LANE_COSTS)
    kernel = {_compiled.LANES: _compiled.descend, _compiled.WIDE: _compiled.descend_wide,
              _compiled.WIDER: _compiled.descend_wider}[lanes]
    P0 = _padded_starts(P, lanes)
    out = _compiled.empty_records(len(record), M, B, n, T, d,  # the real starts only
                                  attention=attention, path=path)
    array = _compiled.kernel_array   # every array as ready() compiled for: no new specialization
    prob = _compiled.Problem(array(K), array(gamma), array(tracked, np.int64))
    run = _compiled.Settings(steps, lr, _loss_code(loss), bool(normalized), eps,
                             array(record, np.int64))
    _run_blocks(kernel, M * P0.shape[1] // lanes, prob, P0, run, out)
    if np.any(out.failed >= 0):
        # a lane met a number the kernel does not handle (an overflowing gradient of the
        # logistic or correlation loss, say, whose normalized step the torch loop takes from
        # scaled factors): the whole call reruns on the torch loop, so that its outcome (the
        # result, or the error and its message) never depends on the engine (issue 38)
        del out
        return _descend_torch(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record,
                              caller, attention, path)
    _rerecord_risks(out.risk, out.path, K, gamma, loss)
    return _Records(out.path, out.risk, out.on, out.off, out.final)


def _rerecord_risks(risk: np.ndarray, path: np.ndarray, K, gamma, loss: Loss) -> None:
    """Recompute, in place, the compiled kernels' recorded risks that are not finite, from the
    recorded iterates with the one risk recorder (:func:`_risk_of`): the kernels sum l(z_i) / n,
    inf when one loss is beyond float64 though the mean is not. risk (R, M, B), iterates path
    (R, M, B, d), keys K (M, n, T, d), scores gamma (M, n, T). A risk beyond float64 stays inf."""
    for r, m, b in map(tuple, np.argwhere(~np.isfinite(risk))):   # (rare: free when all finite)
        risk[r, m, b] = _risk_at(K[m], gamma[m], path[r, m, b], loss)


def _risk_at(K: np.ndarray, gamma: np.ndarray, p: np.ndarray, loss: Loss) -> float:
    """The risk of one iterate p (d,) on keys K (n, T, d) and scores gamma (n, T), computed as
    the torch loops do (margins relative to the most-attended token, :func:`_risk_of`)."""
    n, T, d = K.shape
    logits = (_kernels.tensor(K.reshape(n * T, d)) @ _kernels.tensor(p[:, None])).view(n, T, 1)
    shift, top = torch.max(logits, dim=1, keepdim=True)
    s = _kernels.softmax_tokens_(logits, shift)
    margin, _ = _kernels.margins(s, _kernels.tensor(gamma[..., None]), top)
    return float(_risk_of(margin, loss)[0])


# The compiled GD kernel's time per lane-step for blocks of 8, 16 and 32 starts, relative to 16:
# measured side by side, kernel alone, one thread, at (100, 10, 10, 64), (1000, 20, 32, 16) and
# (8, 4, 4, 1024) (16 lanes 1.2-1.4x faster per start than 8; 32 lanes 1.1-1.3x faster than 16,
# with AVX-512 and with AVX2 code)
_GD_LANE_COSTS = {8: 1.3, 16: 1.0, 32: 0.85}


def _padded_starts(S: np.ndarray, lanes: int) -> np.ndarray:
    """Starts S (..., B, d) padded to a multiple of ``lanes`` along B for the compiled kernels:
    the spare lanes repeat the last start (their results are dropped)."""
    B = S.shape[-2]
    padded = np.empty(S.shape[:-2] + (-(-B // lanes) * lanes, S.shape[-1]))
    padded[..., :B, :] = S
    padded[..., B:, :] = S[..., -1:, :]
    return padded


def _descend_joint_compiled(X, Y, K, V, P, steps, lr, loss, normalized, eps_v, eps_p, tracked,
                            record) -> tuple:
    """:func:`_descend_joint_torch` on the compiled kernel (:mod:`._compiled`, section gd_joint).

    The kernel marks a lane that met a margin or slope that is not finite (a gradient that is not
    finite makes the next iterate so, and its margins NaN) and stops its block; the whole call
    then reruns on the torch loop. That is correct because where every number is finite the torch loop neither
    raises nor rescales (derivative_weights rescales only non-finite slopes, the F6 retry and the
    errors follow only a non-finite iterate), so the two compute the same steps; and the rerun,
    from the same starts, makes every other case the torch engine's: the same error message, or
    the same rescaled steps. (The scale-safe normalization of a gradient whose squares under- or
    overflow is in both.)
    """
    from . import _compiled  # deferred: numba compiles (or loads from its cache) on first use

    _compiled.ready_joint()
    n, T, d = X.shape
    B = P.shape[0]
    lanes = _block_lanes(B, 1, _TWO_LANE_COSTS)   # (B = 16 on two threads: two blocks of 8)
    kernel = _compiled.descend_joint_wide if lanes == _compiled.WIDE else _compiled.descend_joint
    V0, P0 = _padded_starts(V, lanes), _padded_starts(P, lanes)
    out = _compiled.empty_joint_records(len(record), B, n, d)   # the real starts only
    array = _compiled.kernel_array   # every array as ready_joint() compiled for
    prob = _compiled.JointProblem(array(Y[:, None, None] * X),  # exact
                                  array(K),
                                  np.zeros(n, dtype=np.int64) if tracked is None
                                  else array(tracked, np.int64))
    run = _compiled.JointSettings(steps, lr, _loss_code(loss), bool(normalized), eps_v, eps_p,
                                  array(record, np.int64), tracked is not None)
    _run_blocks(kernel, P0.shape[0] // lanes, prob, V0, P0, run, out)
    if np.any(out.failed >= 0):
        del out
        return _descend_joint_torch(X, Y, K, V, P, steps, lr, loss, normalized, eps_v, eps_p,
                                    tracked, record)
    return out.v, out.p, out.risk, out.probability, out.on


def _descend_torch(K, gamma, P, steps, lr, loss, normalized, eps, tracked, record,
                   caller, attention=True, path=None) -> _Records:
    """The pure-torch engine: the whole batch as one array program per step."""
    M, n, T, d = K.shape
    B = P.shape[1]
    R = len(record)
    path = np.empty((R, M, B, d)) if path is None else path
    risks = np.empty((R, M, B))
    on = np.empty((R if attention else 0, M, n, B))
    off = np.empty((R if attention else 0, M, n, B))
    Kt = _kernels.tensor(K.reshape(M, n * T, d))
    KtT = Kt.transpose(1, 2).contiguous()  # (M, d, n T): a contiguous copy makes the contraction faster
    G = _kernels.tensor(gamma.reshape(M * n, T, 1))
    Pt = _kernels.tensor(np.swapaxes(P, 1, 2))  # (M, d, B)
    hit = np.arange(T) == tracked[..., None]  # (M, n, T)
    on_mask = torch.from_numpy(hit.reshape(M * n, 1, T).astype(np.float64))
    off_mask = 1.0 - on_mask
    r = 0

    with _kernels.threads_for(M * n * T * B):
        for k in range(steps + 1):
            logits = (Kt @ Pt).reshape(M * n, T, B)
            shift, top = torch.max(logits, dim=1, keepdim=True)
            s = _kernels.softmax_tokens_(logits, shift)
            margin, deviation = _kernels.margins(s, G, top)
            if record[r] == k:
                path[r] = Pt.transpose(1, 2).numpy()
                if attention:
                    on[r] = torch.bmm(on_mask, s).reshape(M, n, B).numpy()
                    off[r] = torch.bmm(off_mask, s).reshape(M, n, B).numpy()  # accurate far below 1e-16
                risks[r] = _risk_of(margin.reshape(M, n, B), loss)
                r += 1
            if k == steps:
                if not bool(torch.isfinite(margin).all()):   # logits of the last iterate
                    raise _overflow(caller, k, gamma, lr, loss, normalized, **_start_of(K, P),
                                    last=True)
                break
            weights, scale = _kernels.derivative_weights(margin.reshape(M, n, B), loss, normalized)
            if weights is None:
                raise _overflow(caller, k, gamma, lr, loss, normalized, **_start_of(K, P))
            dlogits = torch.mul(s, deviation, out=s)
            dlogits *= weights.reshape(M * n, 1, B)
            dlogits = dlogits.reshape(M, n * T, B)
            step_eps = eps if scale is None else eps * scale
            # a gradient that is not finite makes the iterate not finite: one check below
            new = Pt - lr * _step_direction(KtT @ dlogits, normalized, step_eps,
                                            lambda: _scaled_contraction(KtT, dlogits))
            if not bool(torch.isfinite(new).all()):   # (one check per step where all is well)
                if normalized:
                    # the contraction overflowed (slopes near 1e306 times keys 1e3) though the
                    # direction is finite: each run's power of two out of dlogits (exact), eps
                    # alike
                    unit = _kernels.power_of_two_scale(dlogits, dims=1)
                    new = Pt - lr * _step_direction(KtT @ (dlogits * unit), True, step_eps * unit)
                if not bool(torch.isfinite(new).all()):  # 0 / 0: a zero gradient, eps * scale = 0
                    raise _overflow(caller, k, gamma, lr, loss, normalized, **_start_of(K, P))
            Pt = new
        if not attention:
            return _Records(path, risks, on, off, np.empty((0, B, n, T)))
        final = _kernels.softmax_tokens_((Kt @ Pt).reshape(M * n, T, B))
    final = final.reshape(M, n, T, B).permute(0, 3, 1, 2).numpy()
    return _Records(path, risks, on.transpose(0, 1, 3, 2), off.transpose(0, 1, 3, 2), final)


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
    record = _record_steps(steps, record_every)
    if shared:
        run = _descend_W_shared(X, gamma, Wk, Z[0], steps, lr, loss, normalized, eps, record)
        if run is not None:
            return run

    B = Wk.shape[0]
    path = np.empty((len(record),) + Wk.shape)
    risks = np.empty((len(record), B))
    G, X2 = _kernels.tensor(gamma[..., None]), _kernels.tensor(X.reshape(n * T, d))
    X2T = X2.T.contiguous()                                   # (d, n T)
    Xb, XbT = X2.view(n, T, d), X2T.view(d, n, T).permute(1, 0, 2)  # (n, T, d), (n, d, T) views
    q = _kernels.tensor(Z[0])                                 # (d,) the shared query
    ZtT = _kernels.tensor(Z.T)                                # (d, n)
    Zt = ZtT.T                                                # (n, d)
    Wt = _kernels.tensor(Wk)                                  # (B, d, d)
    start_W = dict(start="W0", start_logits=lambda: _kernels.self_attention_logits(X, path[0], Z),
                   sizes=(_largest(X), _largest(Z)))
    r = 0
    with _kernels.threads_for(n * T * B):
        for k in range(steps + 1):
            # contract W with the queries first: u = W z (B, d, [n]), then the logits x_it^T u
            if shared:
                logits = (X2 @ (Wt @ q).T).view(n, T, B)
            else:
                logits = torch.bmm(Xb, (Wt @ ZtT).permute(2, 1, 0))   # (n, T, d) @ (n, d, B)
            shift, top = torch.max(logits, dim=1, keepdim=True)
            s = _kernels.softmax_tokens_(logits, shift)
            margin, deviation = _kernels.margins(s, G, top)
            if record[r] == k:
                path[r] = Wt.numpy()
                risks[r] = _risk_of(margin, loss)
                r += 1
            if k == steps:
                if not bool(torch.isfinite(margin).all()):   # the last iterate's logits
                    raise _overflow("gd_W", k, gamma, lr, loss, normalized, **start_W, last=True)
                break
            weights, scale = _kernels.derivative_weights(margin, loss, normalized)
            if weights is None:
                raise _overflow("gd_W", k, gamma, lr, loss, normalized, **start_W)
            dlogits = torch.mul(s, deviation, out=s)
            dlogits *= weights[:, None, :]

            def step(dlogits, step_eps):
                # dL/dW = sum_it dlogit_it x_it z_i^T: first a = sum_t dlogit x (the tokens),
                # then the outer products with the queries (one for a shared query)
                if shared:
                    a = X2T @ dlogits.view(n * T, B)                   # (d, B)
                    grad = a.T[:, :, None] * q                         # (B, d, d)
                else:
                    A = torch.bmm(XbT, dlogits)                        # (n, d, B)
                    grad = A.permute(2, 1, 0) @ Zt                     # (B, d, n) @ (n, d)
                def rescaled():   # (grad 2^k, k): X, dlogits and the queries scaled up
                    if shared:
                        a, k = _scaled_contraction(X2T, dlogits.view(n * T, B))
                        kq = _up_exponent(q, dims=0)
                        grad = a.T[:, :, None] * _times_power_of_two(q, kq)
                    else:       # one scale for all of X, and for each run's dlogits
                        kx, kd = _up_exponent(X2T, dims=(0, 1)), _up_exponent(dlogits, (0, 1))
                        A = torch.bmm(_times_power_of_two(XbT, kx),
                                      _times_power_of_two(dlogits, kd))  # (n, d, B)
                        k, kq = (kx + kd).reshape(1, B), _up_exponent(Zt, dims=(0, 1))
                        grad = A.permute(2, 1, 0) @ _times_power_of_two(Zt, kq)
                    return grad.reshape(B, -1).T, (k + kq).reshape(1, B)

                flat = _step_direction(grad.reshape(B, -1).T, normalized, step_eps, rescaled).T
                return Wt - lr * flat.reshape(Wt.shape)

            step_eps = eps if scale is None else eps * scale
            # a gradient that is not finite makes the iterate not finite: one check below
            new = step(dlogits, step_eps)
            if not bool(torch.isfinite(new).all()):
                if normalized:
                    # the contraction overflowed though the direction is finite: each run's
                    # power of two out of dlogits (exact), and eps alike
                    unit = _kernels.power_of_two_scale(dlogits, dims=(0, 1))  # (1, 1, B)
                    new = step(dlogits * unit, step_eps * unit.reshape(1, B))
                if not bool(torch.isfinite(new).all()):
                    raise _overflow("gd_W", k, gamma, lr, loss, normalized, **start_W)
            Wt = new
    return WTrajectory(path, risks, lr, normalized, record)


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
    work = 2 * len(P) * (steps + 1) * n * T * d
    if _loss_code(loss) is not None and engine(work=work, kernel="gd_joint") == "compiled":
        vs, ps, risks, probs, on = _descend_joint_compiled(X, Y, K, V, P, steps, lr, loss,
                                                           normalized, eps_v, eps_p, tracked,
                                                           record)
    else:
        vs, ps, risks, probs, on = _descend_joint_torch(X, Y, K, V, P, steps, lr, loss,
                                                        normalized, eps_v, eps_p, tracked, record)
    if tracked is None:
        R, B = len(record), len(P)
        rows = np.arange(n)
        K2 = _kernels.tensor(K.reshape(n * T, d))
        tracked = np.argmax(_kernels.scores(X, Y, vs[-1, 0]), axis=1)  # the final v (step steps)
        with _kernels.threads_for(n * T * B):
            for r in range(R):  # the attention of each record again, as the loop computed it
                logits = (K2 @ _kernels.tensor(ps[r].T)).view(n, T, B)
                shift = torch.max(logits, dim=1, keepdim=True).values
                on[r] = _kernels.softmax_tokens_(logits, shift).numpy()[rows, tracked].T
    return JointTrajectory(vs, ps, risks, probs, on, tracked, lr, normalized, record)


def _descend_joint_torch(X, Y, K, V, P, steps, lr, loss, normalized, eps_v, eps_p, tracked,
                         record) -> tuple:
    """The torch loop of :func:`gd_joint` on validated inputs: tokens X and keys K (n, T, d),
    labels Y (n,), starts V, P (B, d), tracked (n,) or None, recorded steps ``record`` (R,).
    Returns the records (v, p, risk, probability, on); ``on`` is left unset when ``tracked`` is
    None (gd_joint fills it after the run). Raises the overflow errors of gd_joint."""
    n, T, d = X.shape
    R = len(record)
    B = P.shape[0]

    vs, ps = np.empty((R, B, d)), np.empty((R, B, d))
    risks, probs = np.empty((R, B)), np.empty((R, B))
    on = np.empty((R, B, n))   # attention on the tracked tokens (filled after the run if None)
    start_joint = dict(start="p0", start_logits=lambda K=K, P=P: np.einsum("ntd,bd->ntb", K, P),
                       sizes=(_largest(K),))
    # tokens signed by their labels, Y_i x_it (exact): the scores are one matmul, XY @ v
    XY = _kernels.tensor((Y[:, None, None] * X).reshape(n * T, d))
    XYT, K2 = XY.T.contiguous(), _kernels.tensor(K.reshape(n * T, d))
    K2T = K2.T.contiguous()
    VP = _kernels.tensor(np.stack([V.T, P.T]))               # (2, d, B): v and p, batch-last
    grad = torch.empty_like(VP)
    offsets = torch.tensor([eps_v, eps_p], dtype=torch.float64).reshape(2, 1, 1)  # their eps
    rows = np.arange(n)
    work = torch.empty((n, T, B), dtype=torch.float64)  # dlogits for dL/dp, in place
    r = 0
    with _kernels.threads_for(n * T * B):
        for k in range(steps + 1):
            gamma = (XY @ VP[0]).view(n, T, B)
            logits = (K2 @ VP[1]).view(n, T, B)
            shift, top = torch.max(logits, dim=1, keepdim=True)
            s = _kernels.softmax_tokens_(logits, shift)
            margin, deviation = _kernels.margins(s, gamma, top)
            if record[r] == k:
                vs[r], ps[r] = VP[0].T.numpy(), VP[1].T.numpy()
                risks[r] = _risk_of(margin, loss)
                probs[r] = np.mean(expit(margin.numpy()), axis=0)
                if tracked is not None:
                    on[r] = s.numpy()[rows, tracked].T
                r += 1
            if k == steps:
                if not bool(torch.isfinite(margin).all()):   # the last iterate's logits
                    raise _overflow("gd_joint", k, gamma.numpy(), lr, loss, normalized,
                                    **start_joint, last=True)
                break
            weights, scale = _kernels.derivative_weights(margin, loss, normalized)
            if weights is None:
                raise _overflow("gd_joint", k, gamma.numpy(), lr, loss, normalized, **start_joint)
            weights = weights[:, None, :]
            step_offsets = offsets if scale is None else offsets * scale

            def step(weights, step_offsets):
                torch.mm(XYT, (s * weights).view(n * T, B), out=grad[0])    # dL/dv
                torch.mul(s, deviation, out=work)
                work.mul_(weights)
                torch.mm(K2T, work.view(n * T, B), out=grad[1])             # dL/dp

                def rescaled():   # both gradients from factors scaled up: (grad 2^k, k)
                    gv, kv = _scaled_contraction(XYT, (s * weights).view(n * T, B))
                    gp, kp = _scaled_contraction(K2T, work.view(n * T, B))
                    return torch.stack([gv, gp]), torch.stack([kv, kp])

                return VP - lr * _step_direction(grad, normalized, step_offsets, rescaled)

            # a gradient that is not finite makes the iterate not finite: one check below
            new = step(weights, step_offsets)
            if not bool(torch.isfinite(new).all()):
                if normalized:
                    # the contraction overflowed though the direction is finite: each run's
                    # power of two out of the weights (exact), and the offsets alike
                    unit = _kernels.power_of_two_scale(weights, dims=(0, 1))  # (1, 1, B)
                    new = step(weights * unit, step_offsets * unit)
                if not bool(torch.isfinite(new).all()):
                    raise _overflow("gd_joint", k, gamma.numpy(), lr, loss, normalized,
                                    **start_joint)
            VP = new
    return vs, ps, risks, probs, on


def _descend_W_shared(X, gamma, W0, p, steps, lr, loss, normalized, eps,
                      record) -> WTrajectory | None:
    """:func:`gd_W` with one query p for every sequence (validated inputs: X (n, T, d), scores
    gamma (n, T), starts W0 (B, d, d), p (d,)), as gradient descent on the prompt u = W p.

    The logits are x^T W p = x^T u and the gradient in W is a p^T, a = dL/du (the gradient of GD
    on a prompt with keys X), so W moves along (.) p^T only: u_{k+1} = W_{k+1} p is the GD step
    on u with step lr ||p||^2 (plain), or lr ||p|| and offset eps / ||p|| (normalized, since
    ||a p^T||_F = ||a|| ||p||), and W_k = W_0 + (u_k - u_0) p^T / ||p||^2. This runs on
    :func:`_descend` (the compiled kernel when numba is there): about twice the speed of the
    loop on W (benchmarks/bench_gd.py). Returns None when these scalars (eps / ||p|| too) leave
    float64's normal range or a step is not finite: the loop on W then runs the call (and names the cause of a
    failure, which it reports with the W-specific wording).
    """
    pp = float(p @ p)
    norm = math.sqrt(pp)
    lr_u = lr * (norm if normalized else pp)
    # eps / ||p|| below the normal range rounds (5e-324 / 1.09 to 5e-324, to 0 for ||p|| > 2):
    # the loop on W keeps eps itself
    if not (1e-150 < pp < 1e150 and sys.float_info.min < lr_u < math.inf
            and sys.float_info.min <= eps / norm < math.inf):
        return None
    U0 = W0 @ p                                                # (B, d)
    if not np.all(np.isfinite(U0)):
        return None
    n, T, d = X.shape
    R, B = len(record), len(W0)
    path = np.empty((R, B, d, d))
    # the iterates u (R, 1, B, d) are recorded at the start of W's buffer and turned into W's
    # records in place, last first: record r of W covers u's records r d .. r d + d - 1, which
    # are r itself (read before it is overwritten) or later ones, already turned
    U = path.reshape(-1)[:R * B * d].reshape(R, 1, B, d)
    try:
        run = _descend(X[None], gamma[None], U0[None], steps, lr_u, loss, normalized,
                       eps / norm, np.zeros((1, n), dtype=np.int64), record, "gd_W",
                       attention=False, path=U)
    except ValueError:              # a gradient or iterate left float64: the loop on W decides
        return None
    along = p / pp
    for r in range(R - 1, -1, -1):
        moved = U[r, 0] - U0                                   # (B, d) u_r - u_0, a copy
        np.multiply(moved[:, :, None], along, out=path[r])
        path[r] += W0
        if not np.all(np.isfinite(path[r])):   # (per record: no mask of the whole path)
            return None
    return WTrajectory(path, run.risk[:, 0], lr, normalized, record)


def _initial_batch(x0, d: int, name: str) -> np.ndarray:
    x0 = _checks.batched_vector(x0, d, name)
    if x0.ndim == 1:
        return x0[None].copy()
    if x0.ndim != 2 or len(x0) < 1:
        raise ValueError(f"{name}: expected shape ({d},) or (B, {d}) with B >= 1, got {x0.shape}")
    return x0.copy()

