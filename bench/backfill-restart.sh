#!/usr/bin/env bash
# Backfill interrupted by an OSD restart, for one or more builds (decision 0048): 4 `block` OSDs
# on files, a size-3 pool of 32 PGs holding GIB GiB of 4 MiB objects; `osd out 0` starts a
# backfill onto the other three; once the misplaced count is down to half, osd.3 is killed with
# SIGKILL and started again on its store. Reports per build: seconds from `osd out` to clean, from
# the restart to clean, the misplaced objects left at the restart and the peak of the count after
# it, sampled every 0.2 s while waiting for clean (a build that starts backfills over shows the
# count jump back up).
#
#   bench/backfill-restart.sh [--rounds N] [--gib G] [--osd-size SIZE] [--workdir DIR] BIN...
#
# Builds alternate within each round (BIN1, BIN2, ..., then again), each on a fresh cluster.
# Everything runs on 127.0.0.1 under --workdir (default /tmp/backfill-restart, on disk) and is
# torn down at exit. Prints one JSON line per run, then a summary.
set -euo pipefail
shopt -s inherit_errexit

ROUNDS=1
GIB=4
OSD_SIZE=8G
WORK=/tmp/backfill-restart
TIMEOUT_S=${TIMEOUT_S:-1200}  # give up on a backfill after this long
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --gib) GIB=$2; shift 2 ;;
    --osd-size) OSD_SIZE=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown argument: $1" >&2; usage 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage 2
# shellcheck source=backfill-lib.sh
. "$(dirname "$0")/backfill-lib.sh"

run_one() {  # $1: binary -> one JSON line
  start_run "$1"
  "$BIN" up --dir "$DIR" --osds 4 --backend block --osd-size "$OSD_SIZE" --pg-num 32 --no-gateway --json >"$WORK/up.json"
  local objects=$((GIB * 256))
  "$BIN" --conf "$DIR/shoal.toml" bench --pool data write -b 4M -t 16 --objects "$objects" --prefix big_ \
    --seconds 36000 --json >"$WORK/load.json"
  wait_clean "$(now)"
  local t_out; t_out=$(now)
  "$BIN" --conf "$DIR/shoal.toml" osd out 0 >/dev/null
  # The misplaced count rises as the PGs peer, then falls as backfill goes: restart at half the peak.
  local start=0 m
  while :; do
    m=$(misplaced)
    [ "$m" -gt "$start" ] && start=$m
    if [ "$start" -gt 0 ] && [ "$m" -le $((start / 2)) ]; then break; fi
    sleep 0.1
  done
  local at_restart=$m
  # osd.3 again, as `up` started it: the same command line, its log appended to.
  local pid; pid=$(cat "$DIR/osd.3.pid")
  local -a cmd; mapfile -d '' -t cmd <"/proc/$pid/cmdline"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  local t_restart; t_restart=$(now)
  "${cmd[@]}" >>"$DIR/osd.3.log" 2>&1 &
  echo $! >"$DIR/osd.3.pid"
  # Until clean, with the peak of the misplaced count on the way (sampled every 0.2 s).
  local after=0
  after=$(until_clean "$t_restart")
  local t_clean; t_clean=$(now)
  jq -nc --arg bin "$BIN" --argjson o "$objects" --argjson start "$start" --argjson at "$at_restart" \
    --argjson after "$after" --argjson total "$(elapsed "$t_out" "$t_clean")" \
    --argjson restart "$(elapsed "$t_restart" "$t_clean")" \
    '{bin: $bin, objects: $o, misplaced_at_out: $start, misplaced_at_restart: $at,
      misplaced_peak_after_restart: $after, out_to_clean_s: $total, restart_to_clean_s: $restart}'
  cleanup
}

results=()
for round in $(seq "$ROUNDS"); do
  for b in "$@"; do
    log "round $round: $b"
    line=$(run_one "$b")
    echo "$line"
    results+=("$line")
  done
done
printf '%s\n' "${results[@]}" | jq -s 'group_by(.bin) | map({bin: .[0].bin,
  out_to_clean_s: map(.out_to_clean_s), restart_to_clean_s: map(.restart_to_clean_s),
  misplaced_at_restart: map(.misplaced_at_restart), misplaced_peak_after_restart: map(.misplaced_peak_after_restart)})'
