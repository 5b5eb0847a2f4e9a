"""The compiled gradient-descent engine on the prompt: one fused pass per step, SIMD over runs.

Imported only when :func:`maxmargin.train.gd` (or ``gd_stack``) first runs with the compiled
engine (numba compiles it on first use, about 10 s, and caches the machine code on disk).
The mathematics is that of :func:`maxmargin.train._descend_torch`, the pure-torch fallback that a
test compares against to 1e-12 relative:

* runs are processed in blocks of L starts of one instance, L = ``LANES`` (8) or, for B >= 16,
  ``WIDE`` (16: 1.2-1.4x faster per start, measured, but 0.6x for B <= 8, whose spare lanes
  it would compute for nothing), the block's prompts held as a (d, L) array, so every inner
  loop runs over the lanes and compiles to SIMD instructions;
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
WIDE = 16  # starts per block of descend_wide, for B >= 16 (_add_lane_sums16 spells 16 out)
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


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _add_lane_sums16(w, x, out, o, fresh):
    """:func:`_add_lane_sums` for 16 lanes (four AVX2 vectors)."""
    if fresh:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = 0.0
    else:
        a0, a1, a2, a3 = out[o], out[o + 1], out[o + 2], out[o + 3]
        a4, a5, a6, a7 = out[o + 4], out[o + 5], out[o + 6], out[o + 7]
        b0, b1, b2, b3 = out[o + 8], out[o + 9], out[o + 10], out[o + 11]
        b4, b5, b6, b7 = out[o + 12], out[o + 13], out[o + 14], out[o + 15]
    for j in range(w.shape[0]):
        k = w[j]
        q = j * 16
        a0 += k * x[q]
        a1 += k * x[q + 1]
        a2 += k * x[q + 2]
        a3 += k * x[q + 3]
        a4 += k * x[q + 4]
        a5 += k * x[q + 5]
        a6 += k * x[q + 6]
        a7 += k * x[q + 7]
        b0 += k * x[q + 8]
        b1 += k * x[q + 9]
        b2 += k * x[q + 10]
        b3 += k * x[q + 11]
        b4 += k * x[q + 12]
        b5 += k * x[q + 13]
        b6 += k * x[q + 14]
        b7 += k * x[q + 15]
    out[o], out[o + 1], out[o + 2], out[o + 3] = a0, a1, a2, a3
    out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a4, a5, a6, a7
    out[o + 8], out[o + 9], out[o + 10], out[o + 11] = b0, b1, b2, b3
    out[o + 12], out[o + 13], out[o + 14], out[o + 15] = b4, b5, b6, b7


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _logits16(Ki, p, s, T, d):
    """:func:`_logits` for 16 lanes."""
    for t in range(T):
        _add_lane_sums16(Ki[t], p, s, t * 16, True)


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _add_contraction16(Ki, c, g, T, d):
    """:func:`_add_contraction` for 16 lanes."""
    for e in range(d):
        _add_lane_sums16(Ki[:, e], c, g, e * 16, False)


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
    """Scratch of one block of L starts; lane l of coordinate e at e * L + l.

    The kernels called once per sequence (:func:`_attend`, :func:`_slopes`, :func:`_add_gradient`)
    take its arrays one by one: read through the tuple inside their loops, the step took 9% longer
    (measured against the single-function kernel, same process, same inputs).
    """

    p: np.ndarray        # (d * L,) iterates
    g: np.ndarray        # (d * L,) gradient
    s: np.ndarray        # (T * L,) attention of the current sequence
    c: np.ndarray        # (T * L,) its contribution to the gradient, per token
    shifted: np.ndarray  # (T * L,) scratch of _exp_lanes
    bits: np.ndarray     # (T * L,) scratch of _exp_lanes
    top: np.ndarray      # (L,) int64 most-attended token
    ref: np.ndarray      # (L,) its score
    offset: np.ndarray   # (L,) sum_t s_t (gamma_t - ref)
    z: np.ndarray        # (L,) margin ref + offset
    w: np.ndarray        # (L,) l'(z) / n
    norm: np.ndarray     # (L,) |g|^2, then |g| + eps (or a mark: see _guard_overflow)


@njit(cache=True, nogil=True, inline="always")
def _lanes(T, d, L):
    """Fresh scratch of one block of L lanes (see :class:`_Lanes`)."""
    return _Lanes(np.empty(d * L), np.empty(d * L), np.empty(T * L),
                  np.empty(T * L), np.empty(T * L), np.empty(T * L),
                  np.empty(L, dtype=np.int64), np.empty(L), np.empty(L),
                  np.empty(L), np.empty(L), np.empty(L))


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _attend(Ki, gi, p, s, shifted, bits, top, ref, offset, z, T, d, L):
    """Attention s (T * L,) of one sequence (keys Ki (T, d), scores gi (T,)) at the lanes'
    prompts p (d * L,), lane l of coordinate e at e * L + l; per lane (L,): the
    most-attended token top, its score ref, offset = sum_t s_t (gamma_t - ref) and the margin
    z = ref + offset (as :func:`maxmargin._kernels.margins`). ``shifted``, ``bits``: scratch."""
    if L == WIDE:                       # (L is a constant of each build: one branch is kept)
        _logits16(Ki, p, s, T, d)
    else:
        _logits(Ki, p, s, T, d)
    for l in range(L):              # shift by the largest logit
        best = s[l]
        at = 0
        for t in range(1, T):
            if s[t * L + l] > best:
                best = s[t * L + l]
                at = t
        top[l] = at
        for t in range(T):
            s[t * L + l] -= best
    _exp_lanes(s, T * L, shifted, bits)
    for l in range(L):              # normalize; margin relative to the top token
        total = 0.0
        for t in range(T):
            total += s[t * L + l]
        base = gi[top[l]]
        shift = 0.0
        inverse = 1.0 / total
        for t in range(T):
            q = t * L + l
            s[q] *= inverse
            shift += s[q] * (gi[t] - base)
        ref[l] = base
        offset[l] = shift
        z[l] = base + shift


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _slopes(loss, z, w, n, shifted, bits, L):
    """w = l'(z) / n, (L,), for the loss with code ``loss`` (the formulas of :mod:`.losses`);
    ``shifted`` and ``bits`` are scratch for :func:`_exp_lanes`."""
    if loss == LOGISTIC_CODE:           # -1 / (1 + exp(z))
        for l in range(L):
            w[l] = z[l]
        _exp_lanes(w, L, shifted, bits)
        for l in range(L):
            w[l] = -1.0 / (1.0 + w[l]) / n
    elif loss == EXPONENTIAL_CODE:      # -exp(-z)
        for l in range(L):
            w[l] = -z[l]
        _exp_lanes(w, L, shifted, bits)
        for l in range(L):
            w[l] = -w[l] / n
    else:                               # -1
        for l in range(L):
            w[l] = -1.0 / n


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _add_gradient(Ki, gi, s, ref, offset, w, c, g, T, d, L):
    """g += the sequence's gradient sum_t s_t (gamma_t - ref - offset) w k_t (lanes as in
    :func:`_attend`; ``c`` (T * L,) is scratch)."""
    for l in range(L):
        base, shift, weight = ref[l], offset[l], w[l]
        for t in range(T):
            q = t * L + l
            c[q] = (s[q] * ((gi[t] - base) - shift)) * weight
    if L == WIDE:
        _add_contraction16(Ki, c, g, T, d)
    else:
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
def _record_sequence(out, r, m, b0, lanes, i, tr, a, T, loss, n, L):
    """Sequence i's loss (added to the risk, / n) and attention on (and off) the tracked token
    ``tr``, at record r, for the first ``lanes`` lanes of the block."""
    s = a.s
    for l in range(lanes):
        out.risk[r, m, b0 + l] += _loss_value(loss, a.z[l]) / n
        out.on[r, m, b0 + l, i] = s[tr * L + l]
        rest = 0.0
        for t in range(T):
            if t != tr:
                rest += s[t * L + l]
        out.off[r, m, b0 + l, i] = rest


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _guard_overflow(Km, gm, a, k, m, b0, run, out, n, T, d, L):
    """a.norm = |g|^2 per lane. A lane whose |g|^2 overflows while g is finite is marked -2
    (:func:`_update` divides it by its largest entry); one whose g overflows gets the
    exponential loss's rescaled direction under normalized GD (marked -1), else its failure
    step in out.failed."""
    g, norm = a.g, a.norm
    for l in range(L):
        norm[l] = 0.0
    for e in range(d):
        for l in range(L):
            norm[l] += g[e * L + l] * g[e * L + l]
    for l in range(L):
        if np.isfinite(norm[l]):
            continue
        finite = True
        for e in range(d):
            finite = finite and np.isfinite(g[e * L + l])
        if finite:                          # only the squares overflow
            norm[l] = -2.0
        elif run.normalized and run.loss == EXPONENTIAL_CODE:   # the direction is finite: rescale
            gl, cl = _rescaled_gradient(Km, gm, a.p[l::L].copy(), n, T, d)
            top = np.max(np.abs(gl))        # gl / top: its squares neither over- nor underflow
            small = run.eps * np.exp(-cl)
            if top > 0:
                size = np.sqrt(np.sum((gl / top) ** 2)) + small / top
                for e in range(d):
                    g[e * L + l] = (gl[e] / top) / size
                norm[l] = -1.0              # marks a lane already normalized
            elif small > 0:                 # a zero gradient: no step
                for e in range(d):
                    g[e * L + l] = 0.0
                norm[l] = -1.0
            elif b0 + l < out.failed.shape[1] and out.failed[m, b0 + l] < 0:  # 0 / 0: refused
                out.failed[m, b0 + l] = k       # (as the torch loop; spare lanes write nothing)
        elif b0 + l < out.failed.shape[1] and out.failed[m, b0 + l] < 0:
            out.failed[m, b0 + l] = k


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _update(a, run, d, L):
    """p -= lr g, or lr g / (|g| + eps) under normalized GD: where g^2 underflows |g| is taken
    as c |g / c| with c the largest entry, where it overflows (marked -2) the step as
    lr (g / c) / (|g / c| + eps / c)."""
    p, g, norm = a.p, a.g, a.norm
    if not run.normalized:
        for e in range(d):
            for l in range(L):
                p[e * L + l] -= run.lr * g[e * L + l]
        return
    for l in range(L):
        if norm[l] == -2.0:                 # |g|^2 overflows: divide g by its largest entry
            scale = 0.0
            for e in range(d):
                scale = max(scale, abs(g[e * L + l]))
            acc = 0.0
            for e in range(d):
                g[e * L + l] /= scale
                acc += g[e * L + l] ** 2
            norm[l] = np.sqrt(acc) + run.eps / scale
            continue
        if norm[l] < 0.0:                   # the lane's g is already its direction
            norm[l] = 1.0
            continue
        if norm[l] < 1e-280:                # (1e-140)^2: rescale, squares underflow
            scale = 0.0
            for e in range(d):
                scale = max(scale, abs(g[e * L + l]))
            if scale > 0.0:
                acc = 0.0
                for e in range(d):
                    acc += (g[e * L + l] / scale) ** 2
                norm[l] = scale * np.sqrt(acc)
            else:
                norm[l] = 0.0
        else:
            norm[l] = np.sqrt(norm[l])
        norm[l] += run.eps
    for e in range(d):
        for l in range(L):
            p[e * L + l] -= run.lr * g[e * L + l] / norm[l]


def _build(L: int):
    """:func:`descend` for blocks of L starts (LANES or WIDE): L is a constant of the build (a
    closure over an int, which numba caches), and every helper is inlined into it, so that the
    loops over the lanes see a constant trip count, as with a module constant."""

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def descend(first, last_job, prob, P0, run, out):
        """Gradient descent (``run``: :class:`Settings`) on ``prob`` (:class:`Problem`) from the starts
        P0 (M, B', d), B' a multiple of L, for the blocks ``first`` to ``last_job - 1`` of L
        starts (block j: instance j // (B' / L)); writes ``out`` (:class:`Records`) for the
        first B starts of each instance (B = out.path.shape[2] <= B'; the others are spare lanes)."""
        M, n, T, d = prob.K.shape
        blocks = P0.shape[1] // L
        B = out.path.shape[2]
        for job in range(first, last_job):
            m = job // blocks
            b0 = (job % blocks) * L
            lanes = min(L, B - b0)
            Km, gm = prob.K[m], prob.gamma[m]
            a = _lanes(T, d, L)
            for e in range(d):
                for l in range(L):
                    a.p[e * L + l] = P0[m, b0 + l, e]
            r = 0
            for k in range(run.steps + 1):
                held = run.record[r] == k
                last = k == run.steps
                for e in range(d * L):
                    a.g[e] = 0.0
                for i in range(n):
                    _attend(Km[i], gm[i], a.p, a.s, a.shifted, a.bits, a.top, a.ref, a.offset, a.z, T, d,
                            L)
                    if held:
                        _record_sequence(out, r, m, b0, lanes, i, prob.tracked[m, i], a, T, run.loss, n,
                                         L)
                    if last:
                        for l in range(lanes):
                            for t in range(T):
                                out.final[m, b0 + l, i, t] = a.s[t * L + l]
                        continue
                    _slopes(run.loss, a.z, a.w, n, a.shifted, a.bits, L)
                    _add_gradient(Km[i], gm[i], a.s, a.ref, a.offset, a.w, a.c, a.g, T, d, L)
                if held:
                    for l in range(lanes):
                        for e in range(d):
                            out.path[r, m, b0 + l, e] = a.p[e * L + l]
                    r += 1
                if last:
                    break
                _guard_overflow(Km, gm, a, k, m, b0, run, out, n, T, d, L)
                _update(a, run, d, L)

    return descend


descend = _build(LANES)
descend_wide = _build(WIDE)


_READY = []


def ready() -> None:
    """Compile :func:`descend` and ``descend_wide`` (or load them from numba's cache) once per
    process, in the calling
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
        for kernel, lanes in ((descend, LANES), (descend_wide, WIDE)):
            kernel(0, 1, Problem(np.zeros((M, n, T, d)), np.zeros((M, n, T)),
                                 np.zeros((M, n), dtype=np.int64)),
                   np.zeros((M, lanes, d)), Settings(1, 0.1, LOGISTIC_CODE, True, 1e-12, record),
                   empty_records(len(record), M, lanes, n, T, d))
    finally:
        if before is None:
            del config.SLP_VECTORIZE
        else:
            config.SLP_VECTORIZE = before
    _READY.append(True)


# --- gd_KQ: GD on the factors (K, Q), shared prompt ---
#
# :func:`maxmargin.keyquery.gd_KQ` with one prompt p shared by every sequence and no penalty
# (the torch loop :func:`maxmargin.keyquery._descend_KQ` is the reference). With q = Q^T p (m,)
# and u = K q (d,) the logits are x_it^T u, so the risk's gradient in u is the gradient a (d,)
# that GD on a prompt computes (keys X, prompt u: :func:`_attend`, :func:`_slopes`,
# :func:`_add_gradient` above), dL/dW = a p^T, and
#     grad_K = a q^T,  grad_Q = p b^T with b = K^T a (m,),
# whose Frobenius norms are |a| |q| and |p| |b|. Q moves only along p: after k steps
# Q_k = Q_0 - p D_k^T, where D_k (m,) sums the steps' lr b / N (N = 1, or |p| |b| + eps when
# normalized), and q_k = Q_k^T p = q_0 - |p|^2 D_k. The state of a run is therefore (K, q, D):
# one step costs d m for u, the n T d core twice, d m for b, d m for K's update; Q itself is
# formed only at the recorded steps. Within a step both factors move along the gradients at the
# step's (K, q), as in the torch loop.
#
# The kernel computes only where float64 is safely in range: a lane whose gradient, weights or
# iterates are not finite, or whose squared sizes leave [KQ_TINY, KQ_LIMIT] (a normalized step
# of a gradient too small or too large to take its norm directly, the exponential loss's weights
# beyond float64 that the torch loop rescales), is marked in ``marked``, and every block stops
# (``halt``); the caller then runs the whole call again on the torch loop, which raises its
# error or takes its careful path. Nothing here validates its inputs.

KQ_LIMIT = 1e280    # a lane's squared sizes above this (or NaN) mark it: far below overflow
KQ_TINY = 1e-280    # a normalized step's squared norm below this (but > 0) marks the lane


class KQSettings(NamedTuple):
    """steps, lr, loss (a ``*_CODE``), normalized, eps, record (R,) as :class:`Settings`; pp =
    |p|^2, pnorm = |p|, pmax = max |p_e| of the shared prompt p."""

    steps: int
    lr: float
    loss: int
    normalized: bool
    eps: float
    record: np.ndarray
    pp: float
    pnorm: float
    pmax: float


class KQRecords(NamedTuple):
    """What :func:`descend_kq` writes for the B real starts: K, Q (R, B, d, m) the factors and
    risk (R, B) the risk at the recorded steps; marked (B,) 1 for a run that met a value out of
    the kernel's range (its records are then incomplete: the caller runs the torch loop); halt
    (1,) set to 1 with the first mark, after which every block stops at its next step."""

    K: np.ndarray
    Q: np.ndarray
    risk: np.ndarray
    marked: np.ndarray
    halt: np.ndarray


def empty_kq_records(R: int, B: int, d: int, m: int) -> KQRecords:
    """Output buffers of :func:`descend_kq` for R recorded steps of B starts."""
    return KQRecords(np.empty((R, B, d, m)), np.empty((R, B, d, m)), np.zeros((R, B)),
                     np.zeros(B, dtype=np.int64), np.zeros(1, dtype=np.int64))


@njit(cache=True, nogil=True, inline="always", fastmath=_FASTMATH)
def _kq_sum_squares(x, count, out, L):
    """out[l] = sum_c x[c * L + l]^2 over the count coordinates of the L lanes."""
    for l in range(L):
        out[l] = 0.0
    for c in range(count):
        for l in range(L):
            out[l] += x[c * L + l] * x[c * L + l]


@njit(cache=True, nogil=True, inline="always")
def _kq_norm(squares, x, count, l, L):
    """|x| of lane l from its sum of squares, or -1.0 where that sum is not safely in range
    (0 for an exactly zero vector)."""
    if KQ_TINY <= squares <= KQ_LIMIT:
        return np.sqrt(squares)
    if squares == 0.0:
        for c in range(count):
            if x[c * L + l] != 0.0:
                return -1.0
        return 0.0
    return -1.0


def _build_kq(L: int):
    """:func:`descend_kq` for blocks of L starts (LANES or WIDE), as :func:`_build`."""

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def descend_kq(first, last_job, X, gamma, p, K0, Q0, q0, run, out):
        """GD on (K, Q) (``run``: :class:`KQSettings`) for keys X (n, T, d), scores gamma (n, T),
        the shared prompt p (d,), from K0, Q0 (B, d, m) with q0 = Q0^T p (B, m), for the blocks
        ``first`` to ``last_job - 1`` of L starts; the spare lanes of the last block repeat its
        last start and write nothing. Writes ``out`` (:class:`KQRecords`)."""
        n, T, d = X.shape
        B, _, m = K0.shape
        lr = run.lr
        for job in range(first, last_job):
            if out.halt[0] != 0:
                return
            b0 = job * L
            lanes = min(L, B - b0)
            a = _lanes(T, d, L)            # a.p holds u = K q, a.g the gradient a in u
            K = np.empty(d * m * L)        # lane l of K[e, j] at (e m + j) L + l
            q = np.empty(m * L)
            moved = np.zeros(m * L)        # D: Q = Q0 - p D^T
            b = np.empty(m * L)
            na, nq, nb = np.empty(L), np.empty(L), np.empty(L)
            size = np.empty(L)
            step_K, step_Q = np.ones(L), np.ones(L)
            for l in range(L):
                s0 = min(b0 + l, B - 1)
                for e in range(d):
                    for j in range(m):
                        K[(e * m + j) * L + l] = K0[s0, e, j]
                for j in range(m):
                    q[j * L + l] = q0[s0, j]
            r = 0
            for k in range(run.steps + 1):
                held = run.record[r] == k
                last = k == run.steps
                u = a.p
                for e in range(d):                          # u = K q
                    for l in range(L):
                        u[e * L + l] = 0.0
                    for j in range(m):
                        for l in range(L):
                            u[e * L + l] += K[(e * m + j) * L + l] * q[j * L + l]
                _kq_sum_squares(u, d, size, L)
                for e in range(d * L):
                    a.g[e] = 0.0
                for i in range(n):
                    _attend(X[i], gamma[i], u, a.s, a.shifted, a.bits, a.top, a.ref, a.offset,
                            a.z, T, d, L)
                    if held:
                        for l in range(lanes):
                            out.risk[r, b0 + l] += _loss_value(run.loss, a.z[l]) / n
                    if last:
                        continue
                    _slopes(run.loss, a.z, a.w, n, a.shifted, a.bits, L)
                    for l in range(L):                      # weights beyond float64: marked
                        if not abs(a.w[l]) <= KQ_LIMIT:
                            size[l] = np.inf
                    _add_gradient(X[i], gamma[i], a.s, a.ref, a.offset, a.w, a.c, a.g, T, d, L)
                if held:
                    for l in range(lanes):
                        for e in range(d):
                            for j in range(m):
                                out.K[r, b0 + l, e, j] = K[(e * m + j) * L + l]
                                out.Q[r, b0 + l, e, j] = Q0[b0 + l, e, j] - p[e] * moved[j * L + l]
                    r += 1
                if not last:
                    for j in range(m):                      # b = K^T a (K of this step)
                        for l in range(L):
                            b[j * L + l] = 0.0
                        for e in range(d):
                            for l in range(L):
                                b[j * L + l] += K[(e * m + j) * L + l] * a.g[e * L + l]
                    _kq_sum_squares(a.g, d, na, L)
                    _kq_sum_squares(q, m, nq, L)
                    _kq_sum_squares(b, m, nb, L)
                    for l in range(L):
                        size[l] += na[l] + nb[l]
                        if run.normalized:                  # |a q^T| = |a| |q|, |p b^T| = |p| |b|
                            norm_a = _kq_norm(na[l], a.g, d, l, L)
                            norm_q = _kq_norm(nq[l], q, m, l, L)
                            norm_b = _kq_norm(nb[l], b, m, l, L)
                            if norm_a < 0.0 or norm_q < 0.0 or norm_b < 0.0:
                                size[l] = np.inf
                            step_K[l] = norm_a * norm_q + run.eps
                            step_Q[l] = run.pnorm * norm_b + run.eps
                    for e in range(d):                      # K -= lr a q^T / N_K (this step's q)
                        for j in range(m):
                            for l in range(L):
                                at = (e * m + j) * L + l
                                K[at] -= lr * ((a.g[e * L + l] * q[j * L + l]) / step_K[l])
                    for j in range(m):                      # Q -= lr p b^T / N_Q, as (q, D)
                        for l in range(L):
                            c = lr * (b[j * L + l] / step_Q[l])
                            moved[j * L + l] += c
                            q[j * L + l] -= run.pp * c
                    _kq_sum_squares(K, d * m, na, L)
                    _kq_sum_squares(q, m, nq, L)
                    _kq_sum_squares(moved, m, nb, L)
                    for l in range(L):
                        size[l] += na[l] + nq[l] + nb[l] * (run.pmax * run.pmax)
                for l in range(lanes):
                    if not size[l] <= KQ_LIMIT:
                        out.marked[b0 + l] = 1
                        out.halt[0] = 1             # (read by the other threads' blocks)
                if out.halt[0] != 0 or last:        # the caller runs the torch loop instead
                    break

    return descend_kq


descend_kq = _build_kq(LANES)
descend_kq_wide = _build_kq(WIDE)


_READY_KQ = []


def ready_kq() -> None:
    """Compile :func:`descend_kq` and ``descend_kq_wide`` (or load them from numba's cache) once
    per process, with LLVM's SLP vectorizer on, as :func:`ready`."""
    if _READY_KQ:
        return
    from numba.core import config

    before = getattr(config, "SLP_VECTORIZE", None)
    config.SLP_VECTORIZE = 1
    try:
        n, T, d, m = 1, 2, 1, 1
        record = np.array([0, 1])
        for kernel, lanes in ((descend_kq, LANES), (descend_kq_wide, WIDE)):
            kernel(0, 1, np.zeros((n, T, d)), np.zeros((n, T)), np.ones(d),
                   np.zeros((lanes, d, m)), np.zeros((lanes, d, m)), np.zeros((lanes, m)),
                   KQSettings(1, 0.1, LOGISTIC_CODE, True, 1e-12, record, 1.0, 1.0, 1.0),
                   empty_kq_records(len(record), lanes, d, m))
    finally:
        if before is None:
            del config.SLP_VECTORIZE
        else:
            config.SLP_VECTORIZE = before
    _READY_KQ.append(True)
