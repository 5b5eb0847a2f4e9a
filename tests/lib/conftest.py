"""Library tests' options: ``--shuffle-seed N`` runs the collected tests in a random order (a
permutation drawn from N), to find tests whose outcome depends on what ran before them (state
left behind: the environment, a loaded kernel, torch's threads, numpy's error state).

    PYTHONPATH=$PWD/lib python -m pytest tests/lib -p no:cacheprovider --shuffle-seed 38

Off by default (the collected order). With pytest-xdist, each worker runs its share in the order
it is given; use ``-n 1`` or no ``-n`` for one shuffled sequence.
"""
from __future__ import annotations

import random

import pytest


def pytest_addoption(parser):
    parser.addoption("--shuffle-seed", type=int, default=None, metavar="N",
                     help="run the collected tests in the random order drawn from seed N")


def pytest_collection_modifyitems(config, items):
    seed = config.getoption("--shuffle-seed")
    if seed is None:
        return
    random.Random(seed).shuffle(items)   # in place: pytest runs items in this list's order


def pytest_report_header(config):
    seed = config.getoption("--shuffle-seed")
    return None if seed is None else f"shuffled: --shuffle-seed {seed}"


@pytest.fixture
def solves_without_multipliers(monkeypatch):
    """cvxpy's ``Problem.solve`` made to solve, then drop every dual value (an optimal status
    without multipliers, as a solver may report): the certificates must refuse the answer."""
    import cvxpy as cp   # (deferred: only the solver tests pay for importing cvxpy)

    real_solve = cp.Problem.solve

    def without_duals(self, *args, **kwargs):
        real_solve(self, *args, **kwargs)
        for constraint in self.constraints:
            for dual in constraint.dual_variables:
                dual.value = None

    monkeypatch.setattr(cp.Problem, "solve", without_duals)
