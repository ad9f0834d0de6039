#!/usr/bin/env bash
# Compare the engine and control-plane benchmarks of two commits on this machine, interleaved
# (A, B, A, B, ...) so that both see the same background load; prints where each log is.
#
#   bash scripts/compare_commits.sh BEFORE AFTER [ROUNDS]
#
# Each commit is exported with `git archive` to a temporary directory and run with this
# checkout's virtualenv (PYTHONPATH points at the export). The tick bench needs PostgreSQL and
# Redis: DATABASE_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres) creates a
# database per commit, REDIS_BASE (default redis://127.0.0.1:6379) lends databases 11-14.
# Read the CPU medians (cpu_median_ms, "CPU time") first: wall times follow the load.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: compare_commits.sh BEFORE AFTER [ROUNDS]}
after=${2:?usage: compare_commits.sh BEFORE AFTER [ROUNDS]}
rounds=${3:-3}
py="$PWD/.venv/bin/python"
admin=${DATABASE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
redis=${REDIS_BASE:-redis://127.0.0.1:6379}
out=$(mktemp -d -t trafficmgr-compare.XXXX)
declare -A db=([before]=11 [after]=12) route_db=([before]=13 [after]=14) rev=([before]=$before [after]=$after)
for side in before after; do
  mkdir -p "$out/$side"
  git archive "${rev[$side]}" | tar -x -C "$out/$side"
  name="trafficmgr_compare_$side"
  psql "$admin" -q -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name"
done
# run MODULE OLD_NAME ARGS...: the module in a tree with bench/ packages, else the flat
# script bench/OLD_NAME.py of a commit from before them
run() {
  local module=$1 old=$2
  shift 2
  if [ -f "$(echo "$module" | tr . /).py" ]; then
    "$py" -m "$module" "$@"
  else
    "$py" "bench/$old.py" "$@"
  fi
}
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    log="$out/$side.log"
    echo "### round $round $side ${rev[$side]} $(uptime)" >> "$log"
    echo "round $round/$rounds: $side (${rev[$side]})"
    (
      cd "$out/$side"
      export PYTHONPATH="$out/$side" SECRET_KEY=bench-only
      run bench.engine.table engine_table --runs 30
      run bench.engine.pick engine_pick --repeat 3
      run bench.controlplane.tick tick --ticks 15 --redis-url "$redis/${db[$side]}" \
        --database-url "${admin%/*}/trafficmgr_compare_$side"
      run bench.controlplane.decisions decisions --in-process 3000 \
        --redis-url "$redis/${route_db[$side]}"
      run bench.controlplane.ingest ingest --in-process 3000
    ) >> "$log" 2>&1 || echo "  (a bench failed: see $log)"
  done
done
echo "logs: $out/before.log $out/after.log"
