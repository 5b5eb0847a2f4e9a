"""How the compiled GD kernels (:mod:`._compiled`) are fed: the code of a built-in loss, the
number of starts per block (lanes) and the thread pool that runs the blocks.
"""
from __future__ import annotations

import numpy as np
import torch

from .losses import CORRELATION, EXPONENTIAL, LOGISTIC, Loss


# The compiled kernels' loss codes, the one table: a built-in loss's code is its index here.
# _compiled reads its LOGISTIC_CODE, EXPONENTIAL_CODE, CORRELATION_CODE from it and restates the
# formulas of losses.py in numba (tests/lib/test_losses.py checks the restatement). numba's cache
# keys on _compiled.py alone: after changing this table, touch _compiled.py.
_COMPILED_LOSSES = (LOGISTIC, EXPONENTIAL, CORRELATION)


def _loss_code(loss: Loss) -> int | None:
    """The compiled engine's code of a built-in loss, recognised by its definition (the same
    value and derivative functions, so a copy or a renamed copy counts), or None."""
    for code, builtin in enumerate(_COMPILED_LOSSES):
        if builtin.same_function(loss):
            return code
    return None


_TWO_LANE_COSTS = {8: 1.3, 16: 1.0}   # the kernels of gd_joint and gd_KQ (8 and 16 lanes)


def _block_lanes(B: int, M: int, costs: dict) -> int:
    """The number of starts per block of a compiled kernel for M instances x B starts: of the lane
    counts L in ``costs`` (L -> time per lane-step), the one with the least work, ceil(B / L) L
    lane-steps (spare lanes included) at its cost, among those that leave no thread idle that
    smaller blocks would keep busy (M ceil(B / L) blocks for torch.get_num_threads() threads)."""
    threads = torch.get_num_threads()
    smallest = min(costs)
    busy = min(threads, M * -(-B // smallest))
    fits = [L for L in costs if M * -(-B // L) >= busy]
    return min(fits, key=lambda L: (-(-B // L) * L * costs[L], L))


def _run_blocks(kernel, jobs: int, *args) -> None:
    """kernel(first, last, *args) over the blocks 0 .. jobs - 1 of a compiled kernel, on
    torch.get_num_threads() threads: the kernels release the GIL, and each thread takes disjoint
    ranges of blocks (four per thread, to balance the load)."""
    threads = max(1, min(torch.get_num_threads(), jobs))
    if threads == 1:
        kernel(0, jobs, *args)
        return
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, jobs, min(jobs, 4 * threads) + 1).round().astype(int)
    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(kernel, int(a), int(b), *args)
                     for a, b in zip(bounds[:-1], bounds[1:])]:
            done.result()
