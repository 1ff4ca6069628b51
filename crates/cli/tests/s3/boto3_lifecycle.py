"""Bucket lifecycle through boto3 against a Shoal gateway whose lifecycle day lasts
LIFECYCLE_DAY_S seconds (driven by crates/cli/tests/s3.rs): configurations checked, stored and
read back, the x-amz-expiration header, and the background pass expiring current versions
(by prefix, size and tags), noncurrent versions (keeping the newest), lone delete markers and
old multipart uploads, never a version under object lock.

Environment: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, LIFECYCLE_DAY_S. Exits non-zero on the
first failed check.
"""
import datetime
import os
import re
import time

from s3common import client, fails

s3 = client()
DAY_S = float(os.environ["LIFECYCLE_DAY_S"])
# Rules act at most a day and a lifecycle period after they are due; a loaded machine gets more.
PATIENCE_S = 20 * DAY_S + 30


def eventually(what, check):
    """Waits (bounded) until check() is true."""
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {PATIENCE_S} s"
        time.sleep(DAY_S / 4)


def keys(bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def versions(bucket, key):
    r = s3.list_object_versions(Bucket=bucket, Prefix=key)
    return ([v["VersionId"] for v in r.get("Versions", []) if v["Key"] == key],
            [m["VersionId"] for m in r.get("DeleteMarkers", []) if m["Key"] == key])


def lifecycle(bucket, *rules):
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": list(rules)})


# Configurations: checked as S3 checks them, read back as sent.
B = "lc-plain"
s3.create_bucket(Bucket=B)
fails("NoSuchLifecycleConfiguration", s3.get_bucket_lifecycle_configuration, Bucket=B)
assert s3.delete_bucket_lifecycle(Bucket=B)["ResponseMetadata"]["HTTPStatusCode"] == 204
rules = [
    {"ID": "old", "Expiration": {"Days": 1}, "Prefix": "old/", "Status": "Enabled"},
    {"ID": "off", "Expiration": {"Days": 1}, "Prefix": "keep/", "Status": "Disabled"},
    {"ID": "big", "Expiration": {"Days": 1}, "Filter": {"And": {"Prefix": "size/", "ObjectSizeGreaterThan": 100}},
     "Status": "Enabled"},
    {"ID": "tagged", "Expiration": {"Days": 1}, "Filter": {"Tag": {"Key": "temp", "Value": "yes"}},
     "Status": "Enabled"},
    {"ID": "uploads", "Filter": {"Prefix": "mp/"}, "Status": "Enabled",
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
]
bad = {"ID": "x", "Expiration": {"Days": 0}, "Prefix": "", "Status": "Enabled"}
assert fails("InvalidArgument", lifecycle, B, bad)
fails("MalformedXML", lifecycle, B, {**bad, "Expiration": {"Days": 1}, "Status": "enabled"})
fails("InvalidArgument", lifecycle, B, {**bad, "Expiration": {"Days": 1}, "ID": "i" * 256})
fails("InvalidArgument", lifecycle, B, rules[0], {**rules[1], "ID": "old"})
fails("InvalidArgument", lifecycle, B, {**bad, "Expiration": {"Date": datetime.datetime(2030, 1, 1, 5)}})
fails("InvalidStorageClass", lifecycle, B, {**rules[0], "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]})
fails("NoSuchLifecycleConfiguration", s3.get_bucket_lifecycle_configuration, Bucket=B)

# Objects written before the rules count from their own creation.
for k in ["old/a", "old/b", "keep/a", "size/small", "size/big", "plain", "tagged", "mp/x"]:
    s3.put_object(Bucket=B, Key=k, Body=b"x" * (500 if k == "size/big" else 10))
s3.put_object_tagging(Bucket=B, Key="tagged", Tagging={"TagSet": [{"Key": "temp", "Value": "yes"}]})
upload = s3.create_multipart_upload(Bucket=B, Key="mp/upload")["UploadId"]
other_upload = s3.create_multipart_upload(Bucket=B, Key="elsewhere")["UploadId"]
lifecycle(B, *rules)
assert s3.get_bucket_lifecycle_configuration(Bucket=B)["Rules"] == rules

# The expiration header names the rule and a midnight a whole number of real days away.
put = s3.put_object(Bucket=B, Key="old/c", Body=b"c")
header = put["ResponseMetadata"]["HTTPHeaders"]["x-amz-expiration"]
m = re.fullmatch(r'expiry-date="(.+)", rule-id="old"', header)
assert m, header
expiry = datetime.datetime.strptime(m.group(1), "%a, %d %b %Y %H:%M:%S GMT")
assert (expiry.hour, expiry.minute, expiry.second) == (0, 0, 0), header
assert 1 <= (expiry - datetime.datetime.utcnow()).days + 1 <= 2, header
assert "x-amz-expiration" in s3.head_object(Bucket=B, Key="tagged")["ResponseMetadata"]["HTTPHeaders"]
assert "x-amz-expiration" not in s3.head_object(Bucket=B, Key="plain")["ResponseMetadata"]["HTTPHeaders"]

# The background pass: what the rules name goes, the rest stays.
eventually("current versions expire", lambda: keys(B) == ["keep/a", "mp/x", "plain", "size/small"])
eventually("old uploads are aborted",
           lambda: [u["Key"] for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])] == ["elsewhere"])
fails("NoSuchUpload", s3.list_parts, Bucket=B, Key="mp/upload", UploadId=upload)
s3.abort_multipart_upload(Bucket=B, Key="elsewhere", UploadId=other_upload)
s3.delete_bucket_lifecycle(Bucket=B)
fails("NoSuchLifecycleConfiguration", s3.get_bucket_lifecycle_configuration, Bucket=B)

# Versioned: noncurrent versions expire a day after they were replaced, the newest one kept;
# an expired current version is hidden under a delete marker; a lone marker goes.
V = "lc-versioned"
s3.create_bucket(Bucket=V)
s3.put_bucket_versioning(Bucket=V, VersioningConfiguration={"Status": "Enabled"})
made = [s3.put_object(Bucket=V, Key="k", Body=str(i).encode())["VersionId"] for i in range(4)]
s3.put_object(Bucket=V, Key="gone", Body=b"g")
s3.delete_object(Bucket=V, Key="gone")
only_marker = versions(V, "gone")[1]
s3.delete_object(Bucket=V, Key="gone", VersionId=versions(V, "gone")[0][0])
assert versions(V, "gone") == ([], only_marker)
s3.put_object(Bucket=V, Key="cur/x", Body=b"x")
lifecycle(
    V,
    {"ID": "noncurrent", "Filter": {"Prefix": "k"}, "Status": "Enabled",
     "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 1}},
    {"ID": "markers", "Filter": {"Prefix": "gone"}, "Status": "Enabled",
     "Expiration": {"ExpiredObjectDeleteMarker": True}},
    {"ID": "current", "Filter": {"Prefix": "cur/"}, "Status": "Enabled", "Expiration": {"Days": 1}},
)
eventually("noncurrent versions expire", lambda: versions(V, "k") == ([made[3], made[2]], []))
assert s3.get_object(Bucket=V, Key="k")["Body"].read() == b"3"
eventually("a lone delete marker expires", lambda: versions(V, "gone") == ([], []))
eventually("a current version is hidden", lambda: len(versions(V, "cur/x")[1]) == 1)
assert len(versions(V, "cur/x")[0]) == 1, "the expired version stays as a noncurrent one"
fails("NoSuchKey", s3.get_object, Bucket=V, Key="cur/x")

# Object lock: a held version outlives its noncurrent expiration.
L = "lc-locked"
s3.create_bucket(Bucket=L, ObjectLockEnabledForBucket=True)
held = s3.put_object(Bucket=L, Key="k", Body=b"held", ObjectLockLegalHoldStatus="ON")["VersionId"]
free = s3.put_object(Bucket=L, Key="k", Body=b"free")["VersionId"]
s3.put_object(Bucket=L, Key="k", Body=b"newest")
lifecycle(L, {"ID": "n", "Filter": {}, "Status": "Enabled", "NoncurrentVersionExpiration": {"NoncurrentDays": 1}})
eventually("an unheld noncurrent version expires", lambda: free not in versions(L, "k")[0])
assert held in versions(L, "k")[0], "a version under legal hold was expired"
s3.put_object_legal_hold(Bucket=L, Key="k", VersionId=held, LegalHold={"Status": "OFF"})
eventually("a released version expires", lambda: held not in versions(L, "k")[0])

print("boto3 lifecycle checks passed")
