#!/usr/bin/env python3
"""Turns results/raw.tsv (engine, run, metric, value, unit) into one markdown table."""
import sys
from collections import OrderedDict

ROWS = [
    ("clean_release_build_s", "clean release build, this engine only (s)", 1, 1),
    ("a_batches_per_s", "(a) commits/s, ascending objects", 0, 1),
    ("a_p99", "(a) commit p99, ascending (µs; includes the syncs)", 0, 1),
    ("a_write_amp", "(a) write amp., ascending", 1, 1),
    ("a_write_amp_settled", "(a) write amp. incl. memtable flush, ascending", 1, 1),
    ("a_shuf_batches_per_s", "(a) commits/s, shuffled objects", 0, 1),
    ("a_shuf_write_amp", "(a) write amp., shuffled", 1, 1),
    ("a_shuf_write_amp_settled", "(a) write amp. incl. memtable flush, shuffled", 1, 1),
    ("b_puts_per_s", "(b) synced puts/s, scattered keys", 0, 1),
    ("b_p50", "(b) synced batch p50, scattered (µs)", 0, 1),
    ("b_write_amp", "(b) write amp., scattered", 1, 1),
    ("b_write_amp_settled", "(b) write amp. incl. memtable flush, scattered", 1, 1),
    ("b_clus_puts_per_s", "(b) synced puts/s, clustered keys", 0, 1),
    ("b_clus_p50", "(b) synced batch p50, clustered (µs)", 0, 1),
    ("b_clus_write_amp", "(b) write amp., clustered", 1, 1),
    ("b_clus_write_amp_settled", "(b) write amp. incl. memtable flush, clustered", 1, 1),
    ("c_same_gets_per_s", "(c) gets/s, same handle, `Kv::get` (redb: read txn per get)", 0, 1),
    ("c_same_gets_one_view_per_s", "(c) gets/s, same handle, one snapshot / read txn", 0, 1),
    ("c_settled_gets_per_s", "(c) gets/s, same handle after flush, `Kv::get`", 0, 1),
    ("c_reopen_gets_per_s", "(c) gets/s after reopen, `Kv::get`", 0, 1),
    ("c_reopen_gets_one_view_per_s", "(c) gets/s after reopen, one snapshot / read txn", 0, 1),
    ("d_same_scans_per_s", "(d) scans/s of 100 keys, same handle", 0, 1),
    ("d_settled_scans_per_s", "(d) scans/s, same handle after flush", 0, 1),
    ("d_reopen_scans_per_s", "(d) scans/s, after reopen", 0, 1),
    ("a_reopen_s", "reopen after (a) + flush (ms)", 1, 1000),
    ("b_reopen_s", "reopen after (b), journal replay for fjall (ms)", 1, 1000),
    ("a_disk_bytes", "disk allocated after (a) + flush (MiB)", 1, 1 / 2**20),
    ("b_disk_bytes", "disk allocated after (b), before flush (MiB)", 1, 1 / 2**20),
    ("loadavg_before", "1-min load average before the run", 2, 1),
]

data = {}
cols = OrderedDict()
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) < 4:
        continue
    engine, run, metric, value = f[:4]
    if run == "build":
        for r in ("run1", "run2"):
            data[(engine, r, metric)] = value
        continue
    cols[(engine, run)] = None
    data[(engine, run, metric)] = value

cols = sorted(cols)
print("| measurement | " + " | ".join(f"{e} {r}" for e, r in cols) + " |")
print("|---|" + "---:|" * len(cols))
for key, title, digits, scale in ROWS:
    cells = []
    for e, r in cols:
        v = data.get((e, r, key))
        if v is None:
            cells.append("–")
            continue
        x = float(v) * scale
        cells.append(f"{x:,.{digits}f}" if x < 1e5 or digits else f"{x/1e3:,.0f}k")
    print(f"| {title} | " + " | ".join(cells) + " |")
