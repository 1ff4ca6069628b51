# Shared by bench/backfill-restart.sh and bench/backfill-return.sh (sourced after their argument
# parsing): time and log helpers, the cluster a run owns (BIN, DIR) and its removal, and waits
# for every PG to be active+clean. The sourcing script sets TIMEOUT_S.

for b in "$@"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 2; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[$(date +%T)] $*" >&2; }

BIN=""
DIR=""
# `down` leaves a block cluster's files: they are removed too (four OSD files of --osd-size).
# A run is a command substitution, a subshell the top level's trap does not cover: it sets the
# same trap itself (`start_run`).
cleanup() {
  if [ -n "$BIN" ] && [ -n "$DIR" ] && [ -d "$DIR" ]; then
    "$BIN" down --dir "$DIR" >/dev/null 2>&1 || true
    rm -rf "$DIR"
  fi
}
trap cleanup EXIT

start_run() {  # $1: binary; a fresh cluster directory under WORK
  BIN=$1
  DIR=$WORK/cluster
  trap cleanup EXIT
  rm -rf "$DIR"; mkdir -p "$WORK"
}

S() { "$BIN" --conf "$DIR/shoal.toml" "$@"; }

# Prints "clean", or the misplaced and degraded counts.
state() {
  S status --json | jq -r '
    if .pgs.count > 0 and (.pgs.by_state["active+clean"] // 0) == .pgs.count
       and .recovery.degraded_objects == 0 and .recovery.misplaced_objects == 0
    then "clean"
    else "\(.recovery.misplaced_objects) \(.recovery.degraded_objects)"
    end'
}
misplaced() { local s; s=$(state); if [ "$s" = clean ]; then echo 0; else echo "${s%% *}"; fi; }

# Waits until clean like `wait_clean`; prints the highest misplaced count seen meanwhile
# (sampled every 0.2 s).
until_clean() {
  local t0=$1 peak=0 s m
  while :; do
    s=$(state)
    [ "$s" = clean ] && break
    m=${s%% *}
    [ "$m" -gt "$peak" ] && peak=$m
    if [ "$(elapsed "$t0" "$(now)" | cut -d. -f1)" -ge "$TIMEOUT_S" ]; then
      log "not clean after ${TIMEOUT_S}s: $s"; exit 1
    fi
    sleep 0.2
  done
  echo "$peak"
}

wait_clean() {  # $1: start time; gives up after TIMEOUT_S
  local t0=$1
  until [ "$(state)" = clean ]; do
    if [ "$(elapsed "$t0" "$(now)" | cut -d. -f1)" -ge "$TIMEOUT_S" ]; then
      log "not clean after ${TIMEOUT_S}s: $(state)"; exit 1
    fi
    sleep 0.5
  done
}
