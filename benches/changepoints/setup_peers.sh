#!/usr/bin/env bash
# Installs the two peer change-point tools that peers.py runs next to quietbench's E-divisive:
#   - MongoDB's signal-processing-algorithms (E-divisive means, permutation test)
#   - Apache Otava, formerly DataStax Hunter (E-divisive split/merge, Student t-test)
#
# Usage: benches/changepoints/setup_peers.sh [VENV_DIR]
#   VENV_DIR defaults to ${QB_PEERS_VENV:-target/peers-venv}; a relative path is taken from the
#   repository root. PYTHON (default python3) picks the interpreter; it must be Python 3.11,
#   the only version signal-processing-algorithms 2.1.6 accepts (Requires-Python >=3.11,<3.12).
#
# The two packages cannot share one environment: signal-processing-algorithms 2.1.6 requires
# numpy<2.0 and apache-otava 0.8.0 pins numpy==2.2.0.*, so pip refuses to resolve them together.
# Each gets its own venv under VENV_DIR (VENV_DIR/mongodb and VENV_DIR/otava); peers.py runs each
# tool with its venv's interpreter. Re-running is cheap: a venv whose package already has the
# pinned version and imports is left alone.
set -euo pipefail

MONGODB_DIST=signal-processing-algorithms
MONGODB_VERSION=2.1.6
MONGODB_IMPORT=signal_processing_algorithms.energy_statistics.energy_statistics
OTAVA_DIST=apache-otava
OTAVA_VERSION=0.8.0
OTAVA_IMPORT=otava.analysis

die() { echo "setup_peers.sh: error: $*" >&2; exit 1; }
say() { echo "setup_peers.sh: $*" >&2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV_DIR=${1:-${QB_PEERS_VENV:-target/peers-venv}}
case "$VENV_DIR" in
  /*) ;;
  *) VENV_DIR="$ROOT/$VENV_DIR" ;;
esac
PYTHON=${PYTHON:-python3}

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=... to a Python 3.11 interpreter)"
PY_VER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$PY_VER" != "3.11" ]; then
  die "$PYTHON is Python $PY_VER; $MONGODB_DIST $MONGODB_VERSION installs only on Python 3.11 (set PYTHON=python3.11)"
fi

# python3 -m venv needs ensurepip, which Debian ships separately in python3-venv.
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    say "the venv module is missing: installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq python3-venv || apt-get install -y -qq "python$PY_VER-venv" \
      || die "apt-get install python3-venv failed"
    "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 \
      || die "python3-venv installed but $PYTHON still lacks venv/ensurepip"
  else
    die "$PYTHON lacks the venv module (ensurepip); install python3-venv (as root: apt-get install -y python3-venv)"
  fi
fi

# has_pkg VENV DIST VERSION MODULE: true when VENV's python has DIST==VERSION and MODULE imports.
has_pkg() {
  [ -x "$1/bin/python" ] || return 1
  "$1/bin/python" - "$2" "$3" "$4" >/dev/null 2>&1 <<'EOF'
import importlib, importlib.metadata, sys
dist, want, module = sys.argv[1:4]
if importlib.metadata.version(dist) != want:
    sys.exit(1)
importlib.import_module(module)
EOF
}

# install_into VENV DIST VERSION MODULE
install_into() {
  local venv=$1 dist=$2 version=$3 module=$4
  if has_pkg "$venv" "$dist" "$version" "$module"; then
    say "$dist $version already installed in $venv"
    return 0
  fi
  if [ ! -x "$venv/bin/python" ]; then
    say "creating venv $venv"
    mkdir -p "$(dirname "$venv")"
    "$PYTHON" -m venv "$venv" || die "python -m venv $venv failed"
  fi
  say "installing $dist==$version into $venv"
  PIP_NO_INPUT=1 "$venv/bin/python" -m pip install --disable-pip-version-check -q "$dist==$version" \
    || die "pip install $dist==$version into $venv failed"
  has_pkg "$venv" "$dist" "$version" "$module" \
    || die "$dist $version installed in $venv but 'import $module' fails"
  say "$dist $version ready in $venv"
}

install_into "$VENV_DIR/mongodb" "$MONGODB_DIST" "$MONGODB_VERSION" "$MONGODB_IMPORT"
install_into "$VENV_DIR/otava" "$OTAVA_DIST" "$OTAVA_VERSION" "$OTAVA_IMPORT"

# The MongoDB tool falls back to a pure-Python loop (orders of magnitude slower) when its native
# _e_divisive library does not load; say so here rather than in the middle of a benchmark.
"$VENV_DIR/mongodb/bin/python" -c \
  'from signal_processing_algorithms.energy_statistics.cext_calculator import C_EXTENSION_LOADED as c; import sys; sys.exit(0 if c else 1)' \
  >/dev/null 2>&1 || say "warning: the native E-divisive library of $MONGODB_DIST did not load; it will run in pure Python"

say "done: run  python3 benches/changepoints/peers.py IN.json OUT.json  (venvs in $VENV_DIR)"
