#!/usr/bin/env bash
# The main job: boot the example system in both placements, drive it with
# the same script, print its call statistics while it runs, then measure the
# placement table (INKS Table 3 through generated stubs) beside the door
# benchmarks and their baselines, the bulk paths against memcpy and a Unix
# socket (with SVG charts), and the file service against Linux's own system
# calls. Pass --quick for a short run.
set -euo pipefail
cd "$(dirname "$0")"
quick=()
[ "${1:-}" = "--quick" ] && quick=(--quick)
cargo build --release -q -p kv-system -p lintel-bench -p lintel-preload
bin=target/release
script='put greeting hello, doors
put answer 42
get greeting
keys
time
where
bench 20000
log 3
ls
cat hello.txt'
for placement in colocated isolated; do
  manifest=examples/kv-system/$placement.toml
  echo "== kv-system, $placement ($manifest)"
  { printf '%s\n' "$script"; sleep 0.5
    # To stderr: stdout here feeds the shell.
    echo "-- kv-system stats (while it runs):" >&2
    "$bin/kv-system" stats "$manifest" >&2
    echo quit; } | "$bin/kv-system" boot "$manifest"
  echo
done
echo "== lintel-bench: baselines, doors, placement, LRPC curves, bulk data, file service (JSON lines in bench.jsonl, charts in target/plots)"
"$bin/lintel-bench" "${quick[@]}" --json bench.jsonl --plots target/plots baseline door placement lrpc bulk fs unix
