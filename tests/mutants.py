"""Mutation check: does the library test suite catch realistic bugs?

Each mutant below names a file of ``lib/maxmargin/``, an exact source snippet and its
replacement: one realistic bug (an off-by-one, a sign flip, a tolerance made absolute, a removed
guard, a wrong axis, a transposed W, ...). The script copies ``lib/`` to a temporary directory,
applies one mutant at a time to that copy (the real source is never modified), puts the copy
first on PYTHONPATH and runs the library tests against it:

1. the mutant's ``hint`` test files first (``pytest <hint files> -x -q -p no:cacheprovider -n 2``),
   which kill it in seconds when they fail;
2. if they pass, the whole ``tests/lib`` (``pytest tests/lib -x -q -p no:cacheprovider -n 2``).

A mutant is *killed* when a test fails (or collection fails, or the run exceeds the timeout),
*survived* when every test passes. The script prints a table and ``N killed, M survived``, and
exits non-zero if any mutant survives. A snippet that is not found exactly once in its file
stops the script before any test runs ("mutant N: snippet not found in lib/maxmargin/<file>"):
when the library changes, re-point the mutant.

Usage (from anywhere; ``make mutants`` runs the first form)::

    python tests/mutants.py                 # baseline + every mutant
    python tests/mutants.py --only 3 7      # some mutants
    python tests/mutants.py --full          # skip the hints: the whole tests/lib per mutant
    python tests/mutants.py --no-baseline   # skip the unmutated run
    python tests/mutants.py --list          # list the mutants and check their snippets
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib"
TESTS = ROOT / "tests" / "lib"


@dataclass(frozen=True)
class Mutant:
    file: str          # path relative to lib/maxmargin/
    description: str
    old: str           # exact snippet, must occur exactly once in the file
    new: str
    hint: tuple[str, ...] = ()  # test files (relative to tests/lib/) likely to kill it


MUTANTS = [
    Mutant("svm.py", "support tolerance made absolute (|g.p - b| <= tol)",
           "tight = others & (gap <= tol * np.maximum(1.0, scales))",
           "tight = others & (gap <= tol)",
           ("test_regressions.py",)),
    Mutant("train.py", "underflow guard of the normalized step removed",
           "risky = ~((norm > 1e-140) & (norm < 1e140))",
           "risky = ~(norm < 1e140)",
           ("test_regressions.py",)),
    Mutant("train.py", "eps added in the wrong place: g / ||g|| + eps",
           "return grad / (norm + eps)",
           "return grad / norm + eps",
           ("test_reference_joint.py",)),
    Mutant("_kernels.py", "softmax normalized over the batch axis instead of the tokens",
           "s /= s.sum(dim=1, keepdim=True)",
           "s /= s.sum(dim=2, keepdim=True)",
           ("test_model.py",)),
    Mutant("_kernels.py", "margin computed relative to the least-attended token",
           "top = torch.max(s, dim=1, keepdim=True).indices",
           "top = torch.min(s, dim=1, keepdim=True).indices",
           ("test_model.py",)),
    Mutant("_kernels.py", "sign flip in the deviation gamma_it - z_i",
           "centred.sub_(offset)",
           "centred.add_(offset)",
           ("test_model.py",)),
    Mutant("_kernels.py", "dropped 1/n in the logit gradient",
           "out *= (loss.torch_derivative(margin) / (n or s.shape[0]))[:, None, :]",
           "out *= loss.torch_derivative(margin)[:, None, :]",
           ("test_model.py",)),
    Mutant("_kernels.py", "keys with W transposed: X W^T instead of X W",
           "return X if W is None else X @ W",
           "return X if W is None else X @ W.T",
           ("test_model.py",)),
    Mutant("problem.py", "stacked instances: per-instance W transposed in the keys",
           "Ws = list(Wa)",
           "Ws = [w.T for w in Wa]",
           ("test_reference_gd.py",)),
    Mutant("train.py", "record_every off by one: records steps 1, k + 1, ... instead of 0, k, ...",
           "kept = np.arange(0, steps + 1, record_every)",
           "kept = np.arange(1, steps + 1, record_every)",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled kernel's softmax not shifted by the largest logit",
           "= x0 - b0, x1 - b1, x2 - b2, x3 - b3, x4 - b4, x5 - b5, x6 - b6, x7 - b7\n",
           "= x0, x1, x2, x3, x4, x5, x6, x7\n",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled kernel's exp: a wrong Taylor coefficient (1/121 for 1/120)",
           "poly = poly * r + 1.0 / 120.0",
           "poly = poly * r + 1.0 / 121.0",
           ("test_compiled.py", "test_train.py")),
    Mutant("_kernels.py", "log-domain weights shifted by the smallest -z instead of the largest",
           "c = torch.where(bad, torch.amax(-margin, dim=-2, keepdim=True), 0.0)",
           "c = torch.where(bad, torch.amin(-margin, dim=-2, keepdim=True), 0.0)",
           ("test_train.py",)),
    Mutant("losses.py", "sign flip in the logistic derivative (numpy)",
           "derivative=lambda x: -expit(-x),",
           "derivative=lambda x: -expit(x),",
           ("test_losses.py",)),
    Mutant("optimality.py", "a support token tied in score is not a violation (tie read as below)",
           "strictly_below = selected - gamma > tie_tolerances(prob)[:, None]",
           "strictly_below = selected - gamma >= -tie_tolerances(prob)[:, None]",
           ("test_optimality.py",)),
    Mutant("optimality.py", "off-by-one: tie test on the 2nd and 3rd highest scores",
           "top = np.sort(gamma, axis=1)[:, -2:]",
           "top = np.sort(gamma, axis=1)[:, -3:-1]",
           ("test_optimality.py", "test_errors.py")),
    Mutant("_least_distance.py", "multipliers: the row scaling is not undone",
           "mu_full[rows] = (mu / hyp) * (L / norms[rows])",
           "mu_full[rows] = mu * (L / norms[rows])",
           ("test_svm.py",)),
    Mutant("svm.py", "W-SVM closed form transposed: z u^T instead of u z^T",
           "np.outer(u, unit) / (unit @ unit) / top",
           "np.outer(unit, u) / (unit @ unit) / top",
           ("test_svm.py",)),
    Mutant("svm.py", "cache/key bug: the solver registry maps 'fast' to the cvxpy solver",
           '"fast": _solve_fast',
           '"fast": _solve_cvxpy',
           ("test_svm.py",)),
    Mutant("_checks.py", "removed guard: NaN/inf tokens accepted",
           "    return finite(X, name)\n",
           "    return X\n",
           ("test_errors.py",)),
    Mutant("_checks.py", ">= vs >: a zero step size or eps accepted",
           "if not np.isfinite(x) or x <= 0:",
           "if not np.isfinite(x) or x < 0:",
           ("test_errors.py",)),
    Mutant("train.py", "removed guard: the step size of the trainers is not validated",
           'lr = _checks.positive_float(lr, "lr")\n    offsets',
           "lr = float(lr)\n    offsets",
           ("test_errors.py",)),
    Mutant("traps.py", "off-by-one: subsets S of size n - 1 are never tried",
           "for size in range(1, n):",
           "for size in range(1, n - 1):",
           ("test_traps.py",)),
    Mutant("paths.py", "regularization path keeps the worse of two candidates",
           "return a[1] < b[1] if tie else a[0] < b[0]",
           "return a[1] < b[1] if tie else a[0] > b[0]",
           ("test_paths.py",)),
    Mutant("heads.py", "sign flip in the head gradient's centring term",
           '- s * np.einsum("bnd,bnd->bn", z, c)[..., None]',
           '+ s * np.einsum("bnd,bnd->bn", z, c)[..., None]',
           ("test_paths.py",)),
    Mutant("_least_distance.py", "scale-back by 1 / L instead of L (p = q / L)",
           "        p = q * L\n",
           "        p = q / L\n",
           ("test_bad_inputs_solvers.py", "test_scale.py")),
    Mutant("_least_distance.py", "certificate's stationarity tolerance absolute, not relative",
           "        size = norm(q) + norm(absG.T @ np.abs(mu))",
           "        size = 1.0",
           ("test_bad_inputs_solvers.py", "test_regressions.py")),
    Mutant("_least_distance.py", "any Farkas bound beyond 1 / tol taken as proof of emptiness",
           "            if _farkas_exact(Gn[work], u_work):",
           "            if True:",
           ("test_bad_inputs_solvers.py",)),
    Mutant("optimality.py", "cost estimate off by a factor: counts levels, not prefixes",
           "        solves = prefixes * ((k >= 2) + (k == n))",
           "        solves = (k >= 2) + (k == n)",
           ("test_bad_inputs_solvers.py",)),
    Mutant("heads.py", "cost estimate of optimal_sets off by a factor T^2",
           "return float(n) * (T * (T + 1) / 2 + 1) * SLSQP_ITERATIONS * float(T) ** 3",
           "return float(n) * (T * (T + 1) / 2 + 1) * SLSQP_ITERATIONS * float(T)",
           ("test_bad_inputs_solvers.py",)),
    Mutant("paths.py", "radius range checked on the first radius, not the largest",
           "    if reach > 0 and radii[-1] > LOGIT_LIMIT / reach:",
           "    if reach > 0 and radii[0] > LOGIT_LIMIT / reach:",
           ("test_bad_inputs_solvers.py", "test_paths.py")),
    Mutant("traps.py", "an ill-conditioned complement read as 'cannot be separated'",
           "    except IllConditionedError:  # not a verdict: let the caller see it\n        raise\n",
           "",
           ("test_bad_inputs_solvers.py",)),
    Mutant("heads.py", "key bug: in-set offset spans token differences, not key differences",
           "rows = [K[i, t] - K[i, first[i]]",
           "rows = [X[i, t] - X[i, first[i]]",
           ("test_paths.py",)),
    Mutant("model.py", "overflow-free attention: the max shift of the scaled logits dropped",
           "z = np.ldexp(b - b.max(axis=axis, keepdims=True), exponent)",
           "z = np.ldexp(b, exponent)",
           ("test_bad_inputs.py",)),
    Mutant("model.py", "overflow-free attention: the gate lets logits up to 2**2000 through",
           "if eK + int(eP.max(initial=0)) + int(np.ceil(np.log2(K.shape[2]))) <= SAFE_EXPONENT:",
           "if eK + int(eP.max(initial=0)) + int(np.ceil(np.log2(K.shape[2]))) <= 2 * SAFE_EXPONENT:",
           ("test_bad_inputs.py",)),
    Mutant("losses.py", "mean loss: a sum that overflows is not rescaled (log domain only)",
           "scaled = np.squeeze(top, axis=axis) * np.mean(values / top, axis=axis)",
           "scaled = np.mean(values, axis=axis)",
           ("test_bad_inputs.py", "test_recorded_risk.py")),
    Mutant("losses.py", "exponential risk: the log-domain mean drops the shift by the largest term",
           "return np.squeeze(top, axis=axis) + np.log(np.mean(np.exp(logs - top), axis=axis))",
           "return np.log(np.mean(np.exp(logs), axis=axis))",
           ("test_bad_inputs.py", "test_recorded_risk.py")),
    Mutant("train.py", "removed guard: cosine accepts NaN (and returns 0 for it)",
           'a = _checks.finite(_checks.as_float_array(a, "a"), "a")',
           'a = _checks.as_float_array(a, "a")',
           ("test_bad_inputs.py",)),
    Mutant("_checks.py", "a truthy string accepted as a flag (normalized=\"no\" runs normalized)",
           "if not isinstance(value, (bool, np.bool_)):\n        raise TypeError(f\"{name}: expected True or False",
           "if not isinstance(value, (bool, np.bool_, str)):\n        raise TypeError(f\"{name}: expected True or False",
           ("test_bad_inputs.py",)),
    Mutant("train.py", "work estimate: the batch size left out of the recorded bytes",
           "return 8.0 * n_records * batch * per_run",
           "return 8.0 * n_records * per_run",
           ("test_bad_inputs.py",)),
    Mutant("train.py", "gd_joint: dropped 1/n in the v-gradient",
           "torch.mm(XYT, (s * weights).view(n * T, B), out=grad[0])",
           "torch.mm(XYT, (s * weights * n).view(n * T, B), out=grad[0])",
           ("test_reference_joint.py",)),
    Mutant("train.py", "gd_joint: v normalized with eps_p instead of eps_v",
           "offsets = torch.tensor([eps_v, eps_p], dtype=torch.float64)",
           "offsets = torch.tensor([eps_p, eps_p], dtype=torch.float64)",
           ("test_reference_joint.py",)),
    Mutant("train.py", "gd_W: the W-gradient transposed (z x^T instead of x z^T)",
           "grad = A.permute(2, 1, 0) @ Zt ",
           "grad = (A.permute(2, 1, 0) @ Zt).transpose(1, 2) ",
           ("test_reference_gd.py",)),
    Mutant("traps.py", "minimal_only=False ignored: supersets of a trap set always skipped",
           "            if covered and minimal_only:\n                continue",
           "            if covered:\n                continue",
           ("test_traps.py",)),
    Mutant("traps.py", "minimality flag: a superset of a trap set flagged minimal",
           "trap = _trap(K, gamma, opt, S, score_tol, minimal=not covered)",
           "trap = _trap(K, gamma, opt, S, score_tol, minimal=True)",
           ("test_traps.py",)),
    Mutant("book/ch04.py", "log-domain NGD: logistic derivative of the wrong sign, |l'(-f)|",
           "log_w = (-np.logaddexp(0.0, f))[..., None]",
           "log_w = (-np.logaddexp(0.0, -f))[..., None]",
           ("test_ch04_helpers.py",)),
    Mutant("book/ch04.py", "log-domain NGD: pair weight s_u only, s_w dropped",
           "+ log_s[..., iu] + log_s[..., iw]",
           "+ log_s[..., iu]",
           ("test_ch04_helpers.py",)),
    Mutant("book/ch04.py", "log-domain NGD: weights exponentiated unscaled (underflow to 0/0)",
           "descent = np.exp(log_w - log_w.max(-1, keepdims=True)) @ pair_terms",
           "descent = np.exp(log_w) @ pair_terms",
           ("test_ch04_helpers.py",)),
    Mutant("book/ch03.py", "settled x2: the bound on c2 dropped (any c1 > 0 settles)",
           "out[leads2 & (c1 > 0) & (c2 <= 0.1 * c1)] = 1",
           "out[leads2 & (c1 > 0)] = 1",
           ("test_ch03_helpers.py",)),
    Mutant("book/ch03.py", "settled x1: leading x2 is enough (l1 > 0 test dropped)",
           "out[(l1 > l2) & (l1 > 0)] = 0",
           "out[l1 > l2] = 0",
           ("test_ch03_helpers.py",)),
    # issue 19: the survivors of an independent review's mutants, and the validated-problem code
    Mutant("nn.py", "torch layer built with W instead of W^T (only a symmetric W was tested)",
           "np.eye(d) if W is None else W.T, dtype=dtype",
           "np.eye(d) if W is None else W, dtype=dtype",
           ("test_nn.py",)),
    Mutant("book/landscape.py", "rays: directions not normalised (evaluated at R d, not R d / ||d||)",
           "P = (radii[None, :, None] * (U / norms)[:, None, :]).reshape(-1, d)",
           "P = (radii[None, :, None] * U[:, None, :]).reshape(-1, d)",
           ("test_model.py",)),
    Mutant("book/landscape.py", "circle: angle flipped (p2 = -R sin theta)",
           "R * np.cos(np.radians(theta)), R * np.sin(np.radians(theta))",
           "R * np.cos(np.radians(theta)), -R * np.sin(np.radians(theta))",
           ("test_model.py",)),
    Mutant("paths.py", "cone projection not clipped at the apex (points opposite the axis)",
           'reach = np.maximum(np.einsum("ij,ij->i", q, edge), 0.0)',
           'reach = np.einsum("ij,ij->i", q, edge)',
           ("test_paths.py",)),
    Mutant("problem.py", "the keys' overflow check dropped (gd blames lr, not W)",
           "if W is not None and not np.all(np.isfinite(K)):",
           "if False:",
           ("test_problem.py",)),
    Mutant("train.py", "a built-in loss recognised by its name (another derivative runs compiled)",
           "if builtin.same_function(loss):",
           "if builtin.name == loss.name:",
           ("test_problem.py",)),
    Mutant("losses.py", "same_function compares the values only, not the derivatives",
           "return isinstance(other, Loss) and all(getattr(self, f) is getattr(other, f) for f in fields)",
           "return isinstance(other, Loss) and self.value is other.value",
           ("test_problem.py",)),
    Mutant("heads.py", "head softmax of overflowing logits: the check dropped (NaN risk)",
           "if np.isnan(logits).any() or np.isposinf(logits).any():",
           "if False:",
           ("test_problem.py",)),
    Mutant("svm.py", "joint_svms: the relaxed p-SVM relaxes nothing",
           "_att_svm(prob.keys, alpha, relaxed=~vsvm.support, name=name)",
           "_att_svm(prob.keys, alpha)",
           ("test_ch06_helpers.py",)),
    Mutant("problem.py", "stacked instances: every instance validated with the first instance's W",
           "return [problem(X[m], Y[m], v[m], Ws[m]) for m in range(M)]",
           "return [problem(X[m], Y[m], v[m], Ws[0]) for m in range(M)]",
           ("test_reference_gd.py",)),
    Mutant("optimality.py", "census: the global selection read as the first token of each sequence",
           "opt = tuple(int(t) for t in _optimal_indices(prob))",
           "opt = tuple(0 for _ in range(n))",
           ("test_ch02_helpers.py",)),
    Mutant("book/landscape.py", "excess risk on the plane: grid rows and columns swapped",
           "return PlaneGrid(p1, p2, gap.reshape(resolution, resolution))",
           "return PlaneGrid(p1, p2, gap.reshape(resolution, resolution).T)",
           ("test_ch01_helpers.py",)),
    Mutant("heads.py", "head softmax: a sequence whose every logit is -inf gives NaN weights",
           "if logits.size and np.any(np.max(logits, axis=-1) == -np.inf):",
           "if False:",
           ("test_problem.py",)),
    Mutant("paths.py", "cone axis used unscaled (its norm overflows for entries near 1e155)",
           "original, direction = direction.copy(), direction / top",
           "original, direction = direction.copy(), direction",
           ("test_problem.py",)),
    Mutant("problem.py", "problem() accepts a missing head (Y and v None reach the kernels)",
           'v = _checks.vector(v, d, "v")\n    Y = _checks.labels(Y, n)\n    return Problem(',
           'v = None if v is None else _checks.vector(v, d, "v")\n    Y = None if Y is None else _checks.labels(Y, n)\n    return Problem(',
           ("test_problem.py",)),
    Mutant("_compiled.py", "compiled exponential slope: the 1/n of the mean dropped",
           "            w[l] = -w[l] / n\n",
           "            w[l] = -w[l]\n",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled record: attention off the tracked token counts only later tokens",
           "            if t != tr:",
           "            if t > tr:",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled normalized step: the rescaled norm of an underflowing gradient not scaled back",
           "norm[l] = scale * np.sqrt(acc)",
           "norm[l] = np.sqrt(acc)",
           ("test_regressions.py", "test_train.py")),
    Mutant("_compiled.py", "compiled logits accumulated onto the previous sequence's values (fresh flag lost)",
           "_add_lane_sums(Ki[t], p, s, t * 8, True)",
           "_add_lane_sums(Ki[t], p, s, t * 8, False)",
           ("test_train.py",)),
    Mutant("_checks.py", "a zero reference direction accepted by the cosine methods (cosine 0)",
           "if not np.all(np.any(u != 0, axis=-1)):",
           "if False:",
           ("test_api.py",)),
    Mutant("_kernels.py", "cosine NaN at a zero vector (no guard on the denominator)",
           "return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)",
           "return dots / denom",
           ("test_api.py", "test_bad_inputs.py")),
    Mutant("svm.py", "W-SVM result stores the norm where the margin belongs",
           """            W=_readonly(W),
            margin=_margin(_ldp.norm(W)),""",
           """            W=_readonly(W),
            margin=_ldp.norm(W),""",
           ("test_api.py", "test_svm.py")),
    Mutant("svm.py", "SVM direction not normalised (the solution itself)",
           "return solution / self.norm if self.norm > 0 else np.zeros_like(solution)",
           "return solution",
           ("test_api.py", "test_svm.py")),
    Mutant("train.py", "overflow guard of the torch normalized step removed (g / inf = 0)",
           "risky = ~((norm > 1e-140) & (norm < 1e140))",
           "risky = ~(norm > 1e-140)",
           ("test_scale_gd.py",)),
    Mutant("_compiled.py", "compiled: a finite gradient whose squares overflow refused as an overflow",
           """        if finite:                          # only the squares overflow
            norm[l] = -2.0
        elif""",
           """        if False:
            norm[l] = -2.0
        elif""",
           ("test_scale_gd.py",)),
    # independent review (issue: new mutants written from the library code alone)
    Mutant("_checks.py", "off-by-one: token index T accepted (arr > T instead of arr >= T)",
           "out = (arr < 0) | (arr >= T)",
           "out = (arr < 0) | (arr > T)",
           ("test_errors.py",)),
    Mutant("problem.py", "exponents: frexp's mantissa taken instead of its exponent (wrong tuple element)",
           "return np.frexp(np.max(np.abs(a), axis=axis, initial=0.0))[1]",
           "return np.frexp(np.max(np.abs(a), axis=axis, initial=0.0))[0]",
           ("test_bad_inputs.py",)),
    Mutant("svm.py", "joint_svms: v-SVM on the keys W^T x instead of the tokens x",
           "vsvm = _v_svm(prob.X[np.arange(n), alpha], _checks.labels(Y, n))",
           "vsvm = _v_svm(prob.keys[np.arange(n), alpha], _checks.labels(Y, n))",
           ("test_ch06_helpers.py", "test_svm.py")),
    Mutant("svm.py", "W-SVM with one query per sequence: rows vec(z d^T) instead of vec(d z^T)",
           'G = np.einsum("ja,jb->jab", D[seq, tok], Z[seq]).reshape(len(seq), -1)',
           'G = np.einsum("ja,jb->jba", D[seq, tok], Z[seq]).reshape(len(seq), -1)',
           ("test_svm.py",)),
    Mutant("train.py", "normalized step: the norm taken over the batch axis, not over d",
           "norm = torch.linalg.vector_norm(grad, dim=-2, keepdim=True)",
           "norm = torch.linalg.vector_norm(grad, dim=-1, keepdim=True)",
           ("test_train.py", "test_reference_gd.py")),
    Mutant("train.py", "gd_joint: v-gradient contracted with the keys instead of the tokens",
           "torch.mm(XYT, (s * weights).view(n * T, B), out=grad[0])",
           "torch.mm(K2T, (s * weights).view(n * T, B), out=grad[0])",
           ("test_reference_joint.py",)),
    Mutant("train.py", "gd_joint: probability sigmoid(-Y f) instead of sigmoid(Y f)",
           "probs[r] = np.mean(expit(margin.numpy()), axis=0)",
           "probs[r] = np.mean(expit(-margin.numpy()), axis=0)",
           ("test_reference_joint.py", "test_train.py")),
    Mutant("_compiled.py", "compiled logistic slope: exp(-z) for exp(z) (-sigmoid(z) instead of -sigmoid(-z))",
           "            w[l] = z[l]\n",
           "            w[l] = -z[l]\n",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled record: tracked attention read at lane offset tr + l, not tr * LANES + l",
           "out.on[r, m, b0 + l, i] = s[tr * L + l]",
           "out.on[r, m, b0 + l, i] = s[tr + l]",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled gradient: deviation gamma_t - ref + offset (sign of the centring)",
           "(x0 * ((g0 - r0) - f0)) * w0",
           "(x0 * ((g0 - r0) + f0)) * w0",
           ("test_train.py", "test_compiled_joint.py")),
    Mutant("_kernels.py", "self-attention logits with W transposed (x^T W^T z)",
           'return np.einsum("ntd,...de,ne->...nt", X, W, Z, optimize=True)',
           'return np.einsum("ntd,...ed,ne->...nt", X, W, Z, optimize=True)',
           ("test_model.py", "test_reference_gd.py")),
    Mutant("_kernels.py", "log-domain weights: eps scale exp(+c) instead of exp(-c)",
           "return -torch.exp(-margin - c) / n, torch.exp(-c)",
           "return -torch.exp(-margin - c) / n, torch.exp(c)",
           ("test_scale_gd.py", "test_regressions.py")),
    Mutant("losses.py", "correlation loss: torch value +x instead of -x",
           "torch_value=lambda x: -x,",
           "torch_value=lambda x: x,",
           ("test_losses.py",)),
    Mutant("paths.py", "cone half-angle: cos of the degrees taken as radians",
           "float(np.cos(np.radians(angle)))",
           "float(np.cos(angle))",
           ("test_paths.py",)),
    Mutant("paths.py", "KKT: ball active only when ||q|| >= R exactly (relative tolerance dropped)",
           "on_ball = norm >= R * (1 - tol)",
           "on_ball = norm >= R",
           ("test_paths.py",)),
    Mutant("optimality.py", "is_locally_optimal: infeasibility guard removed (raises instead of False)",
           "    if not _is_feasible(prob.keys, alpha):\n        return False\n",
           "",
           ("test_optimality.py",)),
    Mutant("traps.py", "escape gap taken over every token (t_i itself included), not only the differing ones",
           "escape = min(escape, float(gap[differ].min()))",
           "escape = min(escape, float(gap.min()))",
           ("test_traps.py",)),
    Mutant("traps.py", "equal-score tolerance made absolute (1e-9, not the relative tie rule)",
           "differ = np.abs(gamma[i] - gamma[i, t]) > score_tol[i]",
           "differ = np.abs(gamma[i] - gamma[i, t]) > 1e-9",
           ("test_traps.py",)),
    Mutant("nn.py", "layer's W property: W_q^T W_k instead of W_k^T W_q",
           "return self.key.weight.T @ self.query.weight",
           "return self.query.weight.T @ self.key.weight",
           ("test_nn.py",)),
    Mutant("nn.py", "logistic_risk: softplus(+Y f) instead of softplus(-Y f)",
           "return nn.functional.softplus(-Y * out).mean()",
           "return nn.functional.softplus(Y * out).mean()",
           ("test_nn.py",)),
    Mutant("heads.py", "MLP head gradient: tanh' written 1 - tanh instead of 1 - tanh^2",
           "return (self.a * (1.0 - h * h)) @ self.B",
           "return (self.a * (1.0 - h)) @ self.B",
           ("test_paths.py",)),
    Mutant("heads.py", "head risk gradient: the 1/n of the mean dropped",
           "c = (loss.derivative(margin) * Y / n)[..., None] * head.grad(z)",
           "c = (loss.derivative(margin) * Y)[..., None] * head.grad(z)",
           ("test_paths.py",)),
    Mutant("data.py", "random_instance: margin planted against the nearest other token, max instead of min",
           '"ntk,k->nt", X[:, :1, :-1] - X[:, 1:, :-1], q).min(axis=1)',
           '"ntk,k->nt", X[:, :1, :-1] - X[:, 1:, :-1], q).max(axis=1)',
           ("test_data.py",)),
    Mutant("model.py", "risk_grad_v: the 1/n of the mean dropped",
           "weight = scaled.torch_derivative(margin) * (Y / Y.shape[0])[:, None]",
           "weight = scaled.torch_derivative(margin) * Y[:, None]",
           ("test_model.py",)),
    Mutant("model.py", "rescaled gradient multiplied by exp(-m) instead of exp(m)",
           "g = np.sign(g) * np.exp(np.log(np.abs(g)) + log_factor)",
           "g = np.sign(g) * np.exp(np.log(np.abs(g)) - log_factor)",
           ("test_bad_inputs.py",)),
    Mutant("book/ch03.py", "settle: rounds end at (growth + 1) times the last, not growth times",
           "chunk = done * (growth - 1)",
           "chunk = done * growth",
           ("test_ch03_helpers.py",)),
    Mutant("book/landscape.py", "selection_basin runs plain GD instead of normalized GD",
           "run = _gd(prob, p0, steps, lr, loss, True, eps, None, 1)",
           "run = _gd(prob, p0, steps, lr, loss, False, eps, None, 1)",
           ("test_ch01_helpers.py", "test_model.py")),
    Mutant("train.py", "normalized step's eps / max|g| by a float numerator (reciprocal overflows)",
           "small = torch.as_tensor(eps, dtype=grad.dtype) / safe",
           "small = eps / safe",
           ("test_scale_gd.py",)),
    Mutant("train.py", "torch loop: a NaN iterate from 0 / 0 not refused at its step",
           "                if not bool(torch.isfinite(new).all()):  # 0 / 0: a zero gradient, eps * scale = 0\n"
           "                    raise _overflow(caller, k, gamma, lr, loss, normalized, **_start_of(K, P))\n",
           "",
           ("test_scale_gd.py",)),
    Mutant("_compiled.py", "exponential rescale: 0 / 0 lane takes a zero step instead of failing",
           "            elif small > 0:                 # a zero gradient: no step",
           "            elif True:                      # a zero gradient: no step",
           ("test_scale_gd.py",)),
    Mutant("svm.py", "shared-query W-SVM lifted as u p^T / (p @ p) without scaling p first",
           "        W = np.outer(u, unit) / (unit @ unit) / top",
           "        W = np.outer(u, p) / (p @ p)",
           ("test_scale.py",)),
    Mutant("svm.py", "SVM constraint values that overflow returned instead of refused",
           "    if not np.all(np.isfinite(values[short]) & np.isfinite(scales[short])):",
           "    if False:",
           ("test_scale.py",)),
    Mutant("heads.py", "optimal sets: a threshold that empties a sequence's set accepted",
           "    if np.any(empty):\n        i = int(np.argmax(empty))\n        raise ValueError(f\"threshold:",
           "    if False:\n        i = int(np.argmax(empty))\n        raise ValueError(f\"threshold:",
           ("test_paths.py",)),
    Mutant("_checks.py", "a masked array's mask ignored (the values under it used)",
           "    if hidden.any():\n        where = tuple(",
           "    if False:\n        where = tuple(",
           ("test_errors.py",)),
    Mutant("nn.py", "layer's attention: logits beyond float64 softmaxed as they are (NaN)",
           "        if bool(torch.isfinite(logits).all()):\n            return torch.softmax(logits, dim=-1)",
           "        if True:\n            return torch.softmax(logits, dim=-1)",
           ("test_nn.py",)),
    Mutant("_kernels.py", "cosine without unit scaling: norms of 1e200 vectors overflow",
           "    a, b = _unit_scale(a), _unit_scale(b)\n",
           "",
           ("test_scale_gd.py",)),
    Mutant("train.py", "overflow at step 0 from the start's logits blamed on lr",
           "    elif step == 0 and not _all_finite(start_logits):",
           "    elif False:",
           ("test_errors.py",)),
    Mutant("train.py", "a gradient too large for float64 at any iterate blamed on lr",
           "    elif bound >= 308.0:",
           "    elif bound >= 308.0 and lr > 1e300:",
           ("test_errors.py",)),
    Mutant("_infeasibility.py", "duplicate-key test absolute again (keys of 1e-13 are duplicates)",
           "    tie = (size <= 1e-12 * size.max())",
           "    tie = (size <= 1e-12 * max(1.0, size.max()))",
           ("test_errors.py",)),
    Mutant("_least_distance.py", "feasibility_tol >= 1 accepted (every point then counts as too far)",
           "    if tol >= 1:\n        raise ValueError(f\"feasibility_tol:",
           "    if tol >= 1e300:\n        raise ValueError(f\"feasibility_tol:",
           ("test_errors.py",)),
    Mutant("optimality.py", "top-score tie tolerance made absolute again (1e-12, not relative)",
           "tied = top[:, 1] - top[:, 0] <= tie_tolerances(prob)",
           "tied = top[:, 1] - top[:, 0] <= 1e-12",
           ("test_scale_ties.py",)),
    Mutant("optimality.py", "census solved at the data's key scale (multipliers leave float64)",
           "    prob, _ = unit_keys(problem(X, Y, v, W))\n    n, T, _ = prob.shape\n",
           "    prob = problem(X, Y, v, W)\n    n, T, _ = prob.shape\n",
           ("test_scale_ties.py",)),
    Mutant("traps.py", "trap search solved at the data's key scale (multiplier error read as infeasible)",
           "    unit, e = unit_keys(prob)\n",
           "    unit, e = prob, 0\n",
           ("test_scale_ties.py",)),
    Mutant("paths.py", "SLSQP polish on x = q whatever the units of the keys (absolute SLSQP tolerances)",
           "unit = key_unit if R <= 1e100 * key_unit else R",
           "unit = 1.0 if R <= 1e100 else R",
           ("test_scale_ties.py",)),
    Mutant("paths.py", "reported gradient norms by np.linalg.norm (squares under/overflow)",
           'out["grad"][j] = value, vector_norm(grad)',
           'out["grad"][j] = value, np.linalg.norm(grad)',
           ("test_scale_ties.py",)),
    Mutant("heads.py", "set_offset solved at the data's key scale (BFGS's absolute gtol)",
           "    unit, e = unit_keys(prob)\n    X, K = prob.X, unit.keys\n",
           "    unit, e = prob, 0\n    X, K = prob.X, unit.keys\n",
           ("test_scale_ties.py",)),
    Mutant("svm.py", "nuclear W-SVM certificate: the spectral-norm condition ||Lambda||_2 <= 1 dropped",
           '"spectral norm": max(0.0, float(np.linalg.norm(dual, 2)) - 1.0),',
           '"spectral norm": 0.0,',
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM core: the basis U_Z built from the differences, not the queries",
           "    U_D, U_Z = _span(rows_D), _span(rows_Z)",
           "    U_D, U_Z = _span(rows_D), _span(rows_D)",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM, shared query: multipliers mu_u / ||p||^2 (the Frobenius lift)",
           '        mu = _multipliers(mu_u, "X") / (_ldp.norm(u) * _ldp.norm(Z))',
           '        mu = _multipliers(mu_u, "X") / _ldp.norm(Z) ** 2',
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: margin 1 / ||W||_F instead of 1 / ||W||_*",
           "        margin=_margin(_nuclear_norm(W)),",
           "        margin=_margin(_ldp.norm(W)),",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM core: the Frobenius objective (sum_squares) minimized instead of normNuc",
           "    mu = _nuclear_clarabel(cp.Problem(cp.Minimize(cp.normNuc(M)), [constraint]), constraint)",
           "    mu = _nuclear_clarabel(cp.Problem(cp.Minimize(cp.sum_squares(M)), [constraint]), constraint)",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: the returned dual matrix with the wrong sign (-sum mu_j d_j z_j^T)",
           '    dual = np.einsum("j,ja,jb->ab", mu, rows_D, rows_Z)  # scale-free: the same at any scale',
           '    dual = np.einsum("j,ja,jb->ab", -mu, rows_D, rows_Z)  # scale-free: the same at any scale',
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM certificate: complementary slackness not checked",
           '        "complementary slackness": float(positive @ np.abs(slack)) / total if total > 0 else np.inf,',
           '        "complementary slackness": 0.0,',
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM solved at the data's scale (no power-of-two rescaling)",
           "    e_D, e_Z = _exponent(D), _exponent(Z)",
           "    e_D, e_Z = 0, 0",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: the multipliers not scaled back to the data's scale",
           "    return _Nuclear(np.ldexp(W, shift), np.ldexp(mu, shift), dual, float(np.ldexp(gap, shift)))",
           "    return _Nuclear(np.ldexp(W, shift), mu, dual, float(np.ldexp(gap, shift)))",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: the scale of the queries undone twice instead of the scale of X",
           "    shift = -(e_D + e_Z)",
           "    shift = -(e_Z + e_Z)",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: a W beyond float64 (flushed to zero or inf) returned",
           "    if not (np.isfinite(largest) and np.ldexp(top, shift) >= np.finfo(np.float64).tiny):",
           "    if not np.isfinite(largest):",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM core: a truncated basis U_D (the rank of the differences cut at a relative 0.5)",
           "    return U[:, : int(np.sum(S > S[0] * max(A.shape) * np.finfo(np.float64).eps))]",
           "    return U[:, : int(np.sum(S > 0.5 * S[0]))]",
           ("test_nuclear_svm.py",)),
    Mutant("svm.py", "nuclear W-SVM: the interior point's (W, mu) returned without the Newton polish",
           "        W, mu = _nuclear_polish(rows_D, rows_Z, W, mu)\n",
           "",
           ("test_nuclear_svm.py",)),
    Mutant("keyquery.py", "gd_KQ: dQ computed as G K instead of G^T K",
           "grad_Q = ZtT @ (A.transpose(1, 2) @ K)",
           "grad_Q = A @ (Zt @ K)",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ: the penalty's gradient reg K instead of 2 reg K",
           "penalty = 2.0 * reg if scale is None else 2.0 * reg * scale.reshape(B, 1, 1)",
           "penalty = reg if scale is None else reg * scale.reshape(B, 1, 1)",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ: (K, Q) normalized jointly instead of each by its own norm",
           "            K = K - lr * _factor_step(grad_K, normalized, eps, scale)\n"
           "            Q = Q - lr * _factor_step(grad_Q, normalized, eps, scale)\n",
           "            both = _factor_step(torch.cat([grad_K, grad_Q], dim=1), normalized, eps, scale)\n"
           "            K, Q = K - lr * both[:, :d], Q - lr * both[:, d:]\n",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ: the penalty's gradient not rescaled with the loss's overflowing weights",
           "2.0 * reg * scale.reshape(B, 1, 1)",
           "2.0 * reg * torch.ones_like(scale).reshape(B, 1, 1)",
           ("test_keyquery.py",)),
    Mutant("svm.py", "nuclear polish: LAPACK's LinAlgError escapes from w_svm",
           "        except np.linalg.LinAlgError:  # LAPACK's SVD failed: a diverging iteration\n"
           "            return None\n",
           "        except ZeroDivisionError:\n"
           "            return None\n",
           ("test_nuclear_svm.py",)),
    Mutant("keyquery.py", "penalty_path: the penalty on K only",
           "        penalty = (Kt ** 2).sum() + (0.0 if freeze_Q else (Qt ** 2).sum())\n",
           "        penalty = (Kt ** 2).sum()\n",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ_stack: freeze_Q ignored (Q trained anyway)",
           "            if not freeze_Q:\n",
           "            if True:\n",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ_stack: every run's gradient from the first instance's tokens",
           'A = torch.einsum("ntb,bntd->bdn", dlogits, Xt)    # dL/dW = A Z, (M, d, n)',
           'A = torch.einsum("ntb,ntd->bdn", dlogits, Xt[0])',
           ("test_keyquery.py",)),
    Mutant("data.py", "query_instance: the queries not normalized",
           "    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)\n",
           "",
           ("test_data.py",)),
    Mutant("keyquery.py", "gd_KQ: a zero factor gradient divided by eps * scale = 0 (0 / 0)",
           "    if normalized and scale is not None:\n"
           "        step = torch.where(torch.any(flat != 0, dim=0, keepdim=True), step, 0.0)\n",
           "",
           ("test_keyquery.py",)),
    Mutant("svm.py", "SVM solutions not checked forward: a W that misses constraints by 1e84 returned",
           "    if not short.any():\n        return values\n",
           "    return values\n",
           ("test_mixed_scales.py", "test_scale.py")),
    Mutant("svm.py", "exactly evaluated constraint values accepted without the violation test",
           "        if violation is None and value < Fraction(float(target[i, t])) - Fraction(FORWARD_TOL):",
           "        if False:",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "support: a value far from its right side flagged tight under a huge scale",
           "    if unclear.any():\n        i, t = (int(k[0]) for k in np.nonzero(unclear))",
           "    if False:\n        i, t = (int(k[0]) for k in np.nonzero(unclear))",
           ("test_mixed_scales.py",)),
    # issue 22 review (A-C): rounding shortfalls re-solved, constraint matrices out of range
    Mutant("svm.py", "re-solve of short constraints: right sides raised by the shortfall only, no rounding margin",
           "need[short] = np.maximum(target[short] - values[short], 0.0) + 2 * error[short]",
           "need[short] = np.maximum(target[short] - values[short], 0.0)",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "no re-solve: a solution short by its own rounding refused (the review's false refusals)",
           "return x, mu, forward(x, solve is _solve_fast), 0.0",
           "return x, mu, forward(x, False), 0.0",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "re-solve raises the right sides of the wrong rows (the selected token's column not skipped)",
           "replace(program, h=program.h + raised[seq, tok])",
           "replace(program, h=program.h + raised[:, 1:].ravel()[:len(seq)])",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "W-SVM constraint matrices outside float64 not refused up front",
           "    if Z.ndim == 2:\n        _w_representable(D, alpha, Z)\n",
           "",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "shared-query W^mm lifted to 0 or inf without refusal",
           "    if not np.isfinite(largest) or (0 < np.abs(u).max() and largest < tiny):",
           "    if False:",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "shared-query infeasibility explained on the rows D p^T (overflow inside the solver)",
           "    if Z.ndim == 1:  # one query p: the constraints see u = W p only, so the rows are D's own",
           "    if False:",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "set-SVM equalities not scaled per sequence (the small sequence's equations cut as rounding)",
           "    E = np.ldexp(D[equal], -exponents[E_seq][:, None])",
           "    E = D[equal]",
           ("test_mixed_scales.py",)),
    Mutant("_least_distance.py", "null space of E cut relative to the rows of G too (every equation dropped at 1e20)",
           "    scale = float(row_norms(E).max(initial=0.0)) if len(E) else 0.0",
           "    scale = float(row_norms(np.vstack([E, G])).max(initial=0.0)) if len(E) else 0.0",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "set-SVM equalities not checked forward",
           "        missed = equal & ~(values <= FORWARD_TOL + 2 * error)  # NaN and inf miss too",
           "        missed = equal & False",
           ("test_mixed_scales.py",)),
    Mutant("svm.py", "cvxpy's SolverError passed through unnamed",
           "    except cp.error.SolverError as error:\n        raise RuntimeError(f\"cvxpy/Clarabel failed ({error}); it works",
           "    except ImportError as error:\n        raise RuntimeError(f\"cvxpy/Clarabel failed ({error}); it works",
           ("test_errors.py",)),
    Mutant("model.py", "excess risk as the difference of two risks (0 where it is 5.7e-19)",
           "    if form is None:\n        return plain",
           "    if True:\n        return plain",
           ("test_model.py",)),
    Mutant("model.py", "risk_grad_W contracts dlogit * x * z unscaled (overflow inside the einsum)",
           "    grad = _contract_scaled(dlogits, X, Z)  # (d, B, d)",
           "    grad = np.einsum(\"ntb,ntd,ne->dbe\", dlogits, X, Z)  # (d, B, d)",
           ("test_model.py",)),
    Mutant("model.py", "risk_grad_W shifts every sequence by the run's largest exponent (small terms to subnormals)",
           "    shift = np.maximum(e.max(axis=0) + int(np.ceil(np.log2(n * T))) - 1020, 0)  # (B,)",
           "    shift = e.max(axis=0)  # (B,)",
           ("test_model.py",)),
    Mutant("svm.py", "set-SVM keys equal up to rounding kept as an equation (infeasible: 0.1 + 0.2 vs 0.3)",
           "    real = _ldp.row_norms(E) > 1e-12",
           "    real = _ldp.row_norms(E) >= 0",
           ("test_svm.py",)),
    Mutant("svm.py", "ATT-SVM errors blame X when the key-query matrix W sets the scale",
           "    return \"X\" if W is None else \"X, W\"",
           "    return \"X\"",
           ("test_errors.py",)),
    Mutant("svm.py", "W-SVM errors blame by the spread of the scales alone (uniformly scaled data a coin toss)",
           "    if abs(far[1] - far[0]) > 10:  # one is over 1000 times farther from unit scale",
           "    if False:",
           ("test_errors.py",)),
    Mutant("optimality.py", "local optimality by float order: a support token tied within rounding "
           "(one ulp below) is not a violation",
           "strictly_below = selected - gamma > tie_tolerances(prob)[:, None]",
           "strictly_below = selected - gamma > 0",
           ("test_ties.py",)),
    Mutant("traps.py", "equal scores judged on the scale of all the sequences (the largest tie "
           "tolerance), not per sequence",
           "score_tol = tie_tolerances(prob)  # (n,)",
           "score_tol = np.full(n, tie_tolerances(prob).max())  # (n,)",
           ("test_ties.py",)),
    Mutant("problem.py", "tie tolerance the former fixed 1e-12 s_i (4500 eps s_i), not the "
           "rounding bound 16 (d + 2) eps s_i",
           "return TIE_FACTOR * (d + 2) * np.finfo(np.float64).eps * score_scales(prob)",
           "return 1e-12 * score_scales(prob)",
           ("test_ties.py",)),
    Mutant("book/ch02.py", "explorer: the optimal token starred by float argmax, not the tie rule",
           "top = int(optimal_indices(inst.X, inst.Y, inst.v)[0])",
           "top = int(inst.scores[0].argmax())",
           ("test_ch02_helpers.py",)),
    # issue 22 review, F6: normalized steps whose contraction overflows, retried scaled
    Mutant("train.py", "torch engine: no scaled retry when the contraction overflows (refused at step 0)",
           "                    unit = _kernels.power_of_two_scale(dlogits, dims=1)\n"
           "                    new = Pt - lr * _step_direction(KtT @ (dlogits * unit), True, step_eps * unit)",
           "                    new = new",
           ("test_scale_gd.py",)),
    Mutant("train.py", "gd_W: the scaled retry computes the same overflowing step again",
           "                    unit = _kernels.power_of_two_scale(dlogits, dims=(0, 1))  # (1, 1, B)\n"
           "                    new = step(dlogits * unit, step_eps * unit.reshape(1, B))",
           "                    unit = _kernels.power_of_two_scale(dlogits, dims=(0, 1, 2))\n"
           "                    new = step(dlogits, step_eps)",
           ("test_scale_gd.py",)),
    Mutant("train.py", "gd_joint: the scaled retry not taken",
           "                    new = step(weights * unit, step_offsets * unit)",
           "                    new = step(weights, step_offsets)",
           ("test_scale_gd.py",)),
    # issue 21: the engines' new contraction orders and records
    Mutant("train.py", "gd_W, shared query: W^T p instead of W p in the logits",
           "logits = (X2 @ (Wt @ q).T).view(n, T, B)",
           "logits = (X2 @ (Wt.transpose(1, 2) @ q).T).view(n, T, B)",
           ("test_reference_gd.py",)),
    Mutant("train.py", "gd_W, shared query: the gradient's outer product p a^T instead of a p^T",
           "grad = a.T[:, :, None] * q ",
           "grad = a.T[:, None, :] * q[:, None] ",
           ("test_reference_gd.py",)),
    Mutant("keyquery.py", "gd_KQ, shared query: dQ = p (Q^T a)^T instead of p (K^T a)^T",
           "grad_Q = p[:, None] * (a[:, None, :] @ K)",
           "grad_Q = p[:, None] * (a[:, None, :] @ Q)",
           ("test_keyquery.py",)),
    Mutant("keyquery.py", "gd_KQ, shared query: logits through Q K^T p (W transposed)",
           "u = (K @ q[:, :, None])[:, :, 0]",
           "u = (Q @ (p @ K)[:, :, None])[:, :, 0]",
           ("test_keyquery.py",)),
    Mutant("train.py", "gd_joint: default tracked attention recomputed from the last p for every record",
           "logits = (K2 @ _kernels.tensor(ps[r].T)).view(n, T, B)",
           "logits = (K2 @ _kernels.tensor(ps[-1].T)).view(n, T, B)",
           ("test_reference_joint.py",)),
    Mutant("train.py", "gd_joint: given tracked tokens read in the wrong order",
           "on[r] = s.numpy()[rows, tracked].T",
           "on[r] = s.numpy()[rows, tracked[::-1]].T",
           ("test_reference_joint.py",)),
    Mutant("train.py", "torch engine: the risk summed over the sequences instead of averaged",
           "    return rounded_mean(loss, values, axis=-2)\n",
           "    return np.sum(loss.value(values), axis=-2)\n",
           ("test_recorded_risk.py", "test_reference_gd.py")),
    Mutant("_compiled.py", "compiled risk: the logistic loss log1p(exp(z)) for z > 0",
           "            return np.log1p(np.exp(-z))\n",
           "            return np.log1p(np.exp(z))\n",
           ("test_train.py", "test_reference_gd.py")),
    Mutant("train.py", "cost estimate of gd leaves out the attention off the tracked tokens",
           "len(P), n * T * d, d + 2 * n + 1, n * T)",
           "len(P), n * T * d, d + n + 1, n * T)",
           ("test_bad_inputs.py", "test_memory.py")),
    Mutant("_compiled.py", "compiled 16-lane blocks: lane 15 accumulates lane 14's prompt",
           "        b7 += k * x[q + 15]\n",
           "        b7 += k * x[q + 14]\n",
           ("test_train.py",)),
    # the compiled gd_joint engine
    Mutant("_compiled.py", "compiled gd_joint: v-gradient contracted with the keys, not the signed tokens",
           "_lane_contraction(XYi, c, gv, T, d, L)",
           "_lane_contraction(Ki, c, gv, T, d, L)",
           ("test_compiled_joint.py",)),
    Mutant("_compiled.py", "compiled gd_joint: v normalized with eps_p instead of eps_v",
           "v_rule = _Rule(run.normalized, run.lr, run.eps_v)",
           "v_rule = _Rule(run.normalized, run.lr, run.eps_p)",
           ("test_compiled_joint.py",)),
    Mutant("_compiled.py", "compiled gd_joint: the p-gradient reads the scores as shared by the lanes",
           "_dlogits8(s, gamma, L, 1, o, T, L, ref, offset, w, c)",
           "_dlogits8(s, gamma, 1, 0, o, T, L, ref, offset, w, c)",
           ("test_compiled_joint.py",)),
    Mutant("train.py", "compiled gd_joint: a lane failing at step 0 not rerun on the torch loop",
           "if np.any(out.failed >= 0):\n        del out",
           "if np.any(out.failed > 0):\n        del out",
           ("test_compiled_joint.py",)),
    Mutant("_compiled.py", "compiled gd_joint: the scores of lane 0's head used for every lane",
           "_lane_sums(prob.XY[i], a.v, a.gamma, T, d, L)",
           "_lane_sums(prob.XY[i], a.v[::L].repeat(L), a.gamma, T, d, L)",
           ("test_compiled_joint.py",)),
    Mutant("_compiled.py", "compiled exp: the table entry 2^(16/32) one ulp high",
           '"0x1.6a09e667f3bcdp+0"',
           '"0x1.6a09e667f3bcep+0"',
           ("test_compiled.py",)),
    Mutant("_compiled.py", "compiled exp: the low part of ln 2 / 32 dropped from the reduction",
           "r = (a - k * _STEP_HI) - k * _STEP_LO",
           "r = a - k * _STEP_HI",
           ("test_compiled.py",)),
    Mutant("_compiled.py", "compiled exp: the power of two as one factor (subnormal results wrong)",
           "        half = m >> 1\n",
           "        half = m\n",
           ("test_compiled.py",)),
    Mutant("_compiled.py", "compiled 16-lane logits: the last token of an odd T left out",
           "    if T % 2:\n        _add_lane_sums16(Ki[T - 1], p, s, (T - 1) * 16, True)",
           "    if False:\n        _add_lane_sums16(Ki[T - 1], p, s, (T - 1) * 16, True)",
           ("test_train.py",)),
    Mutant("_compiled.py", "compiled 16-lane gradient: the last coordinate of an odd d left out",
           "    if d % 2:\n        _add_lane_sums16(Ki[:, d - 1], c, g, (d - 1) * 16, False)",
           "    if False:\n        _add_lane_sums16(Ki[:, d - 1], c, g, (d - 1) * 16, False)",
           ("test_train.py",)),
    Mutant("train.py", "gd_W shared query: the normalized step of u scaled by |p|^2, not |p|",
           "lr_u = lr * (norm if normalized else pp)",
           "lr_u = lr * (pp if normalized else pp)",
           ("test_train.py", "test_reference_gd.py")),
    Mutant("train.py", "gd_W shared query: eps not divided by |p| for the step of u",
           "eps / norm, np.zeros((1, n), dtype=np.int64)",
           "eps, np.zeros((1, n), dtype=np.int64)",
           ("test_train.py",)),
    Mutant("train.py", "gd_W shared query: W's records rebuilt first to last (u's records overwritten)",
           "for r in range(R - 1, -1, -1):",
           "for r in range(R):",
           ("test_train.py", "test_reference_gd.py")),
    # the compiled gd_KQ engine
    Mutant("_compiled.py", "compiled gd_KQ: K's normalized step divided by |a| instead of |a| |q|",
           "step_K[l] = norm_a * norm_q + run.eps",
           "step_K[l] = norm_a + run.eps",
           ("test_compiled_kq.py",)),
    Mutant("_compiled.py", "compiled gd_KQ: q = Q^T p stepped by |p| c instead of |p|^2 c",
           "q[j * L + l] -= run.pp * c",
           "q[j * L + l] -= run.pnorm * c",
           ("test_compiled_kq.py",)),
    Mutant("_compiled.py", "compiled gd_KQ: Q recorded as Q0 + p D^T (the sign of Q's motion)",
           "Q0[b0 + l, e, j] - p[e] * moved[j * L + l]",
           "Q0[b0 + l, e, j] + p[e] * moved[j * L + l]",
           ("test_compiled_kq.py",)),
    Mutant("keyquery.py", "compiled gd_KQ: the kernel's marks ignored (no fall-back to the torch loop)",
           "    if np.any(out.marked):\n",
           "    if False:\n",
           ("test_compiled_kq.py", "test_errors.py")),
    Mutant("train.py", "compiled block size: a thread left idle (busy threads not required)",
           "    fits = [L for L in costs if M * -(-B // L) >= busy]\n",
           "    fits = list(costs)\n",
           ("test_compiled.py",)),
    Mutant("train.py", "compiled block size: spare lanes not counted (the widest block always)",
           "key=lambda L: (-(-B // L) * L * costs[L], L)",
           "key=lambda L: (B * costs[L], L)",
           ("test_compiled.py",)),
    Mutant("_compiled.py", "compiled 32-lane logits: lane 31 accumulates lane 30's prompt",
           "        a31 += k * x[q + 31]\n",
           "        a31 += k * x[q + 30]\n",
           ("test_compiled.py", "test_train.py")),
    # --- round four, A ---
    Mutant("_compiled.py", "compiled gd: the iterate not checked after an update (last one NaN)",
           "                _check_iterate(a.p, k, m, b0, lanes, out, d, L)\n",
           "",
           ("test_last_step.py",)),
    Mutant("_compiled.py", "compiled gd: margins of the last iterate not checked",
           "                            if not np.isfinite(a.z[l]) and out.failed[m, b0 + l] < 0:\n",
           "                            if False:\n",
           ("test_last_step.py",)),
    Mutant("train.py", "torch gd: margins of the last iterate not checked",
           "                if not bool(torch.isfinite(margin).all()):   # logits of the last iterate\n",
           "                if False:\n",
           ("test_last_step.py",)),
    Mutant("train.py", "_overflow's bound: log10(2 max|gamma|) overflows to inf (blames X or v)",
           "np.log10(2.0) + np.log10(top)",
           "np.log10(2.0 * top)",
           ("test_last_step.py", "test_errors.py")),
    Mutant("_compiled.py", "kernel_array: read-only arrays passed through (a new specialization)",
           'return np.require(a, dtype, ("C", "W"))',
           'return np.require(a, dtype, ("C",))',
           ("test_kernel_arrays.py",)),
    Mutant("train.py", "recorded risk: np.mean of the raw losses (inf when their sum overflows)",
           "    return rounded_mean(loss, values, axis=-2)\n",
           "    return np.mean(loss.value(values), axis=-2)\n",
           ("test_recorded_risk.py",)),
    Mutant("_compiled.py", "compiled gd_joint: the risk as the sum of the losses, divided by n",
           "                        out.risk[r, b0 + l] = a.risk[l]\n",
           "                        out.risk[r, b0 + l] = (a.risk[l] * n) / n\n",
           ("test_recorded_risk.py",)),
]


# ----------------------------------------------------------------------------------------------


def check_snippets(mutants: list[tuple[int, Mutant]]) -> list[str]:
    """Every snippet must occur exactly once in the real source; the problems found, if any."""
    problems = []
    for number, m in mutants:
        path = LIB / "maxmargin" / m.file
        rel = path.relative_to(ROOT)
        if not path.exists():
            problems.append(f"mutant {number}: file {rel} does not exist")
            continue
        count = path.read_text().count(m.old)
        if count == 0:
            problems.append(f"mutant {number}: snippet not found in {rel}: {m.old.strip()[:70]!r}")
        elif count > 1:
            problems.append(f"mutant {number}: snippet occurs {count} times in {rel} (make it unique)")
        if m.old == m.new:
            problems.append(f"mutant {number}: the replacement equals the snippet")
        for hint in m.hint:
            if not (TESTS / hint).exists():
                problems.append(f"mutant {number}: hint tests/lib/{hint} does not exist")
    return problems


def clean_copy(tmp: Path) -> Path:
    """A fresh copy of lib/ under tmp, without bytecode caches."""
    target = tmp / "lib"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(LIB, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def environment(lib_copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(lib_copy)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant of the same size and mtime must not reuse a .pyc
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_pytest(targets: list[str], env: dict, cwd: Path, workers: int, timeout: float):
    """(status, seconds, first failure line): status is 'passed', 'failed' or 'timeout'."""
    command = [sys.executable, "-m", "pytest", *targets, "-x", "-q", "-p", "no:cacheprovider",
               "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")]
    if workers > 0:
        command += ["-n", str(workers)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, f"timeout after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    lines = (done.stdout + done.stderr).splitlines()
    if done.returncode == 0:
        return "passed", seconds, ""
    if done.returncode in (1, 2):  # tests failed / collection or import error
        first = next((line for line in lines if line.startswith(("FAILED", "ERROR"))), lines[-1] if lines else "")
        if "tests/lib/" in first:  # "FAILED <copy>/tests/lib/<file>::<test> - message"
            first = first.split(" ")[0] + " " + first[first.index("tests/lib/"):]
        return "failed", seconds, first
    raise RuntimeError(f"pytest exited with {done.returncode} (a problem of this script?):\n"
                       + "\n".join(lines[-30:]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, nargs="+", metavar="N", help="run only these mutants (1-based)")
    parser.add_argument("--full", action="store_true", help="skip the hint files: whole tests/lib per mutant")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--list", action="store_true", help="list the mutants, check their snippets, exit")
    parser.add_argument("-n", "--workers", type=int, default=2, help="pytest-xdist workers (0: none)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per pytest run")
    args = parser.parse_args()

    chosen = [(i, m) for i, m in enumerate(MUTANTS, 1) if not args.only or i in args.only]
    problems = check_snippets(chosen)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.list:
        for i, m in chosen:
            print(f"{i:>3}  {m.file:<20} {m.description}")
        print(f"{len(chosen)} mutants, every snippet found exactly once")
        return 0

    total_start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="maxmargin-mutants-") as tmpdir:
        tmp = Path(tmpdir)
        lib_copy = clean_copy(tmp)
        env = environment(lib_copy)
        where = subprocess.run([sys.executable, "-c", "import maxmargin; print(maxmargin.__file__)"],
                               env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout.strip()
        if not where.startswith(str(lib_copy)):
            print(f"the subprocess imports maxmargin from {where}, not from the copy {lib_copy}", file=sys.stderr)
            return 2
        if not args.no_baseline:
            status, seconds, first = run_pytest([str(TESTS)], env, tmp, args.workers, args.timeout)
            print(f"baseline (unmutated copy): {status} in {seconds:.0f} s", flush=True)
            if status != "passed":
                print(f"the unmutated library fails its tests ({first}); fix that first", file=sys.stderr)
                return 2
        for number, m in chosen:
            lib_copy = clean_copy(tmp)
            target = lib_copy / "maxmargin" / m.file
            target.write_text(target.read_text().replace(m.old, m.new, 1))
            status, seconds, first, stage = "passed", 0.0, "", ""
            stages = [] if args.full or not m.hint else [("hint", [str(TESTS / h) for h in m.hint])]
            stages.append(("full", [str(TESTS)]))
            for stage, targets in stages:
                status, took, first = run_pytest(targets, env, tmp, args.workers, args.timeout)
                seconds += took
                if status != "passed":
                    break
            verdict = "survived" if status == "passed" else "killed"
            results.append((number, m, verdict, stage, seconds, first))
            print(f"mutant {number:>2} {verdict:<8} ({stage}, {seconds:.0f} s) {m.file}: {m.description}"
                  + (f"\n           by {first[:150]}" if first else ""), flush=True)

    elapsed = time.perf_counter() - total_start
    print()
    print(f"{'#':>3}  {'file':<18} {'description':<70} {'result':<8} {'stage':<5} {'time':>5}  first failure")
    for number, m, verdict, stage, seconds, first in results:
        test = first.split(" ", 1)[1].split(" - ")[0].replace("tests/lib/", "") if " " in first else first
        print(f"{number:>3}  {m.file:<18} {m.description:<70} {verdict:<8} {stage:<5} {seconds:>4.0f}s  "
              f"{test if verdict == 'killed' else ''}")
    killed = sum(r[2] == "killed" for r in results)
    survived = len(results) - killed
    print(f"\n{killed} killed, {survived} survived (total {elapsed / 60:.1f} min)")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
