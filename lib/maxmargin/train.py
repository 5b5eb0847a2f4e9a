"""Gradient descent on the prompt p, on the key-query matrix W, and jointly on (v, p).

Every routine runs many initializations at once as one array program: ``p0`` of shape (B, d)
gives B trajectories. A step is plain, ``x <- x - lr * g``, or normalized,
``x <- x - lr * g / (||g|| + eps)`` (each parameter normalized separately, as in the paper's runs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import _checks, _kernels
from .losses import Loss, expit, get_loss
from .model import _softmax as softmax


@dataclass(frozen=True)
class Trajectory:
    """A batch of B gradient-descent runs on p over ``steps`` iterations.

    Attributes
    ----------
    p : (steps + 1, B, d) iterates, p[0] is the initialization.
    loss : (steps + 1, B) risk at each iterate.
    tracked_attention : (steps + 1, B, n) attention weight on token ``tracked[i]`` of sequence i.
    other_attention : (steps + 1, B, n) attention on all the other tokens, summed; computed from
        the small weights themselves, so it stays accurate far below 1e-16.
    tracked : (n,) token indices whose attention is recorded (default: the highest-score tokens).
    final_attention : (B, n, T) attention weights at the last iterate.
    """

    p: np.ndarray
    loss: np.ndarray
    tracked_attention: np.ndarray
    other_attention: np.ndarray
    tracked: np.ndarray
    final_attention: np.ndarray
    lr: float
    normalized: bool

    @property
    def norms(self) -> np.ndarray:
        """(steps + 1, B) Euclidean norms of the iterates."""
        return np.linalg.norm(self.p, axis=-1)

    def cosine(self, direction) -> np.ndarray:
        """(steps + 1, B) cosine similarity of each iterate with ``direction`` (d,); 0 at p = 0."""
        return cosine(self.p, _checks.vector(direction, self.p.shape[-1], "direction"))

    def selected_tokens(self) -> np.ndarray:
        """(B, n) index of the token with the largest final attention in each sequence."""
        return np.argmax(self.final_attention, axis=-1)


def cosine(a, b) -> np.ndarray:
    """Cosine similarity along the last axis, broadcasting; defined as 0 where a vector is 0.

    Finite vectors of any size (each is first divided by its largest entry, so no norm
    overflows); NaN or inf, or shapes that do not broadcast, raise a ValueError naming a or b.
    """
    a = _checks.finite(_checks._as_float_array(a, "a"), "a")
    b = _checks.finite(_checks._as_float_array(b, "b"), "b")
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"b: expected vectors along the last axis of the same length as a's, "
                         f"got shapes {a.shape} and {b.shape}")
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"b: shape {b.shape} does not broadcast against a's {a.shape}") from None
    a, b = _unit_scale(a), _unit_scale(b)
    denom = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = np.sum(a * b, axis=-1)
    return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)


def _unit_scale(a: np.ndarray) -> np.ndarray:
    """Each vector (last axis) divided by its largest |entry| (zero vectors kept)."""
    top = np.max(np.abs(a), axis=-1, keepdims=True)
    return a / np.where(top > 0, top, 1.0)


def gd(X, Y, v, p0, steps: int, lr: float, W=None, loss: str | Loss = "logistic",
       normalized: bool = False, eps: float = 1e-12, track=None) -> Trajectory:
    """Gradient descent on the prompt p with v and W fixed, batched over initializations.

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,), (d,), (d, d) or None.
    p0 : (d,) or (B, d) initial prompts; a (d,) start is a batch of one.
    steps, lr : number of iterations and step size.
    normalized : divide each gradient by (its norm + eps) before stepping.
    track : (n,) token indices whose attention to record; default argmax_t gamma_it.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    gamma = _kernels.scores(X, _checks.labels(Y, n), _checks.vector(v, d, "v"))
    K = _kernels.keys(X, _checks.key_matrix(W, d))
    P = _initial_batch(p0, d, "p0")
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    _affordable_descent(steps, len(P), n * T * d, d + 3 * n + 1, n * T)
    tracked = np.argmax(gamma, axis=1) if track is None else _checks.indices(track, n, T, "track")
    run = _descend(K[None], gamma[None], P[None], steps, lr, loss, normalized, eps, tracked[None])
    return Trajectory(run.path[:, 0], run.loss[:, 0], run.on[:, 0], run.off[:, 0], tracked,
                      run.final[0], lr, normalized)


@dataclass(frozen=True)
class StackTrajectory(Trajectory):
    """B gradient-descent runs on p for each of M instances of the same shape (n, T, d).

    The fields of :class:`Trajectory` with an instance axis after the step axis: ``p`` is
    (steps + 1, M, B, d), ``loss`` (steps + 1, M, B), ``tracked_attention`` and
    ``other_attention`` (steps + 1, M, B, n), ``tracked`` (M, n), ``final_attention`` (M, B, n, T).
    """

    def cosine(self, directions) -> np.ndarray:
        """(steps + 1, M, B) cosine of each iterate with its instance's direction; ``directions``
        is (M, d), or (M, B, d) for one direction per run."""
        directions = np.asarray(directions, dtype=np.float64)
        if directions.ndim == 2:
            directions = directions[:, None, :]
        return cosine(self.p, directions)


def gd_stack(X, Y, v, p0, steps: int, lr: float, W=None, loss: str | Loss = "logistic",
             normalized: bool = False, eps: float = 1e-12, track=None) -> StackTrajectory:
    """Gradient descent on p for a stack of M instances, B starts each, as one array program.

    Run ``m`` is exactly ``gd(X[m], Y[m], v[m], p0[m], ...)`` (the risk of each instance is its own
    mean over its n sequences; a normalized step divides by the norm of that run's gradient).

    Parameters
    ----------
    X : (M, n, T, d) tokens of M instances.
    Y : (M, n) labels in {-1, +1}.
    v : (M, d) heads, or (d,) shared.
    p0 : (M, B, d) starts, or (B, d) / (d,) shared by every instance.
    W : (M, d, d), (d, d) shared, or None (identity).
    track : (M, n) token indices whose attention to record; default argmax_t gamma_it.
    """
    X = _checks._as_float_array(X, "X")
    if X.ndim != 4:
        raise ValueError(f"X: expected shape (M, n, T, d), got an array with shape {X.shape}")
    M, n, T, d = X.shape
    if M < 1:
        raise ValueError(f"X: needs at least one instance (M >= 1), got shape {X.shape}")
    for m in range(M):
        _checks.tokens(X[m], "X")
    Y = _checks._as_float_array(Y, "Y")
    if Y.shape != (M, n):
        raise ValueError(f"Y: expected shape ({M}, {n}) to match X, got {Y.shape}")
    v = _checks.batched_vector(v, d, "v")
    v = np.broadcast_to(v, (M, d)) if v.shape in ((d,), (M, d)) else None
    if v is None:
        raise ValueError(f"v: expected shape ({d},) or ({M}, {d})")
    gamma = np.stack([_kernels.scores(X[m], _checks.labels(Y[m], n), v[m]) for m in range(M)])
    if W is None:
        K = X
    else:
        Wa = _checks._as_float_array(W, "W")
        if Wa.shape == (d, d):
            Wa = np.broadcast_to(Wa, (M, d, d))
        if Wa.shape != (M, d, d):
            raise ValueError(f"W: expected shape ({d}, {d}) or ({M}, {d}, {d}), got {Wa.shape}")
        K = np.einsum("mnte,med->mntd", X, _checks.finite(Wa, "W"))
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
    _affordable_descent(steps, M * P.shape[1], n * T * d, d + 3 * n + 1, n * T)
    if track is None:
        tracked = np.argmax(gamma, axis=-1)
    else:
        track = np.asarray(track)
        if track.shape != (M, n):
            raise ValueError(f"track: expected shape ({M}, {n}), one token index per sequence of "
                             f"each instance, got {track.shape}")
        tracked = np.stack([_checks.indices(t, n, T, "track") for t in track])

    run = _descend(K, gamma, np.ascontiguousarray(P), steps, lr, loss, normalized, eps, tracked)
    return StackTrajectory(run.path, run.loss, run.on, run.off, tracked, run.final, lr, normalized)


@dataclass(frozen=True)
class _Records:
    """What :func:`_descend` records for M instances x B runs."""

    path: np.ndarray   # (steps + 1, M, B, d)
    loss: np.ndarray   # (steps + 1, M, B)
    on: np.ndarray     # (steps + 1, M, B, n) attention on the tracked tokens
    off: np.ndarray    # (steps + 1, M, B, n) attention on all other tokens, summed
    final: np.ndarray  # (M, B, n, T) attention at the last iterate


def _descend(K, gamma, P, steps, lr, loss, normalized, eps, tracked) -> _Records:
    """The GD engine behind :func:`gd` and :func:`gd_stack`: keys K (M, n, T, d), scores gamma
    (M, n, T), starts P (M, B, d), tracked tokens (M, n); validated inputs, one array program."""
    M, n, T, d = K.shape
    B = P.shape[1]
    path = np.empty((steps + 1, M, B, d))
    margins = np.empty((steps + 1, M * n, B))
    on = np.empty((steps + 1, M, n, B))
    off = np.empty((steps + 1, M, n, B))
    Kt = _kernels.tensor(K.reshape(M, n * T, d))
    KtT = Kt.transpose(1, 2).contiguous()  # (M, d, n T): a contiguous copy makes the contraction faster
    G = _kernels.tensor(gamma.reshape(M * n, T, 1))
    Pt = _kernels.tensor(np.swapaxes(P, 1, 2))  # (M, d, B)
    hit = np.arange(T) == tracked[..., None]  # (M, n, T)
    on_mask = torch.from_numpy(hit.reshape(M * n, 1, T).astype(np.float64))
    off_mask = 1.0 - on_mask

    with _kernels.threads_for(M * n * T * B):
        for k in range(steps + 1):
            path[k] = Pt.transpose(1, 2).numpy()
            logits = (Kt @ Pt).reshape(M * n, T, B)
            shift, top = torch.max(logits, dim=1, keepdim=True)
            s = _kernels.softmax_tokens_(logits, shift)
            on[k] = torch.bmm(on_mask, s).reshape(M, n, B).numpy()
            off[k] = torch.bmm(off_mask, s).reshape(M, n, B).numpy()  # accurate far below 1e-16
            margin, deviation = _kernels.margins(s, G, top)
            margins[k] = margin.numpy()
            if k == steps:
                break
            dlogits = _kernels.logit_grad(s, deviation, margin, loss, out=s, n=n)
            grad = KtT @ dlogits.reshape(M, n * T, B)  # (M, d, B)
            Pt = Pt - lr * _step_direction(grad, normalized, eps)
        final = _kernels.softmax_tokens_((Kt @ Pt).reshape(M * n, T, B))
    final = final.reshape(M, n, T, B).permute(0, 3, 1, 2).numpy()
    risks = loss.torch_value(torch.from_numpy(margins)).numpy()
    risks = np.mean(risks.reshape(steps + 1, M, n, B), axis=2)
    return _Records(path, risks, on.transpose(0, 1, 3, 2), off.transpose(0, 1, 3, 2), final)


@dataclass(frozen=True)
class WTrajectory:
    """A batch of B gradient-descent runs on W: ``W`` is (steps + 1, B, d, d), ``loss`` (steps + 1, B)."""

    W: np.ndarray
    loss: np.ndarray
    lr: float
    normalized: bool

    def cosine(self, direction) -> np.ndarray:
        """(steps + 1, B) Frobenius cosine of each iterate with the matrix ``direction`` (d, d)."""
        flat = self.W.reshape(self.W.shape[:2] + (-1,))
        return cosine(flat, np.asarray(direction, dtype=np.float64).reshape(-1))


def gd_W(X, Y, v, W0, queries, steps: int, lr: float, loss: str | Loss = "logistic",
         normalized: bool = False, eps: float = 1e-12) -> WTrajectory:
    """Gradient descent on the key-query matrix W with fixed queries, batched over initializations.

    ``W0`` is (d, d) or (B, d, d); ``queries`` is (n, d) (one query z_i per sequence) or (d,)
    (the prompt p shared by every sequence).
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    gamma = _kernels.scores(X, _checks.labels(Y, n), _checks.vector(v, d, "v"))
    Z = _checks.queries(queries, n, d)
    Wk = _checks._as_float_array(W0, "W0")
    if Wk.shape == (d, d):
        Wk = Wk[None]
    if Wk.ndim != 3 or Wk.shape[1:] != (d, d) or Wk.shape[0] < 1:
        raise ValueError(f"W0: expected shape ({d}, {d}) or (B, {d}, {d}) with B >= 1, got {Wk.shape}")
    _checks.finite(Wk, "W0")
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    _affordable_descent(steps, Wk.shape[0], n * T * d * (d + 2), d * d + 1, n * T)

    path = np.empty((steps + 1,) + Wk.shape)
    risks = np.empty((steps + 1, Wk.shape[0]))
    G, Xt, Zt = _kernels.tensor(gamma[..., None]), _kernels.tensor(X), _kernels.tensor(Z)
    with _kernels.threads_for(n * T * Wk.shape[0]):
        for k in range(steps + 1):
            path[k] = Wk
            logits = _kernels.self_attention_logits(X, Wk, Z)
            s = _kernels.tensor(softmax(logits).transpose(1, 2, 0))
            margin, deviation = _kernels.margins(s, G)
            risks[k] = np.mean(loss.value(margin.numpy()), axis=0)
            if k == steps:
                break
            dlogits = _kernels.logit_grad(s, deviation, margin, loss, out=s)
            grad = torch.einsum("ntb,ntd,ne->bde", dlogits, Xt, Zt)
            flat = _step_direction(grad.reshape(grad.shape[0], -1).T, normalized, eps).T
            Wk = Wk - lr * flat.reshape(Wk.shape).numpy()
    bad = ~np.isfinite(path).reshape(steps + 1, -1).all(axis=1)
    if bad.any():
        raise ValueError(f"gd_W: W overflowed at step {int(np.argmax(bad))} (the loss, its "
                         f"gradient or the step became non-finite); check lr, loss and the scale "
                         f"of v and X")
    return WTrajectory(path, risks, lr, normalized)


@dataclass(frozen=True)
class JointTrajectory:
    """A batch of B joint runs on (v, p).

    ``v`` and ``p`` are (steps + 1, B, d); ``loss`` and ``probability`` (the mean over sequences of
    sigmoid(Y_i f(X_i))) are (steps + 1, B); ``tracked_attention`` is (steps + 1, B, n).
    """

    v: np.ndarray
    p: np.ndarray
    loss: np.ndarray
    probability: np.ndarray
    tracked_attention: np.ndarray
    tracked: np.ndarray
    lr: float
    normalized: bool


def gd_joint(X, Y, v0, p0, steps: int, lr: float, W=None, loss: str | Loss = "logistic",
             normalized: bool = True, eps_v: float = 1e-12, eps_p: float = 1e-12,
             track=None) -> JointTrajectory:
    """Gradient descent on v and p together, batched over initializations.

    ``v0`` and ``p0`` are (d,) or (B, d) (broadcast against each other). With ``normalized`` the
    two gradients are normalized separately. ``track`` (n,) are the token indices whose attention is
    recorded; by default the highest-score tokens under the final v.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    K = _kernels.keys(X, _checks.key_matrix(W, d))
    V = _initial_batch(v0, d, "v0")
    P = _initial_batch(p0, d, "p0")
    if len(V) != len(P) and 1 not in (len(V), len(P)):
        raise ValueError(f"v0: {len(V)} starts do not pair with the {len(P)} starts of p0 (give "
                         f"equal numbers of starts, or one start for either)")
    V, P = (np.array(a) for a in np.broadcast_arrays(V, P))
    steps, lr, loss, eps_v, eps_p = _settings(steps, lr, loss, eps_v=eps_v, eps_p=eps_p)
    normalized = _checks.flag(normalized, "normalized")
    if track is not None:
        _checks.indices(track, n, T, "track")
    _affordable_descent(steps, len(P), n * T * d, 2 * d + 2 * n + n * T, n * T)
    rows = np.arange(n)

    B = P.shape[0]
    vs, ps = np.empty((steps + 1, B, d)), np.empty((steps + 1, B, d))
    margins = np.empty((steps + 1, n, B))
    attention = np.empty((steps + 1, n, T, B))
    Xt, K, Yt, V, P = (_kernels.tensor(a) for a in (X, K, Y, V.T, P.T))
    with _kernels.threads_for(n * T * B):
        for k in range(steps + 1):
            vs[k], ps[k] = V.T.numpy(), P.T.numpy()
            gamma = Yt[:, None, None] * torch.einsum("ntd,db->ntb", Xt, V)
            s = _kernels.attention_from_keys(K, P)
            attention[k] = s.numpy()
            margin, deviation = _kernels.margins(s, gamma)
            margins[k] = margin.numpy()
            if k == steps:
                break
            weight_v = loss.torch_derivative(margin) * (Yt / n)[:, None]
            grad_v = _kernels.contract_tokens(s * weight_v[:, None, :], Xt)
            grad_p = _kernels.contract_tokens(_kernels.logit_grad(s, deviation, margin, loss), K)
            V = V - lr * _step_direction(grad_v, normalized, eps_v)
            P = P - lr * _step_direction(grad_p, normalized, eps_p)
    V = V.T.numpy()
    risks = np.mean(loss.value(margins), axis=1)
    probs = np.mean(expit(margins), axis=1)
    if track is None:
        tracked = np.argmax(_kernels.scores(X, Y, V[0]), axis=1)
    else:
        tracked = _checks.indices(track, n, T, "track")
    return JointTrajectory(vs, ps, risks, probs, attention[:, rows, tracked].transpose(0, 2, 1), tracked,
                           lr, normalized)


def selection_basin(X, Y, v, W=None, extent: float = 8.0, num: int = 61, steps: int = 200,
                    lr: float = 0.1, sequence: int = 0):
    """Which token normalized GD selects from each start of a grid in the (p1, p2) plane.

    Starts are p0 = (a, b, 0, ...) for a, b on ``np.linspace(-extent, extent, num)``; all runs are
    one batched :func:`gd` call (``steps`` normalized steps of size ``lr``, eps 1e-12).

    Returns
    -------
    (grid (num,), selected (num, num)): the index of the token with the largest final attention
    in sequence ``sequence``; row j is b = grid[j], column k is a = grid[k].
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    if d < 2:
        raise ValueError(f"X: the prompt plane needs d >= 2, got d={d}")
    extent = _checks.positive_float(extent, "extent")
    num = _checks.positive_int(num, "num")
    if isinstance(sequence, bool) or not isinstance(sequence, (int, np.integer)) \
            or not 0 <= sequence < n:
        raise ValueError(f"sequence: expected an index in [0, {n}), got {sequence!r}")
    _checks.affordable("num", num, float(num) ** 2 * n * T * d, 8.0 * num ** 2 * (d + n * T),
                       "a grid of num x num starts")
    grid = np.linspace(-extent, extent, num)
    A, B = np.meshgrid(grid, grid)
    p0 = np.zeros((A.size, d))
    p0[:, 0], p0[:, 1] = A.ravel(), B.ravel()
    run = gd(X, Y, v, p0, steps, lr, W=W, normalized=True)
    return grid, run.selected_tokens()[:, sequence].reshape(num, num)


def _settings(steps, lr, loss, **eps) -> tuple:
    """The validated step settings shared by every descent: (steps, lr, loss, *eps values).

    ``eps`` are the named normalization offsets (``eps``, or ``eps_v`` and ``eps_p``), each a
    positive float, returned in the order given.
    """
    steps = _checks.positive_int(steps, "steps")
    lr = _checks.positive_float(lr, "lr")
    offsets = [_checks.positive_float(value, name) for name, value in eps.items()]
    return (steps, lr, get_loss(loss), *offsets)


def _initial_batch(x0, d: int, name: str) -> np.ndarray:
    x0 = _checks.batched_vector(x0, d, name)
    if x0.ndim == 1:
        return x0[None].copy()
    if x0.ndim != 2 or len(x0) < 1:
        raise ValueError(f"{name}: expected shape ({d},) or (B, {d}) with B >= 1, got {x0.shape}")
    return x0.copy()


STEP_OVERHEAD = 10_000  # the fixed cost of one step (Python and torch calls), in multiply-adds


def _recording_bytes(n_records: int, batch: int, per_run: int) -> float:
    """Bytes of the arrays a descent records: ``n_records`` recorded steps (today steps + 1) of
    ``batch`` runs, ``per_run`` float64 numbers per run and recorded step (d for the iterate, n
    per recorded attention or margin, 1 for the loss)."""
    return 8.0 * n_records * batch * per_run


def _affordable_descent(steps: int, batch: int, step_work: int, per_run: int, final: int) -> None:
    """Refuse a descent whose estimated cost exceeds the library's limits (_checks.affordable):
    ``steps`` steps of ``batch`` runs, each ``step_work`` multiply-adds per run and step (plus a
    fixed overhead per step), recording ``per_run`` numbers per run and step, and ``final``
    numbers per run at the end."""
    operations = float(steps) * (4.0 * batch * step_work + STEP_OVERHEAD)
    nbytes = _recording_bytes(steps + 1, batch, per_run) + 8.0 * batch * final
    _checks.affordable("steps", steps, operations, nbytes, f"a descent of {batch} run(s)")


def _step_direction(grad: torch.Tensor, normalized: bool, eps: float) -> torch.Tensor:
    """The gradient (..., d, B) itself, or each column divided by (its norm + eps).

    A column below 1e-140 is rescaled by its largest entry before the norm is taken, so that
    its squares do not underflow to a zero norm (which would turn a tiny gradient into a huge
    step).
    """
    if not normalized:
        return grad
    norm = torch.linalg.vector_norm(grad, dim=-2, keepdim=True)
    if bool((norm < 1e-140).any()):
        scale = grad.abs().amax(dim=-2, keepdim=True)
        unit = torch.where(scale > 0, grad / torch.where(scale > 0, scale, 1.0), 0.0)
        norm = scale * torch.linalg.vector_norm(unit, dim=-2, keepdim=True)
    return grad / (norm + eps)
