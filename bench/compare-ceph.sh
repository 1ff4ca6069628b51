#!/usr/bin/env bash
# Side-by-side comparison of Shoal and real Ceph 16.2 (Debian packages) on this machine.
# What is measured and why: bench/ceph/README.md.
#
#   bench/compare-ceph.sh [--seconds S] [--rounds N] [--only ceph|shoal] [--out FILE]
#                         [--workdir DIR] [--keep-going]
#
# Everything runs on 127.0.0.1 with private ports, all state under --workdir
# (default /tmp/compare-ceph), and is torn down at exit, even on failure.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_S=10
ROUNDS=1
ONLY=both
OUT=""
WORK=${COMPARE_CEPH_DIR:-/tmp/compare-ceph}
SHOAL_BIN=${SHOAL_BIN:-target/release/shoal}
HEALTHY_TIMEOUT_S=${HEALTHY_TIMEOUT_S:-180}  # give up on a deploy after this long
HEALTH_OK_EXTRA_S=${HEALTH_OK_EXTRA_S:-20}   # after "ready", how long to keep waiting for HEALTH_OK
IDLE_S=5                                     # idle time before reading RSS
PG_NUM=32                                    # Ceph's osd_pool_default_pg_num
MEMSTORE_BYTES=$((16 << 30))                 # memstore's cap per OSD (not an allocation)

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) BENCH_S=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done
case $ONLY in both|ceph|shoal) ;; *) echo "--only ceph|shoal" >&2; exit 2 ;; esac

# ---------------------------------------------------------------- shared with recovery-ceph.sh
# shellcheck source=ceph/lib.sh
. "$HERE/ceph/lib.sh"

trap 'remove_clusters_and_exit "$WORK"/ceph*-r*/ "$WORK"/shoal*-r*/' EXIT
trap 'exit 130' INT TERM

rados_bench() {  # bs -> JSON object (rados bench's own summary)
  local bs=$1 out
  out=$(x rados --conf "$CONF" -p bench bench "$BENCH_S" write -b "$bs" -t 16 --no-cleanup 2>&1) || {
    echo "$out" >&2; return 1; }
  echo "$out" >"$WORK/logs/$(basename "$DIR")-rados-bench-$bs.txt"
  echo "$out" | awk -F: '
    function v(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^Bandwidth \(MB\/sec\)/ {mb=v($2)} /^Average IOPS/ {iops=v($2)}
    /^Average Latency\(s\)/ {avg=v($2)} /^Max latency\(s\)/ {max=v($2)}
    /^Min latency\(s\)/ {min=v($2)} /^Stddev Latency\(s\)/ {sd=v($2)}
    /^Total writes made/ {n=v($2)}
    END { printf "{\"tool\":\"rados bench\",\"mb_per_s\":%s,\"ops_per_s\":%s,\"lat_ms_avg\":%s,\"lat_ms_stddev\":%s,\"lat_ms_min\":%s,\"lat_ms_max\":%s,\"ops\":%s}\n",
            mb, iops, avg*1000, sd*1000, min*1000, max*1000, n }'
}

fio_bench() {  # bs -> JSON object (fio's rados engine, same pool, 16 in flight)
  local bs=$1 out
  # 16 objects of 64 MiB (--size is the total; the rados engine ignores --filesize) written round-robin (one object would serialise every write on one
  # PG; osd_max_object_size is 128 MiB); --time_based wraps around, i.e. later passes overwrite
  out=$(x fio --name="w$bs" --ioengine=rados --conf="$CONF" --clientname=admin --pool=bench \
          --rw=write --bs="$bs" --iodepth=16 --nrfiles=16 --size=1G --file_service_type=roundrobin \
          --time_based --runtime="$BENCH_S" \
          --percentile_list=50:99 --output-format=json 2>"$WORK/logs/$(basename "$DIR")-fio-$bs.err") || {
    cat "$WORK/logs/$(basename "$DIR")-fio-$bs.err" >&2; return 1; }
  echo "$out" >"$WORK/logs/$(basename "$DIR")-fio-$bs.json"
  echo "$out" | jq -c '.jobs[0].write as $w | {
      tool: "fio --ioengine=rados",
      mb_per_s: ($w.bw_bytes / 1e6), ops_per_s: $w.iops,
      lat_ms_avg: ($w.lat_ns.mean / 1e6), lat_ms_max: ($w.lat_ns.max / 1e6),
      clat_ms_p50: ($w.clat_ns.percentile["50.000000"] / 1e6),
      clat_ms_p99: ($w.clat_ns.percentile["99.000000"] / 1e6),
      ops: $w.total_ios }'
}

daemon_rss() {  # JSON {name: kib} for every daemon of $DIR
  local f name first=1
  printf '{'
  for f in "$DIR"/pids/*.pid; do
    name=$(basename "$f" .pid)
    [ $first = 1 ] || printf ','
    first=0
    printf '"%s":%s' "$name" "$(rss_kib "$(cat "$f")")"
  done
  printf '}\n'
}

deploy_json() {  # the last ceph_deploy's timings as JSON
  jq -nc --argjson s "$READY_S" --argjson h "$HEALTH_OK_S" --arg st "$HEALTH_AT_READY" \
        --argjson checks "$HEALTH_DETAIL" \
        --argjson m "$PH_MON" --argjson g "$PH_MGR" --argjson o "$PH_OSDS" --argjson p "$PH_POOL" \
        --argjson ma "$PH_MGR_AVAIL" --argjson ou "$PH_OSDS_UP" \
        '{ready_s:$s, health_ok_s:$h, health_at_ready:$st, health_checks_after:$checks,
          phases_s: {mon_mkfs_and_started: $m, mgr_started: $g, osds_created_and_started: $o,
                     pool_created: $p, mgr_available_seen: $ma, osds_up_and_in_seen: $ou,
                     ready: $s}}'
}

ceph_round() {  # -> $WORK/ceph-rN.json
  local r=$1 d1 d6 t_down1 rss_idle rss_after b4m b4k f4m f4k
  # one OSD, size-1 pool: deploy, idle RSS, benches, teardown
  DIR=$WORK/ceph1-r$r
  log "ceph: deploying 1 OSD in $DIR"
  ceph_deploy 1 1
  d1=$(deploy_json)
  sleep "$IDLE_S"
  rss_idle=$(daemon_rss)
  log "ceph: rados bench 4M / 4K, fio rados 4K / 4M (${BENCH_S}s each)"
  b4m=$(rados_bench 4194304)
  b4k=$(rados_bench 4096)
  f4k=$(fio_bench 4096)
  f4m=$(fio_bench 4194304)
  rss_after=$(daemon_rss)
  ceph_teardown; t_down1=$TEARDOWN_S
  # six OSDs, size-3 pool, deployed in parallel
  DIR=$WORK/ceph6-r$r
  log "ceph: deploying 6 OSDs in $DIR"
  ceph_deploy 6 3
  d6=$(deploy_json)
  sleep "$IDLE_S"
  local rss6; rss6=$(daemon_rss)
  ceph_teardown
  jq -nc --argjson d1 "$d1" --argjson d6 "$d6" --argjson t1 "$t_down1" --argjson t6 "$TEARDOWN_S" \
     --argjson ri "$rss_idle" --argjson ra "$rss_after" --argjson r6 "$rss6" \
     --argjson b4m "$b4m" --argjson b4k "$b4k" --argjson f4k "$f4k" --argjson f4m "$f4m" '{
    deploy_1osd_s: $d1.ready_s, deploy_6osd_s: $d6.ready_s,
    deploy_1osd_health_ok_s: $d1.health_ok_s, deploy_6osd_health_ok_s: $d6.health_ok_s,
    teardown_s: $t6, teardown_1osd_after_bench_s: $t1,
    write_4m: $b4m, write_4k: $b4k, write_4k_fio: $f4k, write_4m_fio: $f4m,
    rss_idle_kib: { osd: $ri["osd.0"], mon: $ri["mon.a"], mgr: $ri["mgr.x"] },
    rss_idle_kib_all_1osd: $ri, rss_after_bench_kib_1osd: $ra, rss_idle_kib_all_6osd: $r6,
    deploy_1osd: $d1, deploy_6osd: $d6 }' >"$WORK/ceph-r$r.json"
}

# ---------------------------------------------------------------- Shoal (spec: bench/ceph/README.md)
SHOAL_SKIP=""
shoal_check() {
  cd "$REPO"
  if [ ! -x "$SHOAL_BIN" ] && [ "$SHOAL_BIN" = "$REPO/target/release/shoal" ]; then
    log "shoal: building (cargo build --release -p shoal)"
    x cargo build --release -p shoal >&2 || { SHOAL_SKIP="cargo build --release -p shoal failed"; return; }
  fi
  [ -x "$SHOAL_BIN" ] || { SHOAL_SKIP="no binary at $SHOAL_BIN"; return; }
  local c
  for c in up down bench; do
    "$SHOAL_BIN" "$c" --help >/dev/null 2>&1 || { SHOAL_SKIP="'shoal $c' not implemented by $SHOAL_BIN"; return; }
  done
}

shoal_pids() {  # PIDs of $DIR's shoal processes: name<TAB>pid
  local f p
  if compgen -G "$DIR/*.pid" >/dev/null; then
    for f in "$DIR"/*.pid; do printf '%s\t%s\n' "$(basename "$f" .pid)" "$(cat "$f")"; done
  else
    for p in $(pgrep -f -- "$DIR" || true); do
      [ "$p" = $$ ] && continue
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | awk -v p="$p" '
        { for (i = 1; i < NF; i++) if ($i ~ /shoal$/ && ($(i+1) == "osd" || $(i+1) == "mon")) { print $(i+1) "." p "\t" p; exit } }'
    done
  fi
}

shoal_rss() {
  local name pid first=1
  printf '{'
  while IFS=$'\t' read -r name pid; do
    [ -n "$pid" ] || continue
    [ $first = 1 ] || printf ','
    first=0
    printf '"%s":%s' "$name" "$(rss_kib "$pid")"
  done < <(shoal_pids)
  printf '}\n'
}

shoal_up() {  # n -> sets READY_S
  local t0; t0=$(now)
  # The same RAM cap per OSD as Ceph's memstore gets here (MEMSTORE_BYTES).
  x "$SHOAL_BIN" up --osds "$1" --backend mem --osd-size "$MEMSTORE_BYTES" --dir "$DIR" >"$WORK/shoal-up.log" 2>&1 || {
    cat "$WORK/shoal-up.log" >&2; return 1; }
  READY_S=$(elapsed "$t0" "$(now)")
  log "shoal $1 OSD(s): up after ${READY_S}s"
}
shoal_down() {
  local t0; t0=$(now)
  x "$SHOAL_BIN" down --dir "$DIR" >/dev/null 2>&1 || log "shoal down failed"
  stop_pids_in "$DIR"
  rm -rf "$DIR"
  TEARDOWN_S=$(elapsed "$t0" "$(now)")
}
shoal_bench() {
  x "$SHOAL_BIN" --conf "$DIR/shoal.toml" bench --pool data --seconds "$BENCH_S" -b "$1" -t 16 write --json \
    2>"$WORK/shoal-bench.err" | jq -c '. + {tool: "shoal bench"}'
}

shoal_round() {  # -> $WORK/shoal-rN.json; called under `if`, so every step checks itself
  local r=$1 d1 d6 t1 rss_idle rss_after b4m b4k rss6
  DIR=$WORK/shoal1-r$r; rm -rf "$DIR"
  log "shoal: up 1 OSD in $DIR"
  shoal_up 1 || return 1; d1=$READY_S
  sleep "$IDLE_S"
  rss_idle=$(shoal_rss) || return 1
  log "shoal: bench 4M / 4K (${BENCH_S}s each)"
  b4m=$(shoal_bench 4194304) && [ -n "$b4m" ] || { cat "$WORK/shoal-bench.err" >&2; return 1; }
  b4k=$(shoal_bench 4096) && [ -n "$b4k" ] || { cat "$WORK/shoal-bench.err" >&2; return 1; }
  rss_after=$(shoal_rss) || return 1
  shoal_down; t1=$TEARDOWN_S
  DIR=$WORK/shoal6-r$r; rm -rf "$DIR"
  log "shoal: up 6 OSDs in $DIR"
  shoal_up 6 || return 1; d6=$READY_S
  sleep "$IDLE_S"
  rss6=$(shoal_rss) || return 1
  shoal_down
  jq -nc --argjson d1 "$d1" --argjson d6 "$d6" --argjson t1 "$t1" --argjson t6 "$TEARDOWN_S" \
     --argjson ri "$rss_idle" --argjson ra "$rss_after" --argjson r6 "$rss6" \
     --argjson b4m "$b4m" --argjson b4k "$b4k" '{
    deploy_1osd_s: $d1, deploy_6osd_s: $d6, teardown_s: $t6, teardown_1osd_after_bench_s: $t1,
    write_4m: $b4m, write_4k: $b4k,
    rss_idle_kib: {
      osd: ([$ri | to_entries[] | select(.key | test("osd")) | .value] | max),
      mon: ([$ri | to_entries[] | select(.key | test("mon")) | .value] | max) },
    rss_idle_kib_all_1osd: $ri, rss_after_bench_kib_1osd: $ra, rss_idle_kib_all_6osd: $r6 }' \
    >"$WORK/shoal-r$r.json"
}

# ---------------------------------------------------------------- main
ensure_packages
# leftovers of a previous run of this script: processes named in its pid files / dirs
if [ -d "$WORK" ]; then
  for d in "$WORK"/*/; do if [ -d "$d" ]; then stop_pids_in "${d%/}"; fi; done
  rm -rf "$WORK"
fi
mkdir -p "$WORK/logs"
: >"$CMDLOG"
DATE=$(date -u +%FT%TZ)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
[ "$ONLY" != ceph ] && shoal_check
[ -n "$SHOAL_SKIP" ] && log "shoal: skipped: $SHOAL_SKIP"

CEPH_ROUNDS=()
SHOAL_ROUNDS=()
for r in $(seq "$ROUNDS"); do
  [ "$r" -gt 1 ] && LOGCMDS=0
  if [ "$ONLY" != shoal ]; then ceph_round "$r"; CEPH_ROUNDS+=("$(cat "$WORK/ceph-r$r.json")"); fi
  if [ "$ONLY" != ceph ] && [ -z "$SHOAL_SKIP" ]; then
    if shoal_round "$r"; then SHOAL_ROUNDS+=("$(cat "$WORK/shoal-r$r.json")"); else
      shoal_down 2>/dev/null || true
      SHOAL_SKIP="a shoal command failed in round $r (see log above)"; fi
  fi
done

# summary of a side: median over rounds of every numeric leaf of its first round
summarize() {
  jq -sc 'def median: sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor]
                               else (.[length/2 - 1] + .[length/2]) / 2 end;
    . as $rs | if length == 0 then null else
    reduce ($rs[0] | paths(numbers)) as $p ($rs[0];
      setpath($p; [$rs[] | getpath($p) | numbers] | median)) end'
}
ceph_json=$(if [ "$ONLY" = shoal ]; then echo '{"skipped":"--only shoal"}'; else
  printf '%s\n' "${CEPH_ROUNDS[@]}" | summarize | jq -c --argjson n "$ROUNDS" \
    --slurpfile rs <(printf '%s\n' "${CEPH_ROUNDS[@]}") '{summary_median: ., rounds: $rs}'; fi)
shoal_json=$(if [ "$ONLY" = ceph ]; then echo '{"skipped":"--only ceph"}';
  elif [ -n "$SHOAL_SKIP" ]; then jq -nc --arg s "$SHOAL_SKIP" '{skipped:$s}'; else
  printf '%s\n' "${SHOAL_ROUNDS[@]}" | summarize | jq -c \
    --slurpfile rs <(printf '%s\n' "${SHOAL_ROUNDS[@]}") '{summary_median: ., rounds: $rs}'; fi)

shoal_commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD 2>/dev/null || shoal_commit="$shoal_commit (+uncommitted changes in the checkout)"
RESULT=$(jq -n --argjson ceph "$ceph_json" --argjson shoal "$shoal_json" \
  --arg date "$DATE" --arg nproc "$(nproc)" --arg mem "$(awk '/MemTotal/{print $2}' /proc/meminfo)" \
  --arg kernel "$(uname -r)" --arg cephv "$(ceph --version 2>/dev/null || echo none)" \
  --arg commit "$shoal_commit" --arg load "$LOAD_BEFORE" --arg loadafter "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --argjson secs "$BENCH_S" --argjson rounds "$ROUNDS" --arg shoalbin "$SHOAL_BIN" \
  --rawfile cmds <(awk '!seen[$0]++' "$CMDLOG") '
  def ratio(a; b): if (a|type) == "number" and (b|type) == "number" and b != 0 then (a / b * 1000 | round) / 1000 else null end;
  ($ceph.summary_median // {}) as $c | ($shoal.summary_median // {}) as $s | {
    date: $date,
    machine: { nproc: ($nproc|tonumber), mem_kib: ($mem|tonumber), kernel: $kernel,
               loadavg_before: $load, loadavg_after: $loadafter,
               note: "2 cores shared with other work (e.g. Rust builds): figures are noisy" },
    versions: { ceph: $cephv, shoal_commit: $commit, shoal_bin: $shoalbin },
    params: { seconds: $secs, rounds: $rounds, threads: 16, ceph_pg_num: 32,
              ceph_pool_size_1osd: 1, ceph_pool_size_6osd: 3, ceph_objectstore: "memstore" },
    ceph: $ceph, shoal: $shoal,
    ratios_note: "throughput: shoal/ceph; times, latencies and RSS: ceph/shoal (so > 1 means Shoal is better)",
    ratios: {
      deploy_1osd: ratio($c.deploy_1osd_s; $s.deploy_1osd_s),
      deploy_6osd: ratio($c.deploy_6osd_s; $s.deploy_6osd_s),
      teardown: ratio($c.teardown_s; $s.teardown_s),
      write_4m_mb_per_s: ratio($s.write_4m.mb_per_s; $c.write_4m.mb_per_s),
      write_4m_ops_per_s: ratio($s.write_4m.ops_per_s; $c.write_4m.ops_per_s),
      write_4m_lat_avg: ratio($c.write_4m.lat_ms_avg; $s.write_4m.lat_ms_avg),
      write_4m_lat_max: ratio($c.write_4m.lat_ms_max; $s.write_4m.lat_ms_max),
      write_4k_ops_per_s: ratio($s.write_4k.ops_per_s; $c.write_4k.ops_per_s),
      write_4k_lat_avg: ratio($c.write_4k.lat_ms_avg; $s.write_4k.lat_ms_avg),
      write_4k_lat_p99_vs_fio: ratio($c.write_4k_fio.clat_ms_p99; $s.write_4k.lat_ms_p99),
      rss_osd: ratio($c.rss_idle_kib.osd; $s.rss_idle_kib.osd),
      rss_mon: ratio($c.rss_idle_kib.mon; $s.rss_idle_kib.mon) },
    commands: ($cmds | split("\n") | map(select(length > 0)))
  }')
[ -n "$OUT" ] && { echo "$RESULT" >"$OUT"; log "wrote $OUT"; }
echo "$RESULT" >"$WORK/result.json"

# ---------------------------------------------------------------- table
echo "$RESULT" | jq -r '
  def mib: if . == null then null else . / 1024 end;
  def f: if . == null then "-" elif type == "number" then (. * 100 | round / 100 | tostring) else tostring end;
  (.ceph.summary_median // {}) as $c | (.shoal.summary_median // {}) as $s | .ratios as $r |
  ["metric", "ceph", "shoal", "ratio (>1: shoal better)"],
  ["deploy 1 OSD (s)", ($c.deploy_1osd_s|f), ($s.deploy_1osd_s|f), ($r.deploy_1osd|f)],
  ["deploy 6 OSDs (s)", ($c.deploy_6osd_s|f), ($s.deploy_6osd_s|f), ($r.deploy_6osd|f)],
  ["teardown 6 OSDs (s)", ($c.teardown_s|f), ($s.teardown_s|f), ($r.teardown|f)],
  ["4M write MB/s", ($c.write_4m.mb_per_s|f), ($s.write_4m.mb_per_s|f), ($r.write_4m_mb_per_s|f)],
  ["4M write IOPS", ($c.write_4m.ops_per_s|f), ($s.write_4m.ops_per_s|f), ($r.write_4m_ops_per_s|f)],
  ["4M lat avg (ms)", ($c.write_4m.lat_ms_avg|f), ($s.write_4m.lat_ms_avg|f), ($r.write_4m_lat_avg|f)],
  ["4M lat max (ms)", ($c.write_4m.lat_ms_max|f), ($s.write_4m.lat_ms_max|f), ($r.write_4m_lat_max|f)],
  ["4K write IOPS", ($c.write_4k.ops_per_s|f), ($s.write_4k.ops_per_s|f), ($r.write_4k_ops_per_s|f)],
  ["4K lat avg (ms)", ($c.write_4k.lat_ms_avg|f), ($s.write_4k.lat_ms_avg|f), ($r.write_4k_lat_avg|f)],
  ["4K lat max (ms)", ($c.write_4k.lat_ms_max|f), ($s.write_4k.lat_ms_max|f), "-"],
  ["4K IOPS (ceph: fio rados)", ($c.write_4k_fio.ops_per_s|f), ($s.write_4k.ops_per_s|f), "-"],
  ["4K p50 (ms; ceph: fio clat)", ($c.write_4k_fio.clat_ms_p50|f), ($s.write_4k.lat_ms_p50|f), "-"],
  ["4K p99 (ms; ceph: fio clat)", ($c.write_4k_fio.clat_ms_p99|f), ($s.write_4k.lat_ms_p99|f), ($r.write_4k_lat_p99_vs_fio|f)],
  ["4M MB/s (ceph: fio rados)", ($c.write_4m_fio.mb_per_s|f), ($s.write_4m.mb_per_s|f), "-"],
  ["idle RSS OSD (MiB)", ($c.rss_idle_kib.osd | mib | f), ($s.rss_idle_kib.osd | mib | f), ($r.rss_osd|f)],
  ["idle RSS mon (MiB)", ($c.rss_idle_kib.mon | mib | f), ($s.rss_idle_kib.mon | mib | f), ($r.rss_mon|f)],
  ["idle RSS mgr (MiB)", ($c.rss_idle_kib.mgr | mib | f), "-", "-"]
  | @tsv' | column -t -s $'\t'
echo "$RESULT" | jq -r '"ceph: \(.versions.ceph); shoal: \(.shoal.skipped // .versions.shoal_commit); \(.machine.nproc) cores, load before \(.machine.loadavg_before)"'
