#!/usr/bin/env bash
# Sequential reads of an image before and after random small writes into it, per build: what
# copy-on-write fragmentation costs a block image (decision 0040). For each BIN, a fresh block3
# cluster (three `block` OSDs, size 3), an image of SIZE written whole with 4 MiB writes, two
# sequential 512 KiB reads at depth 4 (fio's nbd engine through `shoal nbd serve`), then N
# random 4 KiB writes at depth 16, then the same two reads.
#
#   bench/read-after-random-writes.sh [--size 256M] [--writes 30000] BIN...
#
# Prints one line per build: MB/s of each read before and after, and the writes' IOPS.
set -euo pipefail

SIZE=256M
WRITES=30000
while [[ ${1:-} == --* ]]; do
  case $1 in
    --size) SIZE=$2; shift 2 ;;
    --writes) WRITES=$2; shift 2 ;;
    *) echo "bench/read-after-random-writes.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "usage: bench/read-after-random-writes.sh [--size S] [--writes N] BIN..." >&2; exit 2; }

DIR=$(mktemp -d /tmp/shoal-frag.XXXXXX)
PORT=10897
BIN=""
cleanup() {
  pkill -f "nbd serve data/img --listen 127.0.0.1:$PORT" 2>/dev/null || true
  if [[ -n $BIN && -f $DIR/c/shoal.toml ]]; then "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

for BIN in "$@"; do
  [[ -x $BIN ]] || { echo "bench/read-after-random-writes.sh: $BIN is not an executable" >&2; exit 2; }
  rm -rf "$DIR/c"
  "$BIN" up --osds 3 --backend block --osd-size 4G --dir "$DIR/c" --no-gateway --json >"$DIR/up.json"
  conf=(--conf "$DIR/c/shoal.toml")
  "$BIN" "${conf[@]}" rbd create data/img --size "$SIZE" >/dev/null
  "$BIN" "${conf[@]}" nbd serve data/img --listen "127.0.0.1:$PORT" >"$DIR/nbd.log" 2>&1 &
  nbd=$!
  sleep 1.5
  engine=(--ioengine=nbd "--uri=nbd://127.0.0.1:$PORT/data/img" --size="$SIZE")
  fio --name=fill "${engine[@]}" --rw=write --bs=4M --iodepth=4 >/dev/null 2>&1
  read_mbs() {
    fio --name=read "${engine[@]}" --rw=read --bs=512k --iodepth=4 --output-format=json --output="$DIR/r.json" >/dev/null 2>&1
    jq '.jobs[0].read.bw_bytes / 1e6 | round' "$DIR/r.json"
  }
  before="$(read_mbs) / $(read_mbs)"
  fio --name=rw "${engine[@]}" --rw=randwrite --bs=4k --iodepth=16 --number_ios="$WRITES" \
    --output-format=json --output="$DIR/w.json" >/dev/null 2>&1
  iops=$(jq '.jobs[0].write.iops | round' "$DIR/w.json")
  after="$(read_mbs) / $(read_mbs)"
  echo "$BIN seq_read_mb_per_s_fresh=$before randwrite_iops=$iops seq_read_mb_per_s_after=$after"
  kill "$nbd"; wait "$nbd" 2>/dev/null || true
  "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true
done
