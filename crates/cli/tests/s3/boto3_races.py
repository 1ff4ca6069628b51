"""Racing writes and deletes of the same few keys through two gateways (driven by
crates/cli/tests/s3.rs): after every round, each key's index entry (what a listing shows) must
be exactly its head (what HEAD and GET show), and nothing listed may be missing. The completion
step of decision 0014 is what keeps them equal under any interleaving; a writer's completion
reuses the index view it read beside its prepare, so this is the check that the shortcut never
lets an entry fall behind its head.

Environment: S3_ENDPOINT, S3_ENDPOINT2 (another gateway on the same cluster), S3_ACCESS_KEY,
S3_SECRET_KEY. Exits non-zero on the first failed check.
"""
import hashlib
import os
import random
import threading

from botocore.exceptions import ClientError

from s3common import client

gateways = [client(max_pool_connections=8), client(os.environ["S3_ENDPOINT2"], max_pool_connections=8)]
s3 = gateways[0]

B = "races"
s3.create_bucket(Bucket=B)
KEYS = ["hot/a", "hot/b", "hot/c"]
# Short rounds, each ending in a check: a completion that leaves an entry behind its head is
# only visible if no later write of the key fixes it, so every round's last steps must count.
ROUNDS, THREADS, OPS = 36, 6, 2
# Mostly small objects (one RADOS object each); some with tails, so replaced tails go to GC.
LARGE_BYTES = (4 << 20) + 4096
errors = []


def racer(round_no, n):
    rnd = random.Random(round_no * 1000 + n)
    try:
        for i in range(OPS):
            gw = rnd.choice(gateways)
            key = KEYS[round_no % len(KEYS)]
            if rnd.random() < 0.3:
                gw.delete_object(Bucket=B, Key=key)
            else:
                size = LARGE_BYTES if rnd.random() < 0.08 else rnd.randrange(1, 8192)
                # Every body is different, so every write has its own ETag.
                body = (f"{round_no}.{n}.{i}.".encode() * (size // 8 + 1))[:size]
                gw.put_object(Bucket=B, Key=key, Body=body)
    except Exception as e:  # noqa: BLE001 - reported below, with the thread it came from
        errors.append(f"racer {n}: {e!r}")


def head_of(key):
    try:
        h = s3.head_object(Bucket=B, Key=key)
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "Not Found"):
            return None
        raise
    return h["ETag"], h["ContentLength"]


for r in range(ROUNDS):
    threads = [threading.Thread(target=racer, args=(r, n)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    listed = {o["Key"]: (o["ETag"], o["Size"]) for o in s3.list_objects_v2(Bucket=B).get("Contents", [])}
    for key in KEYS:
        head = head_of(key)
        assert listed.get(key) == head, f"round {r}: {key} is listed as {listed.get(key)} but its head is {head}"
        if head is not None:
            body = s3.get_object(Bucket=B, Key=key)["Body"].read()
            assert len(body) == head[1], f"round {r}: {key} read {len(body)} bytes of {head[1]}"
            assert f'"{hashlib.md5(body).hexdigest()}"' == head[0], f"round {r}: {key}'s bytes are not its ETag's"
    assert set(listed) <= set(KEYS), f"round {r}: unexpected keys listed: {sorted(listed)}"

for key in KEYS:
    s3.delete_object(Bucket=B, Key=key)
assert "Contents" not in s3.list_objects_v2(Bucket=B), "keys left after the last deletes"
s3.delete_bucket(Bucket=B)
print("boto3 race checks passed")
