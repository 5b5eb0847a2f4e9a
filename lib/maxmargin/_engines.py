"""The GD engines behind the trainers of :mod:`.train` and :mod:`.keyquery`: the choice between
the compiled kernels (:mod:`._compiled`, numba) and the torch loop (:mod:`._torchdescent`), the
wrappers that feed the kernels (and rerun a call on the torch loop where a kernel hands it over),
and the shortcuts of a shared query (GD on W as GD on the prompt u = W p). Inputs are validated
(by the public trainers); settings arrive as one :class:`~maxmargin._descent.Descent`; every
entry point (``_descend``, ``_descend_W``, ``_descend_joint``, ``_descend_KQ``,
``_descend_KQ_stack``), on every engine, returns one :class:`~maxmargin._descent.Records`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np

from . import _kernels, _torchdescent
from ._blocks import _TWO_LANE_COSTS, _block_lanes, _loss_code, _run_blocks
from ._descent import Descent, Records, _affordable_descent, _largest, _risk_of
from .losses import Loss


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
             path: np.ndarray | None = None) -> Records:
    """The GD engine behind :func:`gd`, :func:`gd_stack` and :func:`gd_W` (shared query): keys K
    (M, n, T, d), scores gamma (M, n, T), starts P (M, B, d), tracked tokens (M, n), settings
    ``run``; validated inputs. Runs the compiled kernel for the three built-in losses when numba
    is there, the torch loop otherwise. Records p (R, M, B, d), the risk and, unless
    ``attention=False`` (then None), ``on``, ``off`` and ``final``; ``path``: a C-contiguous
    (R, M, B, d) buffer for the iterates (default: a new one)."""
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


def _descend_compiled(K, gamma, P, tracked, run: Descent, attention=True, path=None) -> Records:
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
    if not attention:
        return Records((out.path,), out.risk)
    return Records((out.path,), out.risk, on=out.on, off=out.off, final=out.final,
                   tracked=tracked)


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
    _, margin, _ = _kernels.attend(logits, _kernels.tensor(gamma[..., None]))
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


def _descend_joint_compiled(X, Y, K, V, P, tracked, run: Descent) -> Records:
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
    return Records((out.v, out.p), out.risk, on=out.on, probability=out.probability)


def _descend_torch(K, gamma, P, tracked, run: Descent, attention=True, path=None) -> Records:
    """:func:`_descend` on the torch loop (:class:`~maxmargin._torchdescent.Prompts`)."""
    model = _torchdescent.Prompts(K, gamma, P, tracked, run, attention, path)
    return _torchdescent.descend(model, run)


def _descend_joint(X, Y, K, V, P, tracked, run: Descent) -> Records:
    """The engine of :func:`gd_joint`: tokens X and keys K (n, T, d), labels Y (n,), starts V, P
    (B, d), tracked (n,) or None; the compiled kernel for a built-in loss where the engine setting
    takes it, else the torch loop. Records v and p, the risk, the probability, ``tracked`` (n,)
    and ``on``, the attention on those tokens: the given ones, or for None the highest-score
    tokens under the final v of the first run (:func:`_record_attention_on`)."""
    n, T, d = X.shape
    work = 2 * len(P) * (run.steps + 1) * n * T * d
    if _loss_code(run.loss) is not None and engine(work=work, kernel="gd_joint") == "compiled":
        records = _descend_joint_compiled(X, Y, K, V, P, tracked, run)
    else:
        records = _descend_joint_torch(X, Y, K, V, P, tracked, run)
    if tracked is None:     # the highest-score tokens under the final v (step steps)
        tracked = np.argmax(_kernels.scores(X, Y, records.iterates[0][-1, 0]), axis=1)
        _record_attention_on(K, records, tracked)
    return dataclasses.replace(records, tracked=tracked)


def _descend_joint_torch(X, Y, K, V, P, tracked, run: Descent) -> Records:
    """The torch loop of :func:`gd_joint` (:class:`~maxmargin._torchdescent.Joint`); ``on`` is
    left unset when ``tracked`` is None (:func:`_descend_joint` fills it after the run). Raises
    the overflow errors of gd_joint."""
    return _torchdescent.descend(_torchdescent.Joint(X, Y, K, V, P, tracked, run), run)


def _descend_W(X, gamma, W0, Z, shared: bool, run: Descent) -> Records:
    """The engine of :func:`gd_W`: tokens X (n, T, d), scores gamma (n, T), starts W0 (B, d, d),
    queries Z (n, d), one shared when ``shared`` (then GD on the prompt u = W p where it can:
    :func:`_descend_W_shared`), else the torch loop
    (:class:`~maxmargin._torchdescent.Matrices`); records W (R, B, d, d) and the risk (R, B)."""
    if shared:
        records = _descend_W_shared(X, gamma, W0, Z[0], run)
        if records is not None:
            return records
    return _torchdescent.descend(_torchdescent.Matrices(X, gamma, W0, Z, shared, run), run)


def _descend_W_shared(X, gamma, W0, p, run: Descent) -> Records | None:
    """:func:`_descend_W` with one query p for every sequence (validated inputs: X (n, T, d), scores
    gamma (n, T), starts W0 (B, d, d), p (d,)), as gradient descent on the prompt u = W p.

    The logits are x^T W p = x^T u and the gradient in W is a p^T, a = dL/du (the gradient of GD
    on a prompt with keys X), so W moves along (.) p^T only: u_{k+1} = W_{k+1} p is the GD step
    on u with step lr ||p||^2 (plain), or lr ||p|| and offset eps / ||p|| (normalized, since
    ||a p^T||_F = ||a|| ||p||), and W_k = W_0 + (u_k - u_0) p^T / ||p||^2. This runs on
    :func:`_descend` (the compiled kernel when numba is there): about twice the speed of the
    loop on W (benchmarks/bench_gd.py). Returns None when these scalars (eps / ||p|| too) leave
    float64's normal range or a step is not finite: the loop on W then runs the call (and names
    the cause of a failure, which it reports with the W-specific wording).
    """
    lr, normalized, eps, record = run.lr, run.normalized, run.eps[0], run.record
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
        out = _descend(X[None], gamma[None], U0[None], np.zeros((1, n), dtype=np.int64),
                       dataclasses.replace(run, lr=lr_u, eps=(eps / norm,)),
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
    return Records((path,), out.risk[:, 0])


def _record_attention_on(K: np.ndarray, records: Records, tracked: np.ndarray) -> None:
    """Fill ``records.on`` (R, B, n) of a joint run with the attention on the tokens ``tracked``
    (n,), chosen after the run: each record's attention computed again from its p, as the loop
    computed it (keys K (n, T, d))."""
    n, T, d = K.shape
    ps, on = records.iterates[1], records.on
    R, B = ps.shape[:2]
    rows = np.arange(n)
    K2 = _kernels.tensor(K.reshape(n * T, d))
    with _kernels.threads_for(n * T * B):
        for r in range(R):
            s = _kernels.softmax_tokens_((K2 @ _kernels.tensor(ps[r].T)).view(n, T, B))
            on[r] = s.numpy()[rows, tracked].T


def _descend_KQ(X, gamma, Z, K0, Q0, reg: float, shared: bool, run: Descent) -> Records:
    """The engine of :func:`~maxmargin.gd_KQ` on validated inputs: X (n, T, d), scores gamma
    (n, T), queries Z (n, d) (``shared``: all rows one query p), starts K0, Q0 (B, d, m), penalty
    ``reg``; the compiled kernel for one shared query, no penalty and a built-in loss where the
    engine setting takes it (:func:`_descend_KQ_compiled`), else the torch loop
    (:class:`~maxmargin._torchdescent.Factors`). Records K, Q (R, B, d, m) and the risk (R, B)."""
    n, T, d = X.shape
    if (shared and reg == 0 and _loss_code(run.loss) is not None
            and engine(work=len(K0) * (run.steps + 1) * n * T * d, kernel="gd_KQ") == "compiled"):
        records = _descend_KQ_compiled(X, gamma, Z[0], K0, Q0, run)
        if records is not None:
            return records
    return _descend_KQ_torch(X, gamma, Z, K0, Q0, reg, shared, run)


def _descend_KQ_torch(X, gamma, Z, K0, Q0, reg: float, shared: bool, run: Descent) -> Records:
    """The torch loop of :func:`_descend_KQ` (:class:`~maxmargin._torchdescent.Factors`)."""
    return _torchdescent.descend(_torchdescent.Factors(X, gamma, Z, K0, Q0, reg, shared, run), run)


def _descend_KQ_stack(X, gamma, Z, K0, Q0, reg: float, freeze_Q: bool, run: Descent) -> Records:
    """The engine of :func:`~maxmargin.gd_KQ_stack` (the torch loop,
    :class:`~maxmargin._torchdescent.FactorStack`): X (M, n, T, d), gamma (M, n, T), Z (M, n, d),
    K0, Q0 (M, d, m); records K, Q (R, M, d, m) and the risk (R, M)."""
    return _torchdescent.descend(
        _torchdescent.FactorStack(X, gamma, Z, K0, Q0, reg, freeze_Q, run), run)


def _descend_KQ_compiled(X, gamma, p, K0, Q0, run: Descent) -> Records | None:
    """:func:`_descend_KQ` for one shared prompt p (d,) and reg = 0 on the compiled kernel
    (:func:`maxmargin._compiled.descend_kq`), or None where the torch loop must run the call.

    None when |p|^2 is 0 or not a normal float (the kernel moves Q along p through q = Q^T p),
    when an entry of Q0 exceeds 1e140 (the kernel sees Q0 only through q, blind to the part
    orthogonal to p, so it could not tell whether Q = Q0 - p D^T overflows), or when a run met
    a value outside the kernel's range (a gradient, weight or iterate not finite or near
    overflow, or a norm too small or too large to take directly), and the caller
    then runs the WHOLE call on the torch loop. Why the errors and results stay those of the
    torch engine: after a mark the call's outcome is by construction the torch loop's (its
    ValueError naming the step and the cause, or its careful path: the exponential loss's
    rescaled weights under normalized GD, a norm taken from the gradient divided by its largest
    entry); without a mark, every weight, gradient, u, K, q and Q of every step was finite with
    squared sizes below 1e280, so the torch loop, computing the same quantities to rounding,
    would not have raised (it raises only on weights or factors that are not finite), and its
    careful path would have taken the same step (it is the same formula, rescaled)."""
    from . import _compiled  # deferred: numba compiles (or loads from its cache) on first use

    pp = float(p @ p)
    if not (np.finfo(np.float64).tiny <= pp < np.inf) or _largest(Q0) > 1e140:
        return None
    _compiled.ready_kq()
    n, T, d = X.shape
    B, _, m = K0.shape
    lanes = _block_lanes(B, 1, _TWO_LANE_COSTS)   # (B = 16 on two threads: two blocks of 8)
    kernel = _compiled.descend_kq_wide if lanes == _compiled.WIDE else _compiled.descend_kq
    out = _compiled.empty_kq_records(len(run.record), B, d, m)   # the real starts only
    settings = _compiled.KQSettings(run.steps, run.lr, _loss_code(run.loss),
                                    bool(run.normalized), run.eps[0],
                                    _compiled.kernel_array(run.record, np.int64), pp,
                                    float(np.sqrt(pp)), _largest(p))
    q0 = np.einsum("bdm,d->bm", Q0, p)                         # q = Q^T p
    # every array as ready_kq() compiled for (a read-only one, e.g. a broadcast query, is another
    # numba type, compiled again without the SLP vectorizer)
    X, gamma, p, K0, Q0, q0 = (_compiled.kernel_array(a) for a in (X, gamma, p, K0, Q0, q0))
    _run_blocks(kernel, -(-B // lanes), X, gamma, p, K0, Q0, q0, settings, out)
    if np.any(out.marked):
        return None
    # the logits see (K, Q) through the prompt u = K Q^T p of the keys X
    _rerecord_risks(out.risk, lambda i: (X, gamma, out.K[i] @ (out.Q[i].T @ p)), run.loss)
    return Records((out.K, out.Q), out.risk)
