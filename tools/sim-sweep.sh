#!/usr/bin/env bash
# Sweeps the deterministic simulation over flag combinations and sorts the failures.
#
#   tools/sim-sweep.sh [--from FIRST] [--seeds N] [--jobs J] COMBOS_FILE
#
# COMBOS_FILE holds one combination of `shoal-sim` flags per line (blank lines and lines
# starting with `#` are skipped). Every combination runs N seeds from FIRST. A failing seed whose
# violation is a resend answered "does not exist" is run again with the largest window of request
# ids kept beyond the PG log (`--dups-objects 1024`): if it then passes, the resend came after its
# request id had left the window (a documented limit of short logs, decision 0039's seventeenth-
# session amendment) and it is listed as `window`; anything else is listed as `FAIL` with its
# replay command. The exit status is 1 if any `FAIL` was found.
#
# Builds `shoal-sim` in release first (set SHOAL_SIM to use another binary).
set -euo pipefail
cd "$(dirname "$0")/.."

from=1
seeds=2000
jobs=$(nproc)
while [[ $# -gt 1 ]]; do
  case "$1" in
    --from) from=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "sim-sweep: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $# -ne 1 || ! -f "$1" ]]; then
  echo "usage: tools/sim-sweep.sh [--from FIRST] [--seeds N] [--jobs J] COMBOS_FILE" >&2
  exit 2
fi
combos=$1

if [[ -z "${SHOAL_SIM:-}" ]]; then
  cargo build --release -q -p shoal-sim
  SHOAL_SIM=target/release/shoal-sim
fi

real_failures=0
while IFS= read -r flags || [[ -n "$flags" ]]; do
  [[ -z "${flags// }" || "$flags" == \#* ]] && continue
  echo "== $flags"
  # Word splitting of the flags is intended: one line holds several arguments.
  # shellcheck disable=SC2086
  out=$("$SHOAL_SIM" --from "$from" --seeds "$seeds" --jobs "$jobs" $flags 2>&1 </dev/null || true)
  if ! echo "$out" | grep -q "seeds from"; then
    # The flags were refused (or the run died): say why, and count it.
    echo "  ERROR  $(echo "$out" | tail -1)"
    real_failures=$((real_failures + 1))
    continue
  fi
  echo "$out" | grep -E "seeds from" | sed 's/ (.*//'
  while read -r seed violation; do
    [[ -z "$seed" ]] && continue
    if [[ "$violation" == *"does not exist"* ]] \
      && "$SHOAL_SIM" --seed "$seed" $flags --dups-objects 1024 >/dev/null 2>&1 </dev/null; then
      echo "  window $seed: $violation"
    else
      echo "  FAIL   $seed: $violation"
      echo "         replay: $SHOAL_SIM --seed $seed $flags --verbose"
      real_failures=$((real_failures + 1))
    fi
  done < <(echo "$out" | sed -n 's/^FAIL seed \([0-9]*\): \(.*\)$/\1 \2/p')
done < "$combos"

if [[ $real_failures -gt 0 ]]; then
  echo "$real_failures failure(s) or refused combination(s) not explained by the dups window"
  exit 1
fi
