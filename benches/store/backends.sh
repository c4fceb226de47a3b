#!/usr/bin/env bash
# What a PostgreSQL store costs against SQLite, and what TLS to it costs: the same small run
# (40 trials of 20 ms) stored five times in each of four stores, interleaved, then read back
# with `show`; prints each run's and each read's wall seconds, then the medians.
#   sqlite    the embedded default
#   pg-unix   PostgreSQL on a Unix socket
#   pg-tcp    the same server over loopback TCP, in the clear (sslmode=disable)
#   pg-tls    the same server over loopback TCP with TLS, sslmode=verify-full against a CA made
#             by `quietbench certs` (rustls on aws-lc-rs; one handshake per process)
# The server is a throwaway one of Debian's postgresql in a temporary folder. Run as root (the
# server runs as the postgres user), after `cargo build --release -p quietbench` (or set
# QUIETBENCH to another binary).
set -euo pipefail
Q=${QUIETBENCH:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/quietbench}
B=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
T=$(mktemp -d); chown postgres: $T
trap 'runuser -u postgres -- $B/pg_ctl -D $T/data -m fast -w stop >/dev/null 2>&1 || true; rm -rf $T' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$Q certs init --dir $T/ca >/dev/null
$Q certs issue --dir $T/ca --agent localhost >/dev/null
mkdir $T/data; chown postgres: $T/data
runuser -u postgres -- $B/initdb -D $T/data --auth=trust --username=postgres --no-locale --no-sync >/dev/null
install -o postgres -m 0600 $T/ca/agent-localhost.pem $T/data/server.crt
install -o postgres -m 0600 $T/ca/agent-localhost.key $T/data/server.key
printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' > $T/data/pg_hba.conf
chown postgres: $T/data/pg_hba.conf
runuser -u postgres -- $B/pg_ctl -D $T/data -l $T/log -w \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $T -c ssl=on" start >/dev/null
$B/createdb -h $T -p $PORT -U postgres qb
export XDG_DATA_HOME=$T/xdg
declare -A URL=(
  [sqlite]=$T/results.sqlite3
  [pg-unix]="postgresql:///qb?host=$T&port=$PORT&user=postgres"
  [pg-tcp]="postgres://postgres@localhost:$PORT/qb?sslmode=disable"
  [pg-tls]="postgres://postgres@localhost:$PORT/qb?sslmode=verify-full&sslrootcert=$T/ca/ca.pem"
)
STORES="sqlite pg-unix pg-tcp pg-tls"
for i in 1 2 3 4 5; do
  for name in $STORES; do
    db=${URL[$name]}
    s=$(date +%s.%N); $Q run --local --rounds 40 --duration 0.02 --interval 0.02 --warmup 0 --db "$db" >/dev/null 2>&1; e=$(date +%s.%N)
    id=$($Q runs --db "$db" --limit 1 | sed -n 2p | cut -d' ' -f1)
    s2=$(date +%s.%N); $Q show $id --db "$db" >/dev/null; e2=$(date +%s.%N)
    echo "$name run=$(echo "$e - $s" | bc) show=$(echo "$e2 - $s2" | bc)" | tee -a $T/times
  done
done
echo "medians of 5 (seconds): store, run, show"
for name in $STORES; do
  grep "^$name " $T/times | python3 -c '
import sys, statistics
rows = [dict(kv.split("=") for kv in line.split()[1:]) for line in sys.stdin]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print("  %-8s %.3f %.3f" % (sys.argv[1], med("run"), med("show")))' "$name"
done
