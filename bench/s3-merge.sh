#!/usr/bin/env bash
# What online index partition merges cost the deletes around them, side by side in one run:
# one RAM OSD, two gateways on the same cluster that both split at --split entries, one merging
# at its default (a quarter of that) and one never merging (--index-merge-entries 0). Each
# bucket is filled through its own gateway, then emptied from the start of its key space by
# `shoal s3 bench ... delete`; the bench figures, the partitions left in each bucket and every
# merge's copy and fenced times (from the merging gateway's log) are printed as JSON.
#
#   bench/s3-merge.sh [--fill-s S] [--delete-s S] [--split N] [--workdir DIR]
set -euo pipefail
shopt -s inherit_errexit

FILL_S=40
DELETE_S=60
SPLIT=20000
WORK=/tmp/s3-merge
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --fill-s) FILL_S=$2; shift 2 ;;
    --delete-s) DELETE_S=$2; shift 2 ;;
    --split) SPLIT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument $1" >&2; usage 2 ;;
  esac
done
SHOAL=$(realpath "$SHOAL_BIN")

"$SHOAL" down --dir "$WORK" >/dev/null 2>&1 || true
rm -rf "$WORK"
UP=$("$SHOAL" up --dir "$WORK" --osds 1 --backend mem --osd-size 6G --json)
AK=$(jq -r .gateway.access_key <<<"$UP")
SK=$(jq -r .gateway.secret_key <<<"$UP")
CONF=$WORK/shoal.toml
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$SHOAL" down --dir "$WORK" >/dev/null 2>&1 || true
}
trap cleanup EXIT

gateway() { # PORT EXTRA...
  local port=$1; shift
  "$SHOAL" gateway run --conf "$CONF" --name client.gateway --listen "127.0.0.1:$port" --pool-size 1 \
    --index-split-entries "$SPLIT" "$@" >"$WORK/gw-$port.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "gateway on $port did not start" >&2
  exit 1
}
gateway 7611
gateway 7612 --index-merge-entries 0

bench() { # PORT BUCKET ARGS...
  local port=$1 bucket=$2; shift 2
  "$SHOAL" s3 bench --endpoint "http://127.0.0.1:$port" --access-key "$AK" --secret-key "$SK" \
    --bucket "$bucket" "$@" --json
}
# Never-merging first, then merging, each filled then emptied.
RESULTS=()
for which in never merging; do
  if [ "$which" = never ]; then port=7612; else port=7611; fi
  bucket="del-$which"
  before=$("$SHOAL" obj ls --conf "$CONF" -p .gw.index | grep -c "^i\." || true)
  fill=$(bench "$port" "$bucket" --size 1 --concurrency 32 --seconds "$FILL_S" put)
  sleep 3
  filled=$("$SHOAL" obj ls --conf "$CONF" -p .gw.index | grep -c "^i\." || true)
  del=$(bench "$port" "$bucket" --concurrency 16 --seconds "$DELETE_S" delete)
  sleep 3
  after=$("$SHOAL" obj ls --conf "$CONF" -p .gw.index | grep -c "^i\." || true)
  RESULTS+=("$(jq -n --arg which "$which" --argjson fill "$fill" --argjson del "$del" \
    --argjson parts_filled "$((filled - before))" --argjson parts_after "$((after - before))" \
    '{gateway: $which, fill: {ops: $fill.ops, ops_per_s: $fill.ops_per_s}, partitions_after_fill: $parts_filled,
      delete: {ops: $del.ops, errors: $del.errors, ops_per_s: $del.ops_per_s, p50_ms: $del.p50_ms,
      p99_ms: $del.p99_ms, max_ms: $del.max_ms}, partitions_after_delete: $parts_after}')")
done
MERGES=$(grep "index partition merge" "$WORK/gw-7611.log" | sed 's/\x1b\[[0-9;]*m//g' \
  | grep -o 'copy_ms=[0-9]* fenced_ms=[0-9]*' | jq -R -s 'split("\n") | map(select(length > 0))')
jq -n --argjson r "$(printf '%s\n' "${RESULTS[@]}" | jq -s .)" --argjson m "$MERGES" \
  --arg commit "$(git -C "$(dirname "$0")/.." rev-parse --short HEAD)" \
  '{commit: $commit, runs: $r, merges: $m}'
