#!/usr/bin/env bash
# What a PostgreSQL store costs against SQLite: the same small run (40 trials of 20 ms) stored
# five times in each, interleaved, then read back with `show`; prints each run's and each
# read's wall seconds. The PostgreSQL server is a throwaway one of Debian's postgresql on a
# Unix socket in a temporary folder. Run as root (the server runs as the postgres user), after
# `cargo build --release -p quietbench` (or set QUIETBENCH to another binary).
set -euo pipefail
Q=${QUIETBENCH:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/quietbench}
B=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
T=$(mktemp -d); chown postgres: $T
runuser -u postgres -- $B/initdb -D $T/data --auth=trust --username=postgres --no-locale --no-sync >/dev/null
runuser -u postgres -- $B/pg_ctl -D $T/data -l $T/log -w -o "-c listen_addresses='' -k $T" start >/dev/null
$B/createdb -h $T -U postgres qb
PG="postgresql:///qb?host=$T&user=postgres"; SQ=$T/results.sqlite3
export XDG_DATA_HOME=$T/xdg
for i in 1 2 3 4 5; do
  for db in "$SQ" "$PG"; do
    s=$(date +%s.%N); $Q run --local --rounds 40 --duration 0.02 --interval 0.02 --warmup 0 --db "$db" >/dev/null 2>&1; e=$(date +%s.%N)
    id=$($Q runs --db "$db" --limit 1 | sed -n 2p | cut -d' ' -f1)
    s2=$(date +%s.%N); $Q show $id --db "$db" >/dev/null; e2=$(date +%s.%N)
    echo "$( [ "$db" = "$SQ" ] && echo sqlite || echo postgres ) run=$(echo "$e - $s" | bc) show=$(echo "$e2 - $s2" | bc)"
  done
done
runuser -u postgres -- $B/pg_ctl -D $T/data -m fast -w stop >/dev/null; rm -rf $T
