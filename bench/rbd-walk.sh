#!/usr/bin/env bash
# Time of the whole-image commands that find an image's objects (`shoal rbd du`, `export` to a
# sparse file, `rm`)
# on a thin image: 64 MiB written (16 objects of 4 MiB), provisioned as SIZE (1T by default:
# 262,144 object numbers), on one `mem` OSD, builds alternated round by round, a fresh cluster per
# run. A small image (64 MiB, fewer object numbers than the pool has PGs) is measured beside it as
# the control: every build visits each of its numbers.
#
#   bench/rbd-walk.sh [--rounds N] [--size SIZE] BIN...
#
# Each BIN is a release build of `shoal` (copy it out of target/). Prints one line per run with
# seconds per command.
set -euo pipefail

ROUNDS=2
SIZE=1T
while [[ ${1:-} == --* ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    *) echo "bench/rbd-walk.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: bench/rbd-walk.sh [--rounds N] [--size SIZE] BIN..." >&2; exit 2; }

DIR=$(mktemp -d /tmp/shoal-walk.XXXXXX)
BIN=""
cleanup() {
  if [[ -n $BIN && -f $DIR/c/shoal.toml ]]; then "$BIN" down --dir "$DIR/c" >/dev/null 2>&1 || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

# 64 MiB with no all-zero 4 MiB chunk, so that the import writes every object.
head -c $((64 << 20)) /dev/urandom >"$DIR/data"

seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null || { echo "bench/rbd-walk.sh: failed: $*" >&2; return 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

for round in $(seq 1 "$ROUNDS"); do
  for BIN in "$@"; do
    "$BIN" up --dir "$DIR/c" --osds 1 --osd-size 2G --no-gateway >/dev/null
    conf=(--conf "$DIR/c/shoal.toml")
    "$BIN" rbd "${conf[@]}" import "$DIR/data" data/small --json >/dev/null
    "$BIN" rbd "${conf[@]}" import "$DIR/data" data/big --json >/dev/null
    "$BIN" rbd "${conf[@]}" resize data/big --size "$SIZE" --json >/dev/null
    du_small=$(seconds "$BIN" rbd "${conf[@]}" du data/small --json)
    du_big=$(seconds "$BIN" rbd "${conf[@]}" du data/big --json)
    export_big=$(seconds "$BIN" rbd "${conf[@]}" export data/big "$DIR/out" --json)
    rm -f "$DIR/out"
    rm_small=$(seconds "$BIN" rbd "${conf[@]}" rm data/small --json)
    rm_big=$(seconds "$BIN" rbd "${conf[@]}" rm data/big --json)
    echo "round $round $BIN: du 64M ${du_small}s, du $SIZE ${du_big}s, export $SIZE ${export_big}s, rm 64M ${rm_small}s, rm $SIZE ${rm_big}s"
    "$BIN" down --dir "$DIR/c" >/dev/null
  done
done
