#!/usr/bin/env bash
# Shoal's block images over NBD beside Ceph 16.2's RBD and `nbdkit memory`, measured with fio.
#
#   bench/nbd-vs-rbd.sh [--seconds S] [--shapes mem1,block3] [--out FILE] [--workdir DIR]
#
# Loads (fio, time-based, S seconds each, default 10): 4 KiB random write and read at iodepth
# 16, 512 KiB sequential write and read at iodepth 4, over a 1 GiB image written whole first.
# Then `rbd bench` and `shoal rbd bench` (4 KiB random at 16 threads, 512 KiB sequential at 4).
# Shoal: `shoal nbd serve` over the image, fio's nbd engine, on loopback TCP and then on a unix
# socket (the same loads again, prefill included). Ceph: the same shape (mem1 = one
# memstore OSD and a size-1 pool; block3 = three bluestore-on-file OSDs and a size-3 pool), fio's
# rbd engine (librbd; rbd-nbd cannot map here: no nbd module), and the same image served over NBD
# by qemu-nbd through librbd (Ceph over the same NBD hop as Shoal's). nbdkit memory: this
# machine's NBD-path ceiling, measured once in the same run. Run as root.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_S=10
SHAPES=mem1,block3
OUT=""
WORK=${NBD_VS_RBD_DIR:-/tmp/nbd-vs-rbd}
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}
HEALTHY_TIMEOUT_S=${HEALTHY_TIMEOUT_S:-180}
HEALTH_OK_EXTRA_S=${HEALTH_OK_EXTRA_S:-5}
PG_NUM=32
MEMSTORE_BYTES=$((8 << 30))
BLUESTORE_BLOCK_BYTES=$((8 << 30))
IMAGE_BYTES=$((1 << 30))

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

NBD_PID=""
cleanup() {
  local rc=$? d
  trap - EXIT
  [ -n "$NBD_PID" ] && kill "$NBD_PID" 2>/dev/null || true
  for d in "$WORK"/*/; do [ -d "$d" ] && remove_cluster "$rc" "${d%/}"; done
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One fio load; prints {iops, bw_mbps, p50_us, p99_us}. $1: engine args (a string), $2 name.
fio_load() {  # engine_args rw bs iodepth -> JSON line
  local out=$WORK/fio.json
  # shellcheck disable=SC2086
  fio --name=load $1 --rw="$2" --bs="$3" --iodepth="$4" --size="$IMAGE_BYTES" --time_based \
    --runtime="$BENCH_S" --ramp_time=1 --randrepeat=0 --output-format=json --output="$out" \
    >>"$WORK/logs/fio.out" 2>&1
  jq -c '.jobs[0] as $j | ($j.write.io_bytes > 0) as $w | (if $w then $j.write else $j.read end) as $d
    | {iops: ($d.iops|round), bw_mbps: (($d.bw_bytes / 1e6) * 10 | round / 10),
       p50_us: (($d.clat_ns.percentile["50.000000"] // 0) / 1000 | round),
       p99_us: (($d.clat_ns.percentile["99.000000"] // 0) / 1000 | round)}' "$out"
}

loads() {  # engine_args -> JSON object of the four loads (after writing the image whole)
  local e=$1 out="{}" r
  log "  prefill"
  # shellcheck disable=SC2086
  fio --name=prefill $e --rw=write --bs=4M --iodepth=4 --size="$IMAGE_BYTES" >>"$WORK/logs/fio.out" 2>&1
  for spec in "randwrite 4k 16" "randread 4k 16" "write 512k 4" "read 512k 4"; do
    set -- $spec
    log "  $1 $2 iodepth $3"
    r=$(fio_load "$e" "$1" "$2" "$3")
    out=$(jq -c --arg k "${1}_${2}_qd$3" --argjson r "$r" '. + {($k): $r}' <<<"$out")
  done
  echo "$out"
}

wait_port() {
  local deadline=$(( $(date +%s) + 30 ))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "nothing listens on $1"; return 1; }
    sleep 0.1
  done
}

# `rbd bench` shapes: type size threads total pattern (name).
BENCH_SHAPES="write 4K 16 128M rand bench_randwrite_4k_t16
read 4K 16 128M rand bench_randread_4k_t16
write 512K 4 1G seq bench_write_512k_t4
read 512K 4 1G seq bench_read_512k_t4"

# Runs the `rbd bench` shapes with command $1 (which ends where the image spec goes: "$2");
# prints {name: ops_per_s, ...}. $3: "json" when the command answers with --json.
bench_tool() {  # cmd spec kind
  local out="{}" t sz th tot pat name ops
  while read -r t sz th tot pat name; do
    if [ "$3" = json ]; then
      ops=$($1 bench "$2" --io-type "$t" --io-size "$sz" --io-threads "$th" --io-total "$tot" --io-pattern "$pat" --json \
        2>>"$WORK/logs/bench.err" | jq '.ops_per_s')
    else
      ops=$($1 bench "$2" --io-type "$t" --io-size "$sz" --io-threads "$th" --io-total "$tot" --io-pattern "$pat" \
        2>>"$WORK/logs/bench.err" | sed -n 's/.*ops\/sec: *\([0-9.]*\).*/\1/p' | tail -1)
    fi
    out=$(jq -c --arg n "$name" --argjson v "${ops:-null}" '. + {($n): $v}' <<<"$out")
  done <<<"$BENCH_SHAPES"
  echo "$out"
}

add_field() {  # file key json: adds {key: json} to the JSON object in file
  jq -c --arg k "$2" --argjson v "$3" '. + {($k): $v}' "$1" >"$1.new"
  mv "$1.new" "$1"
}

ceph_shape() {  # shape n size
  DIR=$WORK/ceph-$1
  if [ "$1" = mem1 ]; then CEPH_OBJECTSTORE=memstore; else CEPH_OBJECTSTORE=bluestore; fi
  log "ceph $1: deploying $2 OSD(s) ($CEPH_OBJECTSTORE, size $3)"
  ceph_deploy "$2" "$3"
  C osd pool application enable bench rbd >/dev/null 2>&1 || true
  x rbd --conf "$CONF" create bench/img --size "$((IMAGE_BYTES >> 20))M" --image-feature layering
  # fio's rbd engine has no conf option: librbd reads CEPH_CONF.
  CEPH_CONF=$CONF loads "--ioengine=rbd --clientname=admin --pool=bench --rbdname=img" \
    | jq -c --arg v "$(ceph --version)" '. + {version: $v}' >"$WORK/ceph-$1.json"
  # The same image over the same NBD hop as Shoal's: qemu-nbd serving it through librbd (what
  # rbd-nbd does; rbd-nbd itself needs the kernel's nbd module). Its default cache mode, as
  # rbd-nbd's librbd defaults.
  local port; port=$(free_range 1)
  log "ceph $1: qemu-nbd over librbd"
  CEPH_CONF=$CONF qemu-nbd --format=raw --persistent --shared=8 --bind=127.0.0.1 --port="$port" \
    "rbd:bench/img:conf=$CONF" >"$WORK/logs/qemu-nbd-$1.log" 2>&1 &
  NBD_PID=$!
  wait_port "$port"
  qemu_nbd=$(loads "--ioengine=nbd --uri=nbd://127.0.0.1:$port")
  kill "$NBD_PID"; wait "$NBD_PID" 2>/dev/null || true; NBD_PID=""
  add_field "$WORK/ceph-$1.json" qemu_nbd "$qemu_nbd"
  log "ceph $1: rbd bench"
  benches=$(bench_tool "rbd --conf $CONF" bench/img text)
  add_field "$WORK/ceph-$1.json" rbd_bench "$benches"
  ceph_teardown
}

shoal_shape() {  # shape n
  local backend=mem port
  [ "$1" = block3 ] && backend=block
  DIR=$WORK/shoal-$1
  rm -rf "$DIR"
  log "shoal $1: up $2 OSD(s) ($backend)"
  x "$SHOAL_BIN" up --osds "$2" --backend "$backend" --osd-size "$MEMSTORE_BYTES" --dir "$DIR" --json >/dev/null
  x "$SHOAL_BIN" --conf "$DIR/shoal.toml" rbd create data/img --size "$IMAGE_BYTES" >/dev/null
  port=$(free_range 1)
  "$SHOAL_BIN" --conf "$DIR/shoal.toml" nbd serve data/img --listen "127.0.0.1:$port" >"$WORK/logs/nbd-$1.log" 2>&1 &
  NBD_PID=$!
  wait_port "$port"
  loads "--ioengine=nbd --uri=nbd://127.0.0.1:$port/data/img" \
    | jq -c --arg c "$(git -C "$REPO" rev-parse HEAD)" '. + {commit: $c}' >"$WORK/shoal-$1.json"
  # SIGTERM: the server releases the image's lock, which the next server and a write bench need.
  kill "$NBD_PID"; wait "$NBD_PID" 2>/dev/null || true; NBD_PID=""
  # The same server on a unix socket: what a client on the same host (QEMU, nbdfuse) can use,
  # without loopback TCP's stack in the way.
  log "shoal $1: nbd serve on a unix socket"
  local sock=$WORK/nbd-$1.sock unix
  "$SHOAL_BIN" --conf "$DIR/shoal.toml" nbd serve data/img --socket "$sock" >"$WORK/logs/nbd-unix-$1.log" 2>&1 &
  NBD_PID=$!
  for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
  unix=$(loads "--ioengine=nbd --uri=nbd+unix:///data/img?socket=$sock")
  kill "$NBD_PID"; wait "$NBD_PID" 2>/dev/null || true; NBD_PID=""
  add_field "$WORK/shoal-$1.json" unix_socket "$unix"
  log "shoal $1: shoal rbd bench"
  benches=$(bench_tool "$SHOAL_BIN --conf $DIR/shoal.toml rbd" data/img json)
  add_field "$WORK/shoal-$1.json" rbd_bench "$benches"
  x "$SHOAL_BIN" down --dir "$DIR" >/dev/null 2>&1 || true
  stop_pids_in "$DIR"; rm -rf "$DIR"
}

nbdkit_memory() {
  local port; port=$(free_range 1)
  log "nbdkit memory"
  nbdkit --foreground --exit-with-parent -p "$port" -i 127.0.0.1 memory "$IMAGE_BYTES" >"$WORK/logs/nbdkit.log" 2>&1 &
  NBD_PID=$!
  wait_port "$port"
  loads "--ioengine=nbd --uri=nbd://127.0.0.1:$port" >"$WORK/nbdkit.json"
  kill "$NBD_PID"; wait "$NBD_PID" 2>/dev/null || true; NBD_PID=""
}

ensure_packages fio nbdkit qemu-utils qemu-block-extra
if [ -d "$WORK" ]; then
  for d in "$WORK"/*/; do [ -d "$d" ] && stop_pids_in "${d%/}"; done
  rm -rf "$WORK"
fi
mkdir -p "$WORK/logs"
: >"$CMDLOG"
[ -x "$SHOAL_BIN" ] || { echo "no shoal binary at $SHOAL_BIN (cargo build --release -p shoal)" >&2; exit 2; }
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
nbdkit_memory
result=$(jq -c '{nbdkit_memory: .}' "$WORK/nbdkit.json")
IFS=, read -r -a shapes <<<"$SHAPES"
for shape in "${shapes[@]}"; do
  case $shape in mem1) n=1 size=1 ;; block3) n=3 size=3 ;; *) echo "unknown shape $shape" >&2; exit 2 ;; esac
  ceph_shape "$shape" "$n" "$size"
  shoal_shape "$shape" "$n"
  result=$(jq -c --arg s "$shape" --slurpfile c "$WORK/ceph-$shape.json" --slurpfile h "$WORK/shoal-$shape.json" \
    '. + {($s): {ceph_rbd: $c[0], shoal: $h[0]}}' <<<"$result")
done
RESULT=$(jq -c --arg date "$(date -u +%FT%TZ)" --arg load "$LOAD_BEFORE" --arg after "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --arg kernel "$(uname -r)" --argjson secs "$BENCH_S" --arg nproc "$(nproc)" \
  '{date: $date, machine: {nproc: ($nproc|tonumber), kernel: $kernel, loadavg_before: $load, loadavg_after: $after},
    seconds: $secs, results: .}' <<<"$result")
[ -n "$OUT" ] && echo "$RESULT" >"$OUT"
echo "$RESULT" >"$WORK/result.json"

# The table: per shape and load, Ceph RBD, Shoal, nbdkit memory, and the ratios.
echo "$RESULT" | jq -r '
  def f: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  .results as $r
  | "| shape | load | ceph rbd | shoal nbd | nbdkit memory | shoal/ceph | shoal/nbdkit | ceph p99 us | shoal p99 us | ceph qemu-nbd | shoal/qemu-nbd | qemu-nbd p99 us | shoal unix socket | unix/ceph | unix p99 us |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ( $r | to_entries[] | select(.key != "nbdkit_memory") | .key as $s | .value as $v
      | ["randwrite_4k_qd16", "randread_4k_qd16", "write_512k_qd4", "read_512k_qd4"][] as $l
      | (if ($l | startswith("rand")) then "iops" else "bw_mbps" end) as $m
      | "| \($s) | \($l) | \($v.ceph_rbd[$l][$m]) | \($v.shoal[$l][$m]) | \($r.nbdkit_memory[$l][$m]) | \(($v.shoal[$l][$m] / $v.ceph_rbd[$l][$m]) | f) | \(($v.shoal[$l][$m] / $r.nbdkit_memory[$l][$m]) | f) | \($v.ceph_rbd[$l].p99_us) | \($v.shoal[$l].p99_us) | \($v.ceph_rbd.qemu_nbd[$l][$m] // "-") | \(if $v.ceph_rbd.qemu_nbd[$l][$m] then ($v.shoal[$l][$m] / $v.ceph_rbd.qemu_nbd[$l][$m]) | f else "-" end) | \($v.ceph_rbd.qemu_nbd[$l].p99_us // "-") | \($v.shoal.unix_socket[$l][$m] // "-") | \(if $v.shoal.unix_socket[$l][$m] then ($v.shoal.unix_socket[$l][$m] / $v.ceph_rbd[$l][$m]) | f else "-" end) | \($v.shoal.unix_socket[$l].p99_us // "-") |" ),
    "",
    "| shape | rbd bench (ops/s) | rbd (ceph) | shoal rbd | shoal/ceph |",
    "|---|---|---|---|---|",
    ( $r | to_entries[] | select(.key != "nbdkit_memory") | .key as $s | .value as $v
      | ($v.ceph_rbd.rbd_bench // {} | keys[]) as $b
      | "| \($s) | \($b) | \($v.ceph_rbd.rbd_bench[$b] | f) | \($v.shoal.rbd_bench[$b] | f) | \(if $v.ceph_rbd.rbd_bench[$b] then ($v.shoal.rbd_bench[$b] / $v.ceph_rbd.rbd_bench[$b]) | f else "-" end) |" )'
