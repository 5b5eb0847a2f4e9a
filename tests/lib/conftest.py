"""Library tests' options: ``--shuffle-seed N`` runs the collected tests in a random order (a
permutation drawn from N), to find tests whose outcome depends on what ran before them (state
left behind: the environment, a loaded kernel, torch's threads, numpy's error state).

    PYTHONPATH=$PWD/lib python -m pytest tests/lib -p no:cacheprovider --shuffle-seed 38

Off by default (the collected order). With pytest-xdist, each worker runs its share in the order
it is given; use ``-n 1`` or no ``-n`` for one shuffled sequence.
"""
from __future__ import annotations

import random


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
