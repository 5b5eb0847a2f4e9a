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


class PromptAttention(nn.Module):
    """One-head prompt attention with a trainable prompt ``p`` (d,) and head ``v`` (d,).

    ``forward(X)`` takes X of shape (n, T, d) and returns f(X) of shape (n,). No 1/sqrt(d) scaling.
    """

    def __init__(self, d: int, p=None, v=None, W=None, dtype=torch.float64):
        super().__init__()
        self.key = nn.Linear(d, d, bias=False, dtype=dtype)
        self.query = nn.Linear(d, d, bias=False, dtype=dtype)
        with torch.no_grad():
            # W = key^T query; start from key = W^T, query = I so that the product is W.
            self.key.weight.copy_(torch.as_tensor(np.eye(d) if W is None else np.asarray(W).T, dtype=dtype))
            self.query.weight.copy_(torch.eye(d, dtype=dtype))
        self.p = nn.Parameter(torch.zeros(d, dtype=dtype) if p is None else torch.as_tensor(p, dtype=dtype).clone())
        self.v = nn.Parameter(torch.zeros(d, dtype=dtype) if v is None else torch.as_tensor(v, dtype=dtype).clone())

    @property
    def W(self) -> torch.Tensor:
        """The key-query matrix W = W_k^T W_q, shape (d, d)."""
        return self.key.weight.T @ self.query.weight

    def attention(self, X: torch.Tensor) -> torch.Tensor:
        """Attention weights softmax(K q) with keys K = X W_k^T and query q = W_q p, shape (n, T)."""
        return torch.softmax(self.key(X) @ self.query(self.p), dim=-1)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return torch.einsum("nt,ntd,d->n", self.attention(X), X, self.v)


def logistic_risk(model: PromptAttention, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss log(1 + exp(-Y f(X))) of the layer, as a scalar tensor."""
    return nn.functional.softplus(-Y * model(X)).mean()
