#!/usr/bin/env bash
# quietbench's change points on the Turing Change Point Dataset, scored with TCPDBench's own
# metric code beside TCPDBench's published default scores, and on simulated series with known
# truth, for the default detector (mean-shift) and E-divisive (the default before issue 31), and
# its cost on long series (issue 31; docs/statistics.md §9c.1 has the tables).
#
# Usage: benches/changepoints/tcpd.sh [OUT_DIR] [SERIES_PER_ROW] [KEY_SERIES]
#   OUT_DIR: where the outputs go (default benches/changepoints/results):
#     tcpd-table.txt   every table, as printed
#     tcpd-series.tsv  one row per TCPD series and method (F1, cover, our locations)
#   SERIES_PER_ROW: simulated series per row of the simulation tables (default 1000).
#   KEY_SERIES: series in the rows the issue's targets name (default 4000).
#   About 4 minutes on 2 cores after the build: TCPD with the default detector under 10 shuffle
#   seeds and with E-divisive (seconds), the simulation table for each detector (about 1 and 2
#   minutes), and the cost of one call on 1,000 and 10,000 runs.
#
# Needs python3 (3.8 or later; standard library only: metrics.py imports nothing). Builds the
# changepoint-tcpd binary in release, runs quietbench's detector with history's defaults on every
# series in benches/changepoints/tcpd/data (multivariate ones and those with missing values are
# skipped and named), scores them with tcpd/score.py (which calls TCPDBench's metrics.py), then
# prints the simulation table.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/benches/changepoints/results}
SERIES=${2:-1000}
KEY=${3:-4000}
PYTHON=${PYTHON:-python3}
TCPD=$ROOT/benches/changepoints/tcpd
mkdir -p "$OUT"
cd "$ROOT"
command -v "$PYTHON" >/dev/null 2>&1 || { echo "tcpd.sh: $PYTHON not found" >&2; exit 1; }
nice cargo build --release -q -p quietbench-benches --bin changepoint-tcpd
BIN=target/release/changepoint-tcpd
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FILES=()
for f in "$TCPD"/data/*.json; do
  [ "$(basename "$f")" = annotations.json ] || FILES+=("$f")
done
# The default detector with history's seed first, then nine other seeds (a permutation test's
# decisions near the threshold move with the seed), then E-divisive, the default before.
DETECTIONS=("$TMP/mean-shift-default.json")
"$BIN" detect --out "$TMP/mean-shift-default.json" "${FILES[@]}"
for seed in 1 2 3 4 5 6 7 8 9; do
  "$BIN" detect --seed "$seed" --out "$TMP/mean-shift-$seed.json" "${FILES[@]}" 2>/dev/null
  DETECTIONS+=("$TMP/mean-shift-$seed.json")
done
"$BIN" detect --method e-divisive --out "$TMP/e-divisive.json" "${FILES[@]}" 2>/dev/null
DETECTIONS+=("$TMP/e-divisive.json")
{
  "$PYTHON" "$TCPD/score.py" "${DETECTIONS[@]}" --series-out "$OUT/tcpd-series.tsv"
  echo
  "$BIN" simulate --series "$SERIES" --key-series "$KEY"
  echo
  "$BIN" simulate --method e-divisive --series "$SERIES" --key-series "$KEY"
  echo
  "$BIN" cost
  echo
  "$BIN" cost --method e-divisive --lengths 1000
} | tee "$OUT/tcpd-table.txt"
