#!/usr/bin/env bash
# Recovery after `osd out`, Shoal beside real Ceph 16.2 on this machine: 4 OSDs on disk files
# (Ceph: bluestore on a file; Shoal: the block backend on a file), a size-3 pool of 32 PGs
# holding BIG_GIB GiB of 4 MiB objects plus SMALL objects of 4 KiB. For each system: the time
# from `osd out 0` until every PG is active+clean again, and the 4 KiB write latency of one
# client (one write in flight, new objects) while quiet and during that recovery.
#
#   bench/recovery-ceph.sh [--only ceph|shoal] [--big-gib N] [--small N] [--quiet-s S]
#                          [--ceph-recovery default|ssd] [--shoal-recovery-share PCT]
#                          [--shoal-config KEY=VALUE]... [--out FILE] [--workdir DIR]
#
# Shoal runs with its default recovery settings. Ceph with its defaults (--ceph-recovery
# default): its OSDs see the files' disk as rotational and throttle recovery as for a hard disk
# (osd_recovery_sleep_hdd 0.1 s, osd_recovery_max_active_hdd 3); with --ceph-recovery ssd they
# get the values Ceph uses for solid-state devices instead (osd_recovery_sleep_hdd 0,
# osd_recovery_max_active_hdd 10, set with `ceph config set` before loading). Shoal's
# osd_recovery_busy_share_pct (how much of an OSD's time recovery takes while clients are busy)
# is set to PCT with --shoal-recovery-share, any other setting with --shoal-config (`shoal config
# set`, before loading). Both probes of Shoal report per-second latencies
# (`timeline`). Everything runs on 127.0.0.1 under --workdir (default /tmp/recovery-ceph, on
# disk) and is torn down at exit.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ONLY=both
BIG_GIB=2
SMALL=100000
QUIET_S=20
OUT=""
CEPH_RECOVERY=default
SHOAL_SHARE=""
SHOAL_CONFIG=()
WORK=${RECOVERY_CEPH_DIR:-/tmp/recovery-ceph}
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}
HEALTHY_TIMEOUT_S=${HEALTHY_TIMEOUT_S:-300}
HEALTH_OK_EXTRA_S=${HEALTH_OK_EXTRA_S:-0}
RECOVERY_TIMEOUT_S=${RECOVERY_TIMEOUT_S:-1800}  # give up on a recovery after this long
PG_NUM=32
MEMSTORE_BYTES=0                                # unused: bluestore
OSD_BYTES=$((8 << 30))                          # each OSD's file (Shoal preallocates it; Ceph's is sparse)
PY=/usr/bin/python3                             # Debian's, which has python3-rados

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --only) ONLY=$2; shift 2 ;;
    --big-gib) BIG_GIB=$2; shift 2 ;;
    --small) SMALL=$2; shift 2 ;;
    --quiet-s) QUIET_S=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --ceph-recovery) CEPH_RECOVERY=$2; shift 2 ;;
    --shoal-recovery-share) SHOAL_SHARE=$2; shift 2 ;;
    --shoal-config) SHOAL_CONFIG+=("$2"); shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done
case $ONLY in both|ceph|shoal) ;; *) echo "--only ceph|shoal" >&2; exit 2 ;; esac
case $CEPH_RECOVERY in default|ssd) ;; *) echo "--ceph-recovery default|ssd" >&2; exit 2 ;; esac
BIG_OBJECTS=$((BIG_GIB * 256))
CEPH_OBJECTSTORE=bluestore
BLUESTORE_BLOCK_BYTES=$OSD_BYTES

# shellcheck source=ceph/lib.sh
. "$HERE/ceph/lib.sh"

trap 'remove_clusters_and_exit "$WORK"/ceph "$WORK"/shoal' EXIT
trap 'exit 130' INT TERM

# Starts a latency probe in the background (PID in PROBE_PID, JSON to file $1); "$@" after the
# file is the probe's command. Stopped with SIGINT, on which it prints its report.
probe_start() {
  local out=$1; shift
  "$@" >"$out" 2>"$out.err" &
  PROBE_PID=$!
}
probe_stop() {
  kill -INT "$PROBE_PID" 2>/dev/null || true
  wait "$PROBE_PID" || { cat "$1.err" >&2; return 1; }
}

# Polls STATE_CMD (prints "clean" or something else) after `osd out`: first until a state that
# is not clean shows (the reports caught up with the new map), then until clean. Sets
# RECOVERY_S (from the out command to clean) and FIRST_NOT_CLEAN_S.
wait_recovered() {
  local t0=$1 state seen="" deadline
  deadline=$(( $(date +%s) + RECOVERY_TIMEOUT_S ))
  FIRST_NOT_CLEAN_S=null
  while :; do
    state=$("$STATE_CMD" 2>/dev/null || echo error)
    echo "$(elapsed "$t0" "$(now)") $state" >>"$WORK/logs/$STATE_CMD.trace"
    if [ -z "$seen" ] && [ "$state" != clean ] && [ "$state" != error ]; then
      seen=1; FIRST_NOT_CLEAN_S=$(elapsed "$t0" "$(now)")
    fi
    if [ -n "$seen" ] && [ "$state" = clean ]; then RECOVERY_S=$(elapsed "$t0" "$(now)"); return 0; fi
    # a recovery that ends before any report shows it: clean again after 60 s of polls
    if [ -z "$seen" ] && [ "$(elapsed "$t0" "$(now)" | cut -d. -f1)" -ge 60 ]; then
      RECOVERY_S=$(elapsed "$t0" "$(now)"); return 0
    fi
    [ "$(date +%s)" -lt "$deadline" ] || { log "not clean after ${RECOVERY_TIMEOUT_S}s"; return 1; }
    sleep 0.5
  done
}

# ---------------------------------------------------------------- Ceph
ceph_state() {  # clean when every PG is active+clean and nothing is degraded or misplaced
  ceph --conf "$CONF" --connect-timeout 10 pg stat --format json | jq -r '
    (.pg_summary // .) as $s
    | ([$s.num_pg_by_state[]? | select(.name == "active+clean") | .num] | add // 0) as $clean
    | if $clean == $s.num_pgs and (($s.degraded_objects // 0) == 0) and (($s.misplaced_objects // 0) == 0)
      then "clean"
      else "recovering(\($clean)/\($s.num_pgs) clean, degraded \($s.degraded_objects // 0), misplaced \($s.misplaced_objects // 0))"
      end'
}

ceph_run() {  # -> $WORK/ceph.json
  DIR=$WORK/ceph
  log "ceph: deploying 4 bluestore OSDs on files in $DIR"
  ceph_deploy 4 3
  local deploy_s=$READY_S t0 load_big load_small quiet during out_epoch settings
  if [ "$CEPH_RECOVERY" = ssd ]; then
    log "ceph: recovery settings of solid-state devices"
    C config set osd osd_recovery_sleep_hdd 0 >/dev/null
    C config set osd osd_recovery_max_active_hdd 10 >/dev/null
  fi
  settings=$(C config dump --format json | jq -c '[.[] | select(.name | test("recovery|backfill")) | {(.name): .value}] | add // {}')
  log "ceph: loading $BIG_OBJECTS x 4 MiB and $SMALL x 4 KiB"
  t0=$(now)
  x rados --conf "$CONF" -p bench bench 36000 write -b 4194304 -t 16 --max-objects "$BIG_OBJECTS" \
    --no-cleanup --run-name big >"$WORK/logs/ceph-load-big.txt" 2>&1
  load_big=$(elapsed "$t0" "$(now)")
  t0=$(now)
  x rados --conf "$CONF" -p bench bench 36000 write -b 4096 -t 32 --max-objects "$SMALL" \
    --no-cleanup --run-name small >"$WORK/logs/ceph-load-small.txt" 2>&1
  load_small=$(elapsed "$t0" "$(now)")
  STATE_CMD=ceph_state
  until [ "$(ceph_state)" = clean ]; do sleep 1; done
  local objects; objects=$(awk -F: '/^Total writes made/ {n += $2} END {print n}' "$WORK"/logs/ceph-load-*.txt)
  log "ceph: $objects objects; quiet probe ${QUIET_S}s"
  x "$PY" "$HERE/ceph/probe.py" --conf "$CONF" --pool bench --prefix quiet_ --seconds "$QUIET_S" >"$WORK/ceph-quiet.json"
  quiet=$(cat "$WORK/ceph-quiet.json")
  log "ceph: osd out 0"
  probe_start "$WORK/ceph-during.json" "$PY" "$HERE/ceph/probe.py" --conf "$CONF" --pool bench --prefix during_
  sleep 1
  t0=$(now)
  C osd out 0 >/dev/null 2>&1
  out_epoch=$(C osd dump --format json | jq .epoch)
  wait_recovered "$t0"
  probe_stop "$WORK/ceph-during.json"
  during=$(cat "$WORK/ceph-during.json")
  log "ceph: clean ${RECOVERY_S}s after osd out"
  local osd_class; osd_class=$(C osd metadata 0 --format json | jq -r '.bluestore_bdev_type // "unknown"')
  stop_pids_in "$DIR"; rm -rf "$DIR"
  jq -nc --arg share "$SHOAL_SHARE" --arg settings "${SHOAL_CONFIG[*]}" --argjson d "$deploy_s" --argjson lb "$load_big" --argjson ls "$load_small" --argjson o "$objects" \
     --argjson q "$quiet" --argjson w "$during" --argjson r "$RECOVERY_S" --argjson f "$FIRST_NOT_CLEAN_S" \
     --argjson e "$out_epoch" --arg c "$osd_class" --arg rs "$CEPH_RECOVERY" --argjson set "$settings" '{
       system: "ceph 16.2 (bluestore on a file per OSD, \($rs) recovery settings)",
       recovery_settings: $rs, settings_changed: $set,
       deploy_s: $d, load_big_s: $lb, load_small_s: $ls, objects: $o, out_epoch: $e,
       bluestore_device_class: $c, recovery_s: $r, first_not_clean_s: $f,
       probe_quiet: $q, probe_during_recovery: $w,
       p99_ratio_during_vs_quiet: (if $q.lat_ms_p99 > 0 then $w.lat_ms_p99 / $q.lat_ms_p99 else null end) }' \
     >"$WORK/ceph.json"
}

# ---------------------------------------------------------------- Shoal
shoal_state() {
  "$SHOAL_BIN" --conf "$DIR/shoal.toml" status --json | jq -r '
    if .pgs.count > 0 and (.pgs.by_state["active+clean"] // 0) == .pgs.count
       and .recovery.degraded_objects == 0 and .recovery.misplaced_objects == 0
    then "clean"
    else "recovering(\(.pgs.by_state["active+clean"] // 0)/\(.pgs.count) clean, degraded \(.recovery.degraded_objects), misplaced \(.recovery.misplaced_objects))"
    end'
}

S() { x "$SHOAL_BIN" --conf "$DIR/shoal.toml" "$@"; }

shoal_run() {  # -> $WORK/shoal.json
  DIR=$WORK/shoal
  cd "$REPO"
  if [ ! -x "$SHOAL_BIN" ]; then
    log "shoal: building (cargo build --release -p shoal)"
    x cargo build --release -p shoal >&2
  fi
  log "shoal: 4 block OSDs on files in $DIR"
  local t0 deploy_s load_big load_small quiet during objects
  t0=$(now)
  x "$SHOAL_BIN" up --dir "$DIR" --osds 4 --backend block --osd-size "$OSD_BYTES" --pg-num "$PG_NUM" --json \
    >"$WORK/logs/shoal-up.json"
  deploy_s=$(elapsed "$t0" "$(now)")
  if [ -n "$SHOAL_SHARE" ]; then S config set osd_recovery_busy_share_pct "$SHOAL_SHARE" >/dev/null; fi
  local kv
  for kv in "${SHOAL_CONFIG[@]}"; do S config set "${kv%%=*}" "${kv#*=}" >/dev/null; done
  log "shoal: loading $BIG_OBJECTS x 4 MiB and $SMALL x 4 KiB"
  t0=$(now)
  S bench --pool data write -b 4M -t 16 --objects "$BIG_OBJECTS" --prefix big_ --seconds 36000 --json \
    >"$WORK/logs/shoal-load-big.json"
  load_big=$(elapsed "$t0" "$(now)")
  t0=$(now)
  S bench --pool data write -b 4K -t 32 --objects "$SMALL" --prefix small_ --seconds 36000 --json \
    >"$WORK/logs/shoal-load-small.json"
  load_small=$(elapsed "$t0" "$(now)")
  STATE_CMD=shoal_state
  until [ "$(shoal_state)" = clean ]; do sleep 1; done
  objects=$(jq -s '[.[].ops] | add' "$WORK/logs/shoal-load-big.json" "$WORK/logs/shoal-load-small.json")
  log "shoal: $objects objects; quiet probe ${QUIET_S}s"
  S bench --pool data write -b 4K -t 1 --prefix quiet_ --seconds "$QUIET_S" --json --timeline >"$WORK/shoal-quiet.json"
  quiet=$(cat "$WORK/shoal-quiet.json")
  log "shoal: osd out 0"
  probe_start "$WORK/shoal-during.json" "$SHOAL_BIN" --conf "$DIR/shoal.toml" bench --pool data write -b 4K -t 1 --timeline \
    --prefix during_ --seconds 36000 --json
  sleep 1
  t0=$(now)
  S osd out 0 >/dev/null
  wait_recovered "$t0"
  probe_stop "$WORK/shoal-during.json"
  during=$(cat "$WORK/shoal-during.json")
  log "shoal: clean ${RECOVERY_S}s after osd out"
  for f in "$DIR"/*.log; do cp "$f" "$WORK/logs/shoal-$(basename "$f")"; done  # daemon logs, kept
  "$SHOAL_BIN" down --dir "$DIR" >/dev/null
  rm -rf "$DIR"
  jq -nc --arg share "$SHOAL_SHARE" --arg settings "${SHOAL_CONFIG[*]}" --argjson d "$deploy_s" --argjson lb "$load_big" --argjson ls "$load_small" --argjson o "$objects" \
     --argjson q "$quiet" --argjson w "$during" --argjson r "$RECOVERY_S" --argjson f "$FIRST_NOT_CLEAN_S" '{
       system: "shoal (block backend on a file per OSD, default recovery settings unless recovery_share_pct)",
       recovery_share_pct: (if $share == "" then null else ($share | tonumber) end), settings: $settings,
       deploy_s: $d, load_big_s: $lb, load_small_s: $ls, objects: $o,
       recovery_s: $r, first_not_clean_s: $f, probe_quiet: $q, probe_during_recovery: $w,
       p99_ratio_during_vs_quiet: (if $q.lat_ms_p99 > 0 then $w.lat_ms_p99 / $q.lat_ms_p99 else null end) }' \
     >"$WORK/shoal.json"
}

# ---------------------------------------------------------------- main
rm -rf "$WORK"
mkdir -p "$WORK/logs"
: >"$CMDLOG"
ensure_packages python3-rados
MACHINE=$(jq -nc --arg cpu "$(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ //')" \
  --argjson cores "$(nproc)" --argjson mem "$(awk '/MemTotal/{print $2}' /proc/meminfo)" \
  --arg disk "$(df -h "$WORK" | awk 'NR==2{print $1}')" --arg kernel "$(uname -r)" \
  '{cpu:$cpu, cores:$cores, mem_kib:$mem, workdir_device:$disk, kernel:$kernel}')
case $ONLY in both|ceph) ceph_run ;; esac
case $ONLY in both|shoal) shoal_run ;; esac
RESULT=$(jq -n --argjson m "$MACHINE" --arg big "$BIG_GIB" --arg small "$SMALL" --arg cr "$CEPH_RECOVERY" \
  --slurpfile c <(cat "$WORK/ceph.json" 2>/dev/null || echo null) \
  --slurpfile s <(cat "$WORK/shoal.json" 2>/dev/null || echo null) \
  --rawfile cmds "$CMDLOG" '{
    machine: $m, ceph_recovery_settings: $cr, data: {big_gib: ($big|tonumber), small_4k_objects: ($small|tonumber), pool_size: 3, pgs: 32, osds: 4},
    ceph: $c[0], shoal: $s[0],
    recovery_speedup_shoal_vs_ceph: (if $c[0] and $s[0] then $c[0].recovery_s / $s[0].recovery_s else null end),
    commands: ($cmds | split("\n") | map(select(length > 0))) }')
if [ -n "$OUT" ]; then echo "$RESULT" >"$OUT"; fi
echo "$RESULT" | jq '{data, recovery_speedup_shoal_vs_ceph,
  ceph: (.ceph // {} | {recovery_s, first_not_clean_s, load_big_s, load_small_s,
         quiet_p99_ms: .probe_quiet.lat_ms_p99, during_p99_ms: .probe_during_recovery.lat_ms_p99,
         quiet_max_ms: .probe_quiet.lat_ms_max, during_max_ms: .probe_during_recovery.lat_ms_max, p99_ratio_during_vs_quiet}),
  shoal: (.shoal // {} | {recovery_s, first_not_clean_s, load_big_s, load_small_s,
         quiet_p99_ms: .probe_quiet.lat_ms_p99, during_p99_ms: .probe_during_recovery.lat_ms_p99,
         quiet_max_ms: .probe_quiet.lat_ms_max, during_max_ms: .probe_during_recovery.lat_ms_max, p99_ratio_during_vs_quiet})}'
