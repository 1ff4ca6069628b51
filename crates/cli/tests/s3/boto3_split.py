"""Online index partition splits through boto3 (driven by crates/cli/tests/s3.rs against a
gateway started with a small --index-split-entries): writers put, overwrite and delete keys
while listers page through the bucket, and every listing must hold every key acknowledged
before it started and not deleted since, in order, without duplicates. A multipart upload and a
versioned bucket live across the splits.

Environment: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY. Exits non-zero on the first failed
check.
"""
import random
import threading

from s3common import client

s3 = client(max_pool_connections=16)

B, V = "splits", "splits-versioned"
WRITERS, KEYS_PER_WRITER = 6, 120
s3.create_bucket(Bucket=B)
s3.create_bucket(Bucket=V)
s3.put_bucket_versioning(Bucket=V, VersioningConfiguration={"Status": "Enabled"})

# An upload started before any split, completed after many.
mp = s3.create_multipart_upload(Bucket=B, Key="m/upload-across-splits")["UploadId"]
part1 = s3.upload_part(Bucket=B, Key="m/upload-across-splits", UploadId=mp, PartNumber=1, Body=b"a" * (5 << 20))

lock = threading.Lock()
present = {}  # key -> body, for keys acknowledged and not deleted
# Keys whose delete has been sent: one may vanish from a listing before its writer hears the
# answer and drops it from `present`, so a listing may miss it without losing anything.
deleting = set()
errors = []


def writer(n):
    rnd = random.Random(n)
    try:
        for i in range(KEYS_PER_WRITER):
            # Keys spread over the whole range, so every partition splits again.
            key = f"{rnd.choice('abcdefghijklmnopqrstuvwxyz')}/{n:02d}-{i:04d}"
            body = f"{key}:{i}".encode()
            s3.put_object(Bucket=B, Key=key, Body=body)
            with lock:
                present[key] = body
            s3.put_object(Bucket=V, Key=f"v{i % 40:02d}", Body=body)
            if i % 7 == 3:
                s3.put_object(Bucket=B, Key=key, Body=body + b"!")
                with lock:
                    present[key] = body + b"!"
            if i % 11 == 5:
                with lock:
                    deleting.add(key)
                s3.delete_object(Bucket=B, Key=key)
                with lock:
                    del present[key]
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(f"writer {n}: {e!r}")


def listing(page_size):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, PaginationConfig={"PageSize": page_size}):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


def lister(stop):
    rounds = 0
    try:
        while not stop.is_set() or rounds < 2:
            with lock:
                before = dict(present)
            keys = listing(random.choice([7, 50, 1000]))
            assert keys == sorted(keys), "a listing is out of order"
            assert len(keys) == len(set(keys)), "a listing repeats keys"
            seen = set(keys)
            with lock:
                still = {k for k in before if k in present and k not in deleting}
            missing = sorted(still - seen)
            assert not missing, f"a listing lost acknowledged keys: {missing[:5]}"
            rounds += 1
    except Exception as e:  # noqa: BLE001
        errors.append(f"lister: {e!r}")


stop = threading.Event()
listers = [threading.Thread(target=lister, args=(stop,)) for _ in range(2)]
writers = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
for t in listers + writers:
    t.start()
for t in writers:
    t.join()
stop.set()
for t in listers:
    t.join()
assert not errors, errors

# The final state, exactly, with every body.
keys = listing(1000)
assert keys == sorted(present), (len(keys), len(present))
for key in random.Random(9).sample(sorted(present), 60):
    assert s3.get_object(Bucket=B, Key=key)["Body"].read() == present[key], key
with_delimiter = s3.list_objects_v2(Bucket=B, Delimiter="/")
assert [p["Prefix"] for p in with_delimiter.get("CommonPrefixes", [])] == sorted({k.split("/")[0] + "/" for k in present})

# The upload is still listed and completes, after the splits.
uploads = s3.list_multipart_uploads(Bucket=B)["Uploads"]
assert [u["UploadId"] for u in uploads] == [mp], uploads
parts = s3.list_parts(Bucket=B, Key="m/upload-across-splits", UploadId=mp)["Parts"]
assert [p["PartNumber"] for p in parts] == [1], parts
part2 = s3.upload_part(Bucket=B, Key="m/upload-across-splits", UploadId=mp, PartNumber=2, Body=b"b" * 100)
s3.complete_multipart_upload(
    Bucket=B,
    Key="m/upload-across-splits",
    UploadId=mp,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part1["ETag"]}, {"PartNumber": 2, "ETag": part2["ETag"]}]},
)
assert s3.head_object(Bucket=B, Key="m/upload-across-splits")["ContentLength"] == (5 << 20) + 100
assert "Uploads" not in s3.list_multipart_uploads(Bucket=B)

# Every version of the versioned bucket, each key's newest first and latest.
versions = []
for page in s3.get_paginator("list_object_versions").paginate(Bucket=V, PaginationConfig={"PageSize": 33}):
    versions.extend(page.get("Versions", []))
assert len(versions) == WRITERS * KEYS_PER_WRITER, len(versions)
by_key = {}
for v in versions:
    by_key.setdefault(v["Key"], []).append(v)
assert sorted(by_key) == [f"v{i:02d}" for i in range(40)]
for key, vs in by_key.items():
    assert [v["IsLatest"] for v in vs] == [True] + [False] * (len(vs) - 1), key
    assert s3.get_object(Bucket=V, Key=key)["VersionId"] == vs[0]["VersionId"], key

# Shrink: nine keys in ten deleted by concurrent deleters while listers check every listing
# and a writer overwrites survivors; the emptied partitions merge under them. An upload started
# before the merges completes after them.
mp2 = s3.create_multipart_upload(Bucket=B, Key="n/upload-across-merges")["UploadId"]
part21 = s3.upload_part(Bucket=B, Key="n/upload-across-merges", UploadId=mp2, PartNumber=1, Body=b"c" * (5 << 20))
keep = sorted(random.Random(5).sample(sorted(present), len(present) // 10))
doomed = sorted(set(present) - set(keep))
random.Random(6).shuffle(doomed)


def deleter(chunk):
    try:
        for key in chunk:
            with lock:
                deleting.add(key)
            s3.delete_object(Bucket=B, Key=key)
            with lock:
                del present[key]
    except Exception as e:  # noqa: BLE001
        errors.append(f"deleter: {e!r}")


def overwriter(stop):
    rnd = random.Random(77)
    try:
        n = 0
        while not stop.is_set():
            key = rnd.choice(keep)
            body = f"{key}:over{n}".encode()
            s3.put_object(Bucket=B, Key=key, Body=body)
            with lock:
                present[key] = body
            n += 1
    except Exception as e:  # noqa: BLE001
        errors.append(f"overwriter: {e!r}")


stop = threading.Event()
listers = [threading.Thread(target=lister, args=(stop,)) for _ in range(2)]
busy = [threading.Thread(target=overwriter, args=(stop,))]
deleters = [threading.Thread(target=deleter, args=(doomed[n::4],)) for n in range(4)]
for t in listers + busy + deleters:
    t.start()
for t in deleters:
    t.join()
stop.set()
for t in listers + busy:
    t.join()
assert not errors, errors
keys = listing(1000)
assert sorted(present) == keep, (len(present), len(keep))
assert keys == sorted(keep + ["m/upload-across-splits"]), sorted(set(keys) ^ set(keep))
for key in keep:
    assert s3.get_object(Bucket=B, Key=key)["Body"].read() == present[key], key
uploads = s3.list_multipart_uploads(Bucket=B)["Uploads"]
assert [u["UploadId"] for u in uploads] == [mp2], uploads
s3.complete_multipart_upload(
    Bucket=B,
    Key="n/upload-across-merges",
    UploadId=mp2,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part21["ETag"]}]},
)
assert s3.head_object(Bucket=B, Key="n/upload-across-merges")["ContentLength"] == 5 << 20

# Emptied and deleted, across all partitions.
for key in list(present) + ["m/upload-across-splits", "n/upload-across-merges"]:
    s3.delete_object(Bucket=B, Key=key)
assert listing(1000) == []
s3.delete_bucket(Bucket=B)
print("boto3 split checks passed")
