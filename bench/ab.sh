#!/usr/bin/env bash
# A/B measurements of Shoal builds on this machine: the same load on a fresh cluster per run,
# builds alternated round by round, with the CPU each process spent per operation (from
# /proc/PID/stat), so that a change is judged by its cost per operation as well as by a
# throughput that swings with the machine's noise.
#
#   bench/ab.sh [--rounds N] [--unwritten | --aged S] [--unix] nbd mem1|block3 RW BS QD BIN...   fio's nbd engine through `nbd serve`
#   bench/ab.sh [--rounds N] s3 mem1|block3 SIZE CONC LOAD BIN...   `shoal s3 bench` on the gateway
#   bench/ab.sh [--rounds N] rbd mem1|block3 BIN...             `shoal rbd bench`, 4 KiB random writes
#
# The nbd image is written whole (4 MiB writes) before the timed load, unless --unwritten: then
# the load starts on a thin image with nothing written (writes into holes); with --aged S, S
# seconds of 4 KiB random writes (iodepth 16) follow the prefill, untimed, as a file system's
# use leaves an image. With --unix, fio reaches the NBD server on a unix socket instead of TCP.
# RW, BS, QD are fio's (randwrite 4k 16, write 512k 4, randrw 4k 16: both sides printed, ...); LOAD is put, get or delete (a get
# run first writes the objects it reads, a delete run the objects it removes). Shapes: mem1 is one `mem` OSD with a size-1 pool, block3 three
# `block` OSDs with size 3. Each BIN is a release build of `shoal` (copy it out of target/ so a
# later build does not replace it). A BIN written VAR=VALUE@PATH runs PATH with VAR set in the
# environment of everything it starts (e.g. SHOAL_LOCAL_SOCKETS=0@/tmp/shoal-x: the same build
# with local sockets off; several assignments are separated by spaces, the whole spec quoted). Prints one line per run; CPU is in microseconds per operation, summed
# over the processes named.
set -euo pipefail

ROUNDS=2
PREFILL=1
AGE_S=0
UNIX=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --unwritten) PREFILL=0; shift ;;
    --aged) AGE_S=$2; shift 2 ;;
    --unix) UNIX=1; shift ;;
    *) echo "bench/ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
MODE=${1:?usage: bench/ab.sh [--rounds N] nbd|s3|rbd SHAPE ... BIN...}
SHAPE=${2:?missing shape (mem1 or block3)}
shift 2
case $SHAPE in
  mem1) UP=(--osds 1 --osd-size 8G) ;;
  block3) UP=(--osds 3 --backend block --osd-size 4G) ;;
  *) echo "bench/ab.sh: unknown shape $SHAPE (mem1 or block3)" >&2; exit 2 ;;
esac

DIR=$(mktemp -d /tmp/shoal-ab.XXXXXX)
PORT=10810
BIN=""
cleanup() {
  pkill -f "nbd serve data/img --listen 127.0.0.1:$PORT" 2>/dev/null || true
  if [[ -n $BIN && -f $DIR/c/shoal.toml ]]; then "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

# Sum of user and system CPU ticks of the processes given.
ticks() {
  local sum=0 pid
  for pid in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
  echo "$sum"
}
# The machine's idle and total CPU ticks so far (idle counts I/O wait), for the share of the
# two vCPUs a load left unused: a chain of processes that waits on each other leaves idle time
# that more CPU per second would not fill.
cpu_ticks() { awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
idle_pct() { python3 -c "print(f'{100 * ($3 - $1) / max(1, $4 - $2):.0f}')"; }
# Microseconds per operation from a tick count (USER_HZ is 100 here).
per_op_us() { python3 -c "print(f'{$1 * 1e6 / $(getconf CLK_TCK) / $2:.1f}')"; }

# Starts a fresh cluster of the shape with build $BIN; $1: "gateway" to keep the gateway.
up() {
  rm -rf "$DIR/c"
  local extra=(--no-gateway)
  [[ ${1:-} == gateway ]] && extra=()
  "$BIN" up "${UP[@]}" --dir "$DIR/c" "${extra[@]}" --json >"$DIR/up.json" 2>"$DIR/up.err" \
    || { echo "bench/ab.sh: shoal up failed:" >&2; cat "$DIR/up.err" >&2; exit 1; }
  OSDS=$(pgrep -f "^$BIN osd run" | tr '\n' ' ')
}
down() {
  "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true
  rm -rf "$DIR/c"
}

run_nbd() {
  local rw=$1 bs=$2 qd=$3
  up
  "$BIN" --conf "$DIR/c/shoal.toml" rbd create data/img --size 1G >/dev/null
  local where=(--listen "127.0.0.1:$PORT") engine=(--ioengine=nbd "--uri=nbd://127.0.0.1:$PORT/data/img")
  if ((UNIX)); then
    where=(--socket "$DIR/nbd.sock")
    engine=(--ioengine=nbd "--uri=nbd+unix:///data/img?socket=$DIR/nbd.sock")
  fi
  "$BIN" --conf "$DIR/c/shoal.toml" nbd serve data/img "${where[@]}" >"$DIR/nbd.log" 2>&1 &
  local nbd=$!
  sleep 1.5
  if ((PREFILL)); then
    fio --name=prefill "${engine[@]}" --rw=write --bs=4M --iodepth=4 --size=1G >/dev/null 2>&1
  fi
  if ((AGE_S > 0)); then
    fio --name=age "${engine[@]}" --rw=randwrite --bs=4k --iodepth=16 --size=1G --time_based --runtime="$AGE_S" \
      >/dev/null 2>&1
  fi
  local o0 n0 o1 n1 m0 m1
  o0=$(ticks $OSDS); n0=$(ticks $nbd); m0=$(cpu_ticks)
  fio --name=load "${engine[@]}" --rw="$rw" --bs="$bs" --iodepth="$qd" --size=1G --time_based --runtime=8 \
    --output-format=json --output="$DIR/fio.json" >/dev/null 2>&1
  o1=$(ticks $OSDS); n1=$(ticks $nbd); m1=$(cpu_ticks)
  kill "$nbd"; wait "$nbd" 2>/dev/null || true
  local ops fio_us
  ops=$(jq '.jobs[0].write.total_ios + .jobs[0].read.total_ios' "$DIR/fio.json")
  fio_us=$(jq --argjson ops "$ops" '(.jobs[0].usr_cpu + .jobs[0].sys_cpu) / 100 * 8e6 / $ops | . * 10 | round / 10' "$DIR/fio.json")
  jq -r --arg b "$BIN" --arg o "$(per_op_us $((o1 - o0)) "$ops")" --arg n "$(per_op_us $((n1 - n0)) "$ops")" \
    --arg f "$fio_us" --arg idle "$(idle_pct $m0 $m1)" '.jobs[0] as $j
      | def side($d): "ops_per_s=\($d.iops | round) mb_per_s=\($d.bw_bytes / 1e6 | . * 10 | round / 10) p50_us=\($d.clat_ns.percentile["50.000000"] / 1000 | round) p99_us=\($d.clat_ns.percentile["99.000000"] / 1000 | round)";
      (if $j.write.total_ios > 0 and $j.read.total_ios > 0 then "read: \(side($j.read)) write: \(side($j.write))"
       elif $j.write.total_ios > 0 then side($j.write) else side($j.read) end) as $sides
      | "\($b) \($j."job options".rw // "") \($sides) osd_cpu_us=\($o) nbd_cpu_us=\($n) fio_cpu_us=\($f) idle_pct=\($idle)"' \
    "$DIR/fio.json"
  down
}

run_s3() {
  local size=$1 conc=$2 load=$3
  up gateway
  local ep ak sk gw
  ep=$(jq -r .gateway.endpoint "$DIR/up.json"); ak=$(jq -r .gateway.access_key "$DIR/up.json")
  sk=$(jq -r .gateway.secret_key "$DIR/up.json"); gw=$(pgrep -f "^$BIN gateway run")
  local s3=(s3 bench --endpoint "$ep" --access-key "$ak" --secret-key "$sk" --size "$size" --concurrency "$conc")
  local measured=("$load")
  if [[ $load == get ]]; then
    # The objects a get reads are written by a short get run first, so that the CPU measured
    # below is the reads' alone.
    "$BIN" "${s3[@]}" --seconds 4 put >/dev/null 2>&1
    "$BIN" "${s3[@]}" --seconds 1 get >/dev/null 2>&1
    measured=(--no-prefill get)
  elif [[ $load == delete ]]; then
    # A delete run removes what the bucket holds: twice what 6 s of deletes take, written first.
    "$BIN" "${s3[@]}" --seconds 12 put >/dev/null 2>&1
  fi
  local o0 g0 o1 g1 m0 m1 l
  o0=$(ticks $OSDS); g0=$(ticks $gw); m0=$(cpu_ticks)
  # The load generator's own CPU (user + system seconds, from time(1)) is printed too: it shares
  # the two vCPUs with the gateway and the cluster, so what it spends is not theirs to use.
  /usr/bin/time -f "%U %S" -o "$DIR/loadgen.time" "$BIN" "${s3[@]}" --seconds 6 --json "${measured[@]}" >"$DIR/s3.json" 2>/dev/null
  o1=$(ticks $OSDS); g1=$(ticks $gw); m1=$(cpu_ticks)
  local ops
  ops=$(jq '.ops' "$DIR/s3.json")
  l=$(python3 -c "u, s = open('$DIR/loadgen.time').read().split()[-2:]; print(f'{(float(u) + float(s)) * 1e6 / $ops:.1f}')")
  jq -r --arg b "$BIN" --arg o "$(per_op_us $((o1 - o0)) "$ops")" --arg g "$(per_op_us $((g1 - g0)) "$ops")" \
    --arg idle "$(idle_pct $m0 $m1)" --arg l "$l" \
    '"\($b) ops_per_s=\(.ops_per_s | round) mb_per_s=\(.mb_per_s | . * 10 | round / 10) p99_ms=\(.p99_ms) osd_cpu_us=\($o) gateway_cpu_us=\($g) loadgen_cpu_us=\($l) idle_pct=\($idle)"' \
    "$DIR/s3.json"
  down
}

run_rbd() {
  up
  local conf=(--conf "$DIR/c/shoal.toml")
  "$BIN" "${conf[@]}" rbd create data/img --size 1G >/dev/null
  local bench=(rbd bench data/img --io-type write --io-size 4K --io-threads 16 --io-total 64M --io-pattern rand --json)
  "$BIN" "${conf[@]}" "${bench[@]}" >/dev/null 2>&1 # warm-up: the image's objects exist afterwards
  local o0 o1
  o0=$(ticks $OSDS)
  "$BIN" "${conf[@]}" "${bench[@]}" >"$DIR/rbd.json" 2>/dev/null
  o1=$(ticks $OSDS)
  jq -r --arg b "$BIN" --arg o "$(per_op_us $((o1 - o0)) "$(jq .ops "$DIR/rbd.json")")" \
    '"\($b) ops_per_s=\(.ops_per_s | round) osd_cpu_us=\($o)"' "$DIR/rbd.json"
  down
}

case $MODE in
  nbd) ARGS=("$1" "$2" "$3"); shift 3 ;;
  s3) ARGS=("$1" "$2" "$3"); shift 3 ;;
  rbd) ARGS=() ;;
  *) echo "bench/ab.sh: unknown mode $MODE (nbd, s3 or rbd)" >&2; exit 2 ;;
esac
(($# > 0)) || { echo "bench/ab.sh: name at least one build" >&2; exit 2; }
for spec in "$@"; do
  [[ -x ${spec#*@} ]] || { echo "bench/ab.sh: ${spec#*@} is not an executable" >&2; exit 2; }
done
for ((round = 1; round <= ROUNDS; round++)); do
  for spec in "$@"; do
    BIN=${spec#*@}
    if [[ $spec == *@* ]]; then
      # In a subshell, so the variable does not leak into the next build's run.
      (for v in ${spec%%@*}; do export "$v"; done; echo -n "${spec%%@*} "; "run_$MODE" "${ARGS[@]}")
    else
      "run_$MODE" "${ARGS[@]}"
    fi
  done
done
