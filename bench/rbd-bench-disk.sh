#!/usr/bin/env bash
# `shoal rbd bench` writes on a fresh three-OSD `block` cluster (size-3 pool, 1 GiB image), with
# what the disk did meanwhile (from /proc/diskstats: writes, MB/s, average write and flush
# latency, flushes a second, busy time) and the CPU ticks each daemon spent: to see whether a
# write load is bound by the disk, the CPU, or neither (then: by waits on its path).
#
#   bench/rbd-bench-disk.sh BIN [SIZE=512K] [THREADS=4] [PATTERN=seq] [TOTAL=2G]
#
# BIN is a release build of `shoal`. Prints the bench's JSON line, a disk line and a CPU line per
# daemon. The cluster lives in a temporary directory on the file system of the current directory
# and is removed at exit.
set -euo pipefail
BIN=${1:?usage: bench/rbd-bench-disk.sh BIN [SIZE] [THREADS] [PATTERN] [TOTAL]}
SIZE=${2:-512K}; THREADS=${3:-4}; PATTERN=${4:-seq}; TOTAL=${5:-2G}
[ -x "$BIN" ] || { echo "no shoal binary at $BIN" >&2; exit 2; }
DIR=$(mktemp -d "$PWD/.rbd-bench-disk.XXXXXX")
cleanup() { "$BIN" down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$BIN" up --osds 3 --backend block --osd-size 8G --dir "$DIR" --json >/dev/null
"$BIN" --conf "$DIR/shoal.toml" rbd create data/img --size 1G >/dev/null
DEV=$(basename "$(df --output=source "$DIR" | tail -1)")
# /proc/diskstats fields: 8 writes completed, 10 sectors written, 11 ms writing, 13 ms doing I/O,
# 19 flushes completed, 20 ms flushing.
disk() { awk -v d="$DEV" '$3 == d { print $8, $10, $11, $19, $20, $13 }' /proc/diskstats; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
mapfile -t PIDS < <(pgrep -f -- "$DIR")
declare -A T0
for p in "${PIDS[@]}"; do T0[$p]=$(ticks "$p"); done
A=$(disk); S0=$(date +%s.%N)
"$BIN" --conf "$DIR/shoal.toml" rbd bench data/img --io-type write --io-size "$SIZE" --io-threads "$THREADS" \
  --io-total "$TOTAL" --io-pattern "$PATTERN" --json
B=$(disk); S1=$(date +%s.%N)
if [ -n "$A" ] && [ -n "$B" ]; then
  python3 - "$A" "$B" "$S0" "$S1" <<'PY'
import sys
a = list(map(int, sys.argv[1].split())); b = list(map(int, sys.argv[2].split()))
t = float(sys.argv[4]) - float(sys.argv[3]); d = [y - x for x, y in zip(a, b)]
print(f"disk over {t:.1f} s: writes/s {d[0]/t:.0f}, MB/s {d[1]*512/t/1e6:.0f}, "
      f"avg write ms {d[2]/max(d[0],1):.2f}, flushes/s {d[3]/t:.0f}, avg flush ms {d[4]/max(d[3],1):.2f}, "
      f"busy {d[5]/t/10:.0f}%")
PY
else
  echo "disk: no /proc/diskstats line for $DEV"
fi
for p in "${PIDS[@]}"; do
  [ -r "/proc/$p/stat" ] || continue
  echo "$(tr '\0' ' ' <"/proc/$p/cmdline" | awk '{ print $2, $3 }'): $(( $(ticks "$p") - ${T0[$p]} )) CPU ticks"
done
