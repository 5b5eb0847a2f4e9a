"""The GD engines behind the trainers of :mod:`.train` and :mod:`.keyquery`: the choice between
the compiled kernels (:mod:`._compiled`, numba) and the torch loop (:mod:`._torchdescent`), the
wrappers that feed the kernels (and rerun a call on the torch loop where a kernel hands it over),
and the records they return. Inputs are validated (by the public trainers); settings arrive as
one :class:`~maxmargin._descent.Descent`.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from . import _kernels, _torchdescent
from ._blocks import _TWO_LANE_COSTS, _block_lanes, _loss_code, _run_blocks
from ._descent import Descent, _affordable_descent, _risk_of
from .losses import Loss


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


def _descend(K, gamma, P, tracked, run: Descent, *, attention: bool = True,
             path: np.ndarray | None = None) -> _Records:
    """The GD engine behind :func:`gd`, :func:`gd_stack` and :func:`gd_W` (shared query): keys K
    (M, n, T, d), scores gamma (M, n, T), starts P (M, B, d), tracked tokens (M, n), settings
    ``run``; validated inputs. Runs the compiled kernel for the three built-in losses when numba
    is there, the torch loop otherwise. ``attention=False``: no attention records (``on``,
    ``off``, ``final`` empty); ``path``: a C-contiguous (R, M, B, d) buffer for the iterates
    (default: a new one)."""
    M, n, T, d = K.shape
    work = M * P.shape[1] * (run.steps + 1) * n * T * d
    if _loss_code(run.loss) is not None and engine(work=work) == "compiled":
        return _descend_compiled(K, gamma, P, tracked, run, attention, path)
    return _descend_torch(K, gamma, P, tracked, run, attention, path)


def _selected_tokens(prob, P: np.ndarray, run: Descent) -> np.ndarray:
    """(B, n) the token of largest attention at the last iterate of GD on p from the starts P
    (B, d) of a validated problem ``prob`` (with its head): :func:`~maxmargin.gd` without its
    records (the book's selection basins, on the problem validated once)."""
    n, T, d = prob.shape
    _affordable_descent(run.steps, len(run.record), len(P), n * T * d, d + 2 * n + 1, n * T)
    tracked = np.argmax(prob.scores, axis=1)
    final = _descend(prob.keys[None], prob.scores[None], P[None], tracked[None], run).final
    return np.argmax(final[0], axis=-1)


_READY_FLAGS = {"gd": "_READY", "gd_joint": "_READY_JOINT", "gd_KQ": "_READY_KQ"}  # in _compiled


def _compiled_loaded(kernel: str = "gd") -> bool:
    module = sys.modules.get(__package__ + "._compiled")
    return module is not None and bool(getattr(module, _READY_FLAGS[kernel]))


def _descend_compiled(K, gamma, P, tracked, run: Descent, attention=True, path=None) -> _Records:
    from . import _compiled  # deferred: numba compiles (or loads from its cache) on first use

    _compiled.ready()
    M, n, T, d = K.shape
    B = P.shape[1]
    lanes = _block_lanes(B, M, _GD_LANE_COSTS)
    kernel = {_compiled.LANES: _compiled.descend, _compiled.WIDE: _compiled.descend_wide,
              _compiled.WIDER: _compiled.descend_wider}[lanes]
    P0 = _padded_starts(P, lanes)
    out = _compiled.empty_records(len(run.record), M, B, n, T, d,  # the real starts only
                                  attention=attention, path=path)
    array = _compiled.kernel_array   # every array as ready() compiled for: no new specialization
    prob = _compiled.Problem(array(K), array(gamma), array(tracked, np.int64))
    settings = _compiled.Settings(run.steps, run.lr, _loss_code(run.loss), bool(run.normalized),
                                  run.eps[0], array(run.record, np.int64))
    _run_blocks(kernel, M * P0.shape[1] // lanes, prob, P0, settings, out)
    if np.any(out.failed >= 0):
        # a lane met a number the kernel does not handle (an overflowing gradient of the
        # logistic or correlation loss, say, whose normalized step the torch loop takes from
        # scaled factors): the whole call reruns on the torch loop, so that its outcome (the
        # result, or the error and its message) never depends on the engine (issue 38)
        del out
        return _descend_torch(K, gamma, P, tracked, run, attention, path)
    _rerecord_risks(out.risk, lambda i: (K[i[1]], gamma[i[1]], out.path[i]), run.loss)
    return _Records(out.path, out.risk, out.on, out.off, out.final)


def _rerecord_risks(risk: np.ndarray, iterate, loss: Loss) -> None:
    """Recompute, in place, the compiled kernels' recorded risks that are not finite, from the
    recorded iterates with the one risk recorder (:func:`_risk_of`): the kernels sum l(z_i) / n,
    inf when one loss is beyond float64 though the mean is not. ``iterate(index)`` gives the
    (keys (n, T, d), scores (n, T), prompt (d,)) of the record at ``index`` of ``risk`` (any
    shape). A risk beyond float64 stays inf."""
    for index in map(tuple, np.argwhere(~np.isfinite(risk))):   # (rare: free when all finite)
        risk[index] = _risk_at(*iterate(index), loss)


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


def _descend_joint_compiled(X, Y, K, V, P, tracked, run: Descent) -> tuple:
    """:func:`_descend_joint_torch` on the compiled kernel (:mod:`._compiled`, section gd_joint).

    The kernel marks a lane that met a margin or slope that is not finite (a gradient that is not
    finite makes the next iterate so, and its margins NaN) and stops its block; the whole call
    then reruns on the torch loop. That is correct because where every number is finite the torch loop neither
    raises nor rescales (derivative_weights rescales only slopes that are not finite, the scaled
    retry and the errors follow only an iterate that is not finite), so the two compute the same steps; and the rerun,
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
    out = _compiled.empty_joint_records(len(run.record), B, n, d)   # the real starts only
    array = _compiled.kernel_array   # every array as ready_joint() compiled for
    prob = _compiled.JointProblem(array(Y[:, None, None] * X),  # exact
                                  array(K),
                                  np.zeros(n, dtype=np.int64) if tracked is None
                                  else array(tracked, np.int64))
    eps_v, eps_p = run.eps
    settings = _compiled.JointSettings(run.steps, run.lr, _loss_code(run.loss),
                                       bool(run.normalized), eps_v, eps_p,
                                       array(run.record, np.int64), tracked is not None)
    _run_blocks(kernel, P0.shape[0] // lanes, prob, V0, P0, settings, out)
    if np.any(out.failed >= 0):
        del out
        return _descend_joint_torch(X, Y, K, V, P, tracked, run)
    XY = Y[:, None, None] * X                      # the scores of v are XY v
    _rerecord_risks(out.risk, lambda i: (K, XY @ out.v[i], out.p[i]), run.loss)
    return out.v, out.p, out.risk, out.probability, out.on


def _descend_torch(K, gamma, P, tracked, run: Descent, attention=True, path=None) -> _Records:
    """:func:`_descend` on the torch loop (:class:`~maxmargin._torchdescent.Prompts`)."""
    model = _torchdescent.Prompts(K, gamma, P, tracked, run, attention, path)
    return _Records(*_torchdescent.descend(model, run))


def _descend_joint(X, Y, K, V, P, tracked, run: Descent) -> tuple:
    """The engine of :func:`gd_joint`: tokens X and keys K (n, T, d), labels Y (n,), starts V, P
    (B, d), tracked (n,) or None; the compiled kernel for a built-in loss where the engine setting
    takes it, else the torch loop. Returns the records (v, p, risk, probability, on)."""
    n, T, d = X.shape
    work = 2 * len(P) * (run.steps + 1) * n * T * d
    if _loss_code(run.loss) is not None and engine(work=work, kernel="gd_joint") == "compiled":
        return _descend_joint_compiled(X, Y, K, V, P, tracked, run)
    return _descend_joint_torch(X, Y, K, V, P, tracked, run)


def _descend_joint_torch(X, Y, K, V, P, tracked, run: Descent) -> tuple:
    """The torch loop of :func:`gd_joint` (:class:`~maxmargin._torchdescent.Joint`): the records
    (v, p, risk, probability, on); ``on`` is left unset when ``tracked`` is None (gd_joint fills
    it after the run). Raises the overflow errors of gd_joint."""
    return _torchdescent.descend(_torchdescent.Joint(X, Y, K, V, P, tracked, run), run)


def _descend_W(X, gamma, W0, Z, shared: bool, run: Descent) -> tuple:
    """The torch loop of :func:`gd_W` (:class:`~maxmargin._torchdescent.Matrices`): queries Z
    (n, d), one shared when ``shared``; returns the records (W (R, B, d, d), risk (R, B))."""
    return _torchdescent.descend(_torchdescent.Matrices(X, gamma, W0, Z, shared, run), run)
