#!/usr/bin/env bash
# Two Shoal builds side by side on writes through a local RAM cluster, rounds alternating A, B,
# so both see the same machine noise. Prints one JSON line per run and the median per side.
#
#   bench/ab-writes.sh BIN_A BIN_B [--rounds N] [--seconds S] [-b SIZE] [--osds N --size N]
#
# Each run starts a fresh cluster (`shoal up --backend mem`), creates pool `ab` of the given
# size on the given OSD count (default 1 and 1), runs `shoal bench write` with 16 in flight,
# and stops the cluster. Everything lives under a temporary directory removed at exit.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A=$1 B=$2; shift 2
ROUNDS=3 SECONDS_PER_RUN=5 BLOCK=4K OSDS=1 SIZE=1
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    -b) BLOCK=$2; shift 2 ;;
    --osds) OSDS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for bin in "$A" "$B"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }; done
WORK=$(mktemp -d /tmp/ab-writes.XXXXXX)
cleanup() { for d in "$WORK"/run-*; do [ -d "$d" ] && "$A" down --dir "$d" >/dev/null 2>&1 || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

run() { # side binary round
  local dir=$WORK/run-$1-$3
  "$2" up --dir "$dir" --osds "$OSDS" --osd-size 2G >/dev/null
  SHOAL_CONF=$dir/shoal.toml "$2" pool create ab --size "$SIZE" --pg-num 32 >/dev/null
  SHOAL_CONF=$dir/shoal.toml "$2" bench --pool ab --seconds "$SECONDS_PER_RUN" -b "$BLOCK" -t 16 write --json \
    | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'side':'$1','round':$3,'ops_per_s':round(d['ops_per_s']),'mb_per_s':round(d['mb_per_s'],1),'lat_ms_p99':d['lat_ms_p99'],'errors':d['errors']}))"
  "$2" down --dir "$dir" >/dev/null
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run A "$A" "$r"; run B "$B" "$r"; else run B "$B" "$r"; run A "$A" "$r"; fi
done | tee "$WORK/runs.jsonl"
python3 - "$WORK/runs.jsonl" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {s: statistics.median(r["ops_per_s"] for r in runs if r["side"] == s) for s in ("A", "B")}
p99 = {s: statistics.median(r["lat_ms_p99"] for r in runs if r["side"] == s) for s in ("A", "B")}
pairs = {}
for r in runs:
    pairs.setdefault(r["round"], {})[r["side"]] = r["ops_per_s"]
ratios = [p["B"] / p["A"] for p in pairs.values() if p.get("A")]
print(json.dumps({"median_ops_per_s": med, "median_p99_ms": p99,
                  "b_over_a_per_round": [round(x, 3) for x in ratios],
                  "b_over_a_median": round(statistics.median(ratios), 3)}))
EOF
