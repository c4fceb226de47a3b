#!/usr/bin/env bash
# quietbench's change points on the Turing Change Point Dataset, scored with TCPDBench's own
# metric code beside TCPDBench's published default scores, and on simulated series with known
# truth (issue 31; docs/statistics.md §9c has the tables).
#
# Usage: benches/changepoints/tcpd.sh [OUT_DIR] [SERIES_PER_ROW]
#   OUT_DIR: where the outputs go (default benches/changepoints/results):
#     tcpd-table.txt   both tables, as printed
#     tcpd-series.tsv  one row per TCPD series and method (F1, cover, our locations)
#   SERIES_PER_ROW: simulated series per row of the simulation table (default 1000).
#   About 2 minutes on 2 cores after the build (the TCPD part takes seconds; the simulations
#   about 70 s at 1000 series per row).
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
"$BIN" detect --out "$TMP/detections.json" "${FILES[@]}"
{
  "$PYTHON" "$TCPD/score.py" "$TMP/detections.json" --series-out "$OUT/tcpd-series.tsv"
  echo
  "$BIN" simulate --series "$SERIES"
} | tee "$OUT/tcpd-table.txt"
