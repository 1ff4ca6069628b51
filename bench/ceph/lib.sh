# Shared by the benchmarks that run real Ceph 16.2 beside Shoal (bench/compare-ceph.sh,
# bench/recovery-ceph.sh): logging, process and port helpers, package installation, and a
# one-monitor Ceph cluster deployed the DisTRaC way (no SSH, no cephadm).
#
# The sourcing script sets: WORK (its work dir), HERE (bench/), REPO, SHOAL_BIN, OUT, PG_NUM, MEMSTORE_BYTES,
# HEALTHY_TIMEOUT_S, HEALTH_OK_EXTRA_S; and, per cluster, DIR. CEPH_OBJECTSTORE picks the OSDs' store:
# memstore (default: RAM) or bluestore on a file of BLUESTORE_BLOCK_BYTES in each OSD's dir.
# Checks and paths both scripts need (they source this right after parsing their arguments).
case $SHOAL_BIN in /*) ;; *) SHOAL_BIN=$REPO/$SHOAL_BIN ;; esac
case $OUT in ""|/*) ;; *) OUT=$PWD/$OUT ;; esac
[ "$(id -u)" = 0 ] || { echo "run as root (apt-get, ceph daemons)" >&2; exit 2; }
case $WORK in /?*) ;; *) echo "--workdir must be an absolute path" >&2; exit 2 ;; esac
CEPH_OBJECTSTORE=${CEPH_OBJECTSTORE:-memstore}
BLUESTORE_BLOCK_BYTES=${BLUESTORE_BLOCK_BYTES:-$((16 << 30))}

# ---------------------------------------------------------------- helpers
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
CMDLOG=$WORK/commands.log
# run a command and record it (first round only) in the "commands" list of the JSON
LOGCMDS=1
x() { [ "$LOGCMDS" = 1 ] && { printf '%q ' "$@"; echo; } >>"$CMDLOG"; "$@"; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null || echo null; }
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# Stop every process listed in DIR/pids/*.pid (SIGTERM, then SIGKILL after 15 s), plus any
# ceph/shoal/fio/rados process whose command line names DIR (e.g. a half-finished mkfs).
stop_pids_in() {
  local dir=$1 pids="" p f comm
  for f in "$dir"/pids/*.pid; do [ -e "$f" ] && pids="$pids $(cat "$f")"; done
  for p in $(pgrep -f -- "$dir" || true); do
    comm=$(cat "/proc/$p/comm" 2>/dev/null || true)
    case $comm in ceph-*|shoal*|fio|rados|ceph|monmaptool) pids="$pids $p" ;; esac
  done
  for p in $pids; do
    # only ever signal a process whose command line names our dir
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$dir" && kill -TERM "$p" 2>/dev/null || true
  done
  local deadline=$(( $(date +%s) + 15 ))
  for p in $pids; do
    while alive "$p" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.05; done
    alive "$p" && kill -KILL "$p" 2>/dev/null || true
  done
  for p in $pids; do while alive "$p"; do sleep 0.05; done; done
}

# Free TCP port range [base, base+len) on 127.0.0.1, chosen at random in 20000-59999.
free_range() {
  local len=$1 base used
  used=$(ss -Htan | awk '{print $4}' | sed 's/.*://' | sort -un)
  for _ in $(seq 200); do
    base=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if ! echo "$used" | awk -v lo="$base" -v hi=$((base + len)) '$1>=lo && $1<hi {f=1} END{exit !f}'; then
      echo "$base"; return 0
    fi
  done
  echo "no free port range" >&2; return 1
}

# Stops and removes a cluster directory (Ceph's or Shoal's) at exit; after a failure (rc != 0)
# its daemons' logs are kept in $WORK/logs first.
remove_cluster() {  # rc dir
  local rc=$1 d=$2
  [ -d "$d" ] || return 0
  if [ "$rc" != 0 ]; then
    cp -r "$d/log" "$WORK/logs/$(basename "$d")-daemon-logs" 2>/dev/null || true
    cp "$d"/*.log "$WORK/logs/" 2>/dev/null || true
  fi
  if [ -f "$d/shoal.toml" ] && [ -x "$SHOAL_BIN" ]; then
    timeout 30 "$SHOAL_BIN" down --dir "$d" >/dev/null 2>&1 || true
  fi
  stop_pids_in "$d"
  rm -rf "$d"
}

# The exit trap of a side-by-side run: removes every cluster directory named (globs expanded
# when the trap runs; names that are not directories are skipped) as `remove_cluster` does,
# keeping logs after a failure, and exits with the run's status. Set it with
#   trap 'remove_clusters_and_exit "$WORK"/ceph "$WORK"/shoal' EXIT; trap 'exit 130' INT TERM
remove_clusters_and_exit() {  # dir...
  local rc=$? d
  trap - EXIT
  for d in "$@"; do remove_cluster "$rc" "${d%/}"; done
  exit "$rc"
}

# ---------------------------------------------------------------- setup
ensure_packages() {  # [extra packages...]
  local need=() p
  for p in ceph-mon ceph-osd ceph-mgr ceph-common fio jq procps uuid-runtime iproute2 gawk "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

# ---------------------------------------------------------------- Ceph
C() { x ceph --conf "$CONF" --connect-timeout 30 "$@"; }

start_daemon() {  # name cmd... : a foreground daemon, PID in $DIR/pids/NAME.pid
  local name=$1; shift
  [ "$LOGCMDS" = 1 ] && { printf '%q ' "$@"; echo '&'; } >>"$CMDLOG"
  "$@" >>"$DIR/log/$name.stdout" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
}

ceph_osd_create() {  # one OSD, as DisTRaC does it: osd new, keyring, mkfs, start
  local uuid secret id
  uuid=$(uuidgen)
  secret=$(ceph-authtool --gen-print-key)
  id=$(echo "{\"cephx_secret\": \"$secret\"}" | C osd new "$uuid" -i -)
  mkdir -p "$DIR/osd.$id"
  x ceph-authtool --create-keyring "$DIR/osd.$id/keyring" --name "osd.$id" --add-key "$secret" >/dev/null
  x ceph-osd --conf "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" >>"$DIR/log/osd.$id.mkfs" 2>&1
  start_daemon "osd.$id" ceph-osd --conf "$CONF" -i "$id" -f
}

# Deploy an N-OSD cluster in $DIR and wait until it is "ready": all N OSDs up and in, the
# pool `bench` exists and every PG the manager reports is active+clean. Sets READY_S,
# HEALTH_OK_S (or null) and HEALTH_AT_READY.
ceph_deploy() {
  local n=$1 pool_size=$2 t0 fsid base st ready="" hok=null deadline
  t0=$(now)
  mkdir -p "$DIR"/{run,log,crash,pids,mon.a,mgr.x}
  CONF=$DIR/ceph.conf
  fsid=$(uuidgen)
  base=$(free_range 400)
  sed -e "s|@DIR@|$DIR|g" -e "s|@FSID@|$fsid|" -e "s|@MON_V2@|$base|" -e "s|@MON_V1@|$((base + 1))|" \
      -e "s|@PORT_MIN@|$((base + 2))|" -e "s|@PORT_MAX@|$((base + 399))|" \
      -e "s|@POOL_SIZE@|$pool_size|" -e "s|@MEMSTORE_BYTES@|$MEMSTORE_BYTES|" \
      -e "s|@OBJECTSTORE@|$CEPH_OBJECTSTORE|" -e "s|@BLUESTORE_BLOCK_BYTES@|$BLUESTORE_BLOCK_BYTES|" \
      "$HERE/ceph/ceph.conf.in" >"$CONF"
  # monitor: keyrings, monmap, mkfs, start
  x ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  x ceph-authtool --create-keyring "$DIR/ceph.client.admin.keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  x ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/ceph.client.admin.keyring" >/dev/null
  x monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]" \
    "$DIR/monmap" >/dev/null
  x ceph-mon --conf "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" \
    >>"$DIR/log/mon.a.mkfs" 2>&1
  start_daemon mon.a ceph-mon --conf "$CONF" -i a -f
  PH_MON=$(elapsed "$t0" "$(now)")
  # manager (needed for PG stats, and any real deploy runs one)
  C auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
    -o "$DIR/mgr.x/keyring" >/dev/null
  start_daemon mgr.x ceph-mgr --conf "$CONF" -i x -f
  PH_MGR=$(elapsed "$t0" "$(now)")
  # OSDs, in parallel
  local pids=() i
  for i in $(seq "$n"); do ceph_osd_create & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i"; done
  PH_OSDS=$(elapsed "$t0" "$(now)")
  C osd pool create bench "$PG_NUM" "$PG_NUM" replicated --size "$pool_size" >/dev/null 2>&1
  C osd pool application enable bench rados >/dev/null 2>&1
  PH_POOL=$(elapsed "$t0" "$(now)")
  # wait for ready, then (briefly) for HEALTH_OK; note on the way when the manager became
  # available and when all OSDs were up and in (each poll is one `ceph -s`, ~0.3 s)
  deadline=$(( $(date +%s) + HEALTHY_TIMEOUT_S ))
  PH_MGR_AVAIL=null PH_OSDS_UP=null
  local ok health osds_ok mgr_ok
  while :; do
    if st=$(C -s --format json 2>/dev/null | jq -r --argjson n "$n" --argjson pg "$PG_NUM" '
        (.osdmap.osdmap // .osdmap) as $o
        | ($o.num_osds == $n and $o.num_up_osds == $n and $o.num_in_osds == $n) as $osds
        | [ ($osds and .pgmap.num_pgs >= $pg
             and ([.pgmap.pgs_by_state[]? | select(.state_name == "active+clean") | .count] | add // 0)
                 == .pgmap.num_pgs),
            .health.status, $osds, (.mgrmap.available // false) ] | @tsv'); then
      IFS=$'\t' read -r ok health osds_ok mgr_ok <<<"$st"
      [ "$PH_MGR_AVAIL" = null ] && [ "$mgr_ok" = true ] && PH_MGR_AVAIL=$(elapsed "$t0" "$(now)")
      [ "$PH_OSDS_UP" = null ] && [ "$osds_ok" = true ] && PH_OSDS_UP=$(elapsed "$t0" "$(now)")
      if [ -z "$ready" ] && [ "$ok" = true ]; then
        ready=$(elapsed "$t0" "$(now)")
        HEALTH_AT_READY=$health
        deadline=$(( $(date +%s) + HEALTH_OK_EXTRA_S ))
        log "ceph $n OSD(s): ready after ${ready}s ($HEALTH_AT_READY)"
      fi
      if [ -n "$ready" ] && [ "$health" = HEALTH_OK ]; then hok=$(elapsed "$t0" "$(now)"); break; fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      [ -n "$ready" ] && break
      log "ceph $n OSD(s): not ready after ${HEALTHY_TIMEOUT_S}s"; C -s >&2 || true; return 1
    fi
    sleep 0.2
  done
  READY_S=$ready HEALTH_OK_S=$hok
  HEALTH_DETAIL=$(C health detail --format json 2>/dev/null | jq -c '[.checks // {} | keys[]]' || echo null)
}

ceph_teardown() {  # sets TEARDOWN_S
  local t0; t0=$(now)
  stop_pids_in "$DIR"
  rm -rf "$DIR"
  TEARDOWN_S=$(elapsed "$t0" "$(now)")
}
