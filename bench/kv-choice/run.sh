#!/usr/bin/env bash
# Reproduces the measurements of docs/decisions/0002-metadata-kv-engine.md.
# Two clean release builds (one per engine, timed), then each engine twice, alternating,
# one benchmark at a time, on a fresh directory under $KV_CHOICE_DIR (default /tmp/kv-choice).
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
TARGET=$HERE/target
RES=$HERE/results
DATA=${KV_CHOICE_DIR:-/tmp/kv-choice}
RUNS=${KV_CHOICE_RUNS:-2}
mkdir -p "$RES" "$DATA/bin"
: > "$RES/raw.tsv"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -r)"
  echo "cpus: $(nproc)"
  echo "rustc: $(rustc --version)"
  echo "fs of $DATA: $(mkdir -p "$DATA" && df -T "$DATA" | awk 'NR==2{print $2" on "$1}')"
} > "$RES/env.txt"

for engine in fjall redb; do
  cargo clean --target-dir "$TARGET" -q
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  start=$(date +%s.%N)
  cargo build --release --locked --target-dir "$TARGET" --features "$engine"
  end=$(date +%s.%N)
  cp "$TARGET/release/kv-choice" "$DATA/bin/kv-choice-$engine"  # cargo clean would delete it from target/
  printf '%s\tbuild\tclean_release_build_s\t%.1f\ts\t(loadavg before: %s)\n' \
    "$engine" "$(echo "$end - $start" | bc)" "$load" | tee -a "$RES/raw.tsv"
done

for run in $(seq 1 "$RUNS"); do
  for engine in fjall redb; do
    dir=$DATA/$engine-run$run
    rm -rf "$dir"
    printf '%s\trun%s\tloadavg_before\t%s\t-\n' "$engine" "$run" "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$RES/raw.tsv"
    "$DATA/bin/kv-choice-$engine" "$dir" "run$run" | tee -a "$RES/raw.tsv"
    rm -rf "$dir"
  done
done
python3 "$HERE/summarize.py" "$RES/raw.tsv" | tee "$RES/summary.md"
