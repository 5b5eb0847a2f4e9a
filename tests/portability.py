"""Portability matrix: the library tests under several arithmetic environments.

A test suite must pass on any CPU, yet float64 results depend on which kernels round them:
numpy's and SciPy's OpenBLAS pick a kernel per CPU (DYNAMIC_ARCH), torch picks its SIMD level
(ATen) and its BLAS code path (MKL), thread counts change how sums are split, and the library's
compiled GD engine (numba) is compiled for the host CPU. Each row below sets environment
variables that force one of those choices, and runs the targets (default ``tests/lib``) once with
pytest; the script prints a table and exits non-zero if any row fails.

The axes, and what this machine's build honours (the ``effective`` column re-checks it per row):

* ``OPENBLAS_CORETYPE``: Prescott (reported as Katmai), Nehalem, Sandybridge, Haswell (the
  default here; Zen also maps to it) change the results of numpy's and SciPy's BLAS/LAPACK.
  SkylakeX (and CooperLake) are accepted but die with SIGILL on a CPU without AVX-512, so they
  join the matrix only where /proc/cpuinfo lists avx512f; unknown names fall back to the default.
* ``ATEN_CPU_CAPABILITY``: ``default`` (no SIMD) and ``avx2``; ``avx512`` only with avx512f (it
  dies with SIGILL otherwise). ``default`` changes torch's exp, sums and softmax.
* MKL (torch's BLAS here): ``MKL_CBWR=COMPATIBLE`` changes torch's float64 matmuls;
  ``MKL_ENABLE_INSTRUCTIONS`` caps MKL's instruction set on Intel CPUs (on the AMD EPYC this was
  written on it changed no result).
* threads: 1 and 2 (``OMP_NUM_THREADS``, read by torch, ``OPENBLAS_NUM_THREADS``,
  ``MKL_NUM_THREADS``, ``NUMBA_NUM_THREADS``); 1-thread rows run pytest with ``-n 2``, 2-thread
  rows with ``-n 1`` (two cores).
* ``MAXMARGIN_ENGINE``: auto (the default), compiled, torch (``lib/maxmargin/_engines.py``).
* ``NUMBA_CPU_NAME=generic``: the compiled engine without AVX2 and FMA (its cache then goes to a
  temporary ``NUMBA_CACHE_DIR``, so nothing is written next to the library).

Not a cross product: every axis value appears in at least one row, the default row comes first,
and ``aten-default`` / ``openblas-*`` are the combinations in which
tests/lib/test_reference_joint.py failed at a fixed 1e-10 on an AMD EPYC (whole trajectories
5e-12 apart by default, 2e-10 to 7e-10 apart there). Before each run a probe prints which
OpenBLAS kernel, ATen capability, torch thread count and GD engine the row really gets, and
which of four fingerprints (numpy BLAS, torch BLAS, torch SIMD, compiled kernel) differ from the
default row's: a row that changes no arithmetic tests nothing new.

Usage (from anywhere)::

    python tests/portability.py                      # every row, on tests/lib
    python tests/portability.py --quick              # four rows: default, aten-default,
                                                     #   openblas-prescott, numba-generic
    python tests/portability.py --targets tests/lib tests/chapters   # more pytest targets
    python tests/portability.py --rows default threads-1             # chosen rows
    python tests/portability.py --list               # the rows and their variables
    python tests/portability.py --headroom           # also the closest assert_allclose per row

``--headroom`` records, for every ``np.testing.assert_allclose`` call, |actual - desired| over
its tolerance (1 = at the limit) and prints the largest per row: how close each environment
comes to failing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# every variable a row may set; all are removed from the inherited environment first, so that
# the default row is the library's default whatever the calling shell exports
CONTROLLED = ("OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
              "MKL_DEBUG_CPU_TYPE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS", "MAXMARGIN_ENGINE", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES",
              "NUMBA_CACHE_DIR", "NPY_DISABLE_CPU_FEATURES")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


@dataclass(frozen=True)
class Row:
    name: str
    env: dict = field(default_factory=dict)
    threads: int | None = None   # None: the libraries' defaults (torch: one per core)
    quick: bool = False
    needs: str = ""              # a /proc/cpuinfo flag the row needs (SIGILL without it)

    def variables(self) -> dict:
        env = dict(self.env)
        if self.threads is not None:
            env.update({name: str(self.threads) for name in THREAD_VARS})
        return env

    def workers(self) -> int:
        """pytest-xdist workers: two cores, shared with the row's threads."""
        return 1 if (self.threads or 1) >= 2 else 2


ROWS = [
    Row("default", quick=True),
    Row("aten-default", {"ATEN_CPU_CAPABILITY": "default"}, quick=True),
    Row("openblas-prescott", {"OPENBLAS_CORETYPE": "Prescott", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
        quick=True),
    Row("openblas-nehalem-torch", {"OPENBLAS_CORETYPE": "Nehalem", "MAXMARGIN_ENGINE": "torch"}),
    Row("openblas-sandybridge-cbwr", {"OPENBLAS_CORETYPE": "Sandybridge", "MKL_CBWR": "COMPATIBLE",
                                      "MAXMARGIN_ENGINE": "auto"}),
    Row("threads-1", {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2",
                      "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, threads=1),
    Row("threads-2-compiled", {"MAXMARGIN_ENGINE": "compiled"}, threads=2),
    Row("numba-generic", {"NUMBA_CPU_NAME": "generic", "MAXMARGIN_ENGINE": "compiled"}, quick=True),
    Row("avx512", {"OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx512",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX512"}, needs="avx512f"),
]

PROBE = r"""
import ctypes, glob, hashlib, json, os
import numpy as np, scipy, torch
def digest(a):
    return hashlib.md5(np.ascontiguousarray(a).tobytes()).hexdigest()[:8]
def corename(pattern, symbol):
    base = os.path.dirname(os.path.dirname(np.__file__))
    found = glob.glob(os.path.join(base, pattern))
    if not found:
        return "?"
    f = getattr(ctypes.CDLL(found[0]), symbol, None)
    if f is None:
        return "?"
    f.restype = ctypes.c_char_p
    return f().decode()
rng = np.random.default_rng(0)
a, b = rng.standard_normal((200, 513)), rng.standard_normal((513, 77))
x = rng.standard_normal((7, 3001))
import maxmargin as mm
out = {
    "openblas": corename("numpy.libs/libscipy_openblas64_*.so", "scipy_openblas_get_corename64_"),
    "openblas_scipy": corename("scipy.libs/libscipy_openblas-*.so", "scipy_openblas_get_corename"),
    "aten": torch.backends.cpu.get_cpu_capability(),
    "torch_threads": torch.get_num_threads(),
    "engine": (os.environ.get("MAXMARGIN_ENGINE") or "auto") + "->" + mm.train.engine(),
    "numpy BLAS": digest(a @ b),
    "torch BLAS": digest((torch.from_numpy(a) @ torch.from_numpy(b)).numpy()),
    "torch SIMD": digest(np.concatenate([f(torch.from_numpy(x)).numpy().ravel() for f in (
        torch.exp, torch.sigmoid, lambda t: t.sum(-1), lambda t: torch.softmax(t, -1))])),
}
if out["engine"].endswith("compiled"):
    os.environ["MAXMARGIN_ENGINE"] = "compiled"   # auto would run this small run on torch
    inst = mm.data.random_instance(7, 6, 5, seed=11)
    run = mm.gd(inst.X, inst.Y, inst.v, rng.standard_normal((13, 5)), 50, 1.0, W=inst.W,
                normalized=True)
    out["compiled"] = digest(run.p)
print(json.dumps(out))
"""
FINGERPRINTS = ("numpy BLAS", "torch BLAS", "torch SIMD", "compiled")

HEADROOM_PLUGIN = r'''
"""pytest plugin written by tests/portability.py --headroom: the largest |actual - desired| over
the tolerance of each np.testing.assert_allclose call site, per test, into a JSON file."""
import json, os, traceback
import numpy as np
import pytest

_original = np.testing.assert_allclose
_test = [None]
_ratios = {}


def _recording(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
    try:
        a, b = np.broadcast_arrays(np.asarray(actual, float), np.asarray(desired, float))
        tol, diff = atol + rtol * np.abs(b), np.abs(a - b)
        with np.errstate(all="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / np.where(tol > 0, tol, np.inf))
        ratio = float(np.nanmax(ratio)) if ratio.size else 0.0
        frame = traceback.extract_stack(limit=3)[-2]
        key = f"{_test[0]} @ {os.path.basename(frame.filename)}:{frame.lineno}"
        _ratios[key] = max(_ratios.get(key, 0.0), ratio)
    except Exception:
        pass
    return _original(actual, desired, rtol, atol, *args, **kwargs)


np.testing.assert_allclose = _recording


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _test[0] = item.nodeid
    yield


def pytest_sessionfinish(session):
    with open(os.path.join(os.environ["PORTABILITY_HEADROOM"], f"{os.getpid()}.json"), "w") as f:
        json.dump(_ratios, f)
'''


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def base_environment() -> tuple[dict, dict]:
    """The inherited environment without the controlled variables, and those it had set."""
    env = dict(os.environ)
    stripped = {name: env.pop(name) for name in CONTROLLED if name in env}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env, stripped


def probe(env: dict) -> tuple[dict | None, str]:
    """What a process with ``env`` really gets (see PROBE); (None, reason) if it cannot run."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "probe timed out"
    if done.returncode != 0:
        if done.returncode in (-4, 132):
            return None, "illegal instruction (SIGILL): this CPU lacks the kernel's instructions"
        return None, f"probe failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def run_pytest(targets: list[str], env: dict, workers: int, timeout: float, plugin: str | None):
    """(status, counts, seconds, failures): status 'passed', 'failed' or 'timeout'."""
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider",
               "-n", str(workers)]
    if plugin:
        command += ["-p", plugin]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", {}, time.perf_counter() - start, [f"timeout after {timeout:.0f} s"]
    seconds = time.perf_counter() - start
    lines = (done.stdout + done.stderr).splitlines()
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), "")
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    failures = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    if done.returncode == 0:
        return "passed", counts, seconds, failures
    if done.returncode in (1, 2):
        return "failed", counts, seconds, failures or lines[-5:]
    return f"exit {done.returncode}", counts, seconds, lines[-10:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the rows marked quick")
    parser.add_argument("--rows", nargs="+", metavar="NAME", help="only these rows")
    parser.add_argument("--targets", nargs="+", default=["tests/lib"],
                        help="pytest targets, relative to the repository (default: tests/lib)")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--headroom", action="store_true",
                        help="record how close each assert_allclose comes to its tolerance")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per pytest run")
    args = parser.parse_args()

    flags = cpu_flags()
    rows = [r for r in ROWS if (not args.quick or r.quick) and (not args.rows or r.name in args.rows)]
    if args.rows and len(rows) != len(set(args.rows)):
        unknown = set(args.rows) - {r.name for r in ROWS}
        print(f"unknown rows: {sorted(unknown)}; known: {[r.name for r in ROWS]}", file=sys.stderr)
        return 2
    if args.list:
        for r in ROWS:
            env = " ".join(f"{k}={v}" for k, v in r.variables().items()) or "(nothing set)"
            extra = f"  [needs {r.needs}]" if r.needs else ""
            print(f"{r.name:<26} -n {r.workers()}  {env}{extra}{'  (quick)' if r.quick else ''}")
        return 0
    missing = [t for t in args.targets if not (ROOT / t).exists()]
    if missing:
        print(f"no such target(s): {missing}", file=sys.stderr)
        return 2

    base, stripped = base_environment()
    if stripped:
        print("removed from the inherited environment: "
              + " ".join(f"{k}={v}" for k, v in stripped.items()))
    print(f"targets: {' '.join(args.targets)}; CPU: {cpu_model()}; {os.cpu_count()} cores")
    reference, why = probe(base)
    if reference is None:
        print(f"the default environment cannot run the probe: {why}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="maxmargin-portability-") as tmp:
        plugin = None
        if args.headroom:
            (Path(tmp) / "portability_headroom.py").write_text(HEADROOM_PLUGIN)
            plugin = "portability_headroom"
        total = time.perf_counter()
        for row in rows:
            env = dict(base, **row.variables())
            # tests/chapters saves its runs for the book build (scripts/executed.py): a row's
            # runs go to a folder of its own, never into the checkout's _build/executed.
            env["BOOK_EXECUTED_STORE"] = str(Path(tmp) / f"executed-{row.name}")
            # a cell may take long on the torch loop (chapter 04's plain-GD continuations took
            # over 300 s there on a loaded machine); the reader's guard is 1800 s already
            env.setdefault("CHAPTER_CELL_TIMEOUT_S", "3600")
            if "NUMBA_CPU_NAME" in env or "NUMBA_CPU_FEATURES" in env:
                env["NUMBA_CACHE_DIR"] = str(Path(tmp) / f"numba-{row.name}")
            if plugin:
                env["PYTHONPATH"] = os.pathsep.join([tmp] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
                env["PORTABILITY_HEADROOM"] = str(Path(tmp) / f"headroom-{row.name}")
                Path(env["PORTABILITY_HEADROOM"]).mkdir()
            if row.needs and row.needs not in flags:
                results.append((row, "skipped", {}, 0.0, [f"this CPU lacks {row.needs}"], None, ""))
                print(f"{row.name}: skipped (this CPU lacks {row.needs})", flush=True)
                continue
            effective, why = probe(env)
            if effective is None:
                results.append((row, "skipped", {}, 0.0, [why], None, ""))
                print(f"{row.name}: skipped ({why})", flush=True)
                continue
            status, counts, seconds, failures = run_pytest(args.targets, env, row.workers(),
                                                           args.timeout, plugin)
            worst = headroom(env["PORTABILITY_HEADROOM"]) if plugin else ""
            results.append((row, status, counts, seconds, failures, effective, worst))
            print(f"{row.name}: {status} in {seconds:.0f} s  {summary_counts(counts)}"
                  + "".join(f"\n    {line}" for line in failures[:10]), flush=True)
        elapsed = time.perf_counter() - total

    print()
    print(f"{'row':<26} {'variables':<62} {'effective (BLAS core, ATen, threads, engine)':<44} "
          f"{'differs from default':<34} {'result':<8} {'passed':>6} {'failed':>6} {'time':>6}")
    for row, status, counts, seconds, failures, effective, worst in results:
        env = " ".join(f"{k}={v}" for k, v in row.variables().items()) or "(nothing set)"
        if effective:
            eff = (f"{effective['openblas']}, {effective['aten']}, {effective['torch_threads']}, "
                   f"{effective['engine']}")
            differs = ", ".join(k for k in FINGERPRINTS if k in effective and k in reference
                                and effective[k] != reference[k])
        else:
            eff, differs = failures[0][:44] if failures else "", ""
        print(f"{row.name:<26} {env:<62} {eff:<44} {differs or '-':<34} {status:<8} "
              f"{counts.get('passed', 0):>6} {counts.get('failed', 0) + counts.get('error', 0) + counts.get('errors', 0):>6} "
              f"{seconds:>5.0f}s")
        if worst:
            print(f"{'':<26} closest to its tolerance: {worst}")
    bad = [r for r in results if r[1] not in ("passed", "skipped")]
    print(f"\n{len(results) - len(bad)} of {len(results)} rows passed or skipped, {len(bad)} failed "
          f"(total {elapsed / 60:.1f} min)")
    return 1 if bad else 0


def summary_counts(counts: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def headroom(directory: str, top: int = 3) -> str:
    ratios = {}
    for path in Path(directory).glob("*.json"):
        for key, value in json.loads(path.read_text()).items():
            ratios[key] = max(ratios.get(key, 0.0), value)
    best = sorted(ratios.items(), key=lambda kv: -kv[1])[:top]
    return "; ".join(f"{value:.1e} {key.split('::')[-1]}" for key, value in best)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
