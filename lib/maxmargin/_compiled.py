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

import numpy as np
from numba import njit

LANES = 8  # starts per block (two AVX2 vectors of float64); _logits and _add_contraction spell 8 out
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


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _logits(Ki, p, s, T, d):
    """s[t * 8 + l] = sum_e Ki[t, e] p[e * 8 + l] for the 8 lanes l, keys Ki (T, d), prompts p
    (d * 8,) (flat arrays: the compiler then knows that the lanes are adjacent).

    The lanes are spelled out as scalars: with no store inside the loop over e the compiler can
    keep them in two SIMD registers (it cannot prove that arrays do not alias).
    """
    for t in range(T):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        for e in range(d):
            k = Ki[t, e]
            q = e * 8
            a0 += k * p[q]
            a1 += k * p[q + 1]
            a2 += k * p[q + 2]
            a3 += k * p[q + 3]
            a4 += k * p[q + 4]
            a5 += k * p[q + 5]
            a6 += k * p[q + 6]
            a7 += k * p[q + 7]
        q = t * 8
        s[q] = a0
        s[q + 1] = a1
        s[q + 2] = a2
        s[q + 3] = a3
        s[q + 4] = a4
        s[q + 5] = a5
        s[q + 6] = a6
        s[q + 7] = a7


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _add_contraction(Ki, c, g, T, d):
    """g[e * 8 + l] += sum_t Ki[t, e] c[t * 8 + l] for the 8 lanes l (as in :func:`_logits`)."""
    for e in range(d):
        o = e * 8
        a0, a1, a2, a3 = g[o], g[o + 1], g[o + 2], g[o + 3]
        a4, a5, a6, a7 = g[o + 4], g[o + 5], g[o + 6], g[o + 7]
        for t in range(T):
            k = Ki[t, e]
            q = t * 8
            a0 += k * c[q]
            a1 += k * c[q + 1]
            a2 += k * c[q + 2]
            a3 += k * c[q + 3]
            a4 += k * c[q + 4]
            a5 += k * c[q + 5]
            a6 += k * c[q + 6]
            a7 += k * c[q + 7]
        g[o], g[o + 1], g[o + 2], g[o + 3] = a0, a1, a2, a3
        g[o + 4], g[o + 5], g[o + 6], g[o + 7] = a4, a5, a6, a7


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


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def descend(first, last_job, K, gamma, P0, tracked, steps, lr, loss, normalized, eps, record,
            path, margins, on, off, final, failed):
    """Gradient descent from the starts ``P0`` (M, B, d), B a multiple of LANES, for the blocks
    ``first`` to ``last_job - 1`` of LANES starts (block j: instance j // (B / LANES)).

    K (M, n, T, d) keys, gamma (M, n, T) scores, tracked (M, n) int64 tokens, loss one of
    LOGISTIC_CODE, EXPONENTIAL_CODE, CORRELATION_CODE; ``record`` (R,) increasing step indices, the last one
    ``steps``. Writes, for each recorded step r: path (R, M, B, d), margins, on, off
    (R, M, B, n); final (M, B, n, T) attention at the last iterate; failed (M, B) the first step
    whose plain-GD gradient overflowed (-1 if none).
    """
    M, n, T, d = K.shape
    B = P0.shape[1]
    blocks = B // LANES
    for job in range(first, last_job):
        m = job // blocks
        b0 = (job % blocks) * LANES
        p = np.empty(d * LANES)   # lane l of coordinate e at e * LANES + l
        g = np.empty(d * LANES)
        s = np.empty(T * LANES)
        c = np.empty(T * LANES)
        scratch = np.empty(T * LANES)
        scratch2 = np.empty(T * LANES)
        top = np.empty(LANES, dtype=np.int64)
        ref = np.empty(LANES)
        offset = np.empty(LANES)
        z = np.empty(LANES)
        w = np.empty(LANES)
        norm = np.empty(LANES)
        for e in range(d):
            for l in range(LANES):
                p[e * LANES + l] = P0[m, b0 + l, e]
        r = 0
        for k in range(steps + 1):
            held = record[r] == k
            last = k == steps
            for e in range(d):
                for l in range(LANES):
                    g[e * LANES + l] = 0.0
            for i in range(n):
                _logits(K[m, i], p, s, T, d)       # logits k_it^T p
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
                _exp_lanes(s, T * LANES, scratch, scratch2)
                for l in range(LANES):              # normalize; margin relative to the top token
                    total = 0.0
                    for t in range(T):
                        total += s[t * LANES + l]
                    base = gamma[m, i, top[l]]
                    shift = 0.0
                    inverse = 1.0 / total
                    for t in range(T):
                        q = t * LANES + l
                        s[q] *= inverse
                        shift += s[q] * (gamma[m, i, t] - base)
                    ref[l] = base
                    offset[l] = shift
                    z[l] = base + shift
                if held:
                    tr = tracked[m, i]
                    for l in range(LANES):
                        margins[r, m, b0 + l, i] = z[l]
                        on[r, m, b0 + l, i] = s[tr * LANES + l]
                        rest = 0.0
                        for t in range(T):
                            if t != tr:
                                rest += s[t * LANES + l]
                        off[r, m, b0 + l, i] = rest
                if last:
                    for l in range(LANES):
                        for t in range(T):
                            final[m, b0 + l, i, t] = s[t * LANES + l]
                    continue
                if loss == LOGISTIC_CODE:               # l'(z) / n
                    for l in range(LANES):
                        w[l] = z[l]
                    _exp_lanes(w, LANES, scratch, scratch2)
                    for l in range(LANES):
                        w[l] = -1.0 / (1.0 + w[l]) / n
                elif loss == EXPONENTIAL_CODE:
                    for l in range(LANES):
                        w[l] = -z[l]
                    _exp_lanes(w, LANES, scratch, scratch2)
                    for l in range(LANES):
                        w[l] = -w[l] / n
                else:
                    for l in range(LANES):
                        w[l] = -1.0 / n
                for l in range(LANES):
                    base, shift, weight = ref[l], offset[l], w[l]
                    for t in range(T):
                        q = t * LANES + l
                        c[q] = (s[q] * ((gamma[m, i, t] - base) - shift)) * weight
                _add_contraction(K[m, i], c, g, T, d)   # gradient += sum_t c_it k_it
            if held:
                for l in range(LANES):
                    for e in range(d):
                        path[r, m, b0 + l, e] = p[e * LANES + l]
                r += 1
            if last:
                break
            for l in range(LANES):
                norm[l] = 0.0
            for e in range(d):
                for l in range(LANES):
                    norm[l] += g[e * LANES + l] * g[e * LANES + l]
            for l in range(LANES):
                if np.isfinite(norm[l]):
                    continue
                if normalized and loss == EXPONENTIAL_CODE:   # the direction is finite: rescale
                    gl, cl = _rescaled_gradient(K[m], gamma[m], p[l::LANES].copy(), n, T, d)
                    size = np.sqrt(np.sum(gl * gl)) + eps * np.exp(-cl)
                    for e in range(d):
                        g[e * LANES + l] = gl[e] / size
                    norm[l] = -1.0                  # marks a lane already normalized
                elif failed[m, b0 + l] < 0:
                    failed[m, b0 + l] = k
            if not normalized:
                for e in range(d):
                    for l in range(LANES):
                        p[e * LANES + l] -= lr * g[e * LANES + l]
                continue
            for l in range(LANES):
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
                norm[l] += eps
            for e in range(d):
                for l in range(LANES):
                    p[e * LANES + l] -= lr * g[e * LANES + l] / norm[l]


_READY = []


def ready() -> None:
    """Compile :func:`descend` (or load it from numba's cache) once per process, in the calling
    thread, with LLVM's SLP vectorizer on: numba leaves it off by default, and without it the
    spelled-out lanes of :func:`_logits` and :func:`_add_contraction` stay scalar (3x slower).
    """
    if _READY:
        return
    from numba.core import config

    before = config.SLP_VECTORIZE
    config.SLP_VECTORIZE = 1
    try:
        M, n, T, d, R = 1, 1, 2, 1, 2
        descend(0, 1, np.zeros((M, n, T, d)), np.zeros((M, n, T)), np.zeros((M, LANES, d)),
                np.zeros((M, n), dtype=np.int64), 1, 0.1, LOGISTIC_CODE, True, 1e-12,
                np.array([0, 1]), np.empty((R, M, LANES, d)), np.empty((R, M, LANES, n)),
                np.empty((R, M, LANES, n)), np.empty((R, M, LANES, n)),
                np.empty((M, LANES, n, T)), np.full((M, LANES), -1, dtype=np.int64))
    finally:
        config.SLP_VECTORIZE = before
    _READY.append(True)
