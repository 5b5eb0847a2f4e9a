"""maxmargin: the library behind the executable companion to
"Max-Margin Token Selection in Attention Mechanism" (Tarzanagh, Li, Zhang, Oymak; NeurIPS 2023).

Import it as ``import maxmargin as mm``. Shapes: X (n, T, d), Y (n,), v (d,), W (d, d) or None,
p (..., d). Token indices are 0-based. Arrays may be lists, numpy arrays or torch tensors
(detached); a numpy masked array is refused when an entry is masked (numpy's conversions drop the
mask, so its hidden values would be used): fill it or leave those entries out.

The top level holds the paper's concepts (``__all__``); the paper's instances are in
``mm.data``, a ``torch.nn`` layer in ``mm.nn``, and the paper's equations written plainly, one
short numpy function each, in ``mm.reference`` (what the engines are tested against). The
book's figures and explorers live apart, in ``maxmargin.book`` (``from maxmargin.book import plots, explore``), which is the only part that
loads matplotlib or ipywidgets; cvxpy and SciPy load on first use.
"""
from __future__ import annotations

import importlib as _importlib

from . import data, exactstep, nn, normsvm, optimizers, reference
from .heads import (
    MLPHead, OptimalSets, SetDirection, head_attention, head_predict, head_risk, head_risk_grad, mlp_head,
    optimal_sets, set_direction, set_offset,
)
from .keyquery import KQTrajectory, PenaltyPath, gd_KQ, gd_KQ_stack, penalty_path
from .losses import CORRELATION, EXPONENTIAL, LOGISTIC, LOSSES, Loss, get_loss
from .model import (
    attention, excess_risk, keys, logits, optimal_risk, predict, risk, risk_grad, risk_grad_v, risk_grad_W, risk_W, scores,
    self_attention_logits, softmax,
)
from .optimality import (
    Selection, SelectionCensus, check_selection, feasible_selections, is_locally_optimal,
    locally_optimal_indices, optimal_indices, selection_census, support_tokens,
)
from .paths import RegularizationPath, local_regularization_path, regularization_path
from .svm import (
    CvxpyProgram, IllConditionedError, JointSVMs, SVMResult, SetSVMResult, VSVMResult, WSVMResult, att_svm, att_svm_problem,
    is_feasible, joint_svms, least_distance, set_svm, v_svm, w_svm,
)
from .train import (
    JointTrajectory, StackTrajectory, Trajectory, WTrajectory, cosine, gd, gd_joint, gd_stack, gd_W,
)
from .traps import TrapSet, trap_sets



def _package_version() -> str:
    """pyproject.toml's version in a source checkout (its one source), else the installed one."""
    import tomllib
    from importlib import metadata
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if source.is_file():
        project = tomllib.loads(source.read_text()).get("project", {})
        if project.get("name") == "maxmargin":
            return project["version"]
    try:
        return metadata.version("maxmargin")
    except metadata.PackageNotFoundError:
        return "unknown"


__version__ = _package_version()

del annotations  # the __future__ feature, not a name of the library

__all__ = [
    # the model and its risk (model, losses)
    "softmax", "keys", "logits", "attention", "scores", "predict", "risk", "risk_grad",
    "risk_grad_v", "self_attention_logits", "risk_W", "risk_grad_W", "optimal_risk",
    "excess_risk",
    "Loss", "LOSSES", "LOGISTIC", "EXPONENTIAL", "CORRELATION", "get_loss",
    # max-margin problems (svm)
    "att_svm", "att_svm_problem", "is_feasible", "set_svm", "v_svm", "w_svm", "joint_svms",
    "least_distance", "IllConditionedError", "CvxpyProgram", "SVMResult", "SetSVMResult", "VSVMResult", "WSVMResult", "JointSVMs",
    # optimal and locally-optimal selections (optimality), trap sets (traps)
    "optimal_indices", "support_tokens", "check_selection", "is_locally_optimal",
    "feasible_selections", "locally_optimal_indices", "selection_census", "Selection",
    "SelectionCensus", "trap_sets", "TrapSet",
    # gradient descent (train; keyquery: on the factors K, Q of W = K Q^T)
    "gd", "gd_stack", "gd_W", "gd_KQ", "gd_KQ_stack", "penalty_path", "PenaltyPath", "gd_joint", "cosine", "Trajectory",
    "StackTrajectory", "WTrajectory", "KQTrajectory", "JointTrajectory",
    # regularization paths (paths) and nonlinear heads (heads)
    "regularization_path", "local_regularization_path", "RegularizationPath", "MLPHead",
    "mlp_head", "head_attention", "head_predict", "head_risk", "head_risk_grad", "optimal_sets",
    "OptimalSets", "SetDirection", "set_offset", "set_direction",
    # instances, the torch layer, and the paper's equations in plain numpy
    "data", "nn", "reference",
]


#: Functions that moved out of the core, and where they are now.
_MOVED = {name: "maxmargin.book.landscape" for name in (
    "excess_risk_on_plane", "excess_risk_on_rays", "excess_risk_on_circle", "selection_basin")}


def __getattr__(name: str):
    """``mm.book`` on first access: the book's figures and explorers (loads matplotlib)."""
    if name == "book":
        return _importlib.import_module(".book", __name__)
    if name in _MOVED:
        raise AttributeError(f"maxmargin.{name} moved to {_MOVED[name]} (it computes the grids of "
                             f"the book's figures): from maxmargin.book import landscape; "
                             f"landscape.{name}(...)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
