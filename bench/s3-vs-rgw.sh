#!/usr/bin/env bash
# Shoal's S3 gateway beside Ceph 16.2's radosgw, on the same cluster shapes, each loaded with the
# same native load generator (`shoal s3 bench`, which speaks plain signed S3 to any server).
#
#   bench/s3-vs-rgw.sh [--seconds S] [--shapes mem1,block3] [--out FILE] [--workdir DIR]
#
# Shapes: mem1 = one RAM OSD (Ceph: memstore; Shoal: --backend mem) with size-1 pools;
# block3 = three disk OSDs (Ceph: bluestore on a file; Shoal: --backend block) with size-3 pools.
# Per shape and system: 4 MiB and 4 KiB PUT then GET, at 16 and 64 requests in flight, S seconds
# each (default 5: every PUT writes a new key, and a RAM OSD holds 16 GiB); the
# gateway's RSS idle and its peak during 64 concurrent 4 MiB PUTs. For Shoal also `shoal bench`
# on the gateway's own data pool (4 MiB writes and reads, 16 and 64 in flight), which shows
# what the gateway costs over the cluster. Ceph first, then Shoal, per shape. Run as root.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_S=5
SHAPES=mem1,block3
OUT=""
WORK=${S3_VS_RGW_DIR:-/tmp/s3-vs-rgw}
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}
HEALTHY_TIMEOUT_S=${HEALTHY_TIMEOUT_S:-180}
HEALTH_OK_EXTRA_S=${HEALTH_OK_EXTRA_S:-5}
IDLE_S=5
PG_NUM=32
MEMSTORE_BYTES=$((16 << 30))
BLUESTORE_BLOCK_BYTES=$((8 << 30))
AK=SHOALBENCHACCESSKEY1
SK=shoalbenchsecretkey0000000000000000000001

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) BENCH_S=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done

# shellcheck source=ceph/lib.sh
. "$HERE/ceph/lib.sh"

trap 'remove_clusters_and_exit "$WORK"/*/' EXIT
trap 'exit 130' INT TERM

s3bench() {  # endpoint ak sk size concurrency workload bucket -> one JSON line
  "$SHOAL_BIN" s3 bench --endpoint "$1" --access-key "$2" --secret-key "$3" --size "$4" \
    --concurrency "$5" --seconds "$BENCH_S" --bucket "$7" "$6" --json 2>>"$WORK/logs/s3bench.err"
}

peak_rss_during() {  # pid cmd... -> runs cmd (stdout kept), prints "PEAK_KIB" to fd 3
  local pid=$1 peak=0 r bg; shift
  "$@" & bg=$!
  while kill -0 "$bg" 2>/dev/null; do
    r=$(rss_kib "$pid"); [ "$r" != null ] && [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.2
  done
  wait "$bg"
  echo "$peak" >&3
}

loads() {  # endpoint ak sk gw_pid -> JSON object of every load's report, and RSS figures
  local ep=$1 ak=$2 sk=$3 pid=$4 idle out="{}" size c w b key peak
  idle=$(rss_kib "$pid")
  for size in 4M 4K; do
    for c in 16 64; do
      b=bench-$(echo "$size" | tr 'MK' 'mk')-$c
      for w in put get; do
        key="${w}_${size}_${c}"
        log "  $key"
        if [ "$size" = 4M ] && [ "$c" = 64 ] && [ "$w" = put ]; then
          r=$(peak_rss_during "$pid" s3bench "$ep" "$ak" "$sk" "$size" "$c" "$w" "$b" 3>"$WORK/peak")
          peak=$(cat "$WORK/peak")
        else
          r=$(s3bench "$ep" "$ak" "$sk" "$size" "$c" "$w" "$b")
        fi
        out=$(jq -c --arg k "$key" --argjson r "$r" '. + {($k): $r}' <<<"$out")
      done
    done
  done
  jq -c --argjson idle "$idle" --argjson peak "$peak" '. + {gateway_rss_idle_kib: $idle, gateway_rss_peak_put_4m_64_kib: $peak}' <<<"$out"
}

rgw_pools() {  # the pools radosgw would create, made first with PG counts that fit one OSD
  local p
  for p in .rgw.root default.rgw.log default.rgw.control default.rgw.meta default.rgw.buckets.index \
           default.rgw.buckets.non-ec; do
    C osd pool create "$p" 8 8 replicated --size "$1" >/dev/null 2>&1
    C osd pool application enable "$p" rgw >/dev/null 2>&1
  done
  C osd pool create default.rgw.buckets.data "$PG_NUM" "$PG_NUM" replicated --size "$1" >/dev/null 2>&1
  C osd pool application enable default.rgw.buckets.data rgw >/dev/null 2>&1
}

ceph_shape() {  # shape osds size -> $WORK/ceph-SHAPE.json
  local shape=$1 n=$2 size=$3 port ep pid
  DIR=$WORK/ceph-$shape
  if [ "$shape" = mem1 ]; then CEPH_OBJECTSTORE=memstore; else CEPH_OBJECTSTORE=bluestore; fi
  log "ceph $shape: deploying $n OSD(s) ($CEPH_OBJECTSTORE, size $size)"
  ceph_deploy "$n" "$size"
  rgw_pools "$size"
  C auth get-or-create client.rgw.x mon 'allow rw' osd 'allow rwx' -o "$DIR/rgw.keyring" >/dev/null
  mkdir -p "$DIR/rgw"
  port=$(free_range 1)
  start_daemon rgw.x radosgw --conf "$CONF" -n client.rgw.x --keyring "$DIR/rgw.keyring" -f \
    --rgw-data "$DIR/rgw" --rgw-frontends "beast endpoint=127.0.0.1:$port" --log-file "$DIR/log/rgw.log"
  pid=$(cat "$DIR/pids/rgw.x.pid")
  local deadline=$(( $(date +%s) + 60 ))
  until curl -s -o /dev/null "http://127.0.0.1:$port/"; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "radosgw did not answer in 60 s"; tail -20 "$DIR/log/rgw.log" >&2; return 1; }
    sleep 0.5
  done
  x radosgw-admin --conf "$CONF" user create --uid bench --display-name bench --access-key "$AK" --secret "$SK" >/dev/null
  sleep "$IDLE_S"
  ep=http://127.0.0.1:$port
  log "ceph $shape: radosgw at $ep"
  loads "$ep" "$AK" "$SK" "$pid" | jq -c --arg v "$(ceph --version)" '. + {version: $v}' >"$WORK/ceph-$shape.json"
  ceph_teardown
}

shoal_up_shape() {  # backend n -> sets EP AK_S SK_S GW_PID
  local size_arg=$MEMSTORE_BYTES
  [ "$1" = block ] && size_arg=$BLUESTORE_BLOCK_BYTES
  rm -rf "$DIR"
  x "$SHOAL_BIN" up --osds "$2" --backend "$1" --osd-size "$size_arg" --dir "$DIR" --json >"$WORK/shoal-up.json"
  EP=$(jq -r .gateway.endpoint "$WORK/shoal-up.json")
  AK_S=$(jq -r .gateway.access_key "$WORK/shoal-up.json")
  SK_S=$(jq -r .gateway.secret_key "$WORK/shoal-up.json")
  GW_PID=$(pgrep -f -- "gateway run.*$DIR" | head -1)
  [ -n "$GW_PID" ] || { log "no gateway process for $DIR"; return 1; }
}

shoal_down_shape() {
  x "$SHOAL_BIN" down --dir "$DIR" >/dev/null 2>&1 || true
  stop_pids_in "$DIR"; rm -rf "$DIR"
}

shoal_shape() {  # shape osds -> $WORK/shoal-SHAPE.json
  local shape=$1 n=$2 backend direct="{}" t w gw r
  DIR=$WORK/shoal-$shape
  if [ "$shape" = mem1 ]; then backend=mem; else backend=block; fi
  log "shoal $shape: up $n OSD(s) ($backend)"
  shoal_up_shape "$backend" "$n"
  sleep "$IDLE_S"
  gw=$(loads "$EP" "$AK_S" "$SK_S" "$GW_PID")
  shoal_down_shape
  # The same pool, straight from the client library, on a fresh cluster of the same shape (so
  # that the gateway loads' data does not fill it): what the gateway's own work costs.
  shoal_up_shape "$backend" "$n"
  for t in 16 64; do
    for w in write seq; do
      log "  shoal bench $w 4M t$t"
      r=$(x "$SHOAL_BIN" --conf "$DIR/shoal.toml" bench --pool .gw.data --seconds "$BENCH_S" -b 4194304 -t "$t" \
            --prefix "t$t-" "$w" --json 2>>"$WORK/logs/shoal-bench.err")
      direct=$(jq -c --arg k "${w}_4M_$t" --argjson r "$r" '. + {($k): $r}' <<<"$direct")
    done
  done
  shoal_down_shape
  jq -c --argjson d "$direct" --arg c "$(git -C "$REPO" rev-parse HEAD)" '. + {direct: $d, commit: $c}' <<<"$gw" >"$WORK/shoal-$shape.json"
}

ensure_packages radosgw curl
if [ -d "$WORK" ]; then
  for d in "$WORK"/*/; do [ -d "$d" ] && stop_pids_in "${d%/}"; done
  rm -rf "$WORK"
fi
mkdir -p "$WORK/logs"
: >"$CMDLOG"
[ -x "$SHOAL_BIN" ] || { echo "no shoal binary at $SHOAL_BIN (cargo build --release -p shoal)" >&2; exit 2; }
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
result='{}'
IFS=, read -r -a shapes <<<"$SHAPES"
for shape in "${shapes[@]}"; do
  case $shape in mem1) n=1 size=1 ;; block3) n=3 size=3 ;; *) echo "unknown shape $shape" >&2; exit 2 ;; esac
  ceph_shape "$shape" "$n" "$size"
  shoal_shape "$shape" "$n"
  result=$(jq -c --arg s "$shape" --slurpfile c "$WORK/ceph-$shape.json" --slurpfile h "$WORK/shoal-$shape.json" \
    '. + {($s): {rgw: $c[0], shoal: $h[0]}}' <<<"$result")
done
RESULT=$(jq -c --arg date "$(date -u +%FT%TZ)" --arg load "$LOAD_BEFORE" --arg after "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --arg kernel "$(uname -r)" --argjson secs "$BENCH_S" --arg nproc "$(nproc)" \
  '{date: $date, machine: {nproc: ($nproc|tonumber), kernel: $kernel, loadavg_before: $load, loadavg_after: $after},
    seconds: $secs, shapes: .}' <<<"$result")
[ -n "$OUT" ] && echo "$RESULT" >"$OUT"
echo "$RESULT" >"$WORK/result.json"

# The table: one row per load and shape; ratios Shoal / RGW (> 1: Shoal better).
echo "$RESULT" | jq -r '
  def f: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  def r(a; b): if (a|type) == "number" and (b|type) == "number" and b != 0 then a / b else null end;
  ["shape", "load", "rgw", "shoal", "shoal/rgw", "rgw p99 ms", "shoal p99 ms"],
  (.shapes | to_entries[] | .key as $s | .value as $v |
    ($v.shoal | to_entries[] | select(.value | type == "object" and has("ops_per_s")) | .key) as $k |
    ($v.rgw[$k]) as $g | ($v.shoal[$k]) as $h |
    (if ($k | test("4M")) then "mb_per_s" else "ops_per_s" end) as $m |
    [$s, "\($k) \($m)", ($g[$m]|f), ($h[$m]|f), (r($h[$m]; $g[$m])|f), ($g.p99_ms|f), ($h.p99_ms|f)]),
  (.shapes | to_entries[] | .key as $s | .value as $v |
    [$s, "gateway RSS idle / peak 64x4M PUT (MiB)", "\(($v.rgw.gateway_rss_idle_kib/1024)|f) / \(($v.rgw.gateway_rss_peak_put_4m_64_kib/1024)|f)",
     "\(($v.shoal.gateway_rss_idle_kib/1024)|f) / \(($v.shoal.gateway_rss_peak_put_4m_64_kib/1024)|f)", "-", "-", "-"]),
  (.shapes | to_entries[] | .key as $s | .value.shoal as $h |
    ($h.direct | to_entries[] | [$s, "shoal bench \(.key) MB/s (gateway: \(if (.key|test("write")) then "put" else "get" end))",
      "-", (.value.mb_per_s|f), "-", "-", (.value.lat_ms_p99 // null | f)]))
  | @tsv' | column -t -s $'\t'
