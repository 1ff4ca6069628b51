#!/usr/bin/python3
"""A client latency probe for Ceph, the counterpart of `shoal bench write -t 1`.

Writes new objects of --bytes (whole-object writes, one in flight) to --pool until --seconds
pass or SIGINT/SIGTERM arrives, then prints one JSON object: ops, errors and latency
percentiles in milliseconds. Run by bench/recovery-ceph.sh; needs python3-rados (Debian's
/usr/bin/python3).
"""
import argparse
import json
import signal
import sys
import time

import rados


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--conf", required=True)
    ap.add_argument("--pool", required=True)
    ap.add_argument("--prefix", required=True, help="object names: PREFIX and a number")
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=3600.0)
    args = ap.parse_args()

    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    cluster = rados.Rados(conffile=args.conf)
    cluster.connect(timeout=30)
    ioctx = cluster.open_ioctx(args.pool)
    payload = bytes((i * 131 + 7) % 256 for i in range(args.bytes))
    lat_us = []
    errors = 0
    first_error = None
    started = time.monotonic()
    deadline = started + args.seconds
    i = 0
    # Bounded by the deadline; a signal ends it sooner.
    while not stop and time.monotonic() < deadline:
        t = time.monotonic()
        try:
            ioctx.write_full(f"{args.prefix}{i}", payload)
            lat_us.append((time.monotonic() - t) * 1e6)
        except rados.Error as e:
            errors += 1
            first_error = first_error or str(e)
        i += 1
    secs = time.monotonic() - started
    ioctx.close()
    cluster.shutdown()

    lat_us.sort()

    def pct(q):
        if not lat_us:
            return 0.0
        return lat_us[min(len(lat_us) - 1, int(q * len(lat_us)))] / 1000.0

    print(json.dumps({
        "tool": "bench/ceph/probe.py (librados write_full, 1 in flight)",
        "block_size": args.bytes,
        "seconds": secs,
        "ops": len(lat_us),
        "ops_per_s": len(lat_us) / secs if secs > 0 else 0.0,
        "lat_ms_avg": (sum(lat_us) / len(lat_us) / 1000.0) if lat_us else 0.0,
        "lat_ms_p50": pct(0.50),
        "lat_ms_p99": pct(0.99),
        "lat_ms_max": (lat_us[-1] / 1000.0) if lat_us else 0.0,
        "errors": errors,
        "first_error": first_error,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
