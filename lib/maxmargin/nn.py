"""A real ``torch.nn.Module`` prompt-attention layer.

It shows that the formulas of :mod:`maxmargin.model` are the ones PyTorch trains: the layer factors
the key-query matrix as W = W_k^T W_q (two ``nn.Linear`` maps without bias, as in attention code),
uses the raw tokens as values, and reads the output at the prompt's position,
f(X) = v^T X^T softmax(X W p).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import _checks


class PromptAttention(nn.Module):
    """One-head prompt attention with a trainable prompt ``p`` (d,) and head ``v`` (d,).

    ``forward(X)`` takes X of shape (n, T, d) and returns f(X) of shape (n,). No `1/sqrt(d)` scaling.

    The key-query matrix is factored as `W = W_k^T W_q` (``key`` and ``query``, two ``nn.Linear``
    maps without bias), started at `W_k = W^T` and `W_q = I`. ``attention(X)`` gives the (n, T)
    weights; X may be a tensor or an array.

    Parameters
    ----------
    d : the token dimension, an integer >= 1.
    p : (d,) initial prompt, or None (the default) for zeros.
    v : (d,) initial head, or None (the default) for zeros.
    W : (d, d) initial key-query matrix, or None (the default) for the identity.
    dtype : torch.float64 (the default) or torch.float32.

    Attributes
    ----------
    p, v : ``nn.Parameter`` (d,), the prompt and the head.
    key, query : ``nn.Linear`` (d, d), `W_k` and `W_q`.
    W : (property) the (d, d) tensor `W_k^T W_q`.

    Raises
    ------
    ValueError : d < 1, p or v not a finite (d,) vector, W not a finite (d, d) matrix, or, in
        ``forward`` and ``attention``, X not of shape (n, T, d).
    TypeError : d not an integer, ``dtype`` not one of the two, or an argument not numeric.

    Examples
    --------
    >>> import torch
    >>> layer = mm.nn.PromptAttention(2, p=[np.log(3.0), 0.0], v=[1.0, 0.5])
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> np.round(layer.attention(torch.tensor(X)).detach().numpy(), 4)
    array([[0.75, 0.25]])
    >>> out = layer(torch.tensor(X)).detach()  # 0.75 * 1 + 0.25 * 0.5, as mm.predict
    >>> round(float(out[0]), 4), round(float(mm.predict(X, [1.0, 0.5], [np.log(3.0), 0.0])[0]), 4)
    (0.875, 0.875)
    """

    def __init__(self, d: int, p=None, v=None, W=None, dtype=torch.float64):
        super().__init__()
        d = _checks.positive_int(d, "d")
        if dtype not in (torch.float64, torch.float32):
            raise TypeError(f"dtype: expected torch.float64 or torch.float32, got {dtype!r}")
        p = np.zeros(d) if p is None else _checks.vector(p, d, "p")
        v = np.zeros(d) if v is None else _checks.vector(v, d, "v")
        W = _checks.key_matrix(W, d)
        self.key = nn.Linear(d, d, bias=False, dtype=dtype)
        self.query = nn.Linear(d, d, bias=False, dtype=dtype)
        with torch.no_grad():
            # W = key^T query; start from key = W^T, query = I so that the product is W.
            self.key.weight.copy_(torch.as_tensor(np.eye(d) if W is None else W.T, dtype=dtype))
            self.query.weight.copy_(torch.eye(d, dtype=dtype))
        self.p = nn.Parameter(torch.as_tensor(p, dtype=dtype).clone())
        self.v = nn.Parameter(torch.as_tensor(v, dtype=dtype).clone())

    @property
    def W(self) -> torch.Tensor:
        """The key-query matrix `W = W_k^T W_q`, shape (d, d)."""
        return self.key.weight.T @ self.query.weight

    def attention(self, X: torch.Tensor) -> torch.Tensor:
        """Attention weights `softmax(K q)` with keys `K = X W_k^T` and query `q = W_q p`, shape (n, T).

        Logits beyond float64 (while K and q are finite) are handled at unit scale: the weights
        are then the exact ones rounded (one-hot on the largest logit, shared among ties), not
        NaN. A key or query beyond float64 raises ValueError naming X and p."""
        X = self._tokens(X)
        keys, query = self.key(X), self.query(self.p)
        logits = keys @ query
        if bool(torch.isfinite(logits).all()):
            return torch.softmax(logits, dim=-1)
        return _softmax_of_product(keys, query)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """The output `f(X_i) = v^T X_i^T softmax(X_i W p)` of each sequence, shape (n,), for X of
        shape (n, T, d) (a tensor or an array); ValueError naming X for another shape."""
        X = self._tokens(X)
        return torch.einsum("nt,ntd,d->n", self.attention(X), X, self.v)

    def _tokens(self, X) -> torch.Tensor:
        """X as a tensor of the layer's dtype, shape (n, T, d), refused otherwise (naming X)."""
        if not isinstance(X, torch.Tensor):
            X = torch.as_tensor(_checks.as_float_array(X, "X"), dtype=self.p.dtype)
        d = self.p.shape[0]
        if X.ndim != 3 or X.shape[2] != d:
            raise ValueError(f"X: expected a tensor of shape (n, T, {d}), got {tuple(X.shape)}")
        if not X.is_floating_point():
            X = X.to(self.p.dtype)
        return X


def _softmax_of_product(keys: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """softmax over tokens of keys (n, T, d) @ query (d,) whose products leave float64: with
    a = max |keys| and c = max |query|, the logits are a c (keys / a) @ (query / c); their
    differences from each sequence's largest are taken at unit scale and multiplied by c, then
    by a, so that a difference beyond float64 becomes -inf (weight 0), never inf - inf."""
    if not (bool(torch.isfinite(keys).all()) and bool(torch.isfinite(query).all())):
        raise ValueError("X, p: the keys X W_k^T or the query W_q p leave float64; rescale the "
                         "tokens, the prompt or the key and query maps")
    a, c = keys.abs().max(), query.abs().max()
    unit = (keys / a) @ (query / c)
    shifted = unit - unit.max(dim=-1, keepdim=True).values
    return torch.softmax(shifted * c * a, dim=-1)


def logistic_risk(model: PromptAttention, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss log(1 + exp(-Y f(X))) of the layer, as a scalar tensor.

    Parameters
    ----------
    model : the :class:`PromptAttention` layer.
    X : (n, T, d) tokens, a tensor or an array (as for the layer).
    Y : (n,) labels in {-1, +1}, a tensor or an array.

    Returns
    -------
    0-d tensor : the risk, differentiable in the layer's parameters (the same value as
        ``mm.risk`` with the logistic loss).

    Raises
    ------
    ValueError : X not (n, T, d), or Y not (n,) labels in {-1, +1} (naming X or Y).
    TypeError : ``model`` is not a PromptAttention layer, or X or Y is not numeric.

    Examples
    --------
    >>> import torch
    >>> layer = mm.nn.PromptAttention(2, p=[np.log(3.0), 0.0], v=[1.0, 0.5])
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> risk = mm.nn.logistic_risk(layer, torch.tensor(X), torch.tensor([1.0]))
    >>> round(risk.item(), 4), round(float(mm.risk(X, [1.0], [1.0, 0.5], [np.log(3.0), 0.0])), 4)
    (0.3484, 0.3484)
    >>> risk.backward()
    >>> layer.p.grad.shape
    torch.Size([2])
    """
    if not isinstance(model, PromptAttention):
        raise TypeError(f"model: expected a PromptAttention layer, got {type(model).__name__}")
    out = model(X)
    labels = _checks.labels(Y.detach().cpu() if isinstance(Y, torch.Tensor) else Y, out.shape[0])
    Y = torch.as_tensor(labels, dtype=out.dtype)
    return nn.functional.softplus(-Y * out).mean()
