"""The paper's equations as a reader writes them: one short numpy function each.

``mm.reference`` is the plain version of what the engines compute fast and safely. Each function
is the equation of a chapter, in numpy (cvxpy for the SVMs, imported inside them), for one
prompt p (d,) or one matrix W (d, d), with no validation beyond the shapes. The tests
(tests/lib/test_reference.py) check it against torch autograd, and the model functions, every
trainer (one step at a time) and the SVM solvers against it; chapter 8's optimizers are checked
against it in tests/lib/test_optimizers.py. Shapes: X (n, T, d), Y (n,) in {-1, +1}, v (d,), W (d, d) or None (the
identity), queries (n, d) (one query `z_i` per sequence) or (d,) (one p for all).

Where the engines compute differently, and why (one line each):

* ``mm.attention``, ``mm.risk`` (model.py): logits beyond `2^1000` are divided by powers of two
  before the softmax, since the products `x^T W p` themselves would overflow float64.
* ``mm.risk_grad`` and every GD engine (_kernels.margins): the margin `z_i` is summed relative to
  the most-attended token's score, so that `gamma_it - z_i` keeps its digits when attention is
  one-hot (here `z_i = sum_t s_it gamma_it`, then `gamma_it - z_i`).
* losses.py: `log(1 + e^-x)` as logaddexp and means of exp(-x) in the log domain, which cannot
  overflow (here the formulas, fine for the moderate margins of the tests and chapters).
* normalized steps (_stepping._step_direction): a gradient whose norm is outside (1e-140, 1e140) is
  divided by its largest entry first, so that `||g||` neither under- nor overflows.
* the exponential loss's slope beyond float64 (_kernels.derivative_weights): a normalized step
  rescales the weights (and eps with them), since its direction does not change.
* ``mm.risk_grad_W`` (model._contract_scaled): each sequence's terms are scaled by powers of two,
  so that a partial product dlogit * x cannot overflow while the sum is finite.
* ``mm.gd_W`` and ``mm.gd_KQ`` with one shared query p: GD on u = W p (resp. `q = Q^T p`), since
  the logits see W only through W p; the iterates are the same up to rounding.
* ``mm.optimizers.descend`` (mirror_step, sign_step, spectral_step, adam_step, polyak_step
  here): the gradient divided by its scale `e^c` (exactstep), norms taken after dividing by the
  largest entry, Adam's moments in a running unit, `L - L*` from exact differences.
* the compiled engine (_compiled.py, numba): the same steps as loops, the same rounding bounds.
* ``mm.att_svm``, ``mm.v_svm``, ``mm.w_svm`` (svm.py): Lawson-Hanson's NNLS on a working set and a
  KKT certificate instead of a generic conic solver; with a shared query the W-SVM's closed form
  `u^mm p^T / ||p||^2`; the nuclear W-SVM on a small core of the data's spans.
* ``mm.regularization_path`` (paths.py): several starts, an SLSQP polish and a KKT certificate
  at every radius, in the span of the key differences (here one projected-GD run per radius).

Examples
--------
>>> from maxmargin import reference as ref
>>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
>>> ref.gd_step(X, [1.0], [1.0, 0.5], [0.0, 0.0], 1.0, loss="correlation")  # p - lr grad
array([ 0.125, -0.125])
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: The margin losses l(x) and their derivatives l'(x), x = Y f(X) (Chapter 1, "Losses").
LOSSES = {
    "logistic": (lambda x: np.log1p(np.exp(-x)), lambda x: -1.0 / (1.0 + np.exp(x))),
    "exponential": (lambda x: np.exp(-x), lambda x: -np.exp(-x)),
    "correlation": (lambda x: -x, lambda x: -np.ones_like(x)),
}


class VP(NamedTuple):
    """A head and a prompt, (v, p), each (d,): one iterate of joint GD (Chapter 6)."""
    v: np.ndarray
    p: np.ndarray


class KQ(NamedTuple):
    """The factors (K, Q) of `W = K Q^T`, each (d, m): one iterate of GD on them (Chapter 7)."""
    K: np.ndarray
    Q: np.ndarray


def _solved(problem, variable, name):
    """The optimum of a solved cvxpy ``problem`` (its ``variable``), or a ValueError saying why
    not (an infeasible selection: no p or W meets the constraints)."""
    if problem.status != "optimal":
        raise ValueError(f"{name}: the program is {problem.status}, not solved to optimality")
    return variable.value


def _queries(queries, n):
    """The query z_i of each sequence, (n, d): a (d,) query p is every sequence's."""
    Z = np.asarray(queries, dtype=float)
    return np.broadcast_to(Z, (n, Z.shape[-1]))


# ---- Chapter 1: the model, its risk and gradients ---------------------------------------------


def softmax(a):
    """The softmax along the last axis (minus the max first: the standard
    shift, which changes nothing but cannot overflow)."""
    e = np.exp(a - np.max(a, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def attention(X, p, *, W=None):
    """Attention weights `s_i = softmax(X_i W p)`, shape (n, T).
    Chapter 1, definition def-01-prompt-attention, eq-01-model."""
    X = np.asarray(X, dtype=float)
    W = np.eye(X.shape[2]) if W is None else np.asarray(W, dtype=float)
    return softmax(X @ (W @ np.asarray(p, dtype=float)))


def scores(X, Y, v):
    """Token scores `gamma_it = Y_i v^T x_it`, shape (n, T).
    Chapter 1, definition def-01-token-scores."""
    X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
    return Y[:, None] * (X @ np.asarray(v, dtype=float))


def predict(X, v, p, *, W=None):
    """Outputs `f(X_i) = <X_i v, softmax(X_i W p)>`, shape (n,).
    Chapter 1, eq-01-model."""
    values = np.asarray(X, dtype=float) @ np.asarray(v, dtype=float)
    return np.sum(values * attention(X, p, W=W), axis=1)


def risk(X, Y, v, p, *, W=None, loss="logistic"):
    """`L(p) = (1/n) sum_i l(Y_i f(X_i))`, a float. Chapter 1, eq-01-risk."""
    value, _ = LOSSES[loss]
    margins = np.asarray(Y, dtype=float) * predict(X, v, p, W=W)
    return float(np.mean(value(margins)))


def risk_grad(X, Y, v, p, *, W=None, loss="logistic"):
    """`grad_p L = (1/n) sum_i l'(z_i) W^T X_i^T (diag(s_i) - s_i s_i^T) gamma_i`,
    shape (d,), with the margins `z_i = Y_i f(X_i) = s_i^T gamma_i`.
    Chapter 1, eq-01-risk and exercise ex-01-gradient."""
    X = np.asarray(X, dtype=float)
    W = np.eye(X.shape[2]) if W is None else np.asarray(W, dtype=float)
    _, slope = LOSSES[loss]
    s, gamma = attention(X, p, W=W), scores(X, Y, v)
    z = np.sum(s * gamma, axis=1)                 # margins z_i
    # the gradient in the logits, l'(z_i) (diag(s_i) - s_i s_i^T) gamma_i:
    dlogits = slope(z)[:, None] * s * (gamma - z[:, None])
    return W.T @ np.einsum("nt,ntd->d", dlogits, X) / len(X)


def risk_grad_v(X, Y, v, p, *, W=None, loss="logistic"):
    """`grad_v L = (1/n) sum_i l'(z_i) Y_i X_i^T s_i`, shape (d,). Chapter 6 (joint training)."""
    X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
    _, slope = LOSSES[loss]
    s = attention(X, p, W=W)
    z = Y * np.sum((X @ np.asarray(v, dtype=float)) * s, axis=1)
    return np.einsum("n,nt,ntd->d", slope(z) * Y, s, X) / len(X)


def self_attention(X, W, queries):
    """Weights `s_i = softmax(X_i W z_i)`, shape (n, T): each sequence's own query `z_i`.
    Chapter 7, the model of section "One query per sequence" (the prompt model when every
    `z_i = p`)."""
    X = np.asarray(X, dtype=float)
    Z = _queries(queries, len(X))
    return softmax(np.einsum("ntd,de,ne->nt", X, np.asarray(W, dtype=float), Z))


def risk_W(X, Y, v, W, queries, *, loss="logistic"):
    """`L(W) = (1/n) sum_i l(Y_i <X_i v, softmax(X_i W z_i)>)`, a float. Chapter 7."""
    value, _ = LOSSES[loss]
    z = np.sum(scores(X, Y, v) * self_attention(X, W, queries), axis=1)
    return float(np.mean(value(z)))


def risk_grad_W(X, Y, v, W, queries, *, loss="logistic"):
    """`grad_W L = (1/n) sum_i l'(z_i) sum_t s_it (gamma_it - z_i) x_it z_i^T`, shape (d, d).
    Chapter 7 (the gradient of GD on W; with one query p it is `g p^T`, g = grad_p at u = W p)."""
    X = np.asarray(X, dtype=float)
    Z = _queries(queries, len(X))
    _, slope = LOSSES[loss]
    s, gamma = self_attention(X, W, Z), scores(X, Y, v)
    z = np.sum(s * gamma, axis=1)
    dlogits = slope(z)[:, None] * s * (gamma - z[:, None])   # dL/dlogit_it, times n
    return np.einsum("nt,ntd,ne->de", dlogits, X, Z) / len(X)


def risk_grad_KQ(X, Y, v, K, Q, queries, *, loss="logistic", reg=0.0):
    """Gradients of `L(K Q^T) + reg (||K||_F^2 + ||Q||_F^2)` in the factors, KQ of (d, m) each:
    `G Q + 2 reg K` and `G^T K + 2 reg Q` with `G = grad_W L` at `W = K Q^T`. Chapter 7."""
    K, Q = np.asarray(K, dtype=float), np.asarray(Q, dtype=float)
    G = risk_grad_W(X, Y, v, K @ Q.T, queries, loss=loss)
    return KQ(G @ Q + 2.0 * reg * K, G.T @ K + 2.0 * reg * Q)


# ---- Chapter 3 (and 6, 7): one step of GD or normalized GD -------------------------------------


def descend(x, g, lr, *, normalized=False, eps=1e-12):
    """One step `x - lr g`, or normalized `x - lr g / (||g|| + eps)` (the
    Frobenius norm for a matrix). Chapter 3, definition def-normalized-gd."""
    x, g = np.asarray(x, dtype=float), np.asarray(g, dtype=float)
    if normalized:
        g = g / (np.linalg.norm(g) + eps)
    return x - lr * g


def gd_step(X, Y, v, p, lr, *, W=None, loss="logistic", normalized=False,
            eps=1e-12):
    """`p_{k+1}` from `p_k = p`: one (normalized) GD step on the prompt, shape
    (d,); what mm.gd and mm.gd_stack iterate. Chapter 3, def-normalized-gd."""
    g = risk_grad(X, Y, v, p, W=W, loss=loss)
    return descend(p, g, lr, normalized=normalized, eps=eps)


def gd_W_step(X, Y, v, W, queries, lr, *, loss="logistic", normalized=False, eps=1e-12):
    """`W_{k+1}` from `W_k = W`: one (normalized) GD step on the key-query matrix, shape (d, d);
    what ``mm.gd_W`` iterates. Chapter 7."""
    g = risk_grad_W(X, Y, v, W, queries, loss=loss)
    return descend(W, g, lr, normalized=normalized, eps=eps)


def gd_joint_step(X, Y, v, p, lr, *, normalized, W=None, loss="logistic", eps_v=1e-12,
                  eps_p=1e-12):
    """`(v, p)_{k+1}` from `(v, p)`: one joint step, each gradient normalized on its own, VP of (d,)
    each; what ``mm.gd_joint`` iterates. Chapter 6, joint training."""
    g_v = risk_grad_v(X, Y, v, p, W=W, loss=loss)
    g_p = risk_grad(X, Y, v, p, W=W, loss=loss)      # both at the old (v, p)
    return VP(descend(v, g_v, lr, normalized=normalized, eps=eps_v),
              descend(p, g_p, lr, normalized=normalized, eps=eps_p))


def gd_KQ_step(X, Y, v, K, Q, queries, lr, *, loss="logistic", normalized=False, eps=1e-12,
               reg=0.0):
    """`(K, Q)_{k+1}` from `(K, Q)`: one step on both factors at once, each normalized on its own,
    KQ of (d, m) each; what ``mm.gd_KQ`` iterates. Chapter 7."""
    g_K, g_Q = risk_grad_KQ(X, Y, v, K, Q, queries, loss=loss, reg=reg)
    return KQ(descend(K, g_K, lr, normalized=normalized, eps=eps),
              descend(Q, g_Q, lr, normalized=normalized, eps=eps))


# ---- Chapter 8: the optimizer picks the margin (one step each, on W) --------------------------


class AdamState(NamedTuple):
    """Adam's state after k steps: the moments m, v (shape of W) and the step count k."""
    m: np.ndarray
    v: np.ndarray
    k: int


def mirror_step(X, Y, v, W, queries, lr, *, p, loss="logistic"):
    """One step of normalized mirror descent with the potential `psi(W) = ||W||_p^p / p` (entrywise),
    shape of W: `psi'(W+) = psi'(W) - lr G / ||G||_q`, with `psi'(W) = sign(W) |W|^(p-1)`, its inverse
    `sign(U) |U|^(1/(p-1))`, `q = p / (p - 1)` and `G = grad_W L`. Chapter 8, mirror descent."""
    G = risk_grad_W(X, Y, v, W, queries, loss=loss)
    q = p / (p - 1.0)
    U = np.sign(W) * np.abs(W) ** (p - 1.0) - lr * G / np.sum(np.abs(G) ** q) ** (1.0 / q)
    return np.sign(U) * np.abs(U) ** (1.0 / (p - 1.0))


def sign_step(X, Y, v, W, queries, lr, *, loss="logistic"):
    """W - lr sign(grad_W L) (sign(0) = 0): steepest descent in the entrywise max-norm.
    Chapter 8, sign descent."""
    return np.asarray(W, dtype=float) - lr * np.sign(risk_grad_W(X, Y, v, W, queries, loss=loss))


def spectral_step(X, Y, v, W, queries, lr, *, loss="logistic"):
    """`W - lr U V^T` with `G = grad_W L = U S V^T`, singular values below 1e-10 times the largest
    dropped: steepest descent in the spectral norm. Chapter 8, spectral descent."""
    U, S, Vt = np.linalg.svd(risk_grad_W(X, Y, v, W, queries, loss=loss), full_matrices=False)
    keep = S > 1e-10 * S[0]
    return np.asarray(W, dtype=float) - lr * U[:, keep] @ Vt[keep]


def adam_step(X, Y, v, W, queries, lr, *, state=None, betas=(0.9, 0.999), eps=1e-8,
              loss="logistic"):
    """(W+, state+): one step of Adam as torch.optim.Adam takes it (no weight decay):
    `m = b1 m + (1 - b1) G`, `v = b2 v + (1 - b2) G^2`, `W+ = W - lr m_hat / (sqrt(v_hat) + eps)`,
    `m_hat = m / (1 - b1^k)`, `v_hat = v / (1 - b2^k)`; ``state`` None is the start (zeros, k = 0).
    Chapter 8, Adam."""
    W = np.asarray(W, dtype=float)
    G = risk_grad_W(X, Y, v, W, queries, loss=loss)
    b1, b2 = betas
    if state is None:
        state = AdamState(np.zeros_like(W), np.zeros_like(W), 0)
    k = state.k + 1
    m = b1 * state.m + (1 - b1) * G
    s = b2 * state.v + (1 - b2) * G * G
    W_next = W - lr * (m / (1 - b1 ** k)) / (np.sqrt(s / (1 - b2 ** k)) + eps)
    return W_next, AdamState(m, s, k)


def polyak_step(X, Y, v, W, queries, lr, *, loss="logistic"):
    """`W - ((L - L*) / ||G||_F^2) G`, G = grad_W L, with `L* = (1/n) sum_i l(gamma_i tau_i)` the
    risk at each sequence's top token `tau_i = argmax_t x_it^T W z_i` (the Polyak step); where
    `L - L* <= 0`, a normalized step `W - lr G / ||G||_F`. Chapter 8, step-size rules."""
    W = np.asarray(W, dtype=float)
    G = risk_grad_W(X, Y, v, W, queries, loss=loss)
    value, _ = LOSSES[loss]
    X = np.asarray(X, dtype=float)
    a = np.einsum("ntd,de,ne->nt", X, W, _queries(queries, len(X)))
    top = np.argmax(a, axis=1)
    gamma = scores(X, Y, v)
    excess = risk_W(X, Y, v, W, queries, loss=loss) - np.mean(value(gamma[np.arange(len(X)), top]))
    size = np.linalg.norm(G)
    return W - (excess / size ** 2 * G if excess > 0 else lr * G / size)


# ---- Chapters 2, 6, 7: the max-margin programs (cvxpy) -----------------------------------------


def att_svm(X, alpha, *, W=None, relaxed=None):
    """`p^mm = argmin ||p||` s.t. `(x_{i alpha_i} - x_it)^T W p >= b_i` for `t != alpha_i`, shape (d,);
    `b_i = 1`, or 0 where ``relaxed`` (n,) is True. Chapter 2, eq-02-att-svm; Chapter 6,
    eq-06-relaxed."""
    import cvxpy as cp

    X = np.asarray(X, dtype=float)
    n, T, d = X.shape
    K = X @ (np.eye(d) if W is None else np.asarray(W, dtype=float))  # keys k_it = W^T x_it
    b = np.ones(n) if relaxed is None else np.where(relaxed, 0.0, 1.0)
    p = cp.Variable(d)
    constraints = [(K[i, alpha[i]] - K[i, t]) @ p >= b[i]
                   for i in range(n) for t in range(T) if t != alpha[i]]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return _solved(problem, p, "att_svm")


def v_svm(R, Y):
    """`v^mm = argmin ||v||` s.t. `Y_i v^T r_i >= 1`, shape (d,). Chapter 6, def-06-v-svm."""
    import cvxpy as cp

    R, Y = np.asarray(R, dtype=float), np.asarray(Y, dtype=float)
    v = cp.Variable(R.shape[1])
    problem = cp.Problem(cp.Minimize(cp.sum_squares(v)), [cp.multiply(Y, R @ v) >= 1])
    problem.solve(solver=cp.CLARABEL)
    return _solved(problem, v, "v_svm")


def w_svm(X, alpha, *, queries, norm="frobenius"):
    """`W^mm = argmin ||W||` s.t. `(x_{i alpha_i} - x_it)^T W z_i >= 1` for `t != alpha_i`, shape
    (d, d), in the norm ``norm``: "frobenius", "nuclear", "spectral", "l1", "linf" or a number
    `q >= 1` (the entrywise `l_q` norm). Chapter 7, eq-07-w-svms; Chapter 8, eq-08-norm-svm."""
    import cvxpy as cp

    X = np.asarray(X, dtype=float)
    n, T, d = X.shape
    Z = _queries(queries, n)
    W = cp.Variable((d, d))
    constraints = [(X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1
                   for i in range(n) for t in range(T) if t != alpha[i]]
    named = {"frobenius": cp.sum_squares(W), "nuclear": cp.normNuc(W), "spectral": cp.sigma_max(W),
             "l1": cp.norm(cp.vec(W, order="C"), 1),
             "linf": cp.norm(cp.vec(W, order="C"), "inf")}
    if isinstance(norm, str) and norm not in named:
        raise ValueError(f"norm: expected one of {sorted(named)} or a number q >= 1, got {norm!r}")
    objective = named[norm] if isinstance(norm, str) else cp.norm(cp.vec(W, order="C"), float(norm))
    problem = cp.Problem(cp.Minimize(objective), constraints)
    problem.solve(solver=cp.CLARABEL)
    return _solved(problem, W, "w_svm")


# ---- Chapter 5: the regularization path --------------------------------------------------------


def regularization_path(X, Y, v, radii, *, W=None, loss="logistic", steps=2000, lr=1.0):
    """`p_bar(R)` in `argmin_{||p|| <= R} L(p)` for each radius, shape (k, d): projected GD (a plain
    step, then back onto the ball), from the previous radius's point. Chapter 5, eq-05-reg-path.

    A local method on a nonconvex problem, stopped after ``steps`` steps per radius: it tends to
    a stationary point of the ball problem (the minimizer when the start lies in its basin), and
    ``steps`` must be enough for it to get there (check the projected gradient; chapter 5's
    instances need 2000 for R <= 2, a run at R = 2 on a random instance needed far more)."""
    p = np.zeros(np.asarray(X).shape[2])
    points = []
    for R in radii:
        for _ in range(steps):
            p = descend(p, risk_grad(X, Y, v, p, W=W, loss=loss), lr)
            p = p * min(1.0, R / max(np.linalg.norm(p), 1e-300))  # the projection on ||p|| <= R
        points.append(p)
    return np.array(points)
