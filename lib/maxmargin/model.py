"""The prompt-attention model f(X) = <X v, softmax(X W p)>, its risk and analytic gradients.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``v`` is (d,), ``W`` is (d, d) or ``None``
(the identity), ``p`` is (..., d) with optional leading batch axes that every output keeps.

The logit of token t in sequence i is ``x_it^T W p = k_it^T p`` with key ``k_it = W^T x_it``; the
token score is ``gamma_it = Y_i v^T x_it``, and ``Y_i f(X_i) = sum_t s_it gamma_it``.

The excess risk `L(p) - L*` measures how far a prompt is from the risk's lower bound `L*`; it is
evaluated here over the families of prompts the book draws: a grid in the (p1, p2) plane, rays
R u, and the circle of radius R in that plane.
"""
from __future__ import annotations

import numpy as np
import torch

from . import _checks, _kernels
from ._numerics import (SAFE_EXPONENT, _attention, _excess_risk, _forward, _optimal_risk, _rescaled,
                        _risk, _risk_grad, _scaled_softmax, _slope_scaled, _softmax)
from .losses import Loss, get_loss, mean_loss
from .problem import exponents as _exponents, keyed, problem, scores_of as _scores


def softmax(a, *, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (max-shifted, so no overflow for huge logits).

    A logit of -inf is a masked token (weight 0); NaN, +inf, or a slice masked entirely raise a
    ValueError naming ``a``.

    Parameters
    ----------
    a : array of logits, any shape (a list or a torch tensor is converted).
    axis : keyword-only, the axis to normalise along (default -1, the last).

    Returns
    -------
    float64 array of the shape of ``a`` : non-negative weights summing to 1 along ``axis``.

    Raises
    ------
    ValueError : ``a`` holds NaN or +inf, every entry of a slice along ``axis`` is -inf,
        ``axis`` is not an axis of ``a`` (a bool included), or ``a`` has no entry along it.
    TypeError : ``a`` is None, complex or not numeric.

    Examples
    --------
    >>> np.round(mm.softmax([0.0, np.log(3.0)]), 4)  # weights 1 : 3
    array([0.25, 0.75])
    >>> mm.softmax([[0.0, -np.inf]])  # a masked token gets weight 0
    array([[1., 0.]])
    """
    a = _checks.as_float_array(a, "a")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: expected an axis of an array with {a.ndim} dimensions, got {axis!r}")
    if a.shape[axis] == 0:     # numpy's max would fail with its own "zero-size array" message
        raise ValueError(f"a: no logit along axis {axis} (shape {a.shape})")
    if not np.isfinite(a).all():
        _checks.finite(np.where(a == -np.inf, 0.0, a), "a")  # names the first NaN or +inf
        if a.size and np.any(np.max(a, axis=axis) == -np.inf):
            raise ValueError("a: a slice along axis has every logit -inf (nothing to attend to)")
    with np.errstate(over="ignore"):  # a difference beyond float64 is -inf, whose exp is 0
        return _softmax(a, axis)


def keys(X, *, W=None) -> np.ndarray:
    """Keys `k_it = W^T x_it`, shape (n, T, d). With ``W=None`` the keys are the tokens.

    The logit of token t is then `x_it^T W p = k_it^T p`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    (n, T, d) array : the keys, row t of sequence i being `x_it^T W`.

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, W is not (d, d), a value is NaN
        or inf, or a key exceeds float64 (naming W).
    TypeError : X or W is not a real numeric array (X None included).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.keys(X, W=np.array([[0.0, 1.0], [1.0, 0.0]]))  # W swaps the coordinates
    array([[[0., 1.],
            [1., 0.]]])
    >>> bool(np.array_equal(mm.keys(X), X))  # W = None: the tokens themselves
    True
    """
    return keyed(X, W).keys


def logits(X, p, *, W=None) -> np.ndarray:
    """Attention logits `x_it^T W p`, shape (..., n, T).

    Parameters
    ----------
    X : (n, T, d) tokens.
    p : (..., d) prompts; leading batch axes are kept in the output.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    (..., n, T) array : the logits `k_it^T p`.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d)), a value is NaN or inf, or the logits exceed float64 (naming p: attention,
        risk and gradients stay finite there, the logits themselves cannot be represented).
    TypeError : X, p or W is not a real numeric array.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.logits(X, [2.0, 0.0])
    array([[2., 0.]])
    >>> mm.logits(X, np.ones((3, 2))).shape  # a batch of 3 prompts
    (3, 1, 2)
    """
    K = keyed(X, W).keys
    p = _checks.batched_vector(p, K.shape[2], "p")
    out = _kernels.unbatch(_kernels.logits(_kernels.tensor(K), _kernels.batch(p)), p.shape[:-1])
    if not np.all(np.isfinite(out)):
        size = _log10_bound(K, p)
        raise ValueError(f"p: the logits x^T W p reach about 10^{size:.0f}, beyond float64 "
                         f"(at most 1.8e308); attention, risk and gradients stay finite there, "
                         f"the logits themselves cannot be represented")
    return out


def attention(X, p, *, W=None) -> np.ndarray:
    """Attention weights `s_i = softmax(X_i W p)`, shape (..., n, T).

    Finite for every finite input, huge prompts included (the logits are rescaled by powers of two
    where they would overflow). Accuracy: the weights are those of the computed logits, each
    within its rounding, about `d eps |k_it|^T |p|`, of the exact one; once that rounding reaches
    about 1 (logits near `2^52` and beyond) two tokens whose exact logits differ by less than it
    (an exact tie included) can get any split of their weight, e.g. one-hot either way. The
    answer is then the exact softmax of logits within rounding of the true ones, not of the
    true ones (``nn.PromptAttention`` alike).

    Parameters
    ----------
    X : (n, T, d) tokens.
    p : (..., d) prompts; leading batch axes are kept in the output.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    (..., n, T) array : the weights of each sequence, summing to 1 over its T tokens.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d)) or a value is NaN or inf; the message names the argument.
    TypeError : X, p or W is not a real numeric array.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> np.round(mm.attention(X, [np.log(3.0), 0.0]), 4)  # logits (log 3, 0): weights 3 : 1
    array([[0.75, 0.25]])
    >>> np.round(mm.attention(X, np.ones((4, 2))).sum(axis=-1), 4)  # 4 prompts, each sums to 1
    array([[1.],
           [1.],
           [1.],
           [1.]])
    """
    K = keyed(X, W).keys
    p = _checks.batched_vector(p, K.shape[2], "p")
    return _kernels.unbatch(_attention(K, p.reshape(-1, K.shape[2])), p.shape[:-1])


def scores(X, Y, v) -> np.ndarray:
    """Token scores `gamma_it = Y_i v^T x_it`, shape (n, T); (..., n, T) for batched v (..., d).

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    v : (d,) linear head, or (..., d) for a batch of heads.

    Returns
    -------
    (n, T) array, or (..., n, T) for batched v : the scores.

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, Y is not (n,) or has a label other
        than -1 and +1, v is not (..., d), a value is NaN or inf, or a score exceeds float64
        (naming v).
    TypeError : X, Y or v is not a real numeric array (None included).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.scores(X, [1.0], [1.0, 0.5])
    array([[1. , 0.5]])
    >>> mm.scores(X, [-1.0], [1.0, 0.5])  # the label flips the sign
    array([[-1. , -0.5]])
    """
    prob = keyed(X)
    Y = _checks.labels(Y, prob.shape[0])
    return _scores(prob.X, Y, _checks.batched_vector(v, prob.shape[2], "v"))


def predict(X, v, p, *, W=None) -> np.ndarray:
    """Model output `f(X_i) = v^T X_i^T softmax(X_i W p)`, shape (..., n).

    Parameters
    ----------
    X : (n, T, d) tokens.
    v : (d,) linear head.
    p : (..., d) prompts; leading batch axes are kept in the output.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    (..., n) array : the output of each sequence.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, v not (d,), p not
        (..., d), W not (d, d)), a value is NaN or inf, or `v^T x_it` exceeds float64 (naming v).
    TypeError : X, v, p or W is not a real numeric array (None included).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> f = mm.predict(X, [1.0, 0.5], [np.log(3.0), 0.0])  # 0.75 * 1 + 0.25 * 0.5
    >>> np.round(f, 4)
    array([0.875])
    """
    prob = keyed(X, W)
    d = prob.shape[2]
    values = _scores(prob.X, np.ones(prob.shape[0]), _checks.vector(v, d, "v"))  # v^T x_it
    p = _checks.batched_vector(p, d, "p")
    s = _kernels.unbatch(_attention(prob.keys, p.reshape(-1, d)), p.shape[:-1])
    return np.sum(s * values, axis=-1)


def risk(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Empirical risk `L(p) = (1/n) sum_i loss(Y_i f(X_i))`, shape (...).

    Finite whenever the risk is representable in float64 (huge prompts included); a risk beyond
    float64 (e.g. the exponential loss at margins below -710) raises a ValueError naming ``v``.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    p : (..., d) prompts; the output has their batch shape (...).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (...) array : the risk at each prompt (a 0-d array for p of shape (d,)).

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,),
        v not (d,), W not (d, d),
        p not (..., d)), a label is not -1 or +1, or a value is NaN or inf; the
        message names the argument.
        The risk beyond float64 names v; an unknown loss name names loss.
    TypeError : an argument is None (W excepted), complex or not numeric, or ``loss`` is neither a
        string nor a ``Loss``.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # scores (1, 0.5) under v = (1, 0.5)
    >>> round(float(mm.risk(X, [1.0], [1.0, 0.5], [0.0, 0.0])), 4)  # log(1 + exp(-0.75))
    0.3869
    >>> p = [np.log(3.0), 0.0]  # attention (0.75, 0.25), f = 0.875
    >>> round(float(mm.risk(X, [1.0], [1.0, 0.5], p, loss="correlation")), 4)
    -0.875
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _risk(prob, P, get_loss(loss)).reshape(lead)


def risk_grad(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in p, shape (..., d).

    `grad_p L = (1/n) sum_i l'(Y_i f_i) W^T X_i^T (diag(s_i) - s_i s_i^T) gamma_i`.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    p : (..., d) prompts; the output has shape (..., d).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (..., d) array : the gradient at each prompt.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,),
        v not (d,), W not (d, d),
        p not (..., d)), a label is not -1 or +1, or a value is NaN or inf; the
        message names the argument.
        A gradient (or the loss's slope) beyond float64 names v; an
        unknown loss name names loss.
    TypeError : an argument is None (W excepted), complex or not numeric, or ``loss`` is neither a
        string nor a ``Loss``.

    Examples
    --------
    At p = 0 the attention is (1/2, 1/2) and `(diag(s) - s s^T) gamma = (0.125, -0.125)`; with the
    correlation loss (l' = -1) the gradient is its negative, so descent raises the logit of the
    higher-score token 0:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.risk_grad(X, [1.0], [1.0, 0.5], [0.0, 0.0], loss="correlation")
    array([-0.125,  0.125])
    >>> np.round(mm.risk_grad(X, [1.0], [1.0, 0.5], [0.0, 0.0]), 4)  # l'(0.75) = -0.3208
    array([-0.0401,  0.0401])
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _risk_grad(prob, P, get_loss(loss)).reshape(lead + (P.shape[1],))


def risk_grad_v(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in v, shape (..., d): `(1/n) sum_i l'(Y_i f_i) Y_i X_i^T s_i`.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    p : (..., d) prompts; the output has shape (..., d).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (..., d) array : the gradient in v at each prompt.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,),
        v not (d,), W not (d, d),
        p not (..., d)), a label is not -1 or +1, or a value is NaN or inf; the
        message names the argument.
        A gradient (or the loss's slope) beyond float64 names v; an
        unknown loss name names loss.
    TypeError : an argument is None (W excepted), complex or not numeric, or ``loss`` is neither a
        string nor a ``Loss``.

    Examples
    --------
    With the correlation loss (l' = -1) the gradient is `-Y X^T s`, minus the attended token mix:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.risk_grad_v(X, [1.0], [1.0, 0.5], [0.0, 0.0], loss="correlation")
    array([-0.5, -0.5])
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    loss = get_loss(loss)
    s, margin, _, scaled, log_factor = _forward(prob, P, loss)
    Y = _kernels.tensor(prob.Y)
    weight = scaled.torch_derivative(margin) * (Y / Y.shape[0])[:, None]
    grad = _kernels.contract_tokens(s * weight[:, None, :], _kernels.tensor(prob.X))
    return _rescaled(grad, log_factor, loss).T.reshape(lead + (P.shape[1],))


def self_attention_logits(X, W, queries) -> np.ndarray:
    """Logits `x_it^T W z_i` with one query `z_i` per sequence, shape (..., n, T).

    ``W`` is (..., d, d); ``queries`` is (n, d), or (d,) for one shared query (the prompt p).

    Parameters
    ----------
    X : (n, T, d) tokens.
    W : (..., d, d) key-query matrices; leading batch axes are kept in the output.
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query shared by all.

    Returns
    -------
    (..., n, T) array : the logits.

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, W is not (..., d, d), queries is
        neither (n, d) nor (d,), a value is NaN or inf, or the logits exceed float64 (naming W).
    TypeError : X, W or queries is not a real numeric array (None included).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.self_attention_logits(X, np.eye(2), [2.0, 0.0])  # one query p: the logits X W p
    array([[2., 0.]])
    >>> mm.self_attention_logits(X, np.eye(2), [[0.0, 3.0]])  # one query per sequence
    array([[0., 3.]])
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    with np.errstate(over="ignore", invalid="ignore"):
        out = _kernels.self_attention_logits(X, W, _checks.queries(queries, n, d))
    if not np.all(np.isfinite(out)):
        raise ValueError("W: the logits x_it^T W z_i exceed float64 (at most 1.8e308); risk_W "
                         "and risk_grad_W stay finite there, the logits themselves cannot be "
                         "represented")
    return out


def risk_W(X, Y, v, W, queries, *, loss: str | Loss = "logistic") -> np.ndarray:
    """Risk as a function of the key-query matrix W (queries fixed), shape (...).

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,) (a batch of heads (..., d)
        broadcasts against the batch axes of W).
    W : (..., d, d) key-query matrices; the output has their batch shape (...).
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query p shared by all.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (...) array : the risk at each W (a 0-d array for W of shape (d, d)).

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (..., d), W not (..., d, d), queries neither (n, d) nor (d,)), a label is not -1 or +1, a
        value is NaN or inf, a score or the risk exceeds float64 (naming v), or the loss name
        is unknown.
    TypeError : an argument is None, complex or not numeric, or ``loss`` is neither a string nor
        a ``Loss``.

    Examples
    --------
    With one shared query p the model is the prompt model at W p: here W = I, so the risk is
    ``mm.risk`` at p.

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> p = np.array([1.0, 0.0])
    >>> r = mm.risk_W(X, [1.0], [1.0, 0.5], np.eye(2), p)
    >>> bool(np.isclose(r, mm.risk(X, [1.0], [1.0, 0.5], p)))
    True
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    gamma = _scores(X, _checks.labels(Y, n), _checks.batched_vector(v, d, "v"))
    W = _checks.batched_key_matrix(W, d)
    s = _self_attention(X, W, _checks.queries(queries, n, d))
    return mean_loss(get_loss(loss), np.sum(s * gamma, axis=-1), axis=-1)


def risk_grad_W(X, Y, v, W, queries, *, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in W, shape (..., d, d): `sum_i sum_t c_it x_it z_i^T`.

    `c_it` is the gradient in the logits. With one shared query p the gradient is rank one,
    `g p^T`, where g is the gradient in `u = W p`.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    W : (..., d, d) key-query matrices; the output has shape (..., d, d).
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query p shared by all.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (..., d, d) array : the gradient at each W.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v's
        last axis not d, W not (..., d, d), queries neither (n, d) nor (d,)), a label is not -1
        or +1, a value is NaN or inf, a score or the gradient exceeds float64 (naming v), or the
        loss name is unknown.
    TypeError : an argument is None, complex or not numeric, or ``loss`` is neither a string nor
        a ``Loss``.

    Examples
    --------
    With W = I and one query p, g is ``mm.risk_grad`` at u = p:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> p = np.array([1.0, 0.0])
    >>> G = mm.risk_grad_W(X, [1.0], [1.0, 0.5], np.eye(2), p)
    >>> bool(np.allclose(G, np.outer(mm.risk_grad(X, [1.0], [1.0, 0.5], p), p)))
    True
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    lead = W.shape[:-2]
    # one head: the batch axes are W's (a batch of heads crashed inside torch's einsum)
    gamma = _scores(X, _checks.labels(Y, n), _checks.vector(v, d, "v"))
    Z = _checks.queries(queries, n, d)
    loss = get_loss(loss)
    s = _self_attention(X, W, Z).reshape((-1, n, T))
    s = _kernels.tensor(np.moveaxis(s, 0, -1))
    margin, deviation = _kernels.margins(s, _kernels.tensor(gamma[..., None]))
    scaled, log_factor = _slope_scaled(loss, margin)
    dlogits = _kernels.logit_grad(s, deviation, margin, scaled).numpy()  # (n, T, B)
    grad = _contract_scaled(dlogits, X, Z)  # (d, B, d)
    grad = _rescaled(torch.from_numpy(grad.reshape(d, -1)), log_factor.repeat(d)
                     if log_factor is not None else None, loss)  # columns (b, e): run b's factor
    return np.moveaxis(grad.reshape(d, -1, d), 0, 1).reshape(lead + (d, d))


def _contract_scaled(dlogits: np.ndarray, X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """sum_it dlogits[i, t, b] x_it z_i^T as (d, B, d), finite wherever the result is.

    A single three-operand product overflows where a partial product dlogit * x does (keys
    1e3, slopes 1e306) although the gradient is representable, and one power of two for a whole
    run pushes a small sequence's terms to subnormals when another sequence is huge. So each
    factor is divided by a power of two per sequence (per run for the dlogits; exact), the sum
    over t is taken per sequence, and the terms of the sum over i are brought to one exponent
    per run, shifted down only as far as that run's largest term needs."""
    n, T, d = X.shape
    e_dl = np.frexp(np.abs(dlogits).max(axis=1))[1]  # (n, B)
    e_x = np.frexp(np.abs(X).reshape(n, -1).max(axis=1))[1]  # (n,)
    e_z = np.frexp(np.abs(Z).max(axis=1))[1]  # (n,)
    A = np.einsum("ntb,ntd->nbd", np.ldexp(dlogits, -e_dl[:, None, :]),
                  np.ldexp(X, -e_x[:, None, None]))  # (n, B, d), entries at most T
    e = e_dl + (e_x + e_z)[:, None]  # (n, B): sequence i's terms are A * z_i' * 2^e
    shift = np.maximum(e.max(axis=0) + int(np.ceil(np.log2(n * T))) - 1020, 0)  # (B,)
    with np.errstate(under="ignore"):
        terms = np.ldexp(A, (e - shift)[:, :, None])  # (n, B, d)
    grad = np.einsum("nbd,ne->dbe", terms, np.ldexp(Z, -e_z[:, None]))
    with np.errstate(over="ignore"):
        return np.ldexp(grad, shift[None, :, None])


def optimal_risk(X, Y, v, *, loss: str | Loss = "logistic") -> float:
    """The lower bound `L* = (1/n) sum_i loss(max_t gamma_it)` of the risk at every p.

    `L*` is the infimum of the risk when ATT-SVM(opt) is feasible (some p ranks every optimal token
    strictly first; unique optimal tokens, strictly decreasing continuous loss), and then it is
    approached only as `||p|| -> inf` and reached by no finite p. Otherwise the infimum is strictly
    larger than `L*` (e.g. when an optimal key lies in the convex hull of its sequence's other keys).

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    float : `L*`.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,),
        v not (d,)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument.
        A score or `L*` beyond float64 names v; an unknown loss name names
        loss.
    TypeError : X, Y or v is None, complex or not numeric, or ``loss`` is neither a string nor a
        ``Loss``.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # highest score 1 under v = (1, 0.5)
    >>> round(mm.optimal_risk(X, [1.0], [1.0, 0.5]), 4)  # log(1 + exp(-1))
    0.3133
    >>> mm.optimal_risk(X, [1.0], [1.0, 0.5], loss="correlation")
    -1.0
    """
    return _optimal_risk(problem(X, Y, v).scores, get_loss(loss))


# ----------------------------------------------------------------------------------------------
# The excess risk L(p) - L* over families of prompts
# ----------------------------------------------------------------------------------------------


def excess_risk(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Excess risk `L(p) - L*` (see :func:`optimal_risk`), shape (...) for p of shape (..., d).

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    p : (..., d) prompts; the output has their batch shape (...).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (...) array : `L(p) - L*` at each prompt, `>= 0`; for the built-in losses (and a ``Loss``
        with an ``excess`` form) accurate to a few units of roundoff relative to itself, also
        where `L(p)` and `L*` agree to every digit (computed from the deficit of each margin,
        not as a difference of risks).

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,),
        v not (d,), W not (d, d),
        p not (..., d)), a label is not -1 or +1, or a value is NaN or inf; the
        message names the argument.
        A risk beyond float64 names v; an unknown loss name names loss.
    TypeError : an argument is None (W excepted), complex or not numeric, or ``loss`` is neither a
        string nor a ``Loss``.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # scores (1, 0.5) under v = (1, 0.5)
    >>> float(mm.excess_risk(X, [1.0], [1.0, 0.5], [0.0, 0.0], loss="correlation"))  # -0.75 + 1
    0.25
    >>> np.round(mm.excess_risk(X, [1.0], [1.0, 0.5], [[0.0, 0.0], [20.0, -20.0]]), 4)
    array([0.0736, 0.    ])
    >>> float(mm.excess_risk(X, [1.0], [1.0, 0.5], [20.0, -20.0]))  # L(p) and L* agree to 1e-18
    5.712792159506935e-19
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _excess_risk(prob, P, get_loss(loss)).reshape(lead)


# ----------------------------------------------------------------------------------------------
# Validation shared by the functions above
# ----------------------------------------------------------------------------------------------


def _log10_bound(K: np.ndarray, p: np.ndarray) -> float:
    """log10 of a bound on |k^T p|, without overflow."""
    e = int(_exponents(K, None)) + int(np.max(_exponents(p, -1), initial=0))
    return (e + np.log2(K.shape[-1])) * np.log10(2.0)


def _self_attention(X: np.ndarray, W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """softmax over tokens of x_it^T W z_i, shape (..., n, T), finite for every finite input
    (the same power-of-two scaling as :func:`_attention`, per W of the batch and per query)."""
    eX = int(_exponents(X, None))
    eW = _exponents(W, (-2, -1))
    eZ = _exponents(Z, 1)
    margin = 2 * int(np.ceil(np.log2(X.shape[2])))
    if eX + int(np.max(eW, initial=0)) + int(eZ.max(initial=0)) + margin <= SAFE_EXPONENT:
        return _softmax(_kernels.self_attention_logits(X, W, Z))
    b = _kernels.self_attention_logits(np.ldexp(X, -eX), np.ldexp(W, -eW[..., None, None]),
                                       np.ldexp(Z, -eZ[:, None]))
    return _scaled_softmax(b, eX + eW[..., None, None] + eZ[:, None], axis=-1)


def _prepare(X, Y, v, p, W):
    """Validate once: the problem (with its head) and the prompts p as (B, d), with p's batch
    shape."""
    prob = problem(X, Y, v, W)
    p = _checks.batched_vector(p, prob.shape[2], "p")
    return prob, p.reshape(-1, prob.shape[2]), p.shape[:-1]

