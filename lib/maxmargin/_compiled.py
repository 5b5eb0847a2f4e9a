"""The compiled gradient-descent engine on the prompt: one fused pass per step, SIMD over runs.

Imported only when :func:`maxmargin.train.gd` (or ``gd_stack``) first runs with the compiled
engine (numba compiles it on first use, about 10 s, and caches the machine code on disk).
The mathematics is that of :func:`maxmargin.train._descend_torch`, the pure-torch fallback that a
test compares against to 1e-12 relative:

* runs are processed in blocks of ``LANES`` starts of one instance, the block's prompts held as a
  (d, LANES) array, so every inner loop runs over the lanes and compiles to SIMD instructions;
* per sequence, one pass computes the logits, the softmax (shifted by the largest logit), the
  margin relative to the most-attended token (as :func:`maxmargin._kernels.margins`), the loss
  derivative, and adds the sequence's contribution to the gradient;
* the exponential is :func:`_exp_lanes`, a vectorizable exp (range reduction by ln 2, a degree-13
  polynomial, the power of two assembled from its bits) accurate to a few ulp over the whole
  float64 range, subnormal results included, since libm's scalar exp would dominate the step;
* the kernel releases the GIL, and the caller runs disjoint ranges of blocks on its threads
  (a ``parallel=True`` kernel took several times longer to compile).

Nothing here validates its inputs (see :mod:`._checks`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

LANES = 8  # starts per block (two AVX2 vectors of float64); _add_lane_sums spells 8 out
LOGISTIC_CODE, EXPONENTIAL_CODE, CORRELATION_CODE = 0, 1, 2  # train._COMPILED_LOSSES, in order

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01   # ln 2 split so that k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0          # 1.5 * 2^52: x + _SHIFTER rounds x to an integer
_SHIFTER_BITS = np.array([_SHIFTER]).view(np.int64)[0]
_FASTMATH = {"contract"}               # fused multiply-add only: no reassociation, inf/nan kept


@njit(cache=True, fastmath=_FASTMATH)
def _exp_lanes(x, size, shifted, bits):
    """exp of ``x[:size]`` in place; ``shifted`` and ``bits`` are (size,) float64 scratch."""
    for j in range(size):
        a = min(max(x[j], -1100.0), 710.0)       # exp is 0 below, inf above
        t = a * _LOG2E + _SHIFTER
        k = t - _SHIFTER                          # round(a / ln 2)
        r = (a - k * _LN2_HI) - k * _LN2_LO       # |r| <= ln(2) / 2
        poly = 1.0 / 6227020800.0
        poly = poly * r + 1.0 / 479001600.0
        poly = poly * r + 1.0 / 39916800.0
        poly = poly * r + 1.0 / 3628800.0
        poly = poly * r + 1.0 / 362880.0
        poly = poly * r + 1.0 / 40320.0
        poly = poly * r + 1.0 / 5040.0
        poly = poly * r + 1.0 / 720.0
        poly = poly * r + 1.0 / 120.0
        poly = poly * r + 1.0 / 24.0
        poly = poly * r + 1.0 / 6.0
        poly = poly * r + 0.5
        poly = poly * r + 1.0
        x[j] = poly * r + 1.0
        half = (k * 0.5 - 0.25) + _SHIFTER       # floor(k / 2), rounded in the float domain
        shifted[j] = half
        bits[j] = (k - (half - _SHIFTER)) + _SHIFTER
    ints = shifted.view(np.int64)
    scale = bits.view(np.int64)
    for j in range(size):                         # 2^k = 2^k1 2^k2, both normal, k1 = floor(k/2)
        ints[j] = (ints[j] - _SHIFTER_BITS + 1023) << 52
        scale[j] = (scale[j] - _SHIFTER_BITS + 1023) << 52
    for j in range(size):                         # one rounding, also into the subnormals
        x[j] = (x[j] * shifted[j]) * bits[j]


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _add_lane_sums(w, x, out, o, fresh):
    """out[o + l] += sum_j w[j] x[j * 8 + l] for the 8 lanes l (= when ``fresh``); w (J,) may be
    a strided view.

    The lanes are spelled out as scalars: with no store inside the loop over j the compiler can
    keep them in two SIMD registers (it cannot prove that arrays do not alias).
    """
    if fresh:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    else:
        a0, a1, a2, a3 = out[o], out[o + 1], out[o + 2], out[o + 3]
        a4, a5, a6, a7 = out[o + 4], out[o + 5], out[o + 6], out[o + 7]
    for j in range(w.shape[0]):
        k = w[j]
        q = j * 8
        a0 += k * x[q]
        a1 += k * x[q + 1]
        a2 += k * x[q + 2]
        a3 += k * x[q + 3]
        a4 += k * x[q + 4]
        a5 += k * x[q + 5]
        a6 += k * x[q + 6]
        a7 += k * x[q + 7]
    out[o], out[o + 1], out[o + 2], out[o + 3] = a0, a1, a2, a3
    out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a4, a5, a6, a7


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _logits(Ki, p, s, T, d):
    """s[t * 8 + l] = sum_e Ki[t, e] p[e * 8 + l] for the 8 lanes l, keys Ki (T, d), prompts p
    (d * 8,) (flat arrays: the compiler then knows that the lanes are adjacent)."""
    for t in range(T):
        _add_lane_sums(Ki[t], p, s, t * 8, True)


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _add_contraction(Ki, c, g, T, d):
    """g[e * 8 + l] += sum_t Ki[t, e] c[t * 8 + l] for the 8 lanes l (as in :func:`_logits`)."""
    for e in range(d):
        _add_lane_sums(Ki[:, e], c, g, e * 8, False)


@njit(cache=True, fastmath=_FASTMATH)
def _rescaled_gradient(K, gamma, p, n, T, d):
    """The exponential loss's risk gradient at one prompt ``p`` (d,) divided by exp(c), and c.

    c is the largest -z_i over the sequences, so the largest weight is 1/n: this is the gradient's
    direction when the gradient itself overflows float64 (scalar code; called only then).
    """
    z = np.empty(n)
    s = np.empty((n, T))
    for i in range(n):
        top = 0
        for t in range(T):
            acc = 0.0
            for e in range(d):
                acc += K[i, t, e] * p[e]
            s[i, t] = acc
            if acc > s[i, top]:
                top = t
        shift = s[i, top]
        total = 0.0
        for t in range(T):
            s[i, t] = np.exp(s[i, t] - shift)
            total += s[i, t]
        offset = 0.0
        for t in range(T):
            s[i, t] /= total
            offset += s[i, t] * (gamma[i, t] - gamma[i, top])
        z[i] = gamma[i, top] + offset
        for t in range(T):
            s[i, t] *= (gamma[i, t] - gamma[i, top]) - offset
    c = -z.min()
    g = np.zeros(d)
    for i in range(n):
        w = -np.exp(-z[i] - c) / n
        for t in range(T):
            for e in range(d):
                g[e] += K[i, t, e] * (w * s[i, t])
    return g, c


class Problem(NamedTuple):
    """The validated inputs of :func:`descend`: K (M, n, T, d) keys, gamma (M, n, T) scores,
    tracked (M, n) int64 token per sequence whose attention is recorded."""

    K: np.ndarray
    gamma: np.ndarray
    tracked: np.ndarray


class Settings(NamedTuple):
    """steps (the number of updates), lr, loss (one of the ``*_CODE``), normalized, eps, and
    record (R,): the increasing step indices recorded, the last one ``steps``."""

    steps: int
    lr: float
    loss: int
    normalized: bool
    eps: float
    record: np.ndarray


class Records(NamedTuple):
    """What :func:`descend` writes, for each recorded step r: path (R, M, B, d) iterates, risk
    (R, M, B) (the mean loss over the sequences, as the loss's numpy ``value``), on, off
    (R, M, B, n) (attention on the tracked token and on all others, summed); final (M, B, n, T)
    attention at the last iterate; failed (M, B) the first step whose plain-GD gradient
    overflowed (-1 if none). B is the number of real starts: the spare lanes of the last block
    write nothing, so no record is larger than the result."""

    path: np.ndarray
    risk: np.ndarray
    on: np.ndarray
    off: np.ndarray
    final: np.ndarray
    failed: np.ndarray


def empty_records(R: int, M: int, B: int, n: int, T: int, d: int) -> Records:
    """Output buffers for R recorded steps of M instances x B starts."""
    return Records(np.empty((R, M, B, d)), np.zeros((R, M, B)), np.empty((R, M, B, n)),
                   np.empty((R, M, B, n)), np.empty((M, B, n, T)),
                   np.full((M, B), -1, dtype=np.int64))


class _Lanes(NamedTuple):
    """Scratch of one block of LANES starts; lane l of coordinate e at e * LANES + l.

    The kernels called once per sequence (:func:`_attend`, :func:`_slopes`, :func:`_add_gradient`)
    take its arrays one by one: read through the tuple inside their loops, the step took 9% longer
    (measured against the single-function kernel, same process, same inputs).
    """

    p: np.ndarray        # (d * LANES,) iterates
    g: np.ndarray        # (d * LANES,) gradient
    s: np.ndarray        # (T * LANES,) attention of the current sequence
    c: np.ndarray        # (T * LANES,) its contribution to the gradient, per token
    shifted: np.ndarray  # (T * LANES,) scratch of _exp_lanes
    bits: np.ndarray     # (T * LANES,) scratch of _exp_lanes
    top: np.ndarray      # (LANES,) int64 most-attended token
    ref: np.ndarray      # (LANES,) its score
    offset: np.ndarray   # (LANES,) sum_t s_t (gamma_t - ref)
    z: np.ndarray        # (LANES,) margin ref + offset
    w: np.ndarray        # (LANES,) l'(z) / n
    norm: np.ndarray     # (LANES,) |g|^2, then |g| + eps (or a mark: see _guard_overflow)


@njit(cache=True, nogil=True, inline="always")
def _lanes(T, d):
    """Fresh scratch of one block (see :class:`_Lanes`)."""
    return _Lanes(np.empty(d * LANES), np.empty(d * LANES), np.empty(T * LANES),
                  np.empty(T * LANES), np.empty(T * LANES), np.empty(T * LANES),
                  np.empty(LANES, dtype=np.int64), np.empty(LANES), np.empty(LANES),
                  np.empty(LANES), np.empty(LANES), np.empty(LANES))


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _attend(Ki, gi, p, s, shifted, bits, top, ref, offset, z, T, d):
    """Attention s (T * LANES,) of one sequence (keys Ki (T, d), scores gi (T,)) at the lanes'
    prompts p (d * LANES,), lane l of coordinate e at e * LANES + l; per lane (LANES,): the
    most-attended token top, its score ref, offset = sum_t s_t (gamma_t - ref) and the margin
    z = ref + offset (as :func:`maxmargin._kernels.margins`). ``shifted``, ``bits``: scratch."""
    _logits(Ki, p, s, T, d)
    for l in range(LANES):              # shift by the largest logit
        best = s[l]
        at = 0
        for t in range(1, T):
            if s[t * LANES + l] > best:
                best = s[t * LANES + l]
                at = t
        top[l] = at
        for t in range(T):
            s[t * LANES + l] -= best
    _exp_lanes(s, T * LANES, shifted, bits)
    for l in range(LANES):              # normalize; margin relative to the top token
        total = 0.0
        for t in range(T):
            total += s[t * LANES + l]
        base = gi[top[l]]
        shift = 0.0
        inverse = 1.0 / total
        for t in range(T):
            q = t * LANES + l
            s[q] *= inverse
            shift += s[q] * (gi[t] - base)
        ref[l] = base
        offset[l] = shift
        z[l] = base + shift


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _slopes(loss, z, w, n, shifted, bits):
    """w = l'(z) / n, (LANES,), for the loss with code ``loss`` (the formulas of :mod:`.losses`);
    ``shifted`` and ``bits`` are scratch for :func:`_exp_lanes`."""
    if loss == LOGISTIC_CODE:           # -1 / (1 + exp(z))
        for l in range(LANES):
            w[l] = z[l]
        _exp_lanes(w, LANES, shifted, bits)
        for l in range(LANES):
            w[l] = -1.0 / (1.0 + w[l]) / n
    elif loss == EXPONENTIAL_CODE:      # -exp(-z)
        for l in range(LANES):
            w[l] = -z[l]
        _exp_lanes(w, LANES, shifted, bits)
        for l in range(LANES):
            w[l] = -w[l] / n
    else:                               # -1
        for l in range(LANES):
            w[l] = -1.0 / n


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _add_gradient(Ki, gi, s, ref, offset, w, c, g, T, d):
    """g += the sequence's gradient sum_t s_t (gamma_t - ref - offset) w k_t (lanes as in
    :func:`_attend`; ``c`` (T * LANES,) is scratch)."""
    for l in range(LANES):
        base, shift, weight = ref[l], offset[l], w[l]
        for t in range(T):
            q = t * LANES + l
            c[q] = (s[q] * ((gi[t] - base) - shift)) * weight
    _add_contraction(Ki, c, g, T, d)


@njit(cache=True, nogil=True, inline="always")
def _loss_value(loss, z):
    """l(z) of the built-in loss with code ``loss``, as :mod:`.losses` computes it with numpy
    (the logistic loss as np.logaddexp(0, -z))."""
    if loss == LOGISTIC_CODE:
        if z == 0.0:
            return np.log(2.0)
        if z > 0.0:
            return np.log1p(np.exp(-z))
        if z < 0.0:
            return -z + np.log1p(np.exp(z))
        return z                            # NaN
    if loss == EXPONENTIAL_CODE:
        return np.exp(-z)
    return -z


@njit(cache=True, nogil=True, inline="always")
def _record_sequence(out, r, m, b0, lanes, i, tr, a, T, loss, n):
    """Sequence i's loss (added to the risk, / n) and attention on (and off) the tracked token
    ``tr``, at record r, for the first ``lanes`` lanes of the block."""
    s = a.s
    for l in range(lanes):
        out.risk[r, m, b0 + l] += _loss_value(loss, a.z[l]) / n
        out.on[r, m, b0 + l, i] = s[tr * LANES + l]
        rest = 0.0
        for t in range(T):
            if t != tr:
                rest += s[t * LANES + l]
        out.off[r, m, b0 + l, i] = rest


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _guard_overflow(Km, gm, a, k, m, b0, run, out, n, T, d):
    """a.norm = |g|^2 per lane. A lane whose |g|^2 overflows while g is finite is marked -2
    (:func:`_update` divides it by its largest entry); one whose g overflows gets the
    exponential loss's rescaled direction under normalized GD (marked -1), else its failure
    step in out.failed."""
    g, norm = a.g, a.norm
    for l in range(LANES):
        norm[l] = 0.0
    for e in range(d):
        for l in range(LANES):
            norm[l] += g[e * LANES + l] * g[e * LANES + l]
    for l in range(LANES):
        if np.isfinite(norm[l]):
            continue
        finite = True
        for e in range(d):
            finite = finite and np.isfinite(g[e * LANES + l])
        if finite:                          # only the squares overflow
            norm[l] = -2.0
        elif run.normalized and run.loss == EXPONENTIAL_CODE:   # the direction is finite: rescale
            gl, cl = _rescaled_gradient(Km, gm, a.p[l::LANES].copy(), n, T, d)
            top = np.max(np.abs(gl))        # gl / top: its squares neither over- nor underflow
            small = run.eps * np.exp(-cl)
            if top > 0:
                size = np.sqrt(np.sum((gl / top) ** 2)) + small / top
                for e in range(d):
                    g[e * LANES + l] = (gl[e] / top) / size
                norm[l] = -1.0              # marks a lane already normalized
            elif small > 0:                 # a zero gradient: no step
                for e in range(d):
                    g[e * LANES + l] = 0.0
                norm[l] = -1.0
            elif b0 + l < out.failed.shape[1] and out.failed[m, b0 + l] < 0:  # 0 / 0: refused
                out.failed[m, b0 + l] = k       # (as the torch loop; spare lanes write nothing)
        elif b0 + l < out.failed.shape[1] and out.failed[m, b0 + l] < 0:
            out.failed[m, b0 + l] = k


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _update(a, run, d):
    """p -= lr g, or lr g / (|g| + eps) under normalized GD: where g^2 underflows |g| is taken
    as c |g / c| with c the largest entry, where it overflows (marked -2) the step as
    lr (g / c) / (|g / c| + eps / c)."""
    p, g, norm = a.p, a.g, a.norm
    if not run.normalized:
        for e in range(d):
            for l in range(LANES):
                p[e * LANES + l] -= run.lr * g[e * LANES + l]
        return
    for l in range(LANES):
        if norm[l] == -2.0:                 # |g|^2 overflows: divide g by its largest entry
            scale = 0.0
            for e in range(d):
                scale = max(scale, abs(g[e * LANES + l]))
            acc = 0.0
            for e in range(d):
                g[e * LANES + l] /= scale
                acc += g[e * LANES + l] ** 2
            norm[l] = np.sqrt(acc) + run.eps / scale
            continue
        if norm[l] < 0.0:                   # the lane's g is already its direction
            norm[l] = 1.0
            continue
        if norm[l] < 1e-280:                # (1e-140)^2: rescale, squares underflow
            scale = 0.0
            for e in range(d):
                scale = max(scale, abs(g[e * LANES + l]))
            if scale > 0.0:
                acc = 0.0
                for e in range(d):
                    acc += (g[e * LANES + l] / scale) ** 2
                norm[l] = scale * np.sqrt(acc)
            else:
                norm[l] = 0.0
        else:
            norm[l] = np.sqrt(norm[l])
        norm[l] += run.eps
    for e in range(d):
        for l in range(LANES):
            p[e * LANES + l] -= run.lr * g[e * LANES + l] / norm[l]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def descend(first, last_job, prob, P0, run, out):
    """Gradient descent (``run``: :class:`Settings`) on ``prob`` (:class:`Problem`) from the starts
    P0 (M, B', d), B' a multiple of LANES, for the blocks ``first`` to ``last_job - 1`` of LANES
    starts (block j: instance j // (B' / LANES)); writes ``out`` (:class:`Records`) for the
    first B starts of each instance (B = out.path.shape[2] <= B'; the others are spare lanes)."""
    M, n, T, d = prob.K.shape
    blocks = P0.shape[1] // LANES
    B = out.path.shape[2]
    for job in range(first, last_job):
        m = job // blocks
        b0 = (job % blocks) * LANES
        lanes = min(LANES, B - b0)
        Km, gm = prob.K[m], prob.gamma[m]
        a = _lanes(T, d)
        for e in range(d):
            for l in range(LANES):
                a.p[e * LANES + l] = P0[m, b0 + l, e]
        r = 0
        for k in range(run.steps + 1):
            held = run.record[r] == k
            last = k == run.steps
            for e in range(d * LANES):
                a.g[e] = 0.0
            for i in range(n):
                _attend(Km[i], gm[i], a.p, a.s, a.shifted, a.bits, a.top, a.ref, a.offset, a.z, T, d)
                if held:
                    _record_sequence(out, r, m, b0, lanes, i, prob.tracked[m, i], a, T, run.loss, n)
                if last:
                    for l in range(lanes):
                        for t in range(T):
                            out.final[m, b0 + l, i, t] = a.s[t * LANES + l]
                    continue
                _slopes(run.loss, a.z, a.w, n, a.shifted, a.bits)
                _add_gradient(Km[i], gm[i], a.s, a.ref, a.offset, a.w, a.c, a.g, T, d)
            if held:
                for l in range(lanes):
                    for e in range(d):
                        out.path[r, m, b0 + l, e] = a.p[e * LANES + l]
                r += 1
            if last:
                break
            _guard_overflow(Km, gm, a, k, m, b0, run, out, n, T, d)
            _update(a, run, d)


_READY = []


def ready() -> None:
    """Compile :func:`descend` (or load it from numba's cache) once per process, in the calling
    thread, with LLVM's SLP vectorizer on: numba leaves it off by default, and without it the
    spelled-out lanes of :func:`_logits` and :func:`_add_contraction` stay scalar (3x slower).
    """
    if _READY:
        return
    from numba.core import config

    # numba's internal switch (0.60-0.68 have it); a numba without it compiles as it does
    before = getattr(config, "SLP_VECTORIZE", None)
    config.SLP_VECTORIZE = 1
    try:
        M, n, T, d = 1, 1, 2, 1
        record = np.array([0, 1])
        descend(0, 1, Problem(np.zeros((M, n, T, d)), np.zeros((M, n, T)),
                              np.zeros((M, n), dtype=np.int64)),
                np.zeros((M, LANES, d)), Settings(1, 0.1, LOGISTIC_CODE, True, 1e-12, record),
                empty_records(len(record), M, LANES, n, T, d))
    finally:
        if before is None:
            del config.SLP_VECTORIZE
        else:
            config.SLP_VECTORIZE = before
    _READY.append(True)
