#!/usr/bin/env bash
# How a bucket index partition (megabytes of omap) moves when an OSD it lives on goes out, and
# what S3 writers see meanwhile: builds alternated, a fresh cluster per run.
#
#   bench/index-move.sh [--rounds N] [--fill-seconds S] BIN...
#
# Per run: `shoal up` with four `block` OSDs (size-3 pools) and its gateway; `shoal s3 bench put`
# of 4 KiB objects, 64 in flight, for S seconds (default 25) fills one bucket, whose index
# partitions then hold tens of thousands of keys (megabytes of omap) each; the OSD that is
# primary of the most index objects is marked out while a second `s3 bench put` (16 in flight,
# 20 s) runs on another bucket. Printed: the keys written and index objects, seconds from the
# mark-out until every PG is active+clean, and the second load's ops/s, p99 and max latency.
set -euo pipefail

ROUNDS=1
FILL=25
while [[ ${1:-} == --* ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --fill-seconds) FILL=$2; shift 2 ;;
    *) echo "bench/index-move.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "usage: bench/index-move.sh [--rounds N] [--fill-seconds S] BIN..." >&2; exit 2; }

DIR=$(mktemp -d /tmp/shoal-index-move.XXXXXX)
BIN=""
cleanup() {
  if [[ -n $BIN && -f $DIR/c/shoal.toml ]]; then "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

clean_pgs() {
  "$BIN" --conf "$DIR/c/shoal.toml" status --json | jq '(.pgs.by_state["active+clean"] // 0) == .pgs.count'
}

run() {
  rm -rf "$DIR/c"
  "$BIN" up --osds 4 --backend block --osd-size 4G --dir "$DIR/c" --json >"$DIR/up.json" 2>"$DIR/up.err" \
    || { echo "bench/index-move.sh: shoal up failed:" >&2; cat "$DIR/up.err" >&2; exit 1; }
  local conf=(--conf "$DIR/c/shoal.toml")
  local ep ak sk
  ep=$(jq -r .gateway.endpoint "$DIR/up.json"); ak=$(jq -r .gateway.access_key "$DIR/up.json")
  sk=$(jq -r .gateway.secret_key "$DIR/up.json")
  local s3=(s3 bench --endpoint "$ep" --access-key "$ak" --secret-key "$sk" --size 4K)
  "$BIN" "${s3[@]}" --bucket fill --concurrency 64 --seconds "$FILL" --json put >"$DIR/fill.json" 2>/dev/null
  for _ in $(seq 1 120); do [[ $(clean_pgs) == true ]] && break; sleep 0.5; done
  # The OSD that is primary of the most index objects (the fill bucket's partitions and the
  # gateway's own): marked out, it hands all of them to new members.
  local objects primary
  objects=$("$BIN" "${conf[@]}" obj ls --pool .gw.index | wc -l)
  primary=$("$BIN" "${conf[@]}" obj ls --pool .gw.index | while read -r o; do
    "$BIN" "${conf[@]}" osd map .gw.index "$o" --json | jq .primary
  done | sort | uniq -c | sort -rn | head -1 | awk '{print $2}')
  "$BIN" "${s3[@]}" --bucket load --concurrency 16 --seconds 20 --json put >"$DIR/load.json" 2>/dev/null &
  local load=$!
  sleep 3
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN" "${conf[@]}" osd out "$primary" >/dev/null
  sleep 1
  for _ in $(seq 1 600); do [[ $(clean_pgs) == true ]] && break; sleep 0.2; done
  t1=$(date +%s.%N)
  wait "$load"
  jq -r --arg b "$BIN" --arg keys "$(jq .ops "$DIR/fill.json")" --arg objs "$objects" --arg out "$primary" \
    --arg secs "$(python3 -c "print(f'{$t1 - $t0:.1f}')")" \
    '"\($b) fill_keys=\($keys) index_objects=\($objs) out=osd.\($out) clean_after_s=\($secs) load_ops_per_s=\(.ops_per_s | round) load_p99_ms=\(.p99_ms) load_max_ms=\(.max_ms) errors=\(.errors)"' \
    "$DIR/load.json"
  "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true
}

for ((round = 1; round <= ROUNDS; round++)); do
  for BIN in "$@"; do
    [[ -x $BIN ]] || { echo "bench/index-move.sh: $BIN is not an executable" >&2; exit 2; }
    run
  done
done
