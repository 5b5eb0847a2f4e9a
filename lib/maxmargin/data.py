"""The paper's instances (Figures 1-4), an instance for nonlinear heads, and seeded random
instance generators.

Every instance is an :class:`Instance` with ``X`` (n, T, d), ``Y`` (n,), ``v`` (d,), ``W`` (d, d) or
``None``, and the initial prompts ``p0`` (k, d) the paper's figure starts from. In Figures 1, 2 and 4
``W = diag(1, 1, 0)``: attention sees the first two coordinates, and the third carries the value
read by ``v = (0, 0, 1)``, so keys and scores can be set independently. The nonlinear-head
instance :func:`mixing_example` is a :class:`HeadInstance`, whose ``head`` takes the place of ``v``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import _checks
from .heads import MLPHead


@dataclass(frozen=True)
class Instance:
    """A data set for the prompt-attention model, with the paper's initializations.

    Attributes
    ----------
    name : a short label, e.g. "fig1a".
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    v : (d,) linear head.
    W : (d, d) key-query matrix, or None for the identity.
    p0 : (k, d) the initial prompts the paper's figure starts from.
    v0 : (d,) initial head for joint training, or None (the default).
    notes : a one-line description (default "").
    extra : a dict of further data (default empty).
    shape : (property) (n, T, d).
    scores : (property) (n, T) token scores `gamma_it = Y_i v^T x_it`.
    optimal : (property) (n,) index of the highest-score token of each sequence; raises
        ValueError on a tie, as :func:`maxmargin.optimal_indices` does.

    Examples
    --------
    >>> inst = mm.data.fig1(variant="a")
    >>> inst.name, inst.shape, inst.p0.shape
    ('fig1a', (1, 3, 3), (6, 3))
    >>> inst.optimal
    array([0])
    """

    name: str
    X: np.ndarray
    Y: np.ndarray
    v: np.ndarray
    W: np.ndarray | None
    p0: np.ndarray
    v0: np.ndarray | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(n, T, d)."""
        return self.X.shape

    @property
    def scores(self) -> np.ndarray:
        """(n, T) token scores `gamma_it = Y_i v^T x_it`."""
        return self.Y[:, None] * (self.X @ self.v)

    @property
    def optimal(self) -> np.ndarray:
        """(n,) index of the highest-score token of each sequence, by the library's one tie rule
        (:func:`maxmargin.optimal_indices`): a ValueError names the sequence whose top tokens tie."""
        from .optimality import optimal_indices  # deferred: optimality imports the solvers

        return optimal_indices(self.X, self.Y, self.v)


_ATTEND_FIRST_TWO = np.diag([1.0, 1.0, 0.0])
_VALUE_AXIS = np.array([0.0, 0.0, 1.0])


def fig1(*, variant: str = "a") -> Instance:
    """Figure 1: one sequence of three tokens, training p only.

    ``variant="a"`` (global convergence): scores (1, 0.9, 0.9), the non-optimal scores are equal.
    ``variant="b"`` (local convergence): scores (1, 0.9, 0), so token 1 is locally optimal too.
    W = diag(1, 1, 0) and v = (0, 0, 1); the attended keys of tokens 0, 1, 2 (x1, x2, x3 in the
    paper's figure) are (-0.1, 1), (1, 0) and (0, 0). ``p0`` holds the six starts (0, y, 0) for
    y = 1, 0.5, 0, -0.5, -1, -1.5.

    Parameters
    ----------
    variant : keyword-only, "a" (the default) or "b"; "global" and "local" are accepted as
        synonyms.

    Returns
    -------
    Instance : named "fig1a" or "fig1b", n = 1, T = 3, d = 3.

    Raises
    ------
    ValueError : ``variant`` is not one of these names.

    Examples
    --------
    >>> mm.data.fig1(variant="a").scores
    array([[1. , 0.9, 0.9]])
    >>> mm.data.fig1(variant="b").scores
    array([[1. , 0.9, 0. ]])
    """
    third = {"a": 0.9, "b": 0.0, "global": 0.9, "local": 0.0}
    if variant not in third:
        raise ValueError(f"variant: expected 'a' (global) or 'b' (local), got {variant!r}")
    X = np.array([[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, third[variant]]]])
    p0 = np.array([[0.0, y, 0.0] for y in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)])
    key = "a" if third[variant] == 0.9 else "b"
    return Instance(f"fig1{key}", X, np.array([1.0]), _VALUE_AXIS.copy(), _ATTEND_FIRST_TWO.copy(), p0,
                    notes="n=1, T=3, d=3; tokens x1=(-0.1,1), x2=(1,0), x3=(0,0) in the attended plane")


def fig2() -> Instance:
    """Figure 2: three sequences of seven tokens from the seeded draw ``torch.manual_seed(0)``.

    Token 0 of each sequence is optimal (score 1); the six others all score 0.5 (equal
    non-optimal scores), so the global-convergence condition holds.

    Returns
    -------
    Instance : named "fig2", n = 3, T = 7, d = 3, W = diag(1, 1, 0), v = (0, 0, 1), and the six
        starts (x, 0, 0) for x = 1, 0.5, 0, -0.5, -1, -1.5 in ``p0``.

    Examples
    --------
    >>> inst = mm.data.fig2()
    >>> inst.shape, inst.optimal
    ((3, 7, 3), array([0, 0, 0]))
    >>> np.unique(inst.scores)
    array([0.5, 1. ])
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    X = 0.2 * torch.randn((3, 7, 3), generator=gen, dtype=torch.float32).numpy().astype(np.float64)
    X[:, 0, :] += [1.0, 0.0, 0.0]
    X[:, 1:4, :] += [-1.0, 1.0, 0.0]
    X[:, 4:7, :] += [-0.5, -0.5, 0.0]
    X[:, 0, 2] = 1.0
    X[:, 1:, 2] = 0.5
    p0 = np.array([[x, 0.0, 0.0] for x in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)])
    return Instance("fig2", X, np.ones(3), _VALUE_AXIS.copy(), _ATTEND_FIRST_TWO.copy(), p0,
                    notes="n=3, T=7, d=3; 0.2*randn plus shifts; optimal token 0 in every sequence")


def fig1_moved(*, x3_score: float = 0.0, x2=(1.0, 0.0)) -> Instance:
    """The Fig. 1 instance with token x3's score and token x2's attended position changed.

    x3_score : `gamma` of x3 (0 in Fig. 1b, 0.9 in Fig. 1a); x2 : (2,) x2's first two coordinates.
    Returns an Instance with n=1, T=3, d=3, W = diag(1, 1, 0), and Fig. 1's starts.

    Parameters
    ----------
    x3_score : keyword-only, the score of token x3 (the last token), default 0.0.
    x2 : keyword-only, (2,) the attended coordinates of token x2 (the middle token), default
        (1, 0).

    Returns
    -------
    Instance : named "fig1-moved".

    Raises
    ------
    ValueError : ``x3_score`` is NaN or inf, or ``x2`` is not a finite (2,) vector.
    TypeError : ``x2`` is None or not numeric.

    Examples
    --------
    >>> inst = mm.data.fig1_moved(x3_score=0.5, x2=(1.0, -0.5))
    >>> inst.scores, inst.X[0, 1, :2]
    (array([[1. , 0.9, 0.5]]), array([ 1. , -0.5]))
    """
    x3_score = _checks.real(x3_score, "x3_score")
    x2 = _checks.vector(x2, 2, "x2")
    base = fig1(variant="b")
    X = base.X.copy()
    X[0, 2, 2] = x3_score
    X[0, 1, :2] = x2
    return replace(base, name="fig1-moved", X=X)


def fig3(*, variant: str = "tight") -> Instance:
    """Figure 3: joint training of (v, p); n=3, T=2, d=2, W = identity, selected token 1.

    ``"tight"``: every sequence is a support vector of the v-SVM. ``"relaxed"``: the third
    sequence's selected token moves to (0.5, 1.5), off the v-SVM margin. Starts v0=(-1, 0), p0=(0, -1).

    Token 0 is the origin in every sequence; the selected tokens are (1, 1), (1, -1) and
    (0.5, 1) (tight) or (0.5, 1.5) (relaxed), with labels Y = (1, -1, 1).

    Parameters
    ----------
    variant : keyword-only, "tight" (the default) or "relaxed".

    Returns
    -------
    Instance : named "fig3-tight" or "fig3-relaxed", with ``v0`` set and ``W`` None.

    Raises
    ------
    ValueError : ``variant`` is neither "tight" nor "relaxed".

    Examples
    --------
    >>> inst = mm.data.fig3(variant="relaxed")
    >>> mm.v_svm(inst.X[:, 1], inst.Y).support  # the third sequence is off the margin
    array([ True,  True, False])
    """
    third = {"tight": 1.0, "relaxed": 1.5}
    if variant not in third:
        raise ValueError(f"variant: expected 'tight' or 'relaxed', got {variant!r}")
    selected = np.array([[1.0, 1.0], [1.0, -1.0], [0.5, third[variant]]])
    X = np.stack([np.zeros((3, 2)), selected], axis=1)
    return Instance(f"fig3-{variant}", X, np.array([1.0, -1.0, 1.0]), np.array([-1.0, 0.0]), None,
                    np.array([[0.0, -1.0]]), v0=np.array([-1.0, 0.0]),
                    notes="token 0 is the origin in every sequence; token 1 is the selected one")


def fig3_moved(c: float) -> Instance:
    """The Fig. 3 instance with the third sequence's selected token moved to (0.5, c).

    c = 1 is the paper's "tight" panel (a), c = 1.5 the "relaxed" panel (b). For c > 1 the third
    sequence has v-margin c > 1 under v = (0, 1) and leaves the v-SVM support set.
    Returns an Instance with n=3, T=2, d=2, W = identity, starts v0=(-1, 0), p0=(0, -1).

    Parameters
    ----------
    c : the second coordinate of the third sequence's selected token, > 0.

    Returns
    -------
    Instance : named "fig3-c<c>".

    Raises
    ------
    ValueError : ``c`` is not a finite positive number.
    TypeError : ``c`` is not a number.

    Examples
    --------
    >>> inst = mm.data.fig3_moved(2.0)
    >>> inst.name, np.round(mm.v_svm(inst.X[:, 1], inst.Y).margins, 4)  # v^mm = (0, 1)
    ('fig3-c2', array([1., 1., 2.]))
    """
    c = _checks.positive_float(c, "c")
    base = fig3(variant="tight")
    X = base.X.copy()
    X[2, 1] = [0.5, c]
    return replace(base, name=f"fig3-c{c:g}", X=X)


def fig4(C: float) -> Instance:
    """Figure 4 (loss-function effect): n=2, T=2, d=3, token 1 optimal with scores (C, 1).

    Sequence 1 is (0,0,0), (1,1,C); sequence 2 is (0,0,0), (1,-1,1); p starts at 0.
    W = diag(1, 1, 0) and v = (0, 0, 1); the max-margin direction is (1, 0, 0) for every C.

    Parameters
    ----------
    C : the score of sequence 1's optimal token, > 0.

    Returns
    -------
    Instance : named "fig4-C<C>", with ``p0`` = [(0, 0, 0)].

    Raises
    ------
    ValueError : ``C`` is not a finite positive number.
    TypeError : ``C`` is not a number.

    Examples
    --------
    >>> inst = mm.data.fig4(3.0)
    >>> inst.scores
    array([[0., 3.],
           [0., 1.]])
    >>> bool(np.allclose(mm.att_svm(inst.X, inst.optimal, W=inst.W).p, [1.0, 0.0, 0.0]))
    True
    """
    C = _checks.positive_float(C, "C")
    X = np.array([[[0.0, 0.0, 0.0], [1.0, 1.0, C]], [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0]]])
    return Instance(f"fig4-C{C:g}", X, np.ones(2), _VALUE_AXIS.copy(), _ATTEND_FIRST_TWO.copy(),
                    np.zeros((1, 3)), notes="the max-margin direction is (1, 0, 0) for every C")


def trap_counterexample() -> Instance:
    """Two sequences on which gradient descent from some starts misses the optimal tokens.

    n = 2, T = 2, d = 3, W = diag(1, 1, 0), v = e3, Y = (+1, +1). Sequence 0: optimal key (-2, 3),
    other (0, 0); sequence 1: optimal key (1, 0), other (0, 0); scores 1 and 0. The non-optimal
    scores are trivially equal and the ATT-SVM of the optimal tokens is `p^mm = (1, 1, 0)`, yet plain
    GD from p0 = (4, 0, 0) keeps sequence 0 on its non-optimal token for ever (a trap set {0}).
    ``p0`` holds the starts (0, 0, 0) and (4, 0, 0).

    Returns
    -------
    Instance : named "trap-counterexample"; the optimal token is 0 in both sequences.

    Examples
    --------
    `p^mm` solves `p_1 >= 1` and `-2 p_1 + 3 p_2 >= 1`, whose shortest solution is (1, 1):

    >>> inst = mm.data.trap_counterexample()
    >>> bool(np.allclose(mm.att_svm(inst.X, inst.optimal, W=inst.W).p, [1.0, 1.0, 0.0]))
    True
    >>> mm.gd(inst.X, inst.Y, inst.v, inst.p0, 500, 1.0, W=inst.W).selected_tokens()[1]
    array([1, 0])
    """
    X = np.array([[[-2.0, 3.0, 1.0], [0.0, 0.0, 0.0]],
                  [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
    p0 = np.array([[0.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    return Instance("trap-counterexample", X, np.ones(2), _VALUE_AXIS.copy(), _ATTEND_FIRST_TWO.copy(),
                    p0, notes="a counterexample to global convergence from every start (n = 2)")


@dataclass(frozen=True)
class HeadInstance:
    """A data set for a nonlinear head: ``X`` (n, T, d), ``Y`` (n,), ``W`` (d, d), ``head``.

    Attributes
    ----------
    name : a short label, e.g. "mixing-beta2".
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    W : (d, d) key-query matrix.
    head : the :class:`~maxmargin.heads.MLPHead` `psi`, in place of a linear head v.
    notes : a one-line description (default "").

    Examples
    --------
    >>> inst = mm.data.mixing_example()
    >>> inst.name, inst.X.shape, inst.head.dim
    ('mixing-beta2', (2, 4, 4), 4)
    """

    name: str
    X: np.ndarray
    Y: np.ndarray
    W: np.ndarray
    head: MLPHead
    notes: str = ""


def mixing_example(*, beta: float = 2.0, a=(1.0, 0.6)) -> HeadInstance:
    """Two sequences of four tokens whose best output may *mix* two tokens.

    Coordinates are (key1, key2, value1, value2) and W = diag(1, 1, 0, 0): attention sees the
    keys, the head sees the values. Token 0 has value (1, 0), token 1 value (0, 1), tokens 2
    and 3 value (0, 0). The head `psi(z) = a_1 tanh(beta z_3) + a_2 tanh(beta z_4)` is an MLP with
    two tanh units. For small ``beta`` it is nearly linear and token 0 alone is best; once
    `beta > arccosh(sqrt(a_1 / a_2))` mixing tokens 0 and 1 gives a larger output. In both
    sequences `k_0 - k_1 = (0, 1)`, so one prompt can set both in-set mixtures at once.

    Parameters
    ----------
    beta : keyword-only, the gain of the tanh units, > 0 (default 2.0).
    a : keyword-only, (2,) the output weights `(a_1, a_2)` (default (1.0, 0.6)).

    Returns
    -------
    HeadInstance : named ``"mixing-beta<beta>"``, Y = (1, 1).

    Raises
    ------
    ValueError : ``beta`` is not a finite positive number, or ``a`` is not a finite (2,) vector.
    TypeError : ``beta`` is not a number, or ``a`` is None or not numeric.

    Examples
    --------
    With a = (1, 0.6) the threshold is `arccosh(sqrt(1 / 0.6)) = 0.75`:

    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> round(float(inst.head.value([0.0, 0.0, 1.0, 0.0])), 4)  # token 0 alone: tanh(2)
    0.964
    >>> round(float(inst.head.value([0.0, 0.0, 0.5, 0.5])), 4)  # an even mix: 1.6 tanh(1)
    1.2186
    """
    beta = _checks.positive_float(beta, "beta")
    a = _checks.vector(a, 2, "a")
    X = np.array([
        [[1.0, 0.5, 1.0, 0.0], [1.0, -0.5, 0.0, 1.0], [-0.5, 1.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]],
        [[0.6, 0.8, 1.0, 0.0], [0.6, -0.2, 0.0, 1.0], [-1.0, 0.0, 0.0, 0.0], [0.2, -1.2, 0.0, 0.0]],
    ])
    B = beta * np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    return HeadInstance(f"mixing-beta{beta:g}", X, np.ones(2), np.diag([1.0, 1.0, 0.0, 0.0]),
                        MLPHead(a, B, np.zeros(2)),
                        notes="token 0 value (1,0), token 1 value (0,1), others (0,0)")


def random_instance(n: int, T: int, d: int, seed: int, *, equal_scores: bool = False,
                    margin: float | None = 0.5, spread: float = 1.0) -> Instance:
    """A seeded random instance with separate key and value coordinates.

    The first d-1 coordinates are Gaussian keys (scale ``spread``); the last coordinate is the value
    read by `v = e_d` through scores in [0, 1); `W = diag(1, ..., 1, 0)`. Token 0 of every sequence is
    the optimal one (score 1). With ``equal_scores`` every other token scores 0, the
    equal-non-optimal-score condition of the global theorem. With ``margin`` (not None) the optimal
    token is moved along a random unit direction until it out-ranks the others by that margin, so the
    ATT-SVM of the optimal tokens is feasible. ``seed`` is an integer >= 0, ``spread`` > 0 and
    ``margin`` >= 0 (0 allows ties).

    The other tokens' scores are drawn uniformly in [0, 0.9); Y = 1 and ``p0`` = [0].

    Parameters
    ----------
    n, T, d : the shape, integers n >= 1, T >= 2, d >= 2.
    seed : integer >= 0, the seed of ``numpy.random.default_rng``.
    equal_scores : keyword-only, bool (default False).
    margin : keyword-only, a number >= 0, or None for no planted margin (default 0.5).
    spread : keyword-only, the scale of the Gaussian keys, > 0 (default 1.0).

    Returns
    -------
    Instance : named "random-n<n>-T<T>-d<d>-seed<seed>".

    Raises
    ------
    ValueError : n < 1, T < 2, d < 2, seed < 0, margin < 0 or not finite, spread not a finite
        positive number, or tokens above 2 GiB (naming n).
    TypeError : n, T, d or seed not an integer (a bool included), ``equal_scores`` not a bool,
        or margin or spread not a number.

    Examples
    --------
    >>> inst = mm.data.random_instance(4, 3, 3, seed=0)
    >>> inst.shape, inst.optimal
    ((4, 3, 3), array([0, 0, 0, 0]))
    >>> mm.is_feasible(inst.X, inst.optimal, W=inst.W)  # the planted margin 0.5
    True
    """
    n = _checks.positive_int(n, "n")
    T = _checks.positive_int(T, "T", minimum=2)
    d = _checks.positive_int(d, "d", minimum=2)
    rng = np.random.default_rng(_checks.seed(seed))
    equal_scores = _checks.flag(equal_scores, "equal_scores")
    margin = None if margin is None else _checks.real(margin, "margin", minimum=0.0)
    spread = _checks.positive_float(spread, "spread")
    _checks.affordable("n", n, 0.0, 8.0 * n * T * d, "drawing the tokens")
    X = np.zeros((n, T, d))
    X[..., :-1] = spread * rng.standard_normal((n, T, d - 1))
    X[:, 1:, -1] = 0.0 if equal_scores else rng.uniform(0.0, 0.9, size=(n, T - 1))
    X[:, 0, -1] = 1.0
    if margin is not None:
        q = rng.standard_normal(d - 1)
        q /= np.linalg.norm(q)
        gaps = np.einsum("ntk,k->nt", X[:, :1, :-1] - X[:, 1:, :-1], q).min(axis=1)
        X[:, 0, :-1] += np.maximum(margin - gaps, 0.0)[:, None] * q
    W = np.diag(np.r_[np.ones(d - 1), 0.0])
    v = np.zeros(d)
    v[-1] = 1.0
    return Instance(f"random-n{n}-T{T}-d{d}-seed{seed}", X, np.ones(n), v, W, np.zeros((1, d)),
                    notes="keys Gaussian, token 0 optimal" + (", equal non-optimal scores" if equal_scores else ""))


def gaussian_instance(n: int, T: int, d: int, seed: int) -> Instance:
    """A seeded fully Gaussian instance: tokens, v ~ N(0, I), random labels, W = identity.

    No structure is planted, so several token selections may be feasible and locally optimal.

    Parameters
    ----------
    n, T, d : the shape, integers n >= 1, T >= 2, d >= 1.
    seed : integer >= 0, the seed of ``numpy.random.default_rng``.

    Returns
    -------
    Instance : named "gaussian-n<n>-T<T>-d<d>-seed<seed>", W None, ``p0`` = [0].

    Raises
    ------
    ValueError : n < 1, T < 2, d < 1, seed < 0, or tokens above 2 GiB (naming n).
    TypeError : n, T, d or seed is not an integer (a bool included).

    Examples
    --------
    >>> inst = mm.data.gaussian_instance(3, 4, 2, seed=1)
    >>> inst.shape, inst.W is None
    ((3, 4, 2), True)
    >>> bool(np.array_equal(inst.X, mm.data.gaussian_instance(3, 4, 2, seed=1).X))  # seeded
    True
    """
    n = _checks.positive_int(n, "n")
    T = _checks.positive_int(T, "T", minimum=2)
    d = _checks.positive_int(d, "d")
    rng = np.random.default_rng(_checks.seed(seed))
    _checks.affordable("n", n, 0.0, 8.0 * n * T * d, "drawing the tokens")
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    return Instance(f"gaussian-n{n}-T{T}-d{d}-seed{seed}", X, Y, v, None, np.zeros((1, d)))


def query_instance(n: int, T: int, d: int, seed: int) -> Instance:
    """A seeded instance with one query per sequence, drawn as in the follow-up paper's experiments.

    Tokens `x_it` and queries `z_i` are Gaussian vectors scaled to unit norm, the head v is a random
    unit vector and the labels are random signs. The queries are ``extra["queries"]`` (n, d):
    the logits are `x_it^T W z_i` (see :func:`maxmargin.gd_W`, :func:`maxmargin.w_svm`).

    Parameters
    ----------
    n, T, d : the shape, integers n >= 1, T >= 2, d >= 1.
    seed : integer >= 0, the seed of ``numpy.random.default_rng``.

    Returns
    -------
    Instance : named "query-n<n>-T<T>-d<d>-seed<seed>", W None, ``p0`` = [0], and
        ``extra = {"queries": (n, d) array}``.

    Raises
    ------
    ValueError : n < 1, T < 2, d < 1, seed < 0, or tokens above 2 GiB (naming n).
    TypeError : n, T, d or seed is not an integer (a bool included).

    Examples
    --------
    >>> inst = mm.data.query_instance(3, 4, 5, seed=0)
    >>> inst.shape, inst.extra["queries"].shape
    ((3, 4, 5), (3, 5))
    >>> bool(np.allclose(np.linalg.norm(inst.X, axis=-1), 1.0))  # unit-norm tokens
    True
    """
    n = _checks.positive_int(n, "n")
    T = _checks.positive_int(T, "T", minimum=2)
    d = _checks.positive_int(d, "d")
    rng = np.random.default_rng(_checks.seed(seed))
    _checks.affordable("n", n, 0.0, 8.0 * n * T * d, "drawing the tokens")
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    Y = rng.choice([-1.0, 1.0], size=n)
    return Instance(f"query-n{n}-T{T}-d{d}-seed{seed}", X, Y, v, None, np.zeros((1, d)),
                    notes="unit-norm Gaussian tokens and queries, unit head, random labels",
                    extra={"queries": Z})
