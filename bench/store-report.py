#!/usr/bin/env python3
"""Renders a `shoal store bench --json-out FILE` document as the Markdown tables of
docs/BENCHMARKS.md. Usage: bench/store-report.py FILE.json"""
import json
import sys

r = json.load(open(sys.argv[1]))


def cell(backend, mode, op, bs):
    for c in r["results"]:
        if (c["backend"], c["mode"], c["op"], c["block_size"]) == (backend, mode, op, bs):
            return c
    return None


def raw(mode, op, bs):
    for c in r["raw"]:
        if (c["mode"], c["op"], c["block_size"]) == (mode, op, bs):
            return c
    return None


def paired(mode, op, bs):
    for p in r["paired"]:
        if (p["mode"], p["op"], p["block_size"]) == (mode, op, bs):
            return p
    return None


def size(bs):
    return f"{bs >> 20} MiB" if bs >= 1 << 20 else f"{bs >> 10} KiB"


def fmt(v, spec=".1f"):
    return "–" if v is None else format(v, spec)


backends = [b for b in ("block", "posix", "mem") if b in r["config"]["backends"]]
for op in ("write", "read", "overwrite", "reread"):
    print(f"\n**{op}** (MB/s; for writes, device bytes per user byte in parentheses; block p99 latency in µs)\n")
    head = "| mode | size | raw | " + " | ".join(backends) + " | block p99 µs | block/raw | block/posix |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for mode in r["config"]["modes"]:
        for bs in r["config"]["block_sizes"]:
            rw = raw(mode, op, bs)
            cols = []
            for b in backends:
                c = cell(b, mode, op, bs)
                if c is None:
                    cols.append("–")
                elif op in ("write", "overwrite"):
                    cols.append(f"{c['mb_per_s']:.1f} ({c['device_bytes_per_user_byte']:.2f})")
                else:
                    cols.append(f"{c['mb_per_s']:.1f}")
            p = paired(mode, op, bs) or {}
            blk = cell("block", mode, op, bs)
            print(
                f"| {mode} | {size(bs)} | {fmt(rw and rw['mb_per_s'])} | " + " | ".join(cols)
                + f" | {fmt(blk and blk['lat_us_p99'], '.0f')} | **{fmt(p.get('block_vs_raw'), '.2f')}** | **{fmt(p.get('block_vs_posix'), '.2f')}** |"
            )
print("\nPeak resident memory:", ", ".join(f"{m['backend']} {m['peak_rss_bytes'] / 2**20:.1f} MiB" for m in r["memory"]))
