#!/usr/bin/env bash
# Measures how fast this machine backs fresh anonymous memory (see touch.c), twice: the second
# pass, right after the first freed its memory, shows the difference between memory the guest
# has never (or not recently) used and memory it has just released.
#
#   bench/fresh-ram/run.sh [steps] [step_mib]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${1:-12}
STEP_MIB=${2:-1024}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -o "$OUT/touch" "$HERE/touch.c"
echo "# $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
if [ -r /sys/module/page_reporting/parameters/page_reporting_order ]; then
  echo "# free page reporting to the host: on (order $(cat /sys/module/page_reporting/parameters/page_reporting_order))"
fi
echo "# pass 1"
"$OUT/touch" "$STEPS" "$STEP_MIB"
echo "# pass 2 (immediately after pass 1 freed its memory)"
"$OUT/touch" "$STEPS" "$STEP_MIB"
