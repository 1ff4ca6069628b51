#!/usr/bin/env bash
# Client writes across an `osd out` on a small RAM cluster: how long peering stalls writes.
#
#   bench/out-probe.sh BIN [RUNS]
#
# Per run: a fresh cluster of 4 OSDs on 4 hosts, a size-3 pool of 32 PGs, 2 s of 64 KiB writes
# as data, then a 3 s probe of 4 KiB writes (2 in flight) with `osd out 0` one second in. Prints
# one JSON line per run: the probe's ops/s, p50, p99 and max latency, and how many map epochs
# the out cost until the end of the probe. Everything lives in a temporary directory.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN=$1 RUNS=${2:-3}
[ -x "$BIN" ] || { echo "not an executable: $BIN" >&2; exit 2; }
WORK=$(mktemp -d /tmp/out-probe.XXXXXX)
cleanup() { "$BIN" down --dir "$WORK/c" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
epoch() { "$BIN" status --json | python3 -c "import json,sys; print(json.load(sys.stdin)['epoch'])"; }
for r in $(seq 1 "$RUNS"); do
  export SHOAL_CONF=$WORK/c/shoal.toml
  "$BIN" up --dir "$WORK/c" --osds 4 --hosts 4 >/dev/null
  "$BIN" pool create t --size 3 --pg-num 32 >/dev/null
  "$BIN" bench --pool t --seconds 2 -b 64K -t 8 write --prefix fill >/dev/null 2>&1
  e0=$(epoch)
  "$BIN" bench --pool t --seconds 3 -b 4K -t 2 write --json >"$WORK/probe.json" &
  probe=$!
  sleep 1
  "$BIN" osd out 0 >/dev/null
  wait "$probe"
  e1=$(epoch)
  python3 -c "import json; d=json.load(open('$WORK/probe.json')); print(json.dumps({'run': $r, 'ops_per_s': round(d['ops_per_s']), 'lat_ms_p50': d['lat_ms_p50'], 'lat_ms_p99': d['lat_ms_p99'], 'lat_ms_max': d['lat_ms_max'], 'epochs': $e1 - $e0}))"
  "$BIN" down --dir "$WORK/c" >/dev/null
  rm -rf "$WORK/c"
done
