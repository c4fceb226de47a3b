#!/usr/bin/env python3
"""Run synthetic series through two peer change-point tools, for comparison with quietbench's
E-divisive detector.

    python3 benches/changepoints/peers.py IN.json OUT.json [--venv DIR]

IN.json:
    {"series": [{"id": "s0", "values": [1.0, 1.01, ...]}, ...],
     "thresholds": {"mongodb": [0.05, 0.01], "otava": [0.001, 0.01]},
     # all optional:
     "mongodb_permutations": 100,   # e_divisive(permutations=...), default: the tool's (100)
     "otava_window": 50,            # compute_change_points(window_len=...), default: the tool's (50)
     "otava_min_magnitude": 0.0,    # compute_change_points(min_magnitude=...), default: the tool's (0.0)
     "seed": 20240601}              # base seed of MongoDB's permutation test
  A tool whose threshold list is missing (or null) runs at its default p-value only (mongodb
  pvalue=0.05, otava max_pvalue=0.001); an empty list skips that tool.

OUT.json:
    {"mongodb": {"0.05": {"s0": [30], ...}, ...},
     "otava":   {"0.001": {"s0": [30], ...}, ...},
     "versions": {"mongodb": "2.1.6", "otava": "0.8.0"},
     "seconds":  {"mongodb": 1.23, "otava": 0.45},
     "params":   {...the effective settings of each tool...}}
  Each list holds the sorted 0-based indices of the FIRST point of each new segment: index i
  means the change lies between values[i-1] and values[i]. Both tools already report that
  index (MongoDB's e_divisive returns tau with X = values[:tau], Y = values[tau:]; Otava's
  ChangePoint.index is the first element of the right-hand slice), so no shift is applied;
  the lists are only sorted (MongoDB returns them in order of discovery). "seconds" is the
  time spent inside the tools' detection calls, all thresholds and series together (not the
  interpreter start-up or the imports).

The two packages need incompatible numpy versions, so each lives in its own venv made by
setup_peers.sh (VENV_DIR/mongodb, VENV_DIR/otava; VENV_DIR from --venv, else $QB_PEERS_VENV,
else target/peers-venv under the repository root). This script runs on any python3 (standard
library only) and re-executes itself in each venv as a worker. Where a tool's venv is missing
it tries the current interpreter, and exits non-zero if the package does not import there.

MongoDB's permutation test draws from numpy's global RNG (np.random.shuffle); the worker seeds
it before every e_divisive call with (seed + crc32(series id)), so a series' result does not
depend on its position in the file or on the other thresholds tried. Otava's default
(split/merge with a t-test) uses no randomness.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

TOOLS = ("mongodb", "otava")
DISTS = {"mongodb": "signal-processing-algorithms", "otava": "apache-otava"}
DEFAULT_SEED = 20240601
REPO_ROOT = Path(__file__).resolve().parents[2]


class InputError(Exception):
    pass


def fail(msg, code=2):
    print(f"peers.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def key_of(threshold):
    # "0.05", "0.001", "0.0001": Python's shortest round-tripping form of the float.
    return repr(float(threshold))


def load_input(path):
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {path}: {e}")
    if not isinstance(spec, dict) or not isinstance(spec.get("series"), list):
        raise InputError(f"{path}: expected an object with a 'series' list")
    seen = set()
    for i, s in enumerate(spec["series"]):
        if not isinstance(s, dict) or "id" not in s or not isinstance(s.get("values"), list):
            raise InputError(f"{path}: series[{i}] needs 'id' and a 'values' list")
        sid = str(s["id"])
        if sid in seen:
            raise InputError(f"{path}: duplicate series id {sid!r}")
        seen.add(sid)
        for j, v in enumerate(s["values"]):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"{path}: series {sid!r} value [{j}] is not a finite number: {v!r}")
    thresholds = spec.get("thresholds") or {}
    if not isinstance(thresholds, dict):
        raise InputError(f"{path}: 'thresholds' must be an object")
    for tool, lst in thresholds.items():
        if lst is None:
            continue
        if not isinstance(lst, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 1 for t in lst
        ):
            raise InputError(f"{path}: thresholds.{tool} must be a list of p-values in [0, 1]")
    for field in ("mongodb_permutations", "otava_window"):
        v = spec.get(field)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if field == "mongodb_permutations" else 2)):
            raise InputError(f"{path}: {field} must be an integer (permutations >= 1, window >= 2)")
    return spec


def thresholds_for(spec, tool, default):
    lst = (spec.get("thresholds") or {}).get(tool)
    if lst is None:
        return [default]
    # keep the order given, drop duplicates
    out = []
    for t in lst:
        if key_of(t) not in {key_of(u) for u in out}:
            out.append(float(t))
    return out


# ---------------------------------------------------------------- workers (run inside a venv)

def worker_mongodb(spec):
    import inspect
    from importlib.metadata import version

    import numpy as np
    from signal_processing_algorithms.energy_statistics.cext_calculator import C_EXTENSION_LOADED
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    sig = inspect.signature(e_divisive).parameters
    default_p = sig["pvalue"].default
    default_perm = sig["permutations"].default
    permutations = spec.get("mongodb_permutations") or default_perm
    seed = int(spec.get("seed", DEFAULT_SEED))
    results = {}
    seconds = 0.0
    for p in thresholds_for(spec, "mongodb", default_p):
        per = {}
        for s in spec["series"]:
            sid = str(s["id"])
            values = [float(v) for v in s["values"]]
            if len(values) < 2:
                per[sid] = []
                continue
            np.random.seed((seed + zlib.crc32(sid.encode())) % 2**32)
            t0 = time.perf_counter()
            cps = e_divisive(values, pvalue=p, permutations=permutations)
            seconds += time.perf_counter() - t0
            # tau = len(X): X = values[:tau], Y = values[tau:], i.e. already the first index
            # of the new segment. Returned in order of discovery, so sort.
            per[sid] = sorted({int(c) for c in cps})
        results[key_of(p)] = per
    params = {
        "function": "signal_processing_algorithms.energy_statistics.energy_statistics.e_divisive",
        "permutations": permutations,
        "default_pvalue": default_p,
        "default_permutations": default_perm,
        "seed": seed,
        "seeding": "np.random.seed((seed + crc32(id)) % 2**32) before each call",
        "native_extension": bool(C_EXTENSION_LOADED),
    }
    return results, version(DISTS["mongodb"]), seconds, params


def worker_otava(spec):
    import inspect
    from importlib.metadata import version

    from otava.analysis import compute_change_points

    sig = inspect.signature(compute_change_points).parameters
    default_p = sig["max_pvalue"].default
    default_window = sig["window_len"].default
    default_mag = sig["min_magnitude"].default
    window = spec.get("otava_window") or default_window
    min_mag = spec.get("otava_min_magnitude")
    min_mag = default_mag if min_mag is None else float(min_mag)
    results = {}
    seconds = 0.0
    for p in thresholds_for(spec, "otava", default_p):
        per = {}
        for s in spec["series"]:
            sid = str(s["id"])
            # A plain list, not an ndarray: otava's ChangePointDetector slices series[start:end]
            # for each window only when it is not already an ndarray.
            values = [float(v) for v in s["values"]]
            t0 = time.perf_counter()
            cps, _weak = compute_change_points(values, window_len=window, max_pvalue=p, min_magnitude=min_mag)
            seconds += time.perf_counter() - t0
            # ChangePoint.index is the first element of the right-hand slice series[index:...]
            per[sid] = sorted({int(c.index) for c in cps})
        results[key_of(p)] = per
    params = {
        "function": "otava.analysis.compute_change_points",
        "window_len": window,
        "min_magnitude": min_mag,
        "default_max_pvalue": default_p,
        "default_window_len": default_window,
        "default_min_magnitude": default_mag,
        "first_pass_pvalue": "10 x max_pvalue below 0.05 (otava's split step)",
        "significance": "two-sided Student t-test (TTestSignificanceTester), deterministic",
    }
    return results, version(DISTS["otava"]), seconds, params


def run_worker(tool, in_path, out_path):
    try:
        spec = load_input(in_path)
    except InputError as e:
        fail(str(e))
    fn = {"mongodb": worker_mongodb, "otava": worker_otava}[tool]
    try:
        results, ver, seconds, params = fn(spec)
    except ImportError as e:
        print(f"peers.py: error: {tool}: cannot import {DISTS[tool]} with {sys.executable}: {e}",
              file=sys.stderr)
        sys.exit(3)
    with open(out_path, "w") as f:
        json.dump({"results": results, "version": ver, "seconds": seconds, "params": params}, f)


# ---------------------------------------------------------------- driver

def venv_dir(arg):
    d = arg or os.environ.get("QB_PEERS_VENV") or "target/peers-venv"
    p = Path(d)
    return p if p.is_absolute() else REPO_ROOT / p


def interpreter_for(tool, vdir):
    py = vdir / tool / "bin" / "python"
    return (str(py), True) if py.exists() else (sys.executable, False)


def summarize(tool, res, n_series):
    parts = []
    for thr, per in res["results"].items():
        hit = sum(1 for v in per.values() if v)
        total = sum(len(v) for v in per.values())
        parts.append(f"p={thr}: {hit}/{n_series} series with change points ({total} in all)")
    extra = ""
    if tool == "mongodb":
        extra = f", permutations={res['params']['permutations']}"
        if not res["params"]["native_extension"]:
            extra += ", PURE PYTHON (native extension not loaded)"
    else:
        extra = f", window_len={res['params']['window_len']}, min_magnitude={res['params']['min_magnitude']}"
    return (f"{tool} ({DISTS[tool]} {res['version']}{extra}): {res['seconds']:.2f} s; "
            + ("; ".join(parts) if parts else "skipped (empty threshold list)"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="IN.json")
    ap.add_argument("output", nargs="?", help="OUT.json")
    ap.add_argument("--venv", help="directory made by setup_peers.sh (default $QB_PEERS_VENV or target/peers-venv)")
    ap.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if not args.output:
            fail("--worker needs an output path")
        run_worker(args.worker, args.input, args.output)
        return
    if not args.output:
        ap.error("OUT.json is required")
    try:
        spec = load_input(args.input)
    except InputError as e:
        fail(str(e))

    vdir = venv_dir(args.venv)
    out = {"versions": {}, "seconds": {}, "params": {}}
    n = len(spec["series"])
    with tempfile.TemporaryDirectory(prefix="qb-peers-") as tmp:
        for tool in TOOLS:
            res_path = os.path.join(tmp, f"{tool}.json")
            py, in_venv = interpreter_for(tool, vdir)
            # The worker's stdout (structlog writes warnings there) goes to our stderr.
            proc = subprocess.run(
                [py, os.path.abspath(__file__), "--worker", tool, os.path.abspath(args.input), res_path],
                stdout=sys.stderr, stderr=sys.stderr,
            )
            if proc.returncode != 0 or not os.path.exists(res_path):
                hint = ("" if in_venv else
                        f" (no venv at {vdir / tool}; run benches/changepoints/setup_peers.sh)")
                fail(f"{tool} worker failed with exit code {proc.returncode}{hint}", code=3)
            with open(res_path) as f:
                res = json.load(f)
            out[tool] = res["results"]
            out["versions"][tool] = res["version"]
            out["seconds"][tool] = round(res["seconds"], 4)
            out["params"][tool] = dict(res["params"], python=py)
            print(summarize(tool, res, n), file=sys.stderr)

    ordered = {t: out[t] for t in TOOLS}
    ordered.update(versions=out["versions"], seconds=out["seconds"], params=out["params"])
    tmp_out = args.output + ".tmp"
    with open(tmp_out, "w") as f:
        json.dump(ordered, f, indent=1)
        f.write("\n")
    os.replace(tmp_out, args.output)


if __name__ == "__main__":
    main()
