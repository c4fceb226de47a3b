#!/usr/bin/env python3
"""Score quietbench's change points on the TCPD series with TCPDBench's own metric code, beside
TCPDBench's published default-experiment scores of the other methods.

    python3 benches/changepoints/tcpd/score.py DETECTIONS.json... [--series-out FILE]

Each DETECTIONS.json is one `changepoint-tcpd detect` output. Files of the same method are runs
with different shuffle seeds: the first gives that method's row (history's default seed), and
when there are more, a second row gives the mean over all of them with its range, because a
permutation test's decisions near the threshold move with the seed and a difference of a few
thousandths between methods can be within that. For each series it scores ours the way
TCPDBench's analysis/scripts/summarize.py scores a method: the reported locations are
deduplicated and only those with 1 <= x < n_obs - 1 kept (TCPDBench drops 0 and n_obs - 1
because several methods report them by default), then metrics.f_measure (F1, margin 5, index 0
added to every set) and metrics.covering against the human annotations in data/annotations.json.

The other methods' scores are TCPDBench's own (tcpdbench/default_{f1,cover}_scores.json, from its
analysis/output/scores): a method that failed on a series (null there) counts 0, and the means
are over the same series as ours, as TCPDBench's "zero_no_coal" strategy does (uk_coal_employ,
which has missing values, is left out; TCPDBench's paper also leaves out the quality_control
series, whose means are shown in the second pair of columns).

Standard library only, plus metrics.py beside this file (which needs nothing else).
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from metrics import covering, f_measure  # noqa: E402  (TCPDBench's code, unmodified)

OURS = "quietbench"
# TCPDBench's default-experiment methods, in its order.
PEERS = [
    "amoc",
    "binseg",
    "bocpd",
    "bocpdms",
    "cpnp",
    "ecp",
    "kcpa",
    "pelt",
    "prophet",
    "rbocpdms",
    "rfpop",
    "segneigh",
    "wbs",
    "zero",
]


def load(path):
    with open(path) as f:
        return json.load(f)


def clean_cps(locations, n_obs):
    # TCPDBench's summarize.py clean_cps, restated: dedupe, keep 1 <= x < n_obs - 1.
    return sorted({x for x in locations if 1 <= x < n_obs - 1})


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detections", nargs="+", help="changepoint-tcpd detect's outputs")
    ap.add_argument("--series-out", help="write the per-series rows (TSV) here")
    args = ap.parse_args()

    dets = [load(path) for path in args.detections]
    det = dets[0]
    annotations = load(HERE / "data" / "annotations.json")
    peer_f1 = load(HERE / "tcpdbench" / "default_f1_scores.json")
    peer_cover = load(HERE / "tcpdbench" / "default_cover_scores.json")

    names = sorted(det["detections"])
    for other in dets[1:]:
        if sorted(other["detections"]) != names:
            sys.exit("score.py: the detection files do not cover the same series")
    n_obs_of = {name: load(HERE / "data" / f"{name}.json")["n_obs"] for name in names}

    def scores(d):
        out = {}
        for name in names:
            locations = clean_cps(d["detections"][name], n_obs_of[name])
            out[name] = (
                f_measure(annotations[name], locations),
                covering(annotations[name], locations, n_obs_of[name]),
                locations,
            )
        return out

    # Our methods, in the order first seen: label -> list of per-seed scores.
    ours = {}
    for d in dets:
        ours.setdefault(d["method"]["name"], []).append(scores(d))
    rows = []  # (series, n_obs, method, f1, cover, failed, locations)
    for name in names:
        n_obs = n_obs_of[name]
        for label, runs in ours.items():
            f1, cover, locations = runs[0][name]
            rows.append((name, n_obs, f"{OURS} {label}", f1, cover, False, locations))
        for m in PEERS:
            f, c = peer_f1[name][m], peer_cover[name][m]
            rows.append((name, n_obs, m, f or 0.0, c or 0.0, f is None, None))

    qc = lambda n: n.startswith("quality_control_")  # noqa: E731
    m = det["method"]
    print(
        f"TCPD univariate series available offline: {len(names)} "
        f"(skipped: {', '.join(f'{k} ({v})' for k, v in sorted(det['skipped'].items())) or 'none'}). "
        f"Scored with TCPDBench's metrics.py: F1 with a margin of 5 and segmentation cover, "
        f"against the human annotations. quietbench: {', '.join(ours)}, with history's defaults "
        f"(p <= {m['significance']}, {m['permutations']} shuffles, min segment "
        f"{m['min_segment']}, seed {m['seed']}). The other rows are TCPDBench's published "
        f"default-experiment scores (a failure counts 0). Four decimals: the best methods' "
        f"covers lie within a few thousandths."
    )
    print()
    non_qc = [n for n in names if not qc(n)]
    print(
        f"| method (TCPDBench default experiment) | mean F1 ({len(names)}) | mean cover "
        f"({len(names)}) | mean F1 (no QC, {len(non_qc)}) | mean cover (no QC, {len(non_qc)}) "
        f"| failures |"
    )
    print("|---|---|---|---|---|---|")
    table = []
    for method in [f"{OURS} {label}" for label in ours] + PEERS:
        mine = [r for r in rows if r[2] == method]
        sub = [r for r in mine if not qc(r[0])]
        table.append(
            (
                method,
                mean([r[3] for r in mine]),
                mean([r[4] for r in mine]),
                mean([r[3] for r in sub]),
                mean([r[4] for r in sub]),
                sum(r[5] for r in mine),
            )
        )
    for method, f1, cover, f1s, covers, fails in table:
        print(f"| {method} | {f1:.4f} | {cover:.4f} | {f1s:.4f} | {covers:.4f} | {fails} |")
        label = method[len(OURS) + 1 :] if method.startswith(OURS + " ") else None
        if label is not None and len(ours[label]) > 1:
            runs = ours[label]

            def over(idx, keep):
                per = [mean([r[n][idx] for n in names if keep(n)]) for r in runs]
                return f"{mean(per):.4f} ({min(per):.4f}–{max(per):.4f})"

            every = lambda n: True  # noqa: E731
            print(
                f"| {method}, mean over {len(runs)} seeds (range) | {over(0, every)} | "
                f"{over(1, every)} | {over(0, lambda n: not qc(n))} | "
                f"{over(1, lambda n: not qc(n))} | 0 |"
            )
    print()
    for label in ours:
        first = next(d for d in dets if d["method"]["name"] == label)
        seconds = sum(first.get("seconds", {}).values())
        print(f"quietbench {label}: detection time, all {len(names)} series: {seconds:.1f} s")

    if args.series_out:
        with open(args.series_out, "w") as f:
            f.write("series\tn_obs\tmethod\tf1\tcover\tfailed\tquietbench_locations\n")
            for name, n_obs, method, f1, cover, failed, locs in rows:
                loc = "" if locs is None else ",".join(map(str, locs))
                f.write(f"{name}\t{n_obs}\t{method}\t{f1:.6f}\t{cover:.6f}\t{int(failed)}\t{loc}\n")


if __name__ == "__main__":
    main()
