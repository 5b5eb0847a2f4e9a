"""The compiled gradient-descent engine on the prompt: one fused pass per step, SIMD over runs.

Imported only when ``mm.gd``, ``gd_stack``, ``gd_W`` (shared query), ``gd_joint`` or ``gd_KQ``
(shared query, reg 0) first runs with the compiled engine (numba compiles it on first use,
about 10 s, and caches the machine code on disk); sections: GD on p, gd_joint, gd_KQ.
The mathematics is that of :func:`maxmargin._torchdescent.descend` (the torch loop), the
pure-torch fallback that a test compares against to 1e-12 relative:

* runs are processed in blocks of L starts of one instance, L = ``LANES`` (8), ``WIDE`` (16:
  1.2-1.4x faster per start than 8, measured, but 0.6x for B <= 8, whose spare lanes it would
  compute for nothing) or, for GD on p, ``WIDER`` (32: 1.1-1.3x faster per start than 16), as
  ``_blocks._block_lanes`` chooses; the block's prompts held as a (d, L) array, so every inner
  loop runs over the lanes and compiles to SIMD instructions;
* per sequence, one pass computes the logits, the softmax (shifted by the largest logit), the
  margin relative to the most-attended token (as :func:`maxmargin._kernels.margins`), the loss
  derivative, and adds the sequence's contribution to the gradient;
* the exponential is :func:`_exp_lanes`, a vectorizable exp (range reduction by ln 2 / 32, a
  table, a degree-6 polynomial, the power of two assembled from its bits) within 1.1 ulp over the
  whole float64 range, subnormal results included, since libm's scalar exp would dominate the step;
* the kernel releases the GIL, and the caller runs disjoint ranges of blocks on its threads
  (a ``parallel=True`` kernel took several times longer to compile).

Nothing here validates its inputs (see :mod:`._checks`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._blocks import _COMPILED_LOSSES
from .losses import CORRELATION, EXPONENTIAL, LOGISTIC

LANES = 8  # starts per block (two AVX2 vectors of float64); _add_lane_sums spells 8 out
WIDE = 16  # starts per block of descend_wide (_add_lane_sums16 spells 16 out)
WIDER = 32  # starts per block of descend_wider, GD on p only (_add_lane_sums32 spells 32 out)
# the codes of the built-in losses, read from the one table (_blocks._COMPILED_LOSSES)
LOGISTIC_CODE, EXPONENTIAL_CODE, CORRELATION_CODE = (
    _COMPILED_LOSSES.index(loss) for loss in (LOGISTIC, EXPONENTIAL, CORRELATION))

# exp(a) = 2^(k / 32) exp(r): k = round(32 a / ln 2), |r| <= ln 2 / 64, 2^(j / 32) from a table
_TABLE = np.array([float.fromhex(h) for h in (
    "0x1.0000000000000p+0", "0x1.059b0d3158574p+0", "0x1.0b5586cf9890fp+0", "0x1.11301d0125b51p+0",
    "0x1.172b83c7d517bp+0", "0x1.1d4873168b9aap+0", "0x1.2387a6e756238p+0", "0x1.29e9df51fdee1p+0",
    "0x1.306fe0a31b715p+0", "0x1.371a7373aa9cbp+0", "0x1.3dea64c123422p+0", "0x1.44e086061892dp+0",
    "0x1.4bfdad5362a27p+0", "0x1.5342b569d4f82p+0", "0x1.5ab07dd485429p+0", "0x1.6247eb03a5585p+0",
    "0x1.6a09e667f3bcdp+0", "0x1.71f75e8ec5f74p+0", "0x1.7a11473eb0187p+0", "0x1.82589994cce13p+0",
    "0x1.8ace5422aa0dbp+0", "0x1.93737b0cdc5e5p+0", "0x1.9c49182a3f090p+0", "0x1.a5503b23e255dp+0",
    "0x1.ae89f995ad3adp+0", "0x1.b7f76f2fb5e47p+0", "0x1.c199bdd85529cp+0", "0x1.cb720dcef9069p+0",
    "0x1.d5818dcfba487p+0", "0x1.dfc97337b9b5fp+0", "0x1.ea4afa2a490dap+0", "0x1.f50765b6e4540p+0",
)])                                    # 2^(j / 32), j = 0..31, correctly rounded (mpmath, 60 digits)
_SCALE = float.fromhex("0x1.71547652b82fep+5")     # 32 / ln 2
_STEP_HI = float.fromhex("0x1.62e42fef00000p-6")   # ln 2 / 32: 33 bits, so k * _STEP_HI is exact
_STEP_LO = float.fromhex("0x1.473de6af278edp-39")  # ln 2 / 32 - _STEP_HI
_SHIFTER = 6755399441055744.0          # 1.5 * 2^52: x + _SHIFTER rounds x to an integer
_SHIFTER_BITS = int(np.array([_SHIFTER]).view(np.int64)[0])
_FASTMATH = {"contract"}               # fused multiply-add only: no reassociation, inf/nan kept
# Every kernel is compiled with error_model="numpy": a division by zero gives inf or NaN as IEEE
# arithmetic does, where numba's default ("python") tests each divisor and raises
# ZeroDivisionError. Those tests kept the divisions of the eight-lane passes scalar: the step took
# 1.2x as long at (100, 10, 10, 64), 1.5x at (8, 4, 4, 1024) (measured, same results bit for bit).
# No divisor here can be 0 (sums of exponentials >= 1, 1 + exp(z), |g| + eps, n, and the
# largest entry where it is > 0), and a NaN would be caught by the checks of the results.


def kernel_array(a, dtype=np.float64) -> np.ndarray:
    """``a`` as the kernels take every array: C-contiguous, writable, of ``dtype`` (a copy only
    when it is not). A read-only or strided array is another numba type: the kernel would be
    compiled again for it (40-125 s), without the SLP vectorizer that :func:`ready` turns on."""
    return np.require(a, dtype, ("C", "W"))


@intrinsic
def _as_int(typingctx, x):
    """The bits of a float64 as an int64 (an LLVM bitcast: no instruction)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _as_float(typingctx, i):
    """The float64 whose bits are the int64 ``i`` (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _exp_lanes(x, size):
    """exp of ``x[:size]`` in place, within 1.1 ulp of the exact value over the whole float64
    range, subnormal results included (the rounding of the table entry and of the result, 1/2 ulp
    each, and the polynomial's 4e-18: tests/lib/test_compiled.py checks it against mpmath;
    measured at most 1.0022 ulp on 61,058 points by an independent review).

    One pass, which the compiler vectorizes: a = k ln 2 / 32 + r (k = 32 a / ln 2 rounded by
    adding 1.5 * 2^52, whose low bits are then k), exp(r) - 1 by a degree-6 polynomial
    (|r| <= ln 2 / 64: the
    remainder is below 4e-18), 2^(k mod 32 / 32) from a table, and the power of two 2^(k // 32)
    assembled from its bits as two factors, both normal, so that a subnormal result is rounded
    once. (The earlier degree-13 polynomial over |r| <= ln 2 / 2 took 1.4x as long.)
    """
    for j in range(size):
        a = x[j]
        a = -1100.0 if a < -1100.0 else a     # exp is 0 below, inf above (NaN stays NaN)
        a = 710.0 if a > 710.0 else a
        t = a * _SCALE + _SHIFTER
        k = t - _SHIFTER                       # round(32 a / ln 2)
        r = (a - k * _STEP_HI) - k * _STEP_LO
        poly = 1.0 / 720.0
        poly = poly * r + 1.0 / 120.0
        poly = poly * r + 1.0 / 24.0
        poly = poly * r + 1.0 / 6.0
        poly = poly * r + 0.5
        poly = poly * r * r + r                # exp(r) - 1
        ki = _as_int(t) - _SHIFTER_BITS        # k as an integer
        m = ki >> 5                            # floor(k / 32)
        half = m >> 1
        tj = _TABLE[ki & 31]
        x[j] = ((tj + tj * poly) * _as_float((half + 1023) << 52)) * _as_float((m - half + 1023) << 52)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
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


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _logits(Ki, p, s, T, d):
    """s[t * 8 + l] = sum_e Ki[t, e] p[e * 8 + l] for the 8 lanes l, keys Ki (T, d), prompts p
    (d * 8,) (flat arrays: the compiler then knows that the lanes are adjacent)."""
    for t in range(T):
        _add_lane_sums(Ki[t], p, s, t * 8, True)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _add_contraction(Ki, c, g, T, d):
    """g[e * 8 + l] += sum_t Ki[t, e] c[t * 8 + l] for the 8 lanes l (as in :func:`_logits`)."""
    for e in range(d):
        _add_lane_sums(Ki[:, e], c, g, e * 8, False)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
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


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _add_lane_sums16x2(w, v, x, out, o, p, fresh):
    """:func:`_add_lane_sums16` for two weight vectors at once, w into out[o:o + 16] and v into
    out[p:p + 16]: eight independent accumulator vectors instead of four, so the multiply-adds
    are no longer waiting on each other (the step 1.1x faster at (1000, 20, 32, 16), measured)."""
    if fresh:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = 0.0
        b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = 0.0
        b8 = b9 = b10 = b11 = b12 = b13 = b14 = b15 = 0.0
    else:
        a0, a1, a2, a3 = out[o + 0], out[o + 1], out[o + 2], out[o + 3]
        a4, a5, a6, a7 = out[o + 4], out[o + 5], out[o + 6], out[o + 7]
        a8, a9, a10, a11 = out[o + 8], out[o + 9], out[o + 10], out[o + 11]
        a12, a13, a14, a15 = out[o + 12], out[o + 13], out[o + 14], out[o + 15]
        b0, b1, b2, b3 = out[p + 0], out[p + 1], out[p + 2], out[p + 3]
        b4, b5, b6, b7 = out[p + 4], out[p + 5], out[p + 6], out[p + 7]
        b8, b9, b10, b11 = out[p + 8], out[p + 9], out[p + 10], out[p + 11]
        b12, b13, b14, b15 = out[p + 12], out[p + 13], out[p + 14], out[p + 15]
    for j in range(w.shape[0]):
        k, m = w[j], v[j]
        q = j * 16
        a0 += k * x[q + 0]
        b0 += m * x[q + 0]
        a1 += k * x[q + 1]
        b1 += m * x[q + 1]
        a2 += k * x[q + 2]
        b2 += m * x[q + 2]
        a3 += k * x[q + 3]
        b3 += m * x[q + 3]
        a4 += k * x[q + 4]
        b4 += m * x[q + 4]
        a5 += k * x[q + 5]
        b5 += m * x[q + 5]
        a6 += k * x[q + 6]
        b6 += m * x[q + 6]
        a7 += k * x[q + 7]
        b7 += m * x[q + 7]
        a8 += k * x[q + 8]
        b8 += m * x[q + 8]
        a9 += k * x[q + 9]
        b9 += m * x[q + 9]
        a10 += k * x[q + 10]
        b10 += m * x[q + 10]
        a11 += k * x[q + 11]
        b11 += m * x[q + 11]
        a12 += k * x[q + 12]
        b12 += m * x[q + 12]
        a13 += k * x[q + 13]
        b13 += m * x[q + 13]
        a14 += k * x[q + 14]
        b14 += m * x[q + 14]
        a15 += k * x[q + 15]
        b15 += m * x[q + 15]
    out[o + 0], out[o + 1], out[o + 2], out[o + 3] = a0, a1, a2, a3
    out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a4, a5, a6, a7
    out[o + 8], out[o + 9], out[o + 10], out[o + 11] = a8, a9, a10, a11
    out[o + 12], out[o + 13], out[o + 14], out[o + 15] = a12, a13, a14, a15
    out[p + 0], out[p + 1], out[p + 2], out[p + 3] = b0, b1, b2, b3
    out[p + 4], out[p + 5], out[p + 6], out[p + 7] = b4, b5, b6, b7
    out[p + 8], out[p + 9], out[p + 10], out[p + 11] = b8, b9, b10, b11
    out[p + 12], out[p + 13], out[p + 14], out[p + 15] = b12, b13, b14, b15


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _logits16(Ki, p, s, T, d):
    """:func:`_logits` for 16 lanes."""
    for t in range(0, T - 1, 2):
        _add_lane_sums16x2(Ki[t], Ki[t + 1], p, s, t * 16, (t + 1) * 16, True)
    if T % 2:
        _add_lane_sums16(Ki[T - 1], p, s, (T - 1) * 16, True)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _add_contraction16(Ki, c, g, T, d):
    """:func:`_add_contraction` for 16 lanes."""
    for e in range(0, d - 1, 2):
        _add_lane_sums16x2(Ki[:, e], Ki[:, e + 1], c, g, e * 16, (e + 1) * 16, False)
    if d % 2:
        _add_lane_sums16(Ki[:, d - 1], c, g, (d - 1) * 16, False)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _add_lane_sums32(w, x, out, o, fresh):
    """:func:`_add_lane_sums` for 32 lanes (four AVX-512 or eight AVX2 vectors)."""
    if fresh:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = 0.0
        a16 = a17 = a18 = a19 = a20 = a21 = a22 = a23 = 0.0
        a24 = a25 = a26 = a27 = a28 = a29 = a30 = a31 = 0.0
    else:
        a0, a1, a2, a3 = out[o + 0], out[o + 1], out[o + 2], out[o + 3]
        a4, a5, a6, a7 = out[o + 4], out[o + 5], out[o + 6], out[o + 7]
        a8, a9, a10, a11 = out[o + 8], out[o + 9], out[o + 10], out[o + 11]
        a12, a13, a14, a15 = out[o + 12], out[o + 13], out[o + 14], out[o + 15]
        a16, a17, a18, a19 = out[o + 16], out[o + 17], out[o + 18], out[o + 19]
        a20, a21, a22, a23 = out[o + 20], out[o + 21], out[o + 22], out[o + 23]
        a24, a25, a26, a27 = out[o + 24], out[o + 25], out[o + 26], out[o + 27]
        a28, a29, a30, a31 = out[o + 28], out[o + 29], out[o + 30], out[o + 31]
    for j in range(w.shape[0]):
        k = w[j]
        q = j * 32
        a0 += k * x[q + 0]
        a1 += k * x[q + 1]
        a2 += k * x[q + 2]
        a3 += k * x[q + 3]
        a4 += k * x[q + 4]
        a5 += k * x[q + 5]
        a6 += k * x[q + 6]
        a7 += k * x[q + 7]
        a8 += k * x[q + 8]
        a9 += k * x[q + 9]
        a10 += k * x[q + 10]
        a11 += k * x[q + 11]
        a12 += k * x[q + 12]
        a13 += k * x[q + 13]
        a14 += k * x[q + 14]
        a15 += k * x[q + 15]
        a16 += k * x[q + 16]
        a17 += k * x[q + 17]
        a18 += k * x[q + 18]
        a19 += k * x[q + 19]
        a20 += k * x[q + 20]
        a21 += k * x[q + 21]
        a22 += k * x[q + 22]
        a23 += k * x[q + 23]
        a24 += k * x[q + 24]
        a25 += k * x[q + 25]
        a26 += k * x[q + 26]
        a27 += k * x[q + 27]
        a28 += k * x[q + 28]
        a29 += k * x[q + 29]
        a30 += k * x[q + 30]
        a31 += k * x[q + 31]
    out[o + 0], out[o + 1], out[o + 2], out[o + 3] = a0, a1, a2, a3
    out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a4, a5, a6, a7
    out[o + 8], out[o + 9], out[o + 10], out[o + 11] = a8, a9, a10, a11
    out[o + 12], out[o + 13], out[o + 14], out[o + 15] = a12, a13, a14, a15
    out[o + 16], out[o + 17], out[o + 18], out[o + 19] = a16, a17, a18, a19
    out[o + 20], out[o + 21], out[o + 22], out[o + 23] = a20, a21, a22, a23
    out[o + 24], out[o + 25], out[o + 26], out[o + 27] = a24, a25, a26, a27
    out[o + 28], out[o + 29], out[o + 30], out[o + 31] = a28, a29, a30, a31


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _logits32(Ki, p, s, T, d):
    """:func:`_logits` for 32 lanes."""
    for t in range(T):
        _add_lane_sums32(Ki[t], p, s, t * 32, True)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _add_contraction32(Ki, c, g, T, d):
    """:func:`_add_contraction` for 32 lanes."""
    for e in range(d):
        _add_lane_sums32(Ki[:, e], c, g, e * 32, False)


@njit(cache=True, error_model="numpy", fastmath=_FASTMATH)
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
    write nothing, so no record is larger than the result. Without attention records (``on``,
    ``off`` and ``final`` of size 0, see :func:`empty_records`) the kernel writes none."""

    path: np.ndarray
    risk: np.ndarray
    on: np.ndarray
    off: np.ndarray
    final: np.ndarray
    failed: np.ndarray


def empty_records(R: int, M: int, B: int, n: int, T: int, d: int, *,
                  attention: bool = True, path: np.ndarray | None = None) -> Records:
    """Output buffers for R recorded steps of M instances x B starts; ``attention=False``: no
    attention records (empty ``on``, ``off``, ``final``; gd_W needs the iterates and risks only);
    ``path``: a C-contiguous (R, M, B, d) buffer for the iterates (default: a new one)."""
    k = 1 if attention else 0
    path = np.empty((R, M, B, d)) if path is None else path
    return Records(path, np.zeros((R, M, B)), np.empty((R * k, M, B, n)),
                   np.empty((R * k, M, B, n)), np.empty((M * k, B, n, T)),
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
    top: np.ndarray      # (L,) int64 most-attended token
    ref: np.ndarray      # (L,) its score
    offset: np.ndarray   # (L,) sum_t s_t (gamma_t - ref)
    z: np.ndarray        # (L,) margin ref + offset
    w: np.ndarray        # (L,) l'(z) / n
    norm: np.ndarray     # (L,) |g|^2, then |g| + eps (or a mark: see _guard_overflow)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _lanes(T, d, L):
    """Fresh scratch of one block of L lanes (see :class:`_Lanes`)."""
    return _Lanes(np.empty(d * L), np.empty(d * L), np.empty(T * L), np.empty(T * L),
                  np.empty(L, dtype=np.int64), np.empty(L), np.empty(L),
                  np.empty(L), np.empty(L), np.empty(L))


# --- the step, written once ---------------------------------------------------------------------
#
# The three kernels, descend (GD on p), descend_joint (on (v, p)) and descend_kq (on the factors
# (K, Q), through the prompt u = K Q^T p), take a step of a block of L lanes as
#   per sequence i: _attend (_lane_sums: the logits; _softmax_margins: _shift8, _exp_lanes,
#                   _normalize8: attention and margin) -> _slopes -> _add_gradient (_dlogits8,
#                   then _contract, the lane sums' transpose);
#   then the update: descend _guard_overflow, _update, _check_iterate; descend_joint
#                   _squared_norms, _update of v and of p; descend_kq its factors' update.
# Scores are read with strides (step, lane): (1, 0), shared by the lanes, in descend and
# descend_kq; (L, 1), one per lane, in descend_joint, whose scores _lane_sums(Y_i X_i, v) depend
# on v (it adds _add_v_gradient). _shift8, _normalize8, _dlogits8 and _weighted8 take eight
# lanes at a time.


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _shift8(s, o, T, L, top):
    """Lanes o..o+7 of s (T * L,): subtract each lane's largest logit, and top[l] = its token.

    The eight lanes are spelled out as scalars, loaded before and stored after the arithmetic:
    the compiler can then keep them in SIMD registers (it cannot prove that arrays do not alias,
    so a loop over the lanes with stores inside stays scalar: the step took 1.3x as
    long, measured at (100, 10, 10, 64))."""
    b0, b1, b2, b3, b4, b5, b6, b7 = s[o + 0], s[o + 1], s[o + 2], s[o + 3], s[o + 4], s[o + 5], s[o + 6], s[o + 7]
    i0, i1, i2, i3, i4, i5, i6, i7 = 0, 0, 0, 0, 0, 0, 0, 0
    for t in range(1, T):
        q = t * L + o
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7]
        if x0 > b0:
            b0, i0 = x0, t
        if x1 > b1:
            b1, i1 = x1, t
        if x2 > b2:
            b2, i2 = x2, t
        if x3 > b3:
            b3, i3 = x3, t
        if x4 > b4:
            b4, i4 = x4, t
        if x5 > b5:
            b5, i5 = x5, t
        if x6 > b6:
            b6, i6 = x6, t
        if x7 > b7:
            b7, i7 = x7, t
    top[o + 0], top[o + 1], top[o + 2], top[o + 3], top[o + 4], top[o + 5], top[o + 6], top[o + 7] = i0, i1, i2, i3, i4, i5, i6, i7
    for t in range(T):
        q = t * L + o
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7]
        s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7] = x0 - b0, x1 - b1, x2 - b2, x3 - b3, x4 - b4, x5 - b5, x6 - b6, x7 - b7


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _normalize8(s, gamma, step, lane, o, T, L, top, ref, offset, z):
    """Lanes o..o+7 of the exponentials s (T * L,): divide by their sum; with the score of token t
    in lane l at gamma[t * step + l * lane] (step, lane = 1, 0: scores (T,) shared by the lanes;
    L, 1: scores (T * L,) of each lane), ref = the top token's score, offset = sum_t s_t
    (gamma_t - ref), z = ref + offset (scalars as in :func:`_shift8`)."""
    a0, a1, a2, a3, a4, a5, a6, a7 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for t in range(T):
        q = t * L + o
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7]
        a0 += x0
        a1 += x1
        a2 += x2
        a3 += x3
        a4 += x4
        a5 += x5
        a6 += x6
        a7 += x7
    a0, a1, a2, a3, a4, a5, a6, a7 = 1.0 / a0, 1.0 / a1, 1.0 / a2, 1.0 / a3, 1.0 / a4, 1.0 / a5, 1.0 / a6, 1.0 / a7
    r0, r1, r2, r3, r4, r5, r6, r7 = gamma[top[o + 0] * step + (o + 0) * lane], gamma[top[o + 1] * step + (o + 1) * lane], gamma[top[o + 2] * step + (o + 2) * lane], gamma[top[o + 3] * step + (o + 3) * lane], gamma[top[o + 4] * step + (o + 4) * lane], gamma[top[o + 5] * step + (o + 5) * lane], gamma[top[o + 6] * step + (o + 6) * lane], gamma[top[o + 7] * step + (o + 7) * lane]
    f0, f1, f2, f3, f4, f5, f6, f7 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for t in range(T):
        q = t * L + o
        h = t * step + o * lane
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0] * a0, s[q + 1] * a1, s[q + 2] * a2, s[q + 3] * a3, s[q + 4] * a4, s[q + 5] * a5, s[q + 6] * a6, s[q + 7] * a7
        g0, g1, g2, g3, g4, g5, g6, g7 = gamma[h + 0 * lane], gamma[h + 1 * lane], gamma[h + 2 * lane], gamma[h + 3 * lane], gamma[h + 4 * lane], gamma[h + 5 * lane], gamma[h + 6 * lane], gamma[h + 7 * lane]
        s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7] = x0, x1, x2, x3, x4, x5, x6, x7
        f0 += x0 * (g0 - r0)
        f1 += x1 * (g1 - r1)
        f2 += x2 * (g2 - r2)
        f3 += x3 * (g3 - r3)
        f4 += x4 * (g4 - r4)
        f5 += x5 * (g5 - r5)
        f6 += x6 * (g6 - r6)
        f7 += x7 * (g7 - r7)
    ref[o + 0], ref[o + 1], ref[o + 2], ref[o + 3], ref[o + 4], ref[o + 5], ref[o + 6], ref[o + 7] = r0, r1, r2, r3, r4, r5, r6, r7
    offset[o + 0], offset[o + 1], offset[o + 2], offset[o + 3], offset[o + 4], offset[o + 5], offset[o + 6], offset[o + 7] = f0, f1, f2, f3, f4, f5, f6, f7
    z[o + 0], z[o + 1], z[o + 2], z[o + 3], z[o + 4], z[o + 5], z[o + 6], z[o + 7] = r0 + f0, r1 + f1, r2 + f2, r3 + f3, r4 + f4, r5 + f5, r6 + f6, r7 + f7


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _dlogits8(s, gamma, step, lane, o, T, L, ref, offset, w, c):
    """Lanes o..o+7 of c = s (gamma - ref - offset) w, per token (scores as in
    :func:`_normalize8`, scalars as in :func:`_shift8`)."""
    r0, r1, r2, r3, r4, r5, r6, r7 = ref[o + 0], ref[o + 1], ref[o + 2], ref[o + 3], ref[o + 4], ref[o + 5], ref[o + 6], ref[o + 7]
    f0, f1, f2, f3, f4, f5, f6, f7 = offset[o + 0], offset[o + 1], offset[o + 2], offset[o + 3], offset[o + 4], offset[o + 5], offset[o + 6], offset[o + 7]
    w0, w1, w2, w3, w4, w5, w6, w7 = w[o + 0], w[o + 1], w[o + 2], w[o + 3], w[o + 4], w[o + 5], w[o + 6], w[o + 7]
    for t in range(T):
        q = t * L + o
        h = t * step + o * lane
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7]
        g0, g1, g2, g3, g4, g5, g6, g7 = gamma[h + 0 * lane], gamma[h + 1 * lane], gamma[h + 2 * lane], gamma[h + 3 * lane], gamma[h + 4 * lane], gamma[h + 5 * lane], gamma[h + 6 * lane], gamma[h + 7 * lane]
        c[q + 0], c[q + 1], c[q + 2], c[q + 3], c[q + 4], c[q + 5], c[q + 6], c[q + 7] = (x0 * ((g0 - r0) - f0)) * w0, (x1 * ((g1 - r1) - f1)) * w1, (x2 * ((g2 - r2) - f2)) * w2, (x3 * ((g3 - r3) - f3)) * w3, (x4 * ((g4 - r4) - f4)) * w4, (x5 * ((g5 - r5) - f5)) * w5, (x6 * ((g6 - r6) - f6)) * w6, (x7 * ((g7 - r7) - f7)) * w7


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _lane_sums(Ki, x, out, T, d, L):
    """out[t * L + l] = sum_e Ki[t, e] x[e * L + l], Ki (T, d), x (d * L,): the logits (or joint's
    scores) of the L lanes, by the spelled-out routine of L = 8, 16 or 32 (:func:`_logits`)."""
    if L == WIDE:                       # (L is a constant of each build: one branch is kept)
        _logits16(Ki, x, out, T, d)
    elif L == WIDER:
        _logits32(Ki, x, out, T, d)
    else:
        _logits(Ki, x, out, T, d)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _contract(Ki, c, g, T, d, L):
    """g[e * L + l] += sum_t Ki[t, e] c[t * L + l], the lane sums' transpose (as
    :func:`_lane_sums`, :func:`_add_contraction` for L = 8, 16 or 32)."""
    if L == WIDE:
        _add_contraction16(Ki, c, g, T, d)
    elif L == WIDER:
        _add_contraction32(Ki, c, g, T, d)
    else:
        _add_contraction(Ki, c, g, T, d)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _softmax_margins(s, gamma, step, lane, top, ref, offset, z, T, L):
    """The logits s (T * L,) become the attention; per lane (L,) the most-attended token top
    (the first one on ties), its score ref, offset = sum_t s_t (gamma_t - ref) and the margin
    z = ref + offset (as :func:`maxmargin._kernels.margins`). The score of token t in lane l is
    gamma[t * step + l * lane]: (step, lane) = (1, 0) for scores (T,) shared by the lanes (gd,
    kq), (L, 1) for per-lane scores (T * L,) (joint)."""
    for o in range(0, L, 8):            # shift by the largest logit
        _shift8(s, o, T, L, top)
    _exp_lanes(s, T * L)
    for o in range(0, L, 8):            # normalize; margin relative to the top token
        _normalize8(s, gamma, step, lane, o, T, L, top, ref, offset, z)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _attend(Ki, p, s, gamma, step, lane, top, ref, offset, z, T, d, L):
    """Attention s (T * L,) of one sequence, keys Ki (T, d), at the lanes' prompts p (d * L,),
    lane l of coordinate e at e * L + l: the logits (:func:`_lane_sums`), then
    :func:`_softmax_margins` (scores gamma read with the strides step, lane)."""
    _lane_sums(Ki, p, s, T, d, L)
    _softmax_margins(s, gamma, step, lane, top, ref, offset, z, T, L)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _slopes(loss, z, w, n, L):
    """w = l'(z) / n, (L,), for the loss with code ``loss``: its ``derivative`` in
    :mod:`.losses`, restated with :func:`_exp_lanes` (test_losses.py checks that they agree)."""
    if loss == LOGISTIC_CODE:           # losses.LOGISTIC.derivative
        for l in range(L):
            w[l] = z[l]
        _exp_lanes(w, L)
        for l in range(L):
            w[l] = -1.0 / (1.0 + w[l]) / n
    elif loss == EXPONENTIAL_CODE:      # losses.EXPONENTIAL.derivative
        for l in range(L):
            w[l] = -z[l]
        _exp_lanes(w, L)
        for l in range(L):
            w[l] = -w[l] / n
    else:                               # losses.CORRELATION.derivative
        for l in range(L):
            w[l] = -1.0 / n


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _add_gradient(Ki, s, gamma, step, lane, ref, offset, w, c, g, T, d, L):
    """g (d * L,) += the sequence's gradient in the prompt, sum_t s_t (gamma_t - ref - offset) w
    k_t (lanes and score strides as in :func:`_attend`; ``c`` (T * L,) is scratch)."""
    for o in range(0, L, 8):
        _dlogits8(s, gamma, step, lane, o, T, L, ref, offset, w, c)
    _contract(Ki, c, g, T, d, L)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _loss_value(loss, z):
    """l(z) of the built-in loss with code ``loss``: its ``value`` in :mod:`.losses`, restated
    as numpy computes it (the logistic's as np.logaddexp(0, -z); test_losses.py checks them)."""
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


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _record_sequence(out, r, m, b0, lanes, i, tr, a, T, loss, n, L):
    """Sequence i's loss (added to the risk, / n) and attention on (and off) the tracked token
    ``tr``, at record r, for the first ``lanes`` lanes of the block."""
    s = a.s
    for l in range(lanes):
        out.risk[r, m, b0 + l] += _loss_value(loss, a.z[l]) / n
    if out.on.shape[0] == 0:                # no attention records (empty_records)
        return
    for l in range(lanes):
        out.on[r, m, b0 + l, i] = s[tr * L + l]
        rest = 0.0
        for t in range(T):
            if t != tr:
                rest += s[t * L + l]
        out.off[r, m, b0 + l, i] = rest


TINY_GRADIENT = 1e-304  # _stepping.TINY_GRADIENT: a normalized step recomputes a smaller gradient


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _up_exponent(top):
    """The k in [0, 1000] with top 2^k in [1/2, 1) for 0 < top < 1/2, else 0
    (_stepping._up_exponent)."""
    if not top > 0.0:
        return 0
    return min(max(-math.frexp(top)[1], 0), 1000)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _careful_norm(g, d, l, L):
    """|g| of lane l, its entries first divided by the largest (squares of tiny entries)."""
    top = 0.0
    for e in range(d):
        top = max(top, abs(g[e * L + l]))
    if top == 0.0:
        return 0.0
    acc = 0.0
    for e in range(d):
        acc += (g[e * L + l] / top) ** 2
    return top * np.sqrt(acc)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
def _refined_direction(K, gamma, p, loss, eps, n, T, d):
    """g / (|g| + eps) for the risk gradient g (d,) at one prompt ``p`` (d,), keys K (n, T, d),
    scores gamma (n, T), when |g| < TINY_GRADIENT: its terms k_it c_it (c_it = s_it (gamma_it -
    z_i) l'(z_i) / n) may be subnormal products, so each is taken as (k_it 2^a) (c_it 2^c), both
    factors scaled up by powers of two (exact), and eps by as much of 2^(a + c) as keeps it
    below 2^1000 (_stepping._scaled_contraction and _scaled_direction; scalar code, called only
    then)."""
    c = np.empty((n, T))
    s = np.empty(T)
    for i in range(n):
        top = 0
        for t in range(T):
            acc = 0.0
            for e in range(d):
                acc += K[i, t, e] * p[e]
            s[t] = acc
            if acc > s[top]:
                top = t
        shift = s[top]
        total = 0.0
        for t in range(T):
            s[t] = np.exp(s[t] - shift)
            total += s[t]
        ref = gamma[i, top]
        offset = 0.0
        for t in range(T):
            s[t] /= total
            offset += s[t] * (gamma[i, t] - ref)
        z = ref + offset
        if loss == LOGISTIC_CODE:       # l'(z) / n as _slopes, scalar (losses.py's derivative)
            w = -1.0 / (1.0 + np.exp(z)) / n
        elif loss == EXPONENTIAL_CODE:
            w = -np.exp(-z) / n
        else:
            w = -1.0 / n
        for t in range(T):
            c[i, t] = (s[t] * ((gamma[i, t] - ref) - offset)) * w
    up_c = _up_exponent(np.max(np.abs(c)))
    up_k = _up_exponent(np.max(np.abs(K)))
    g = np.zeros(d)
    for i in range(n):
        for t in range(T):
            ct = math.ldexp(c[i, t], up_c)
            for e in range(d):
                g[e] += math.ldexp(K[i, t, e], up_k) * ct
    k = up_c + up_k
    kept = min(k, max(1000 - math.frexp(eps)[1], 0))
    for e in range(d):
        g[e] = math.ldexp(g[e], kept - k)
    small = math.ldexp(eps, kept)
    top = np.max(np.abs(g))
    if top > 0.0:
        size = top * np.sqrt(np.sum((g / top) ** 2)) + small
        for e in range(d):
            g[e] = g[e] / size
    return g


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
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
            # a normalized step of a gradient whose terms may be subnormal: from scaled factors
            if (run.normalized and norm[l] < 1e-280
                    and _careful_norm(g, d, l, L) < TINY_GRADIENT):
                gl = _refined_direction(Km, gm, a.p[l::L].copy(), run.loss, run.eps, n, T, d)
                for e in range(d):
                    g[e * L + l] = gl[e]
                norm[l] = -1.0              # marks a lane already normalized
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


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _check_iterate(p, k, m, b0, lanes, out, d, L):
    """out.failed[m, b0 + l] = k for a real lane whose iterate p (d * L,) left float64 in the
    update of step k (as the torch loop refuses it there, the last update included), unless an
    earlier step already failed."""
    for l in range(lanes):
        seen = 0.0
        for e in range(d):
            seen += p[e * L + l] * 0.0      # NaN once an entry is inf or NaN
        if not np.isfinite(seen) and out.failed[m, b0 + l] < 0:
            out.failed[m, b0 + l] = k


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
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
    """:func:`descend` for blocks of L starts (LANES, WIDE or WIDER): L is a constant of the build (a
    closure over an int, which numba caches), and every helper is inlined into it, so that the
    loops over the lanes see a constant trip count, as with a module constant."""

    @njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
    def descend(first, last_job, prob, P0, run, out):
        """Gradient descent (``run``: :class:`Settings`) on ``prob`` (:class:`Problem`) from the starts
        P0 (M, B', d), B' a multiple of L, for the blocks ``first`` to ``last_job - 1`` of L
        starts (block j: instance j // (B' / L)); writes ``out`` (:class:`Records`) for the
        first B starts of each instance (B = out.path.shape[2] <= B'; the others are spare lanes).
        Adds to the step (see "the step, written once") the guards of a gradient that leaves
        float64 and of the iterate (:func:`_guard_overflow`, :func:`_check_iterate`)."""
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
                    _attend(Km[i], a.p, a.s, gm[i], 1, 0, a.top, a.ref, a.offset, a.z, T, d, L)
                    if held:
                        _record_sequence(out, r, m, b0, lanes, i, prob.tracked[m, i], a, T, run.loss, n,
                                         L)
                    if last:
                        for l in range(lanes):      # logits of the last iterate beyond float64
                            if not np.isfinite(a.z[l]) and out.failed[m, b0 + l] < 0:
                                out.failed[m, b0 + l] = k
                        for l in range(lanes if out.final.shape[0] else 0):
                            for t in range(T):
                                out.final[m, b0 + l, i, t] = a.s[t * L + l]
                        continue
                    _slopes(run.loss, a.z, a.w, n, L)
                    _add_gradient(Km[i], a.s, gm[i], 1, 0, a.ref, a.offset, a.w, a.c, a.g, T, d, L)
                if held:
                    for l in range(lanes):
                        for e in range(d):
                            out.path[r, m, b0 + l, e] = a.p[e * L + l]
                    r += 1
                if last:
                    break
                _guard_overflow(Km, gm, a, k, m, b0, run, out, n, T, d, L)
                _update(a, run, d, L)
                _check_iterate(a.p, k, m, b0, lanes, out, d, L)

    return descend


descend = _build(LANES)
descend_wide = _build(WIDE)
descend_wider = _build(WIDER)


_READY = []


def _compile(flag: list, warm_ups) -> None:
    """Compile kernels (or load them from numba's cache) once per process, in the calling thread,
    with LLVM's SLP vectorizer on: numba leaves it off by default, and without it the spelled-out
    lanes of :func:`_logits` and :func:`_add_contraction` stay scalar (3x slower). ``warm_ups``
    () -> the (kernel, args) calls on tiny inputs that compile them; ``flag`` (``_READY``,
    ``_READY_JOINT`` or ``_READY_KQ``, which ``_engines._compiled_loaded`` reads) gets True."""
    if flag:
        return
    from numba.core import config

    # numba's internal switch (0.60-0.68 have it); a numba without it compiles as it does
    before = getattr(config, "SLP_VECTORIZE", None)
    config.SLP_VECTORIZE = 1
    try:
        for kernel, args in warm_ups():
            kernel(*args)
    finally:
        if before is None:
            del config.SLP_VECTORIZE
        else:
            config.SLP_VECTORIZE = before
    flag.append(True)


def _gd_warm_ups():
    """The calls on tiny inputs that compile descend, descend_wide and descend_wider."""
    M, n, T, d = 1, 1, 2, 1
    record = np.array([0, 1])
    for kernel, lanes in ((descend, LANES), (descend_wide, WIDE), (descend_wider, WIDER)):
        yield kernel, (0, 1, Problem(np.zeros((M, n, T, d)), np.zeros((M, n, T)),
                                     np.zeros((M, n), dtype=np.int64)),
                       np.zeros((M, lanes, d)), Settings(1, 0.1, LOGISTIC_CODE, True, 1e-12, record),
                       empty_records(len(record), M, lanes, n, T, d))


def ready() -> None:
    """Compile :func:`descend`, ``descend_wide`` and ``descend_wider`` once per process (see
    :func:`_compile`)."""
    _compile(_READY, _gd_warm_ups)


# --- gd_joint: GD on (v, p) ----------------------------------------------------------------------
#
# The engine of :func:`maxmargin.train.gd_joint` (its torch loop, ``_torchdescent.Joint``,
# is the same mathematics). Blocks of L starts as above, lane l of coordinate e of v and of p at
# e * L + l. Per step and sequence i, for the L lanes: the scores gamma_t = Y_i x_it . v and the
# logits k_it . p (two lane sums: v differs per lane, so the scores do too), the softmax and the
# margin relative to the most-attended token (:func:`_attend`, scores read per lane), the slope
# w = l'(z) / n (:func:`_slopes`), then grad_p += sum_t k_it s_t (gamma_t - z) w
# (:func:`_add_gradient`) and grad_v += sum_t Y_i x_it s_t w (:func:`_add_v_gradient`); each
# gradient then steps by :func:`_update` (its own eps under normalized GD).
#
# The kernel computes only where every number is finite: a real lane whose margin or slope is not
# finite gets the step in out.failed and its block stops (a gradient that is not finite makes the
# next iterate so, whose scores or logits, and so margins, are then NaN: caught at the next step,
# the last one included). The caller then reruns the whole call on the torch loop,
# which raises the right error or takes its rescaled steps (the scaled retry, the exponential loss's
# log-domain slopes): where everything is finite that loop neither raises nor rescales, so the
# two compute the same steps. Only a finite gradient whose squares overflow is handled here
# (marked -2 for :func:`_update`, as in gd), and one whose squares underflow (:func:`_update`).


class JointProblem(NamedTuple):
    """The validated inputs of :func:`descend_joint`: XY (n, T, d) tokens signed by their labels,
    Y_i x_it; K (n, T, d) keys; tracked (n,) int64 token per sequence (read when
    JointSettings.track)."""

    XY: np.ndarray
    K: np.ndarray
    tracked: np.ndarray


class JointSettings(NamedTuple):
    """steps, lr, loss (a ``*_CODE``), normalized, eps_v, eps_p, record (R,) the recorded steps
    (the last one ``steps``), track: whether to record the attention on ``tracked``."""

    steps: int
    lr: float
    loss: int
    normalized: bool
    eps_v: float
    eps_p: float
    record: np.ndarray
    track: bool


class JointRecords(NamedTuple):
    """What :func:`descend_joint` writes for the B real starts: v, p (R, B, d); risk and
    probability (R, B) (mean loss and mean expit of the margins); on (R, B, n) attention on the
    tracked tokens (when tracked); failed (B,) the step at which a lane met a number that is not
    finite (-1 if none): the caller then reruns on the torch loop."""

    v: np.ndarray
    p: np.ndarray
    risk: np.ndarray
    probability: np.ndarray
    on: np.ndarray
    failed: np.ndarray


def empty_joint_records(R: int, B: int, n: int, d: int) -> JointRecords:
    """Output buffers of :func:`descend_joint`: the result's arrays, no larger."""
    return JointRecords(np.empty((R, B, d)), np.empty((R, B, d)), np.empty((R, B)),
                        np.empty((R, B)), np.empty((R, B, n)), np.full(B, -1, dtype=np.int64))


class _JointLanes(NamedTuple):
    """Scratch of one block of L joint runs (lane l of coordinate e at e * L + l)."""

    v: np.ndarray        # (d * L,) heads
    p: np.ndarray        # (d * L,) prompts
    gv: np.ndarray       # (d * L,) gradients
    gp: np.ndarray
    gamma: np.ndarray    # (T * L,) scores of the current sequence, per lane
    s: np.ndarray        # (T * L,) logits, then attention
    c: np.ndarray        # (T * L,) contribution to a gradient, per token
    top: np.ndarray      # (L,) int64 most-attended token
    ref: np.ndarray      # (L,) its score
    offset: np.ndarray   # (L,) sum_t s_t (gamma_t - ref)
    z: np.ndarray        # (L,) margin
    w: np.ndarray        # (L,) l'(z) / n
    nv: np.ndarray       # (L,) |grad_v|^2, then the normalization (see _update)
    np_: np.ndarray      # (L,) the same for grad_p
    seen: np.ndarray     # (L,) sum of 0 * (margins, slopes): NaN once one is not finite
    risk: np.ndarray     # (L,) sum of loss / n at a recorded step (the risk)
    prob: np.ndarray     # (L,) sum of expit(z)


class _Step(NamedTuple):
    """The arrays :func:`_update` reads of one parameter: iterate p, gradient g, norm."""

    p: np.ndarray
    g: np.ndarray
    norm: np.ndarray


class _Rule(NamedTuple):
    """The settings :func:`_update` reads, with the eps of one parameter."""

    normalized: bool
    lr: float
    eps: float


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _joint_lanes(T, d, L):
    return _JointLanes(np.empty(d * L), np.empty(d * L), np.empty(d * L), np.empty(d * L),
                       np.empty(T * L), np.empty(T * L), np.empty(T * L),
                       np.empty(L, dtype=np.int64), np.empty(L), np.empty(L),
                       np.empty(L), np.empty(L), np.empty(L), np.empty(L), np.empty(L),
                       np.empty(L), np.empty(L))


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _weighted8(s, o, T, L, w, c):
    """Lanes o..o+7 of c = s w, per token (scalars as in :func:`_shift8`)."""
    w0, w1, w2, w3, w4, w5, w6, w7 = w[o + 0], w[o + 1], w[o + 2], w[o + 3], w[o + 4], w[o + 5], w[o + 6], w[o + 7]
    for t in range(T):
        q = t * L + o
        x0, x1, x2, x3, x4, x5, x6, x7 = s[q + 0], s[q + 1], s[q + 2], s[q + 3], s[q + 4], s[q + 5], s[q + 6], s[q + 7]
        c[q + 0], c[q + 1], c[q + 2], c[q + 3], c[q + 4], c[q + 5], c[q + 6], c[q + 7] = x0 * w0, x1 * w1, x2 * w2, x3 * w3, x4 * w4, x5 * w5, x6 * w6, x7 * w7


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _add_v_gradient(XYi, s, w, c, gv, T, d, L):
    """gv (d * L,) += sum_t Y_i x_it s_t w, the sequence's gradient in the head (signed tokens
    XYi (T, d), attention s and slopes w as in :func:`_add_gradient`; ``c`` is scratch)."""
    for o in range(0, L, 8):
        _weighted8(s, o, T, L, w, c)
    _contract(XYi, c, gv, T, d, L)


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _squared_norms(g, norm, d, L):
    """norm = |g|^2 per lane; -2 where only the squares overflow (g finite: :func:`_update`
    divides by its largest entry), NaN where g itself is not finite (the step becomes NaN)."""
    for l in range(L):
        norm[l] = 0.0
    for e in range(d):
        for l in range(L):
            norm[l] += g[e * L + l] * g[e * L + l]
    for l in range(L):
        if not np.isfinite(norm[l]):
            finite = True
            for e in range(d):
                finite = finite and np.isfinite(g[e * L + l])
            norm[l] = -2.0 if finite else np.nan


def _build_joint(L: int):
    """:func:`descend_joint` for blocks of L starts (LANES or WIDE), as :func:`_build`."""

    @njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
    def descend_joint(first, last_job, prob, V0, P0, run, out):
        """Joint GD (``run``: :class:`JointSettings`) on ``prob`` (:class:`JointProblem`) from the
        starts V0, P0 (B', d), B' a multiple of L, for the blocks ``first`` to ``last_job - 1``;
        writes ``out`` (:class:`JointRecords`) for the first B = out.v.shape[1] starts. Adds to
        the step per-lane scores Y_i X_i v and v's gradient; a lane that is not finite fails."""
        n, T, d = prob.K.shape
        B = out.v.shape[1]
        a = _joint_lanes(T, d, L)
        v_step, p_step = _Step(a.v, a.gv, a.nv), _Step(a.p, a.gp, a.np_)
        v_rule = _Rule(run.normalized, run.lr, run.eps_v)
        p_rule = _Rule(run.normalized, run.lr, run.eps_p)
        for job in range(first, last_job):
            b0 = job * L
            lanes = min(L, B - b0)
            for e in range(d):
                for l in range(L):
                    a.v[e * L + l] = V0[b0 + l, e]
                    a.p[e * L + l] = P0[b0 + l, e]
            r = 0
            for k in range(run.steps + 1):
                held = run.record[r] == k
                last = k == run.steps
                for e in range(d * L):
                    a.gv[e] = 0.0
                    a.gp[e] = 0.0
                for l in range(L):
                    a.seen[l] = 0.0
                    a.risk[l] = 0.0
                    a.prob[l] = 0.0
                for i in range(n):
                    # joint: the scores depend on v, so they differ per lane (strides L, 1)
                    _lane_sums(prob.XY[i], a.v, a.gamma, T, d, L)
                    _attend(prob.K[i], a.p, a.s, a.gamma, L, 1, a.top, a.ref, a.offset, a.z,
                            T, d, L)
                    if held:
                        for l in range(lanes):
                            # each loss / n, as gd's kernel: their sum may overflow
                            a.risk[l] += _loss_value(run.loss, a.z[l]) / n
                            a.prob[l] += 1.0 / (1.0 + np.exp(-a.z[l]))
                        if run.track:
                            tr = prob.tracked[i]
                            for l in range(lanes):
                                out.on[r, b0 + l, i] = a.s[tr * L + l]
                    if last:
                        for l in range(L):
                            a.seen[l] += a.z[l] * 0.0
                        continue
                    _slopes(run.loss, a.z, a.w, n, L)
                    for l in range(L):
                        a.seen[l] += a.z[l] * 0.0 + a.w[l] * 0.0
                    _add_gradient(prob.K[i], a.s, a.gamma, L, 1, a.ref, a.offset, a.w, a.c,
                                  a.gp, T, d, L)
                    _add_v_gradient(prob.XY[i], a.s, a.w, a.c, a.gv, T, d, L)  # joint: and v's
                if held:
                    for l in range(lanes):
                        for e in range(d):
                            out.v[r, b0 + l, e] = a.v[e * L + l]
                            out.p[r, b0 + l, e] = a.p[e * L + l]
                        out.risk[r, b0 + l] = a.risk[l]
                        out.probability[r, b0 + l] = a.prob[l] / n
                    r += 1
                if not last:
                    if run.normalized:
                        _squared_norms(a.gv, a.nv, d, L)
                        _squared_norms(a.gp, a.np_, d, L)
                        for l in range(L):   # terms maybe subnormal: the torch loop reruns
                            if ((0.0 <= a.nv[l] < 1e-280                 # (its rescaled
                                 and _careful_norm(a.gv, d, l, L) < TINY_GRADIENT)  # terms)
                                    or (0.0 <= a.np_[l] < 1e-280
                                        and _careful_norm(a.gp, d, l, L) < TINY_GRADIENT)):
                                a.seen[l] = np.nan
                    _update(v_step, v_rule, d, L)   # an iterate that is not finite makes the
                    _update(p_step, p_rule, d, L)   # next step's margins so (checked there)
                stop = last
                for l in range(lanes):
                    if not np.isfinite(a.seen[l]):
                        out.failed[b0 + l] = k
                        stop = True
                if stop:
                    break

    return descend_joint


descend_joint = _build_joint(LANES)
descend_joint_wide = _build_joint(WIDE)

_READY_JOINT = []


def _joint_warm_ups():
    """The calls on tiny inputs that compile descend_joint and descend_joint_wide."""
    n, T, d = 1, 2, 1
    record = np.array([0, 1])
    for kernel, lanes in ((descend_joint, LANES), (descend_joint_wide, WIDE)):
        yield kernel, (0, 1, JointProblem(np.zeros((n, T, d)), np.zeros((n, T, d)),
                                          np.zeros(n, dtype=np.int64)),
                       np.zeros((lanes, d)), np.zeros((lanes, d)),
                       JointSettings(1, 0.1, LOGISTIC_CODE, True, 1e-12, 1e-12, record, True),
                       empty_joint_records(len(record), lanes, n, d))


def ready_joint() -> None:
    """Compile :func:`descend_joint` and ``descend_joint_wide`` once per process (see
    :func:`_compile`)."""
    _compile(_READY_JOINT, _joint_warm_ups)


# --- gd_KQ: GD on the factors (K, Q), shared prompt ---
#
# :func:`maxmargin.keyquery.gd_KQ` with one prompt p shared by every sequence and no penalty
# (the torch loop :func:`maxmargin._engines._descend_KQ_torch` is the reference). With
# q = Q^T p (m,) and u = K q (d,) the logits are x_it^T u, so the risk's gradient in u is the
# gradient a (d,) that GD on a prompt computes (keys X, prompt u: :func:`_attend`, :func:`_slopes`,
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


@njit(cache=True, error_model="numpy", nogil=True, inline="always", fastmath=_FASTMATH)
def _kq_sum_squares(x, count, out, L):
    """out[l] = sum_c x[c * L + l]^2 over the count coordinates of the L lanes."""
    for l in range(L):
        out[l] = 0.0
    for c in range(count):
        for l in range(L):
            out[l] += x[c * L + l] * x[c * L + l]


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
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

    @njit(cache=True, error_model="numpy", nogil=True, fastmath=_FASTMATH)
    def descend_kq(first, last_job, X, gamma, p, K0, Q0, q0, run, out):
        """GD on (K, Q) (``run``: :class:`KQSettings`) for keys X (n, T, d), scores gamma (n, T),
        the shared prompt p (d,), from K0, Q0 (B, d, m) with q0 = Q0^T p (B, m), for the blocks
        ``first`` to ``last_job - 1`` of L starts; the spare lanes of the last block repeat its
        last start and write nothing. Writes ``out`` (:class:`KQRecords`). Adds to the step the
        prompt u = K q and the factors' update from the gradient a in u (see the section's
        comment)."""
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
                    # kq: the prompt is u = K q; the gradient a in u then moves K and q
                    _attend(X[i], u, a.s, gamma[i], 1, 0, a.top, a.ref, a.offset, a.z, T, d, L)
                    if held:
                        for l in range(lanes):
                            out.risk[r, b0 + l] += _loss_value(run.loss, a.z[l]) / n
                    if last:
                        continue
                    _slopes(run.loss, a.z, a.w, n, L)
                    for l in range(L):                      # weights beyond float64: marked
                        if not abs(a.w[l]) <= KQ_LIMIT:
                            size[l] = np.inf
                    _add_gradient(X[i], a.s, gamma[i], 1, 0, a.ref, a.offset, a.w, a.c, a.g,
                                  T, d, L)
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
                            # (a = 0 too: its terms may all have underflowed)
                            if norm_a <= 0.0 or norm_q < 0.0 or norm_b < 0.0:
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


def _kq_warm_ups():
    """The calls on tiny inputs that compile descend_kq and descend_kq_wide."""
    n, T, d, m = 1, 2, 1, 1
    record = np.array([0, 1])
    for kernel, lanes in ((descend_kq, LANES), (descend_kq_wide, WIDE)):
        yield kernel, (0, 1, np.zeros((n, T, d)), np.zeros((n, T)), np.ones(d),
                       np.zeros((lanes, d, m)), np.zeros((lanes, d, m)), np.zeros((lanes, m)),
                       KQSettings(1, 0.1, LOGISTIC_CODE, True, 1e-12, record, 1.0, 1.0, 1.0),
                       empty_kq_records(len(record), lanes, d, m))


def ready_kq() -> None:
    """Compile :func:`descend_kq` and ``descend_kq_wide`` once per process (see
    :func:`_compile`)."""
    _compile(_READY_KQ, _kq_warm_ups)
