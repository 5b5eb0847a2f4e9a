"""The torch engine's gradient descent, written once for every parameterization (issue 38).

:func:`descend` is the one loop: per step the logits of the iterate, the softmax over tokens,
the margins z_i = Y_i f(X_i) (their risk recorded at ``run.record``), the derivative weights
(1/n) l'(z_i), the logit gradient dL/dlogit_it = (1/n) l'(z_i) s_it (gamma_it - z_i), and the
step of each gradient block, plain or normalized (:func:`~maxmargin._stepping._step_direction`),
with the finiteness check, the normalized step's scaled retry and the overflow errors.
A parameterization (the classes below) supplies only what differs: its logits and scores, its
gradient blocks, how a step moves it, what it records, and its start (for the errors).
Layout batch-last: attention (N, T, B), a block's gradient (..., D, B), one column per run.
"""
from __future__ import annotations

import numpy as np
import torch

from . import _kernels
from ._descent import Descent, Records, _largest, _overflow, _risk_of
from ._stepping import _scaled_contraction, _step_direction, _times_power_of_two, _up_exponent
from .losses import expit


def descend(model, run: Descent):
    """``run.steps`` GD steps of ``model`` from ``model.start``; returns its
    :class:`~maxmargin._descent.Records` (``model.finish(x)``). Raises the overflow errors of
    ``run.caller`` (:func:`~maxmargin._descent._overflow`)."""
    loss, normalized, record = run.loss, run.normalized, run.record
    x = model.start
    r = 0
    with _kernels.threads_for(model.work):
        for k in range(run.steps + 1):
            logits, gamma = model.logits(x)                   # (N, T, B), (N, T, 1 or B)
            s, margin, deviation = _kernels.attend(logits, gamma)
            if model.risk_shape is not None:                  # (M, n, B): n sequences a risk
                margin = margin.view(model.risk_shape)
            if record[r] == k:
                model.record(r, x, s, margin, _risk_of(margin, loss))
                r += 1
            if k == run.steps:
                if not bool(torch.isfinite(margin).all()):    # the last iterate's logits
                    raise _failed(model, run, k, gamma, last=True)
                break
            weights, scale = _kernels.derivative_weights(margin, loss, normalized)
            if weights is None:
                raise _failed(model, run, k, gamma)
            dlogits = model.logit_gradient(s, deviation, weights)
            # a gradient that is not finite makes the iterate not finite: one check below
            new = _moved(model, x, dlogits, scale, run)
            if not model.finite(new):                         # (one check where all is well)
                if normalized and not bool(torch.isfinite(dlogits).all()):
                    # a finite weight near float64's top (the exponential loss's exp(-z))
                    # times gamma - z overflowed: those runs' weights rescaled in the log
                    # domain, as where a weight itself overflows (the compiled kernels do so)
                    weights, scale = _kernels.derivative_weights(margin, loss, True, large=True)
                    if weights is not None:   # (the loop's s became dlogits in place)
                        s, _, deviation = _kernels.attend(*model.logits(x))
                        dlogits = model.logit_gradient(s, deviation, weights)
                        new = _moved(model, x, dlogits, scale, run)
                if normalized and not model.finite(new):
                    # the contraction overflowed though the direction is finite: each run's
                    # power of two out of the logit gradient (exact), and eps alike
                    dlogits, unit = model.scaled_down(dlogits)
                    new = _moved(model, x, dlogits, unit if scale is None else scale * unit, run)
                if not model.finite(new):
                    raise _failed(model, run, k, gamma)
            x = new
        return model.finish(x)


def _moved(model, x, dlogits, scale, run: Descent):
    """The next iterate: each gradient block of ``model`` (its loss part multiplied by ``scale``,
    None for 1, and its eps alike) stepped plain or normalized, each block on its own norm."""
    directions = []
    for (grad, rescaled), eps in zip(model.blocks(x, dlogits, scale), model.eps):
        direction = _step_direction(grad, run.normalized, eps if scale is None else eps * scale,
                                    rescaled)
        if scale is not None and model.exact_zeros:
            # a zero gradient is a zero step, also where eps * scale underflowed to 0 (0 / 0)
            direction = torch.where(torch.any(grad != 0, dim=-2, keepdim=True), direction, 0.0)
        directions.append(direction)
    return model.moved(x, run.lr, directions)


def _failed(model, run: Descent, step: int, gamma: torch.Tensor, last: bool = False) -> ValueError:
    return _overflow(run.caller, step, gamma.numpy(), run.lr, run.loss, run.normalized,
                     **model.start_args, last=last)


class _Parameterization:
    """What :func:`descend` asks of a parameterization, with the parts most share.

    Attributes: ``start`` the first iterate x (a tensor, or a tuple of factors); ``eps`` one
    normalization offset per gradient block; ``risk_shape`` (M, n, B), the margins (M n, B) of
    M risks, or None (the margins (n, B) of one risk per run); ``work`` elements per step (:func:`~maxmargin._kernels.threads_for`); ``start_args``
    the start's arguments of :func:`~maxmargin._descent._overflow`; ``exact_zeros``: whether a
    block's zero gradient under rescaled weights is exactly 0 (a factor's, when the other factor
    is 0: a zero step) rather than underflowed (p, W, (v, p): no direction, refused as 0 / 0).

    Methods: ``logits(x)`` -> logits (N, T, B) (overwritten by the softmax) and scores (N, T, 1
    or B); ``record(r, x, s, margin, risk)``; ``logit_gradient(s, deviation, weights)``;
    ``scaled_down(dlogits)`` -> (dlogits 2^-e, 2^-e in the shape of the weights' scale);
    ``blocks(x, dlogits, scale)`` -> [(gradient (..., D, B), rescaled or None)], ``scale`` the
    factor the loss part carries (None for 1; a penalty takes it too); ``moved(x, lr,
    directions)`` -> the next iterate; ``finite(x)``; ``finish(x)`` -> the records."""

    exact_zeros = False

    def logit_gradient(self, s, deviation, weights):
        """dL/dlogit_it = s_it (gamma_it - z_i) (1/n) l'(z_i) (N, T, B), in place of s."""
        dlogits = torch.mul(s, deviation, out=s)
        dlogits *= weights.reshape(len(s), 1, -1)
        return dlogits

    def scaled_down(self, dlogits):
        """(dlogits 2^-e, 2^-e (1, B)): each run's power of two (exact) out of the logit gradient."""
        unit = _kernels.power_of_two_scale(dlogits, dims=tuple(range(dlogits.dim() - 1)))
        return dlogits * unit, unit.reshape(1, -1)

    def finite(self, x) -> bool:
        return bool(torch.isfinite(x).all())


class Prompts(_Parameterization):
    """GD on prompts p, M instances x B runs: keys K (M, n, T, d), scores gamma (M, n, T), starts
    P (M, B, d), tracked tokens (M, n). Logits k_it^T p (M n, T, B); one block, the gradient
    dL/dp = sum_it dlogit_it k_it (M, d, B). Records p, the risk, the attention on the tracked
    tokens and on the others (``attention``), into ``path`` (R, M, B, d) if given."""

    def __init__(self, K, gamma, P, tracked, run: Descent, attention=True, path=None):
        M, n, T, d = K.shape
        B, R = P.shape[1], len(run.record)
        self.shape, self.attention, self.tracked = (M, n, T, B), attention, tracked
        self.path = np.empty((R, M, B, d)) if path is None else path
        self.risk = np.empty((R, M, B))
        self.on = np.empty((R if attention else 0, M, n, B))
        self.off = np.empty((R if attention else 0, M, n, B))
        self.Kt = _kernels.tensor(K.reshape(M, n * T, d))
        self.KtT = self.Kt.transpose(1, 2).contiguous()  # (M, d, n T): contiguous, a faster contraction
        self.G = _kernels.tensor(gamma.reshape(M * n, T, 1))
        hit = np.arange(T) == tracked[..., None]  # (M, n, T)
        self.on_mask = torch.from_numpy(hit.reshape(M * n, 1, T).astype(np.float64))
        self.off_mask = 1.0 - self.on_mask
        self.start = _kernels.tensor(np.swapaxes(P, 1, 2))  # (M, d, B)
        # margins (M n, B) as (M, n, B), the n of each risk (one instance: as they are)
        self.risk_shape = (M, n, B) if M > 1 else None
        self.eps, self.work = run.eps, M * n * T * B
        self.start_args = dict(start="p0", start_logits=lambda: np.einsum("mntd,mbd->mntb", K, P),
                               sizes=(_largest(K),), logits="k_it^T p")

    def logits(self, Pt):
        M, n, T, B = self.shape
        return (self.Kt @ Pt).reshape(M * n, T, B), self.G

    def record(self, r, Pt, s, margin, risk):
        M, n, T, B = self.shape
        self.path[r] = Pt.transpose(1, 2).numpy()
        if self.attention:
            self.on[r] = torch.bmm(self.on_mask, s).reshape(M, n, B).numpy()
            self.off[r] = torch.bmm(self.off_mask, s).reshape(M, n, B).numpy()  # accurate far below 1e-16
        self.risk[r] = risk

    def logit_gradient(self, s, deviation, weights):
        M, n, T, B = self.shape   # (the base's steps inline: a call is 5% of a small step)
        dlogits = torch.mul(s, deviation, out=s)
        dlogits *= weights.reshape(M * n, 1, B)
        return dlogits.reshape(M, n * T, B)

    def scaled_down(self, dlogits):
        unit = _kernels.power_of_two_scale(dlogits, dims=1)   # (M, 1, B): per instance and run
        return dlogits * unit, unit

    def blocks(self, Pt, dlogits, scale):
        return [(self.KtT @ dlogits, lambda: _scaled_contraction(self.KtT, dlogits))]

    def moved(self, Pt, lr, directions):
        return Pt - lr * directions[0]

    def finish(self, Pt) -> Records:
        """p (R, M, B, d), the risk; with ``attention``, on and off (R, M, B, n) and the final
        attention (M, B, n, T)."""
        M, n, T, B = self.shape
        if not self.attention:
            return Records((self.path,), self.risk)
        final = _kernels.softmax_tokens_((self.Kt @ Pt).reshape(M * n, T, B))
        final = final.reshape(M, n, T, B).permute(0, 3, 1, 2).numpy()
        return Records((self.path,), self.risk, on=self.on.transpose(0, 1, 3, 2),
                       off=self.off.transpose(0, 1, 3, 2), final=final, tracked=self.tracked)


class Matrices(_Parameterization):
    """GD on W with queries Z (n, d) (``shared``: one query q = Z[0] for all): tokens X (n, T, d),
    scores gamma (n, T), starts W0 (B, d, d). Logits x_it^T W z_i (n, T, B); one block, the
    gradient dL/dW = sum_it dlogit_it x_it z_i^T flattened (d d, B). Records W and the risk."""

    def __init__(self, X, gamma, W0, Z, shared: bool, run: Descent):
        n, T, d = X.shape
        B, R = len(W0), len(run.record)
        self.shape, self.shared = (n, T, d, B), shared
        self.path, self.risk = np.empty((R,) + W0.shape), np.empty((R, B))
        self.G, self.X2 = _kernels.tensor(gamma[..., None]), _kernels.tensor(X.reshape(n * T, d))
        self.X2T = self.X2.T.contiguous()                                   # (d, n T)
        self.Xb, self.XbT = self.X2.view(n, T, d), self.X2T.view(d, n, T).permute(1, 0, 2)
        self.q = _kernels.tensor(Z[0])                                      # (d,) shared query
        self.ZtT = _kernels.tensor(Z.T)                                     # (d, n)
        self.Zt = self.ZtT.T                                                # (n, d)
        self.start = _kernels.tensor(W0)                                    # (B, d, d)
        self.eps, self.risk_shape, self.work = run.eps, None, n * T * B
        self.start_args = dict(start="W0",
                               start_logits=lambda: _kernels.self_attention_logits(X, W0, Z),
                               sizes=(_largest(X), _largest(Z)), logits="x_it^T W z_i")

    def logits(self, Wt):
        # contract W with the queries first: u = W z (B, d, [n]), then the logits x_it^T u
        n, T, d, B = self.shape
        if self.shared:
            return (self.X2 @ (Wt @ self.q).T).view(n, T, B), self.G
        return torch.bmm(self.Xb, (Wt @ self.ZtT).permute(2, 1, 0)), self.G  # (n, T, d) @ (n, d, B)

    def record(self, r, Wt, s, margin, risk):
        self.path[r], self.risk[r] = Wt.numpy(), risk

    def blocks(self, Wt, dlogits, scale):
        # dL/dW = sum_it dlogit_it x_it z_i^T: first a = sum_t dlogit x (the tokens), then the
        # outer products with the queries (one for a shared query)
        n, T, d, B = self.shape
        if self.shared:
            a = self.X2T @ dlogits.view(n * T, B)                         # (d, B)
            grad = a.T[:, :, None] * self.q                               # (B, d, d)
        else:
            A = torch.bmm(self.XbT, dlogits)                              # (n, d, B)
            grad = A.permute(2, 1, 0) @ self.Zt                           # (B, d, n) @ (n, d)

        def rescaled():   # (grad 2^k, k): X, dlogits and the queries scaled up
            if self.shared:
                a, k = _scaled_contraction(self.X2T, dlogits.view(n * T, B))
                kq = _up_exponent(self.q, dims=0)
                grad = a.T[:, :, None] * _times_power_of_two(self.q, kq)
            else:       # one scale for all of X, and for each run's dlogits
                kx, kd = _up_exponent(self.X2T, dims=(0, 1)), _up_exponent(dlogits, (0, 1))
                A = torch.bmm(_times_power_of_two(self.XbT, kx),
                              _times_power_of_two(dlogits, kd))             # (n, d, B)
                k, kq = (kx + kd).reshape(1, B), _up_exponent(self.Zt, dims=(0, 1))
                grad = A.permute(2, 1, 0) @ _times_power_of_two(self.Zt, kq)
            return grad.reshape(B, -1).T, (k + kq).reshape(1, B)

        return [(grad.reshape(B, -1).T, rescaled)]

    def moved(self, Wt, lr, directions):
        return Wt - lr * directions[0].T.reshape(Wt.shape)

    def finish(self, Wt) -> Records:
        """W (R, B, d, d), the risk (R, B)."""
        return Records((self.path,), self.risk)


class Joint(_Parameterization):
    """Joint GD on (v, p): tokens X and keys K (n, T, d), labels Y (n,), starts V, P (B, d),
    tracked (n,) or None. Scores Y_i v^T x_it and logits k_it^T p (n, T, B) both move; one block
    (2, d, B) of the two gradients dL/dv = sum_it (1/n) l'(z_i) s_it Y_i x_it and
    dL/dp = sum_it dlogit_it k_it, each column normalized on its own (eps_v, eps_p). Records v,
    p, the risk, the probability and (``tracked`` given) the attention on the tracked tokens."""

    def __init__(self, X, Y, K, V, P, tracked, run: Descent):
        n, T, d = X.shape
        B, R = P.shape[0], len(run.record)
        self.shape, self.tracked, self.rows = (n, T, B), tracked, np.arange(n)
        self.v, self.p = np.empty((R, B, d)), np.empty((R, B, d))
        self.risk, self.probability = np.empty((R, B)), np.empty((R, B))
        self.on = np.empty((R, B, n))   # filled after the run (gd_joint) if tracked is None
        # tokens signed by their labels, Y_i x_it (exact): the scores are one matmul, XY @ v
        self.XY = _kernels.tensor((Y[:, None, None] * X).reshape(n * T, d))
        self.XYT = self.XY.T.contiguous()
        self.K2 = _kernels.tensor(K.reshape(n * T, d))
        self.K2T = self.K2.T.contiguous()
        self.start = _kernels.tensor(np.stack([V.T, P.T]))        # (2, d, B): v and p, batch-last
        self.grad = torch.empty_like(self.start)
        # (2, n, T, B): (1/n) l'(z_i) s_it (for dL/dv) and dlogits (for dL/dp), in place; views
        # of the two buffers made once (a view costs as much as a small step's multiply)
        self.weighted = torch.empty((2, n, T, B), dtype=torch.float64)
        self.parts, self.grads = tuple(self.weighted), tuple(self.grad)
        self.columns = tuple(part.view(n * T, B) for part in self.parts)   # (n T, B) each
        self.eps = [torch.tensor(run.eps, dtype=torch.float64).reshape(2, 1, 1)]
        self.risk_shape, self.work = None, n * T * B
        self.start_args = dict(start="p0", start_logits=lambda: np.einsum("ntd,bd->ntb", K, P),
                               sizes=(_largest(K),), logits="k_it^T p or scores Y_i v^T x_it",
                               start_scores=lambda: (Y[:, None, None] * X) @ V.T)

    def logits(self, VP):
        n, T, B = self.shape
        return (self.K2 @ VP[1]).view(n, T, B), (self.XY @ VP[0]).view(n, T, B)

    def record(self, r, VP, s, margin, risk):
        self.v[r], self.p[r] = VP[0].T.numpy(), VP[1].T.numpy()
        self.risk[r] = risk
        self.probability[r] = np.mean(expit(margin.numpy()), axis=0)
        if self.tracked is not None:
            self.on[r] = s.numpy()[self.rows, self.tracked].T

    def logit_gradient(self, s, deviation, weights):
        weights = weights[:, None, :]
        for_v, for_p = self.parts
        torch.mul(s, weights, out=for_v)
        torch.mul(s, deviation, out=for_p)
        for_p.mul_(weights)
        return self.weighted

    def blocks(self, VP, weighted, scale):
        n, T, B = self.shape
        for_v, for_p = (self.columns if weighted is self.weighted else
                        (weighted[0].view(n * T, B), weighted[1].view(n * T, B)))   # (retry)
        torch.mm(self.XYT, for_v, out=self.grads[0])   # dL/dv
        torch.mm(self.K2T, for_p, out=self.grads[1])   # dL/dp

        def rescaled():   # both gradients from factors scaled up: (grad 2^k, k)
            gv, kv = _scaled_contraction(self.XYT, for_v)
            gp, kp = _scaled_contraction(self.K2T, for_p)
            return torch.stack([gv, gp]), torch.stack([kv, kp])

        return [(self.grad, rescaled)]

    def moved(self, VP, lr, directions):
        return VP - lr * directions[0]

    def finish(self, VP) -> Records:
        """v, p (R, B, d), the risk and probability (R, B), on (R, B, n)."""
        return Records((self.v, self.p), self.risk, on=self.on, probability=self.probability)


class Factors(_Parameterization):
    """GD on the factors (K, Q) of W = K Q^T (gd_KQ): tokens X (n, T, d), scores gamma (n, T),
    queries Z (n, d) (``shared``: one query p = Z[0], contracted once: q = Q^T p, u = K q),
    starts K0, Q0 (B, d, m), penalty ``reg``. Logits x_it^T K Q^T z_i (n, T, B); two blocks,
    dK = G Q + 2 reg K and dQ = G^T K + 2 reg Q (G = dL/dW), each flattened (d m, B) and
    normalized on its own norm. Records K, Q and the risk (without the penalty)."""

    exact_zeros = True   # from Q0 = 0, dK = G Q = 0: K stays (test_keyquery.py)

    def __init__(self, X, gamma, Z, K0, Q0, reg: float, shared: bool, run: Descent):
        n, T, d = X.shape
        B, _, m = K0.shape
        R = len(run.record)
        self.shape, self.reg, self.shared = (n, T, d, B), reg, shared
        self.K, self.Q = np.empty((R, B, d, m)), np.empty((R, B, d, m))
        self.risk = np.empty((R, B))
        self.G, self.Xt, Zt = (_kernels.tensor(a) for a in (gamma[..., None], X, Z))
        self.ZtT = Zt.T.contiguous()                                 # (d, n)
        self.X2T = self.Xt.view(n * T, d).T.contiguous()            # (d, n T)
        self.p = Zt[0]                                               # the query, when shared
        self.start = (_kernels.tensor(K0), _kernels.tensor(Q0))     # (B, d, m) each
        self.eps, self.risk_shape, self.work = (run.eps[0],) * 2, None, n * T * B   # K and Q alike
        # The causes _overflow names: the start (K0, Q0), or the bound 2 max|gamma| max|x|
        # max|z| of the gradient in W, through which the factors' gradients go.
        self.start_args = dict(
            start="K0, Q0", sizes=(_largest(X), _largest(Z)), logits="x_it^T K Q^T z_i",
            start_logits=lambda: _kernels.self_attention_logits(X, K0 @ np.swapaxes(Q0, 1, 2), Z))
        # this step's Q^T p (B, m), or Q^T z_i (B, m, n): set by logits(x), read by blocks(x)
        # and gradients(x), which descend calls after logits of the same x (the retry too)
        self.q = self.C = None

    def logits(self, KQ):
        K, Q = KQ
        n, T, d, B = self.shape
        if self.shared:
            self.q = self.p @ Q                                # (B, m): Q^T p
            u = (K @ self.q[:, :, None])[:, :, 0]              # (B, d): K Q^T p
            return (self.Xt.view(n * T, d) @ u.T).view(n, T, B), self.G   # x_it^T K Q^T p
        self.C = Q.transpose(1, 2) @ self.ZtT                  # (B, m, n): Q^T z_i
        U = K @ self.C                                         # (B, d, n): u_i = K Q^T z_i
        return torch.einsum("ntd,bdn->ntb", self.Xt, U), self.G   # x_it^T K Q^T z_i

    def record(self, r, KQ, s, margin, risk):
        self.K[r], self.Q[r], self.risk[r] = KQ[0].numpy(), KQ[1].numpy(), risk

    def gradients(self, KQ, dlogits):
        """(G Q, G^T K) (B, d, m) from the logit gradient (n, T, B), without the penalty."""
        K, Q = KQ
        n, T, d, B = self.shape
        if self.shared:                                        # G = a p^T
            a = (self.X2T @ dlogits.view(n * T, B)).T          # (B, d)
            return a[:, :, None] * self.q[:, None, :], self.p[:, None] * (a[:, None, :] @ K)
        A = torch.einsum("ntb,ntd->bdn", dlogits, self.Xt)     # G = A Z, (B, d, n)
        return A @ self.C.transpose(1, 2), self.ZtT @ (A.transpose(1, 2) @ K)

    def blocks(self, KQ, dlogits, scale):
        K, Q = KQ
        grad_K, grad_Q = self.gradients(KQ, dlogits)
        factors = None
        if self.reg > 0:  # scaled as the loss's part when that was (scale < 1)
            B = K.shape[0]
            penalty = 2.0 * self.reg if scale is None else 2.0 * self.reg * scale.reshape(B, 1, 1)
            grad_K = grad_K + penalty * K
            grad_Q = grad_Q + penalty * Q
        else:   # both gradients from factors scaled up by powers of two (terms may be subnormal)
            factors = _KQFactors(self.X2T, self.Xt, dlogits, self.p, self.q, self.ZtT, self.C, K,
                                 self.shared)
        return [_flat(grad_K, None if factors is None else factors.grad_K),
                _flat(grad_Q, None if factors is None else factors.grad_Q)]

    def moved(self, KQ, lr, directions):
        """(K, Q) each moved along its block's direction (d m, B); without a second block
        (FactorStack's Q under freeze_Q) Q stays."""
        K, Q = KQ
        K = K - lr * directions[0].T.reshape(K.shape)
        return (K, Q if len(directions) == 1 else Q - lr * directions[1].T.reshape(Q.shape))

    def finite(self, KQ) -> bool:
        return bool(torch.isfinite(KQ[0]).all()) and bool(torch.isfinite(KQ[1]).all())

    def finish(self, KQ) -> Records:
        """K, Q (R, B, d, m), the risk (R, B)."""
        return Records((self.K, self.Q), self.risk)


class FactorStack(Factors):
    """GD on (K, Q) for M instances, one run each (gd_KQ_stack, the run axis b the instance
    axis): X (M, n, T, d), scores gamma (M, n, T), queries Z (M, n, d), starts K0, Q0 (M, d, m);
    ``freeze_Q``: one block, K's (Q stays at Q0). Logits (n, T, M); no rescaled gradients
    (as before: the stack's terms are not recomputed from scaled factors)."""

    def __init__(self, X, gamma, Z, K0, Q0, reg: float, freeze_Q: bool, run: Descent):
        M, n, T, d = X.shape
        m, R = K0.shape[2], len(run.record)
        self.shape, self.reg, self.freeze_Q = (n, T, d, M), reg, freeze_Q
        self.K, self.Q = np.empty((R, M, d, m)), np.empty((R, M, d, m))
        self.risk = np.empty((R, M))
        self.G = _kernels.tensor(np.moveaxis(gamma, 0, -1))          # (n, T, M)
        self.Xt, Zt = _kernels.tensor(X), _kernels.tensor(Z)         # (M, n, T, d), (M, n, d)
        self.ZtT = Zt.transpose(1, 2).contiguous()                   # (M, d, n)
        self.start = (_kernels.tensor(K0), _kernels.tensor(Q0))     # (M, d, m) each
        self.eps = (run.eps[0],) * 2       # K and Q alike
        self.risk_shape, self.work = None, n * T * M
        self.start_args = dict(
            start="K0, Q0", sizes=(_largest(X), _largest(Z)), logits="x_it^T K Q^T z_i",
            start_logits=lambda: np.einsum("bntd,bde,bne->bnt", X, K0 @ np.swapaxes(Q0, 1, 2), Z))

    def logits(self, KQ):
        K, Q = KQ
        self.C = Q.transpose(1, 2) @ self.ZtT                  # (M, m, n): Q^T z_i
        U = K @ self.C                                         # (M, d, n): u_i = K Q^T z_i
        return torch.einsum("bntd,bdn->ntb", self.Xt, U).contiguous(), self.G   # (n, T, M)

    def blocks(self, KQ, dlogits, scale):
        K, Q = KQ
        A = torch.einsum("ntb,bntd->bdn", dlogits, self.Xt)    # dL/dW = A Z, (M, d, n)
        grads = [A @ self.C.transpose(1, 2)]                   # G Q (M, d, m)
        if not self.freeze_Q:
            grads.append(torch.matmul(self.ZtT, A.transpose(1, 2) @ K))   # G^T K per instance
        if self.reg > 0:
            penalty = 2.0 * self.reg if scale is None else 2.0 * self.reg * scale.reshape(-1, 1, 1)
            grads = [g + penalty * factor for g, factor in zip(grads, KQ)]
        return [_flat(g, None) for g in grads]


def _flat(grad, rescaled) -> tuple:
    """(grad (B, d, m) as columns (d m, B), its ``rescaled`` as columns), a block of :func:`_moved`."""
    B = grad.shape[0]
    if rescaled is None:
        return grad.reshape(B, -1).T, None

    def flat_rescaled():
        scaled, k = rescaled()
        return scaled.reshape(B, -1).T, k.reshape(1, B)

    return grad.reshape(B, -1).T, flat_rescaled


class _KQFactors:
    """The gradients of :class:`Factors` at one step recomputed from factors scaled up by powers
    of two (:func:`~maxmargin._stepping._up_exponent`): ``grad_K()`` and ``grad_Q()`` return
    (grad 2^k (B, d, m), k (B,)), for a normalized step whose gradient's terms may be subnormal.
    X2T (d, n T), Xt (n, T, d), dlogits (n, T, B), p (d,) the shared query and q = Q^T p (B, m),
    or ZtT (d, n) and C = Q^T Z (B, m, n); K (B, d, m) this step's K."""

    def __init__(self, X2T, Xt, dlogits, p, q, ZtT, C, K, shared):
        self.X2T, self.Xt, self.dlogits, self.p, self.q = X2T, Xt, dlogits, p, q
        self.ZtT, self.C, self.K, self.shared = ZtT, C, K, shared
        self._a = None

    def _gradient_in_W(self):
        """a 2^ka (B, d) (shared; G = a p^T) or A 2^ka (B, d, n) (G = A Z), and ka (B,)."""
        if self._a is None:
            n, T, B = self.dlogits.shape
            kx = _up_exponent(self.X2T, dims=(0, 1))                       # (1, 1)
            kd = _up_exponent(self.dlogits, dims=(0, 1))                   # (1, 1, B)
            D = _times_power_of_two(self.dlogits, kd)
            if self.shared:
                a = (_times_power_of_two(self.X2T, kx) @ D.view(n * T, B)).T
            else:
                a = torch.einsum("ntb,ntd->bdn", D, _times_power_of_two(self.Xt, kx))
            self._a = (a, (kx + kd).reshape(B))
        return self._a

    def grad_K(self):
        a, ka = self._gradient_in_W()
        if self.shared:                                              # a q^T
            kq = _up_exponent(self.q, dims=1)                          # (B, 1)
            return a[:, :, None] * _times_power_of_two(self.q, kq)[:, None, :], ka + kq[:, 0]
        kc = _up_exponent(self.C, dims=(1, 2))                         # (B, 1, 1)
        return a @ _times_power_of_two(self.C, kc).transpose(1, 2), ka + kc[:, 0, 0]

    def grad_Q(self):
        a, ka = self._gradient_in_W()
        kK = _up_exponent(self.K, dims=(1, 2))                         # (B, 1, 1)
        K = _times_power_of_two(self.K, kK)
        if self.shared:                                              # p (K^T a)^T
            kp = _up_exponent(self.p, dims=0)                          # (1,)
            grad = _times_power_of_two(self.p, kp)[:, None] * (a[:, None, :] @ K)
            return grad, ka + kK[:, 0, 0] + kp
        kz = _up_exponent(self.ZtT, dims=(0, 1))                       # (1, 1)
        grad = _times_power_of_two(self.ZtT, kz) @ (a.transpose(1, 2) @ K)
        return grad, ka + kK[:, 0, 0] + kz[0]
