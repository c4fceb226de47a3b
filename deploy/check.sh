#!/usr/bin/env bash
# Validates every file under deploy/ with its own tool, installing the tools
# first (each only when missing). Run from anywhere as root on Debian 12:
#   bash deploy/check.sh
# Prints one line per check; any failure prints the tool's output and exits
# non-zero. Needs apt and PyPI; never AWS (packer validate sends nothing).
set -euo pipefail

cd "$(dirname "$0")/.."
PARLIAMENT_VERSION=1.6.4
# parliament 1.6.4 imports pkg_resources, which setuptools >= 81 no longer
# ships: it gets its own virtualenv, so the machine's Python is left alone.
PARLIAMENT_VENV=${XDG_CACHE_HOME:-$HOME/.cache}/quietbench-deploy/parliament-$PARLIAMENT_VERSION
MAX_EXPOSURE=2.7 # systemd-analyze security of the agent; deploy/README.md quotes it
MAX_SERVE_EXPOSURE=1.6 # ... and of quietbench serve

fail() {
    echo "FAIL $1" >&2
    [ -z "${2:-}" ] || printf '%s\n' "$2" >&2
    exit 1
}

# --- tools --------------------------------------------------------------------
apt_missing=()
dpkg -s packer >/dev/null 2>&1 || apt_missing+=(packer) # Debian's 1.6.6
dpkg -s cloud-init >/dev/null 2>&1 || apt_missing+=(cloud-init)
command -v systemd-analyze >/dev/null || apt_missing+=(systemd)
if [ ${#apt_missing[@]} -gt 0 ]; then
    echo "installing ${apt_missing[*]} (apt)"
    if [[ " ${apt_missing[*]} " == *" cloud-init "* ]]; then
        # Only its schema checker is wanted: keep cloud-init from ever running
        # at boot on this machine (its generator honours this file).
        mkdir -p /etc/cloud && touch /etc/cloud/cloud-init.disabled
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${apt_missing[@]}" >/dev/null
fi
PACKER=/usr/bin/packer # Debian's, not a newer one on PATH that needs plugins

if ! "$PARLIAMENT_VENV/bin/parliament" --version 2>/dev/null | grep -qx "parliament $PARLIAMENT_VERSION"; then
    echo "installing parliament $PARLIAMENT_VERSION (pip, in $PARLIAMENT_VENV)"
    rm -rf "$PARLIAMENT_VENV"
    mkdir -p "$(dirname "$PARLIAMENT_VENV")"
    if ! python3 -m venv "$PARLIAMENT_VENV" 2>/dev/null; then
        rm -rf "$PARLIAMENT_VENV"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$PARLIAMENT_VENV"
    fi
    "$PARLIAMENT_VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "parliament==$PARLIAMENT_VERSION" "setuptools<81"
fi

# The agent binary: systemd-analyze verify wants ExecStart's program to exist,
# packer validate wants the file provisioner's source to.
BIN=
for b in target/release/quietbench target/debug/quietbench; do
    if [ -x "$b" ]; then BIN=$PWD/$b; break; fi
done
if [ -z "$BIN" ]; then
    echo "building quietbench (cargo build -p quietbench)"
    cargo build -q -p quietbench
    BIN=$PWD/target/debug/quietbench
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# --- 1. systemd units -------------------------------------------------------------
# verify checks that ExecStart's /usr/local/bin/quietbench exists. Rather than
# install it on this machine, verify under --root: a throwaway tree holding the
# units in etc/systemd/system, the binary in usr/local/bin and a copy of the
# system's units (for sysinit.target and the other default dependencies).
# verify exits 0 on mere warnings (e.g. an unknown key), so any output fails.
root=$TMP/root
mkdir -p "$root/etc/systemd/system" "$root/usr/local/bin" "$root/usr/lib/systemd"
ln "$BIN" "$root/usr/local/bin/quietbench" 2>/dev/null || cp "$BIN" "$root/usr/local/bin/quietbench"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
check_unit() { # UNIT MAX_EXPOSURE
    local unit=deploy/systemd/$1 max=$2 out exposure
    cp "$unit" "$root/etc/systemd/system/"
    out=$(systemd-analyze verify --root="$root" "$1" 2>&1) || fail "systemd: $1: systemd-analyze verify failed" "$out"
    [ -z "$out" ] || fail "systemd: $1: systemd-analyze verify printed output" "$out"
    out=$(systemd-analyze security --offline=true "$unit" 2>&1) || fail "systemd: $1: systemd-analyze security failed" "$out"
    exposure=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$out")
    [ -n "$exposure" ] || fail "systemd: $1: no exposure level in systemd-analyze security's output" "$out"
    awk -v e="$exposure" -v m="$max" 'BEGIN { exit !(e <= m) }' ||
        fail "systemd: $1: exposure $exposure is above $max" "$out"
    echo "PASS systemd:     $1: verify silent; security --offline exposure $exposure (at most $max)"
}
check_unit quietbench-agent.service "$MAX_EXPOSURE"
check_unit quietbench-serve.service "$MAX_SERVE_EXPOSURE"

# --- 2. cloud-init user data ----------------------------------------------------
userdata=deploy/cloud-init/user-data.yaml
out=$(cloud-init schema --config-file "$userdata" 2>&1) || fail "cloud-init: schema" "$out"
grep -q '^Valid cloud-config' <<<"$out" || fail "cloud-init: schema did not say valid" "$out"
# The schema does not look inside files: check that the agent.toml it writes
# uses only the agent's keys (crates/quietbench-agent/src/config.rs), points at
# the files it writes, and that the key is 0600. Also the image's agent.toml.
/usr/bin/python3 - "$userdata" deploy/packer/agent.toml <<'EOF' || fail "cloud-init: agent.toml content"
import sys, tomllib, yaml
KEYS = {"listen", "state_dir", "allow_exec", "tls_cert", "tls_key", "client_ca",
        "token_file", "insecure", "max_trial_secs"}
def check_keys(name, text):
    unknown = set(tomllib.loads(text)) - KEYS
    if unknown:
        sys.exit(f"{name}: keys the agent refuses: {sorted(unknown)}")
    return tomllib.loads(text)
files = {f["path"]: f for f in yaml.safe_load(open(sys.argv[1]))["write_files"]}
conf = check_keys("user data agent.toml", files["/etc/quietbench/agent.toml"]["content"])
for key in ("tls_cert", "tls_key", "client_ca"):
    if conf.get(key) not in files:
        sys.exit(f"user data: {key} = {conf.get(key)!r} is not one of the files it writes")
if files[conf["tls_key"]]["permissions"] != "0600":
    sys.exit("user data: the agent key must be written 0600")
check_keys(sys.argv[2], open(sys.argv[2]).read())
EOF
echo "PASS cloud-init:  cloud-init schema: valid; agent.toml keys, TLS paths and 0600 key checked"

# --- 3. packer template ----------------------------------------------------------
# Full validate (not -syntax-only) of the single file: it prepares the builder
# and provisioners without calling AWS or needing credentials.
out=$("$PACKER" validate -var "quietbench_binary=$BIN" deploy/packer/agent.pkr.hcl 2>&1) ||
    fail "packer: $("$PACKER" version) validate" "$out"
echo "PASS packer:      $("$PACKER" version) validate agent.pkr.hcl: valid${out:+ ($out)}"

# --- 4. IAM policy ----------------------------------------------------------------
# --files rather than --file: parliament 1.6.4 refuses --file whenever stdin is
# not a terminal (CI, a pipe); both read the file the same way. Exit status 0
# means no finding, 1 findings (one JSON object a line), anything else an error.
policy=deploy/iam/controller-policy.json
rc=0
out=$("$PARLIAMENT_VENV/bin/parliament" --json --minimum_severity INFO --files "$policy" 2>&1) || rc=$?
[ "$rc" -le 1 ] || fail "iam: parliament exited $rc" "$out"
summary=$(/usr/bin/python3 -c '
import json, sys
counts = {}
for line in filter(None, sys.stdin.read().splitlines()):
    sev = json.loads(line)["severity"]  # a line that is not a finding fails here
    counts[sev] = counts.get(sev, 0) + 1
bad = sum(counts.get(s, 0) for s in ("MEDIUM", "HIGH", "CRITICAL"))
print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no findings")
sys.exit(1 if bad else 0)' <<<"$out") || fail "iam: parliament findings at MEDIUM or above" "$out"
echo "PASS iam:         parliament $PARLIAMENT_VERSION: $summary"

echo "all 5 checks passed"
