"""Input validation shared by the public functions.

Every checker returns a clean float64 (or int/bool) array, or raises a ``ValueError`` /
``TypeError`` whose message starts with the argument's name and says what is wrong.
"""
from __future__ import annotations

import numpy as np


def renamed(owner: str, old: str, new: str, what: str) -> property:
    """A read-only attribute ``old`` that raises an AttributeError pointing to ``new``: a
    renamed result field fails loudly in old code instead of disappearing silently."""

    def fail(self):
        raise AttributeError(f"{owner}.{old} was renamed {owner}.{new} ({what})")

    return property(fail)


def unmasked(value, name: str):
    """``value`` itself, or its data if it is a numpy masked array with no entry masked. A masked
    entry is refused: numpy's conversions drop the mask, so the library would silently compute
    with the values under it."""
    if not isinstance(value, np.ma.MaskedArray):
        return value
    hidden = np.ma.getmaskarray(value)
    if hidden.any():
        where = tuple(int(b) for b in np.argwhere(hidden)[0])
        raise ValueError(f"{name}: masked arrays with masked entries are not supported (the first "
                         f"at index {where}): fill them ({name}.filled(value)) or leave them out")
    return np.ma.getdata(value)


def as_array(value, name: str) -> np.ndarray:
    """``value`` as a numpy array of its own dtype (masked entries refused, :func:`unmasked`),
    refusing a ragged nested list with a ValueError naming ``name``."""
    try:
        return np.asarray(unmasked(value, name))
    except ValueError as exc:
        if "inhomogeneous" not in str(exc):
            raise
        raise ValueError(f"{name}: expected a rectangular array, got nested sequences of "
                         f"unequal lengths ({exc})") from None


def as_float_array(value, name: str) -> np.ndarray:
    """``value`` as a float64 array (a torch tensor detached), refusing None, complex and
    non-numeric values with a TypeError naming ``name``, and masked entries (:func:`unmasked`);
    not yet checked for shape or NaN."""
    if value is None:
        raise TypeError(f"{name}: expected an array of numbers, got None")
    value = unmasked(value, name)
    if callable(getattr(value, "detach", None)):  # a torch tensor, perhaps with requires_grad
        value = value.detach().cpu()
    try:
        complex_ = np.iscomplexobj(value)  # converts a nested list: may fail as the cast below
    except (TypeError, ValueError, OverflowError):
        complex_ = False
    if complex_:  # before the cast, which would warn and drop the imaginary part
        raise TypeError(f"{name}: complex values are not supported")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except OverflowError:  # a Python int beyond float64 (numpy's message names no argument)
        raise ValueError(f"{name}: holds an integer beyond float64 (at most 1.8e308)") from None
    except (TypeError, ValueError) as exc:
        if "inhomogeneous" in str(exc):  # a ragged nested list
            raise ValueError(f"{name}: expected a rectangular array, got nested sequences of "
                             f"unequal lengths ({exc})") from None
        raise TypeError(f"{name}: expected an array of real numbers ({exc})") from None
    return arr


def finite(arr: np.ndarray, name: str) -> np.ndarray:
    """Raise if ``arr`` holds NaN or inf, naming where."""
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name}: non-finite value at index {tuple(int(b) for b in bad)}")
    return arr


def tokens(X, name: str = "X") -> np.ndarray:
    """Sequences of tokens, shape (n, T, d), float64, finite, n >= 1, T >= 2."""
    X = as_float_array(X, name)
    if X.ndim != 3:
        raise ValueError(f"{name}: expected shape (n, T, d), got an array with shape {X.shape}")
    token_shape(X.shape, name)
    return finite(X, name)


def direction(u: np.ndarray, shape: tuple, expected: str, *, name: str = "direction") -> np.ndarray:
    """A finite reference direction ``u`` that broadcasts to iterates of ``shape`` along the last
    axis, with no zero vector (the angle with 0 is undefined); ``expected`` describes its shapes."""
    u = finite(as_float_array(u, name), name)
    try:
        fits = u.ndim >= 1 and np.broadcast_shapes(shape, u.shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{name}: expected shape {expected} (or one that broadcasts to the "
                         f"iterates' {tuple(shape)}), got {u.shape}")
    if not np.all(np.any(u != 0, axis=-1)):
        raise ValueError(f"{name}: a zero vector has no direction, so no cosine with it")
    return u


def token_shape(shape: tuple, name: str = "X") -> None:
    """Refuse a token shape (n, T, d) with no sequence, no feature, or fewer than 2 tokens."""
    n, T, d = shape
    if n < 1 or d < 1:
        raise ValueError(f"{name}: needs at least one sequence and one feature, got shape {shape}")
    if T < 2:
        raise ValueError(f"{name}: each sequence needs at least 2 tokens to select from, got T={T}")


def labels(Y, n: int, name: str = "Y") -> np.ndarray:
    """Labels, shape (n,), values in {-1, +1}, returned as float64."""
    Y = as_float_array(Y, name)
    if Y.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) to match X, got {Y.shape}")
    if not np.all(np.isin(Y, (-1.0, 1.0))):
        bad = Y[~np.isin(Y, (-1.0, 1.0))][0]
        raise ValueError(f"{name}: labels must be -1 or +1, found {float(bad)!r}")
    return Y


def vector(v, d: int, name: str) -> np.ndarray:
    """A single vector of shape (d,)."""
    v = as_float_array(v, name)
    if v.shape != (d,):
        raise ValueError(f"{name}: expected shape ({d},), got {v.shape}")
    return finite(v, name)


def batched_vector(p, d: int, name: str) -> np.ndarray:
    """A vector with optional leading batch axes, shape (..., d)."""
    p = as_float_array(p, name)
    if p.ndim == 0 or p.shape[-1] != d:
        raise ValueError(f"{name}: expected shape (..., {d}) with last axis d={d}, got {p.shape}")
    return finite(p, name)


def key_matrix(W, d: int, name: str = "W") -> np.ndarray | None:
    """The key-query matrix, shape (d, d), or None for the identity."""
    if W is None:
        return None
    W = as_float_array(W, name)
    if W.shape != (d, d):
        raise ValueError(f"{name}: expected shape ({d}, {d}) or None for the identity, got {W.shape}")
    return finite(W, name)


def batched_key_matrix(W, d: int, name: str = "W") -> np.ndarray:
    """Key-query matrices with optional leading batch axes, shape (..., d, d)."""
    W = as_float_array(W, name)
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"{name}: expected shape (..., {d}, {d}), got {W.shape}")
    return finite(W, name)


def queries(Z, n: int, d: int, name: str = "queries") -> np.ndarray:
    """One query per sequence, shape (n, d); a single (d,) query is broadcast to every sequence."""
    Z = as_float_array(Z, name)
    if Z.shape == (d,):
        Z = np.broadcast_to(Z, (n, d))
    if Z.shape != (n, d):
        raise ValueError(f"{name}: expected shape ({n}, {d}) or ({d},), got {Z.shape}")
    return finite(Z, name)


def indices(alpha, n: int, T: int, name: str = "alpha") -> np.ndarray:
    """One token index per sequence, shape (n,), ints in [0, T)."""
    arr = as_array(alpha, name)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name}: expected integer token indices, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected one index per sequence, shape ({n},), got {arr.shape}")
    out = (arr < 0) | (arr >= T)
    if np.any(out):
        i = int(np.argmax(out))
        raise ValueError(f"{name}: index {int(arr[i])} for sequence {i} is out of range [0, {T})")
    return arr.astype(np.int64)


def mask(m, n: int, name: str) -> np.ndarray:
    """A boolean mask over sequences, shape (n,)."""
    arr = as_array(m, name)
    if arr.dtype != bool:
        raise TypeError(f"{name}: expected a boolean mask of shape ({n},), got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},), got {arr.shape}")
    return arr


def token_sets(sets, n: int, T: int, proper: bool = False, name: str = "sets") -> np.ndarray:
    """A boolean mask of token sets, shape (n, T), with at least one token per sequence.

    With ``proper`` every set must also leave at least one token out (as the set-SVM needs).
    """
    arr = as_array(sets, name)
    if arr.dtype != bool:
        raise TypeError(f"{name}: expected a boolean mask of shape ({n}, {T}), got dtype {arr.dtype}")
    if arr.shape != (n, T):
        raise ValueError(f"{name}: expected shape ({n}, {T}), got {arr.shape}")
    for i, row in enumerate(arr):
        if not row.any():
            raise ValueError(f"{name}: the set of sequence {i} is empty (needs at least one True)")
        if proper and row.all():
            raise ValueError(f"{name}: the set of sequence {i} holds every token (needs a False)")
    return arr


#: The largest count accepted (int64's): counts are stored in int64 arrays and C loops.
MAX_COUNT = 2 ** 63 - 1


def _scalar(x):
    """A 0-d numpy array as its numpy scalar (np.array(0.1) as np.float64(0.1)), so every scalar
    setting takes it as it takes the scalar; anything else unchanged."""
    return x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x


def positive_int(k, name: str, minimum: int = 1) -> int:
    """An integer (not a bool) in [minimum, MAX_COUNT]."""
    k = _scalar(k)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(k).__name__}")
    if k < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {_short(k)}")
    if k > MAX_COUNT:
        raise ValueError(f"{name}: must be at most 2**63 - 1, got {_short(k)}")
    return int(k)


def _short(k) -> str:
    """An integer for a message: its digits, or its size when it has more than 30."""
    text = str(int(k))
    digits = len(text.lstrip("-"))
    return text if digits <= 30 else f"{'a negative' if k < 0 else 'an'} integer of {digits} digits"


def _shown(x) -> str:
    """A number for a message (a long int by its size, :func:`_short`)."""
    return _short(x) if isinstance(x, (int, np.integer)) else str(x)


def _float(x, name: str) -> float:
    """A number (not a bool) as a float, refusing a Python int beyond float64 as not finite
    (``float`` would raise an OverflowError, numpy's isfinite a TypeError, naming nothing)."""
    x = _scalar(x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {x!r} ({type(x).__name__})")
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"{name}: must be finite, got {_short(x)} (beyond float64, at most "
                         "1.8e308)") from None


def positive_float(x, name: str) -> float:
    """A finite number > 0, as a float."""
    f = _float(x, name)
    if not np.isfinite(f) or f <= 0:
        raise ValueError(f"{name}: must be a finite positive number, got {_shown(x)}")
    return f


# ----------------------------------------------------------------------------------------------
# Flags, seeds, bounded reals, and the estimate of what a call may cost
# ----------------------------------------------------------------------------------------------


def flag(value, name: str) -> bool:
    """A true/false switch: a bool (or numpy bool). Strings such as "no" are refused, not truthy."""
    value = _scalar(value)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def seed(value, name: str = "seed") -> int:
    """A random seed: an integer >= 0 (what numpy's default_rng accepts), not a bool."""
    value = _scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer >= 0, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return int(value)


def real(x, name: str, minimum: float | None = None) -> float:
    """A finite real number, optionally >= ``minimum``."""
    f = _float(x, name)
    if not np.isfinite(f):
        raise ValueError(f"{name}: must be finite, got {x}")
    if minimum is not None and f < minimum:
        raise ValueError(f"{name}: must be >= {minimum:g}, got {_shown(x)}")
    return f


# What one call may cost: multiply-adds (about 10-30 minutes on one laptop core), and bytes of
# the arrays it returns or records (2 GiB). Documented in the running appendix.
MAX_OPERATIONS = 1e12
MAX_BYTES = 2 ** 31


def affordable(name: str, value, operations: float, nbytes: float, what: str) -> None:
    """Refuse a call whose estimated cost exceeds MAX_OPERATIONS or MAX_BYTES, naming ``name``
    (the argument that sets the size, with its ``value``) and both estimates."""
    if operations <= MAX_OPERATIONS and nbytes <= MAX_BYTES:
        return
    raise ValueError(f"{name}: {what} with {name}={value} would take about {operations:.1e} "
                     f"operations (limit {MAX_OPERATIONS:.0e}) and {nbytes / 1e9:.3g} GB of "
                     f"memory (limit {MAX_BYTES / 1e9:.2f} GB); lower {name} or the batch size")
