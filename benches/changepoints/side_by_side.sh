#!/usr/bin/env bash
# quietbench's change points beside MongoDB's signal-processing-algorithms and Apache Otava, on
# the same synthetic series with known steps (docs/statistics.md §10 has the table).
#
# Usage: benches/changepoints/side_by_side.sh [NOISE] [OUT_DIR] [OUTLIERS]
#   (about 5 minutes on 2 cores, most of it MongoDB's tool)
#   NOISE: the relative SD of a run's value, default 0.01 (1%); 0.0015 is this project's
#   measured run-to-run noise of cpu.primes on one quiet VM.
#   OUT_DIR: where the table goes, as table-noiseNOISE[-outliersOUTLIERS].txt (default
#   benches/changepoints/results).
#   OUTLIERS: the share of runs that are bad days, 5-15% high (default 0).
#
# Installs the peers in venvs under target/peers-venv (setup_peers.sh), builds the validation
# binary in release, generates the series (fixed seeds), runs the peers (peers.py) and scores
# all three: false alarms per 1000 runs of noise, detection of 1%, 2% and 5% steps and the
# runs it takes after a step until each first reports it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NOISE=${1:-0.01}
OUT=${2:-$ROOT/benches/changepoints/results}
OUTLIERS=${3:-0}
TAG="noise$NOISE"
[ "$OUTLIERS" = 0 ] || TAG="$TAG-outliers$OUTLIERS"
mkdir -p "$OUT"
cd "$ROOT"
bash benches/changepoints/setup_peers.sh
cargo build --release -q -p quietbench-benches --bin changepoint-validation
BIN=target/release/changepoint-validation
SERIES=$(mktemp -d)/series.json
trap 'rm -rf "$(dirname "$SERIES")"' EXIT
"$BIN" generate --noise "$NOISE" --outliers "$OUTLIERS" --out "$SERIES"
# The peers' detections (about 1.5 MB) stay beside the series, in the temporary folder.
PEERS="$(dirname "$SERIES")/peers.json"
python3 benches/changepoints/peers.py "$SERIES" "$PEERS"
"$BIN" score --input "$SERIES" --peers "$PEERS" | tee "$OUT/table-$TAG.txt"
