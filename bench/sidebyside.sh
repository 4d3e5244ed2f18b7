#!/usr/bin/env bash
# sidebyside.sh: our hub and the reference hub measured side by side in one
# run, by one client (synapse bench load --vs), at equal offered load and at
# saturation, in memory and durable (our --db against the reference's --db).
#
#   REF_ROOT=/path/to/exported/trees bench/sidebyside.sh [OUT_DIR]
#
# Each row starts a fresh hub of each kind on free loopback ports, runs
# 'synapse bench load --uri OURS --vs REFERENCE' for its agents and --rate,
# and stops both. The JSON lines go to OUT_DIR/results.jsonl (a temporary
# folder by default) and a Markdown table to stdout (docs/benchmarks.md,
# "Side by side with the reference").
#
# Environment:
#   REF_ROOT    the exported synapse-channel and websockets trees (required)
#   REF_START   the reference hub's start.sh (default: ../shared/reference-hub/start.sh
#               beside this checkout)
#   DURATION    each cycling phase (default 5s)
#   MEM_LOADS   memory rows, AGENTS:RATE (0 = saturation), default "1:200 32:5 1:0 32:0"
#   DUR_LOADS   durable rows, default "1:100 32:2 1:0 32:0"
# Needs Go, Python >= 3.10 (the reference; also used here for free ports
# and the table) and the two cores to yourself: other work on the machine
# moves every figure.

set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
: "${REF_ROOT:?set REF_ROOT to the exported reference trees (docs/benchmarks.md, Side by side with the reference)}"
REF_START=${REF_START:-$(dirname "$here")/shared/reference-hub/start.sh}
[[ -x $REF_START ]] || { echo "no reference start.sh at $REF_START: set REF_START" >&2; exit 2; }
DURATION=${DURATION:-5s}
MEM_LOADS=${MEM_LOADS:-"1:200 32:5 1:0 32:0"}
DUR_LOADS=${DUR_LOADS:-"1:100 32:2 1:0 32:0"}
out=${1:-$(mktemp -d -t synapse-sidebyside-XXXXXX)}
mkdir -p "$out"
results=$out/results.jsonl
: >"$results"

syn=$out/synapse
(cd "$here" && go build -o "$syn" ./cmd/synapse)

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# waitport PORT PID: until something listens on PORT, or PID has died.
waitport() {
  for _ in $(seq 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || { echo "hub (pid $2) exited before listening on $1" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listens on $1 after 60 s" >&2
  return 1
}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# row MODE AGENTS RATE: one side-by-side row, MODE memory or durable.
row() {
  local mode=$1 agents=$2 rate=$3 ours_port ref_port ours_pid ref_pid ours_db=() ref_db=-
  ours_port=$(freeport)
  ref_port=$(freeport)
  if [[ $mode == durable ]]; then
    rm -rf "$out/db" && mkdir -p "$out/db"
    ours_db=(--db "$out/db/ours.db")
    ref_db=$out/db/reference.db
  else
    ours_db=(--no-db)
  fi
  # The same caps lifted on both: clients, sockets per host, claims per
  # agent; no pacing on ours (the reference has none by default).
  "$syn" hub --port "$ours_port" --no-mcp "${ours_db[@]}" --max-clients 4096 --max-connections-per-host 0 \
    --max-claims-per-agent 1000000 --frames-per-socket 0 >"$out/ours.log" 2>&1 &
  ours_pid=$!
  REF_ROOT=$REF_ROOT "$REF_START" "$ref_port" "$ref_db" --max-clients 4096 --max-connections-per-host 0 \
    --max-claims-per-agent 1000000 >"$out/reference.log" 2>&1 &
  ref_pid=$!
  pids=("$ours_pid" "$ref_pid")
  waitport "$ours_port" "$ours_pid"
  waitport "$ref_port" "$ref_pid"
  echo "== $mode: $agents agents at --rate $rate" >&2
  "$syn" bench load --uri "ws://127.0.0.1:$ours_port" --hub-pid "$ours_pid" --label synapse \
    --vs "ws://127.0.0.1:$ref_port" --vs-pid "$ref_pid" --vs-label reference \
    --agents "$agents" --rate "$rate" --duration "$DURATION" --json |
    python3 -c 'import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    o = json.loads(line); o["mode"] = mode; print(json.dumps(o))' "$mode" >>"$results"
  kill "$ours_pid" "$ref_pid"
  wait "$ours_pid" "$ref_pid" 2>/dev/null || true
  pids=()
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$here" rev-parse --short HEAD)"
  echo "cores: $(nproc), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/run.txt" >&2

for l in $MEM_LOADS; do row memory "${l%%:*}" "${l##*:}"; done
for l in $DUR_LOADS; do row durable "${l%%:*}" "${l##*:}"; done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/run.txt" >&2

python3 - "$results" <<'EOF'
import json, sys
rows, res = [], {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "compare" in o:
        c = o["compare"]
        rows.append((o["mode"], c["agents"], c["rate_per_agent"], res.pop("synapse"), res.pop("reference"), c))
    else:
        res[o["label"]] = o
def side(r):
    return "%s / %s | %s / %s | **%s** | %.2f | %d MiB" % (
        format(round(r["cycles_per_s"]), ","), format(round(r.get("offered_cycles_per_s", 0)), ",") if r.get("offered_cycles_per_s") else "sat.",
        us(r["claim"]["p50_us"]), us(r["claim"]["p99_us"]), format(round(r.get("hub_cpu_us_per_cycle", 0)), ","), r.get("hub_cores", 0),
        round(r.get("hub_rss_kb", 0) / 1024))
def us(v):
    return "%.0f µs" % v if v < 1000 else "%.1f ms" % (v / 1000)
print("| journal | agents | offered | hub | cycles/s achieved / offered | claim p50 / p99 | hub CPU µs/cycle | hub cores | hub RSS | reference ÷ synapse, CPU/cycle |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode, agents, rate, ours, ref, c in rows:
    offered = "%g/s each" % rate if rate else "saturation"
    journal = "memory" if mode == "memory" else "durable (FULL)"
    print("| %s | %d | %s | synapse | %s | |" % (journal, agents, offered, side(ours)))
    print("| | | | reference | %s | **%.1f×** |" % (side(ref), c["vs_hub_cpu_per_cycle_ratio"]))
EOF
echo "results: $results" >&2
