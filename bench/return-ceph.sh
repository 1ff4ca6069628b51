#!/usr/bin/env bash
# An OSD back after its PG logs moved on, Shoal beside real Ceph 16.2 on this machine (decision
# 0049): 4 OSDs on disk files (Ceph: bluestore on a file; Shoal: the block backend on a file), a
# size-3 pool of 32 PGs holding GIB GiB of 4 MiB objects; `noout`, osd.3 killed with SIGKILL;
# SMALL writes of 4 KiB to HOT new objects while it is away (more per PG than either system's PG
# log keeps: Ceph's is set to Shoal's 512 entries, osd_min/max_pg_log_entries, so both fall back
# to backfill at the same point); then osd.3 starts again on its store. For each system: seconds
# from that start to every PG active+clean, the MiB written to the work directory's disk
# meanwhile (/proc/diskstats: every process, and the kernel's writeback of earlier writes), and
# the MiB the OSD processes wrote (/proc/PID/io write_bytes, the restarted one's whole life);
# and the MiB written to the disk while osd.3 was away (the small writes plus any data the
# cluster moved meanwhile, measured 10 s after the last write).
#
#   bench/return-ceph.sh [--only ceph|shoal] [--gib G] [--small N] [--hot N] [--out FILE] [--workdir DIR]
#
# Ceph runs with the recovery settings of solid-state devices (its OSDs see the files' disk as
# rotational and would otherwise sleep 0.1 s between recovery operations). Everything runs on
# 127.0.0.1 under --workdir (default /tmp/return-ceph, on disk) and is torn down at exit.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ONLY=both
GIB=4
SMALL=20000
HOT=100
OUT=""
WORK=${RETURN_CEPH_DIR:-/tmp/return-ceph}
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}
HEALTHY_TIMEOUT_S=${HEALTHY_TIMEOUT_S:-300}
HEALTH_OK_EXTRA_S=${HEALTH_OK_EXTRA_S:-0}
RECOVERY_TIMEOUT_S=${RECOVERY_TIMEOUT_S:-1200}
PG_NUM=32
LOG_ENTRIES=512
MEMSTORE_BYTES=0                                # unused: bluestore
OSD_BYTES=$((10 << 30))                         # each OSD's file (Shoal preallocates it; Ceph's is sparse)
PY=/usr/bin/python3                             # Debian's, which has python3-rados

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --only) ONLY=$2; shift 2 ;;
    --gib) GIB=$2; shift 2 ;;
    --small) SMALL=$2; shift 2 ;;
    --hot) HOT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done
case $ONLY in both|ceph|shoal) ;; *) echo "--only ceph|shoal" >&2; exit 2 ;; esac
BIG_OBJECTS=$((GIB * 256))
CEPH_OBJECTSTORE=bluestore
BLUESTORE_BLOCK_BYTES=$OSD_BYTES

# shellcheck source=ceph/lib.sh
. "$HERE/ceph/lib.sh"

trap 'remove_clusters_and_exit "$WORK"/ceph "$WORK"/shoal' EXIT
trap 'exit 130' INT TERM

osd_write_bytes() {  # pid files...: the bytes those processes had written to storage (/proc/PID/io)
  local f total=0 b
  for f in "$@"; do
    b=$(awk '/^write_bytes:/ { print $2 }' "/proc/$(cat "$f")/io" 2>/dev/null || echo 0)
    total=$((total + ${b:-0}))
  done
  echo "$total"
}

sectors_written() {  # the work directory's device, 512-byte sectors written since boot
  local disk; disk=$(df --output=source "$WORK" | tail -1 | xargs basename)
  awk -v d="$disk" '$3 == d { print $10 }' /proc/diskstats
}

# Polls STATE_CMD until clean; sets CLEAN_S (from $1) and PEAK (highest misplaced+degraded seen).
wait_clean_from() {
  local t0=$1 state n deadline
  deadline=$(( $(date +%s) + RECOVERY_TIMEOUT_S ))
  PEAK=0
  while :; do
    state=$("$STATE_CMD" 2>/dev/null || echo "error 0")
    echo "$(elapsed "$t0" "$(now)") $state" >>"$WORK/logs/$STATE_CMD.trace"
    if [ "$state" = clean ]; then CLEAN_S=$(elapsed "$t0" "$(now)"); return 0; fi
    n=${state##* }
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -gt "$PEAK" ] && PEAK=$n
    [ "$(date +%s)" -lt "$deadline" ] || { log "not clean after ${RECOVERY_TIMEOUT_S}s: $state"; return 1; }
    sleep 0.2
  done
}

result_json() {  # system clean_s written_bytes peak load_s small_s extra-json
  jq -nc --arg sys "$1" --argjson c "$2" --argjson w "$3" --argjson p "$4" --argjson l "$5" --argjson s "$6" \
    --argjson x "$7" '{system: $sys, restart_to_clean_s: $c, disk_written_mib: ($w / 1048576 | floor),
      peak_not_clean_objects: $p, load_s: $l, writes_while_away_s: $s} + $x'
}

# ---------------------------------------------------------------- Ceph
ceph_state() {  # "clean", or "recovering N" with N the degraded plus misplaced objects
  ceph --conf "$CONF" --connect-timeout 10 pg stat --format json | jq -r '
    (.pg_summary // .) as $s
    | ([$s.num_pg_by_state[]? | select(.name == "active+clean") | .num] | add // 0) as $clean
    | if $clean == $s.num_pgs and (($s.degraded_objects // 0) == 0) and (($s.misplaced_objects // 0) == 0)
      then "clean"
      else "recovering \(($s.degraded_objects // 0) + ($s.misplaced_objects // 0))"
      end'
}

ceph_run() {  # -> $WORK/ceph.json
  DIR=$WORK/ceph
  log "ceph: deploying 4 bluestore OSDs on files in $DIR"
  ceph_deploy 4 3
  # Recovery as for solid-state devices, and PG logs as long as Shoal's.
  C config set osd osd_recovery_sleep_hdd 0 >/dev/null
  C config set osd osd_recovery_max_active_hdd 10 >/dev/null
  C config set osd osd_min_pg_log_entries "$LOG_ENTRIES" >/dev/null
  C config set osd osd_max_pg_log_entries "$LOG_ENTRIES" >/dev/null
  local t0 load_s small_s s0 s1 p0 p1 a0 a1
  log "ceph: loading $BIG_OBJECTS x 4 MiB"
  t0=$(now)
  x rados --conf "$CONF" -p bench bench 36000 write -b 4194304 -t 16 --max-objects "$BIG_OBJECTS" \
    --no-cleanup --run-name big >"$WORK/logs/ceph-load-big.txt" 2>&1
  load_s=$(elapsed "$t0" "$(now)")
  STATE_CMD=ceph_state
  until [ "$(ceph_state)" = clean ]; do sleep 1; done
  C osd set noout >/dev/null 2>&1
  a0=$(sectors_written)
  log "ceph: SIGKILL osd.3"
  kill -KILL "$(cat "$DIR/pids/osd.3.pid")"
  until C osd dump --format json | jq -e '.osds[] | select(.osd == 3) | .up == 0' >/dev/null; do
    C osd down 3 >/dev/null 2>&1 || true
    sleep 0.5
  done
  log "ceph: $SMALL writes of 4 KiB to $HOT objects while it is away"
  t0=$(now)
  x "$PY" - "$CONF" "$SMALL" "$HOT" <<'PY'
import sys, rados
conf, small, hot = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cluster = rados.Rados(conffile=conf)
cluster.connect()
io = cluster.open_ioctx("bench")
data = bytes(range(256)) * 16
# 32 writes in flight, as the Shoal side's load generator keeps.
pending = []
for k in range(small):
    pending.append(io.aio_write_full("hot_%d" % (k % hot), data))
    if len(pending) >= 32:
        pending.pop(0).wait_for_complete()
for c in pending:
    c.wait_for_complete()
io.close()
cluster.shutdown()
PY
  small_s=$(elapsed "$t0" "$(now)")
  # Whatever the cluster does while osd.3 is away (the writes, and any data it moves) is done
  # before it starts again: the same settling time for both systems.
  sleep 10
  a1=$(sectors_written)
  log "ceph: osd.3 starts again"
  s0=$(sectors_written)
  p0=$(osd_write_bytes "$DIR"/pids/osd.{0,1,2}.pid)
  t0=$(now)
  start_daemon osd.3 ceph-osd --conf "$CONF" -i 3 -f
  wait_clean_from "$t0"
  s1=$(sectors_written)
  p1=$(osd_write_bytes "$DIR"/pids/osd.{0,1,2,3}.pid)
  log "ceph: clean ${CLEAN_S}s after the restart"
  C osd unset noout >/dev/null 2>&1
  local settings
  settings=$(C config dump --format json | jq -c '[.[] | select(.name | test("recovery|pg_log")) | {(.name): .value}] | add // {}')
  stop_pids_in "$DIR"; rm -rf "$DIR"
  result_json "ceph 16.2 (bluestore on a file per OSD)" "$CLEAN_S" $(( (s1 - s0) * 512 )) "$PEAK" "$load_s" "$small_s" \
    "$(jq -nc --argjson s "$settings" --argjson p $((p1 - p0)) --argjson a $(( (a1 - a0) * 512 )) '{disk_written_while_away_mib: ($a / 1048576 | floor), osds_wrote_mib: ($p / 1048576 | floor), settings_changed: $s}')" >"$WORK/ceph.json"
}

# ---------------------------------------------------------------- Shoal
shoal_state() {
  "$SHOAL_BIN" --conf "$DIR/shoal.toml" status --json | jq -r '
    if .pgs.count > 0 and (.pgs.by_state["active+clean"] // 0) == .pgs.count
       and .recovery.degraded_objects == 0 and .recovery.misplaced_objects == 0
    then "clean"
    else "recovering \(.recovery.degraded_objects + .recovery.misplaced_objects)"
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
  x "$SHOAL_BIN" up --dir "$DIR" --osds 4 --backend block --osd-size "$OSD_BYTES" --pg-num "$PG_NUM" \
    --no-gateway --json >"$WORK/logs/shoal-up.json"
  local t0 load_s small_s s0 s1 p0 p1 a0 a1 pid round
  log "shoal: loading $BIG_OBJECTS x 4 MiB"
  t0=$(now)
  S bench --pool data write -b 4M -t 16 --objects "$BIG_OBJECTS" --prefix big_ --seconds 36000 --json \
    >"$WORK/logs/shoal-load-big.json"
  load_s=$(elapsed "$t0" "$(now)")
  STATE_CMD=shoal_state
  until [ "$(shoal_state)" = clean ]; do sleep 1; done
  S osd set noout >/dev/null
  a0=$(sectors_written)
  log "shoal: SIGKILL osd.3"
  pid=$(cat "$DIR/osd.3.pid")
  local -a cmd; mapfile -d '' -t cmd <"/proc/$pid/cmdline"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  log "shoal: $SMALL writes of 4 KiB to $HOT objects while it is away"
  t0=$(now)
  for round in $(seq $((SMALL / HOT))); do
    S bench --pool data write -b 4K -t 32 --objects "$HOT" --prefix hot_ --seconds 36000 --json >"$WORK/logs/shoal-small.json"
  done
  small_s=$(elapsed "$t0" "$(now)")
  sleep 10
  a1=$(sectors_written)
  log "shoal: osd.3 starts again"
  s0=$(sectors_written)
  p0=$(osd_write_bytes "$DIR"/osd.{0,1,2}.pid)
  t0=$(now)
  "${cmd[@]}" >>"$DIR/osd.3.log" 2>&1 &
  echo $! >"$DIR/osd.3.pid"
  wait_clean_from "$t0"
  s1=$(sectors_written)
  p1=$(osd_write_bytes "$DIR"/osd.{0,1,2,3}.pid)
  log "shoal: clean ${CLEAN_S}s after the restart"
  S osd unset noout >/dev/null
  local counts
  counts=$(cat "$DIR"/osd.*.log | { grep -h 'backfill finished' || true; } | { grep ' peer=osd.3 ' || true; } |
    sed -n 's/.* sent=\([0-9]*\) kept=\([0-9]*\).*/\1 \2/p' |
    awk -v p=$((p1 - p0)) -v a=$(( (a1 - a0) * 512 )) '{ s += $1; k += $2 } END { printf "{\"disk_written_while_away_mib\": %d, \"osds_wrote_mib\": %d, \"objects_sent_to_osd3\": %d, \"objects_kept_on_osd3\": %d}", a / 1048576, p / 1048576, s, k }')
  for f in "$DIR"/*.log; do cp "$f" "$WORK/logs/shoal-$(basename "$f")"; done
  "$SHOAL_BIN" down --dir "$DIR" >/dev/null
  rm -rf "$DIR"
  result_json "shoal (block backend on a file per OSD)" "$CLEAN_S" $(( (s1 - s0) * 512 )) "$PEAK" "$load_s" "$small_s" \
    "$counts" >"$WORK/shoal.json"
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
RESULT=$(jq -n --argjson m "$MACHINE" --argjson gib "$GIB" --argjson small "$SMALL" --argjson hot "$HOT" \
  --slurpfile c <(cat "$WORK/ceph.json" 2>/dev/null || echo null) \
  --slurpfile s <(cat "$WORK/shoal.json" 2>/dev/null || echo null) \
  --rawfile cmds "$CMDLOG" '{
    machine: $m, data: {gib: $gib, big_objects: ($gib * 256), writes_while_away: $small, hot_objects: $hot,
      pool_size: 3, pgs: 32, osds: 4, pg_log_entries: 512},
    ceph: $c[0], shoal: $s[0],
    written_ratio_ceph_vs_shoal: (if $c[0] and $s[0] and $s[0].disk_written_mib > 0
      then $c[0].disk_written_mib / $s[0].disk_written_mib else null end),
    clean_speedup_shoal_vs_ceph: (if $c[0] and $s[0] then $c[0].restart_to_clean_s / $s[0].restart_to_clean_s else null end),
    commands: ($cmds | split("\n") | map(select(length > 0))) }')
if [ -n "$OUT" ]; then echo "$RESULT" >"$OUT"; fi
echo "$RESULT" | jq 'del(.commands)'
