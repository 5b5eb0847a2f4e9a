"""maxmargin: the library behind the executable companion to
"Max-Margin Token Selection in Attention Mechanism" (Tarzanagh, Li, Zhang, Oymak; NeurIPS 2023).

Import it as ``import maxmargin as mm``. Shapes: X (n, T, d), Y (n,), v (d,), W (d, d) or None,
p (..., d). Token indices are 0-based.
"""
from . import data, explore, nn, paths, plots
from .losses import CORRELATION, EXPONENTIAL, LOGISTIC, LOSSES, Loss, get_loss
from .model import (
    attention, keys, logits, optimal_risk, predict, risk, risk_grad, risk_grad_v, risk_grad_W,
    risk_W, scores, self_attention_logits, softmax,
)
from .paths import local_regularization_path, regularization_path
from .optimality import (
    Selection, SelectionCensus, check_selection, feasible_selections, is_locally_optimal,
    locally_optimal_indices, optimal_indices, selection_census, support_tokens,
)
from .svm import (
    SVMResult, SetSVMResult, VSVMResult, WSVMResult, att_svm, att_svm_problem, is_feasible, set_svm,
    set_svm_problem, v_svm, v_svm_problem, w_svm, w_svm_problem,
)
from .train import (
    JointTrajectory, StackTrajectory, Trajectory, WTrajectory, cosine, gd, gd_joint, gd_stack, gd_W,
)
from .traps import TrapSet, trap_sets

__version__ = "0.1.0"
