"""Repository tests: licences, citation, publishing workflow, and references between files.

They read files only (no build, no network) and run first in `make test`.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
