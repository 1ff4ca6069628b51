#!/usr/bin/env bash
# An OSD away while the PG logs move on past it, for one or more builds (decision 0049): 4 `block`
# OSDs on files, a size-3 pool of 32 PGs holding GIB GiB of 4 MiB objects; osd.3 is killed with
# SIGKILL (noout set, so nothing moves while it is away), SMALL writes of 4 KiB go to HOT objects
# (far more writes than a PG log keeps per PG, 512 entries, to few objects), then osd.3 starts
# again on its store.
# Reports per build: seconds from its restart to every PG active+clean, the MiB written to the
# work directory's disk meanwhile (/proc/diskstats: nearly all of it the restarted OSD's
# backfill), and the peak of the misplaced count after it.
#
#   bench/backfill-return.sh [--rounds N] [--gib G] [--small N] [--hot N] [--rbd [--hot-snaps S]] [--osd-size SIZE] [--workdir DIR] BIN...
#
# With --rbd the data is a block image with a snapshot instead: an image of GIB GiB written
# whole, snapshotted, and written whole again (so every object has a clone beside it), and the
# writes while osd.3 is away are SMALL random 4 KiB writes to a second image of HOT objects.
# With --hot-snaps S that second image is written whole and then, S times, snapshotted and
# written whole again before osd.3 goes away: each of its objects has S clones beside its head,
# none of them made while osd.3 is away (what its recovery must send: the heads only).
#
# Builds alternate within each round, each on a fresh cluster; everything runs on 127.0.0.1
# under --workdir (default /tmp/backfill-return, on disk) and is removed at exit. Prints one JSON
# line per run, then a summary.
set -euo pipefail
shopt -s inherit_errexit

ROUNDS=1
GIB=4
SMALL=40000
HOT=100
OSD_SIZE=8G
RBD=0
HOT_SNAPS=0
WORK=/tmp/backfill-return
TIMEOUT_S=${TIMEOUT_S:-1200}
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --gib) GIB=$2; shift 2 ;;
    --small) SMALL=$2; shift 2 ;;
    --hot) HOT=$2; shift 2 ;;
    --rbd) RBD=1; shift ;;
    --hot-snaps) HOT_SNAPS=$2; shift 2 ;;
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

run_one() {
  start_run "$1"
  "$BIN" up --dir "$DIR" --osds 4 --backend block --osd-size "$OSD_SIZE" --pg-num 32 --no-gateway --json >"$WORK/up.json"
  if [ "$RBD" = 1 ]; then
    # Written whole, snapshotted, written whole again: a clone of every object beside it.
    S rbd create data/big --size "${GIB}G" --json >/dev/null
    S rbd bench --io-type write --io-size 4M --io-threads 16 --io-total "${GIB}G" --io-pattern seq data/big --json >"$WORK/load.json"
    S rbd snap create data/big@before --json >/dev/null
    S rbd bench --io-type write --io-size 4M --io-threads 16 --io-total "${GIB}G" --io-pattern seq data/big --json >"$WORK/load.json"
    S rbd create data/hot --size "$((HOT * 4))M" --json >/dev/null
    if [ "$HOT_SNAPS" -gt 0 ]; then
      S rbd bench --io-type write --io-size 4M --io-threads 16 --io-total "$((HOT * 4))M" --io-pattern seq data/hot --json >/dev/null
      local snap
      for snap in $(seq "$HOT_SNAPS"); do
        S rbd snap create "data/hot@s$snap" --json >/dev/null
        S rbd bench --io-type write --io-size 4M --io-threads 16 --io-total "$((HOT * 4))M" --io-pattern seq data/hot --json >/dev/null
      done
    fi
  else
    S bench --pool data write -b 4M -t 16 --objects $((GIB * 256)) --prefix big_ --seconds 36000 --json >"$WORK/load.json"
  fi
  wait_clean "$(now)"
  S osd set noout >/dev/null
  local pid; pid=$(cat "$DIR/osd.3.pid")
  local -a cmd; mapfile -d '' -t cmd <"/proc/$pid/cmdline"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  # Writes while it is away, far past what each PG's log keeps (512 entries), to HOT objects
  # only: SMALL writes in rounds that rewrite the same HOT names.
  if [ "$RBD" = 1 ]; then
    S rbd bench --io-type write --io-size 4K --io-threads 32 --io-total "$((SMALL * 4))K" --io-pattern rand data/hot --json >"$WORK/small.json"
  else
    local round
    for round in $(seq $((SMALL / HOT))); do
      S bench --pool data write -b 4K -t 32 --objects "$HOT" --prefix hot_ --seconds 36000 --json >"$WORK/small.json"
    done
  fi
  local disk; disk=$(df --output=source "$WORK" | tail -1 | xargs basename)
  local sectors0; sectors0=$(awk -v d="$disk" '$3 == d { print $10 }' /proc/diskstats)
  local t_restart; t_restart=$(now)
  "${cmd[@]}" >>"$DIR/osd.3.log" 2>&1 &
  echo $! >"$DIR/osd.3.pid"
  # Until clean, with the peak of the misplaced count on the way (sampled every 0.2 s).
  local peak=0
  peak=$(until_clean "$t_restart")
  local t_clean; t_clean=$(now)
  # What reached the disk meanwhile (every process: the restarted OSD's backfill, nearly all).
  local sectors1; sectors1=$(awk -v d="$disk" '$3 == d { print $10 }' /proc/diskstats)
  local written=$(( (sectors1 - sectors0) * 512 ))
  S osd unset noout >/dev/null
  # What the primaries say they sent and kept (builds that log "backfill finished"; else null).
  local counts; counts=$(cat "$DIR"/osd.*.log | { grep -h 'backfill finished' || true; } | { grep ' peer=osd.3 ' || true; } |
    sed -n 's/.* sent=\([0-9]*\) kept=\([0-9]*\).*/\1 \2/p' |
    awk 'BEGIN { n = 0 } { s += $1; k += $2; n++ } END { if (n) printf "{\"sent\": %d, \"kept\": %d}", s, k; else printf "null" }')
  jq -nc --arg bin "$BIN" --argjson big $((GIB * 256)) --argjson small "$SMALL" --argjson peak "$peak" \
    --argjson s "$(elapsed "$t_restart" "$t_clean")" --argjson w "$written" --argjson rbd "$RBD" --argjson c "$counts" \
    --argjson hs "$HOT_SNAPS" \
    '{bin: $bin, rbd: ($rbd == 1), hot_snaps: $hs, big_objects: $big, writes_while_away: $small,
      misplaced_peak_after_restart: $peak, restart_to_clean_s: $s, disk_written_mib: ($w / 1048576 | floor),
      objects_sent_to_osd3: $c.sent, objects_kept_on_osd3: $c.kept}'
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
  restart_to_clean_s: map(.restart_to_clean_s), disk_written_mib: map(.disk_written_mib),
  misplaced_peak_after_restart: map(.misplaced_peak_after_restart),
  objects_sent_to_osd3: map(.objects_sent_to_osd3), objects_kept_on_osd3: map(.objects_kept_on_osd3)})'
