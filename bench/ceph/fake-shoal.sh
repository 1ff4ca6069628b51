#!/usr/bin/env bash
# A stand-in for the `shoal` binary that implements only the command-line spec compare-ceph.sh
# relies on (up/down/bench), with made-up figures. For testing the harness itself:
#   SHOAL_BIN=$PWD/bench/ceph/fake-shoal.sh bench/compare-ceph.sh --only shoal --seconds 1
set -euo pipefail
conf=""
if [ "${1:-}" = --conf ]; then conf=$2; shift 2; fi
cmd=${1:-}; shift || true
case " $* " in *" --help "*) echo "fake shoal $cmd"; exit 0 ;; esac
case $cmd in
  up)
    n=1 dir=""
    while [ $# -gt 0 ]; do case $1 in --osds) n=$2; shift 2 ;; --dir) dir=$2; shift 2 ;; *) shift ;; esac; done
    mkdir -p "$dir"; echo "# fake" >"$dir/shoal.toml"
    (exec -a "shoal mon --dir $dir" sleep 1000) & echo $! >"$dir/mon.pid"
    for i in $(seq 0 $((n - 1))); do (exec -a "shoal osd --dir $dir" sleep 1000) & echo $! >"$dir/osd.$i.pid"; done
    sleep 0.3 ;;
  down)
    dir=""; while [ $# -gt 0 ]; do case $1 in --dir) dir=$2; shift 2 ;; *) shift ;; esac; done
    for f in "$dir"/*.pid; do [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null; rm -f "$f"; done; true ;;
  bench)
    [ -n "$conf" ] || { echo "bench needs --conf" >&2; exit 2; }
    bs=4096; while [ $# -gt 0 ]; do case $1 in -b) bs=$2; shift 2 ;; *) shift ;; esac; done
    echo "some progress line"
    echo "{\"mb_per_s\": $((bs / 10000 + 1)), \"ops_per_s\": 1000, \"lat_ms_avg\": 1.5, \"lat_ms_p50\": 1.2, \"lat_ms_p99\": 4.0, \"lat_ms_max\": 9.0}" ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
