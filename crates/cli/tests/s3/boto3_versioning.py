"""Bucket versioning through boto3 against a Shoal gateway (driven by crates/cli/tests/s3.rs):
versions, delete markers, the null version, suspension, listing versions page by page, copies,
ACLs and tags by version, multipart uploads into versions, concurrent writes, object lock.

Environment: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY. Exits non-zero on the first failed
check.
"""
import datetime
import threading

from s3common import client, fails

s3 = client()


def body(key, version=None):
    kw = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=B, Key=key, **kw)["Body"].read()


def all_versions(prefix=""):
    r = s3.list_object_versions(Bucket=B, Prefix=prefix)
    return r.get("Versions", []), r.get("DeleteMarkers", [])


B = "vers"
s3.create_bucket(Bucket=B)
assert "Status" not in s3.get_bucket_versioning(Bucket=B)

# An object written before versioning is the null version, and stays one.
s3.put_object(Bucket=B, Key="k", Body=b"plain")
assert "VersionId" not in s3.put_object(Bucket=B, Key="plain-only", Body=b"p")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
assert s3.get_bucket_versioning(Bucket=B)["Status"] == "Enabled"
v1 = s3.put_object(Bucket=B, Key="k", Body=b"one")["VersionId"]
v2 = s3.put_object(Bucket=B, Key="k", Body=b"two")["VersionId"]
assert v1 != v2 and "null" not in (v1, v2)
assert body("k") == b"two"
assert body("k", v1) == b"one" and body("k", "null") == b"plain"
head = s3.head_object(Bucket=B, Key="k", VersionId=v1)
assert head["VersionId"] == v1 and head["ContentLength"] == 3
assert s3.get_object(Bucket=B, Key="k")["VersionId"] == v2
versions, markers = all_versions("k")
assert [v["VersionId"] for v in versions if v["Key"] == "k"] == [v2, v1, "null"], versions
assert [v["IsLatest"] for v in versions if v["Key"] == "k"] == [True, False, False]
assert markers == []

# Bad and unknown version ids.
fails("InvalidArgument", s3.get_object, Bucket=B, Key="k", VersionId="not-a-version")
fails("NoSuchVersion", s3.get_object, Bucket=B, Key="k", VersionId="0" * 24)

# A delete adds a marker: the key is gone from listings and GETs, its versions stay.
d = s3.delete_object(Bucket=B, Key="k")
assert d["DeleteMarker"] is True and d["VersionId"] not in (v1, v2)
marker = d["VersionId"]
e = fails("NoSuchKey", s3.get_object, Bucket=B, Key="k")
assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
e = fails("MethodNotAllowed", s3.get_object, Bucket=B, Key="k", VersionId=marker)
assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
assert "k" not in [o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", [])]
versions, markers = all_versions("k")
assert [m["VersionId"] for m in markers] == [marker] and markers[0]["IsLatest"]
assert len([v for v in versions if v["Key"] == "k"]) == 3
# The bucket is not empty while versions or markers remain.
fails("BucketNotEmpty", s3.delete_bucket, Bucket=B)

# Removing the marker brings the newest version back; removing the newest, the one before.
d = s3.delete_object(Bucket=B, Key="k", VersionId=marker)
assert d["DeleteMarker"] is True and d["VersionId"] == marker
assert body("k") == b"two"
s3.delete_object(Bucket=B, Key="k", VersionId=v2)
assert body("k") == b"one"
# Removing a version that is not there succeeds (deletes are idempotent).
s3.delete_object(Bucket=B, Key="k", VersionId=v2)
assert [v["VersionId"] for v in all_versions("k")[0] if v["Key"] == "k"] == [v1, "null"]

# Suspended: writes replace the null version; a delete makes the null version a marker.
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Suspended"})
assert s3.get_bucket_versioning(Bucket=B)["Status"] == "Suspended"
assert "VersionId" not in s3.put_object(Bucket=B, Key="k", Body=b"null-2")
assert body("k") == b"null-2" and body("k", "null") == b"null-2" and body("k", v1) == b"one"
assert [v["VersionId"] for v in all_versions("k")[0] if v["Key"] == "k"] == ["null", v1]
d = s3.delete_object(Bucket=B, Key="k")
assert d["DeleteMarker"] is True and d["VersionId"] == "null"
versions, markers = all_versions("k")
assert [v["VersionId"] for v in versions if v["Key"] == "k"] == [v1]
assert [m["VersionId"] for m in markers] == ["null"]
s3.delete_object(Bucket=B, Key="k", VersionId="null")
assert body("k") == b"one"

# Listing versions page by page: markers resume inside a key's versions.
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
made = {}
for key in ["p/a", "p/b"]:
    made[key] = [s3.put_object(Bucket=B, Key=key, Body=f"{key}-{i}".encode())["VersionId"] for i in range(3)]
seen, kw = [], {}
while True:
    r = s3.list_object_versions(Bucket=B, Prefix="p/", MaxKeys=2, **kw)
    seen += [(v["Key"], v["VersionId"], v["IsLatest"]) for v in r.get("Versions", [])]
    if not r["IsTruncated"]:
        break
    kw = {"KeyMarker": r["NextKeyMarker"], "VersionIdMarker": r["NextVersionIdMarker"]}
expected = []
for key in ["p/a", "p/b"]:
    expected += [(key, v, i == 0) for i, v in enumerate(reversed(made[key]))]
assert seen == expected, (seen, expected)
r = s3.list_object_versions(Bucket=B, Delimiter="/")
assert [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["p/"]

# Copies from a version; a copy into a versioned bucket is a new version.
c = s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "p/a", "VersionId": made["p/a"][0]})
assert c["CopySourceVersionId"] == made["p/a"][0] and c["VersionId"]
assert body("copy") == b"p/a-0"

# ACLs and tags by version.
old = made["p/b"][0]
s3.put_object_acl(Bucket=B, Key="p/b", VersionId=old, ACL="public-read")
grants = s3.get_object_acl(Bucket=B, Key="p/b", VersionId=old)["Grants"]
assert any(g["Grantee"].get("URI", "").endswith("AllUsers") for g in grants)
assert not any(g["Grantee"].get("URI", "").endswith("AllUsers") for g in s3.get_object_acl(Bucket=B, Key="p/b")["Grants"])
s3.put_object_tagging(Bucket=B, Key="p/b", VersionId=old, Tagging={"TagSet": [{"Key": "t", "Value": "v"}]})
assert s3.get_object_tagging(Bucket=B, Key="p/b", VersionId=old)["TagSet"] == [{"Key": "t", "Value": "v"}]
assert s3.get_object_tagging(Bucket=B, Key="p/b")["TagSet"] == []

# A multipart upload completes into a new version.
up = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
parts = []
for n, data in [(1, b"a" * (5 << 20)), (2, b"tail")]:
    etag = s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=n, Body=data)["ETag"]
    parts.append({"PartNumber": n, "ETag": etag})
done = s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
assert done["VersionId"]
got = s3.get_object(Bucket=B, Key="mp", VersionId=done["VersionId"])
assert got["ContentLength"] == (5 << 20) + 4 and got["Body"].read()[-4:] == b"tail"

# Conditional writes judge the current version.
fails("PreconditionFailed", s3.put_object, Bucket=B, Key="mp", Body=b"x", IfNoneMatch="*")
s3.put_object(Bucket=B, Key="fresh", Body=b"x", IfNoneMatch="*")

# Concurrent writes of one key: every one is a version, one of them the current.
ids, lock = [], threading.Lock()


def write(i):
    v = s3.put_object(Bucket=B, Key="hot", Body=f"w{i}".encode())["VersionId"]
    with lock:
        ids.append(v)


threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
listed = [v for v in all_versions("hot")[0] if v["Key"] == "hot"]
assert sorted(v["VersionId"] for v in listed) == sorted(ids) and len(set(ids)) == 8
assert listed[0]["IsLatest"] and s3.get_object(Bucket=B, Key="hot")["VersionId"] == listed[0]["VersionId"]

# Multi-object delete by version, then of what is left; the bucket then deletes.
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "hot", "VersionId": v} for v in ids]})
assert len(r["Deleted"]) == 8 and not r.get("Errors")
assert [v for v in all_versions("hot")[0] if v["Key"] == "hot"] == []
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "gone-before"}]})
assert r["Deleted"][0]["DeleteMarker"] and r["Deleted"][0]["DeleteMarkerVersionId"]
versions, markers = all_versions()
everything = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions + markers]
r = s3.delete_objects(Bucket=B, Delete={"Objects": everything})
assert not r.get("Errors"), r
assert all_versions() == ([], [])
s3.delete_bucket(Bucket=B)

# Object lock: a bucket created with it versions; its default retention protects new versions
# from deletion by id (governance yields to a bypass); a legal hold holds whatever the bypass.

L = "locked"
s3.create_bucket(Bucket=L, ObjectLockEnabledForBucket=True)
assert s3.get_bucket_versioning(Bucket=L)["Status"] == "Enabled"
fails("InvalidBucketState", s3.put_bucket_versioning, Bucket=L, VersioningConfiguration={"Status": "Suspended"})
conf = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
s3.put_object_lock_configuration(Bucket=L, ObjectLockConfiguration=conf)
assert s3.get_object_lock_configuration(Bucket=L)["ObjectLockConfiguration"] == conf
bad = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 0}}}
fails("InvalidRetentionPeriod", s3.put_object_lock_configuration, Bucket=L, ObjectLockConfiguration=bad)
v = s3.put_object(Bucket=L, Key="k", Body=b"kept")["VersionId"]
head = s3.head_object(Bucket=L, Key="k")
assert head["ObjectLockMode"] == "GOVERNANCE" and head["ObjectLockRetainUntilDate"] > datetime.datetime.now(datetime.timezone.utc)
fails("AccessDenied", s3.delete_object, Bucket=L, Key="k", VersionId=v)
later = head["ObjectLockRetainUntilDate"] + datetime.timedelta(days=1)
s3.put_object_retention(Bucket=L, Key="k", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later})
sooner = {"Mode": "GOVERNANCE", "RetainUntilDate": later - datetime.timedelta(days=1, hours=1)}
fails("AccessDenied", s3.put_object_retention, Bucket=L, Key="k", Retention=sooner)
s3.put_object_legal_hold(Bucket=L, Key="k", LegalHold={"Status": "ON"})
assert s3.get_object_legal_hold(Bucket=L, Key="k")["LegalHold"]["Status"] == "ON"
fails("AccessDenied", s3.delete_object, Bucket=L, Key="k", VersionId=v, BypassGovernanceRetention=True)
s3.put_object_legal_hold(Bucket=L, Key="k", LegalHold={"Status": "OFF"})
marker = s3.delete_object(Bucket=L, Key="k")["VersionId"]  # a marker removes nothing: allowed
s3.delete_object(Bucket=L, Key="k", VersionId=marker)
s3.delete_object(Bucket=L, Key="k", VersionId=v, BypassGovernanceRetention=True)
s3.delete_bucket(Bucket=L)
s3.create_bucket(Bucket="lockless")
s3.put_object(Bucket="lockless", Key="x", Body=b"x")
fails("InvalidRequest", s3.get_object_retention, Bucket="lockless", Key="x")
fails("ObjectLockConfigurationNotFoundError", s3.get_object_lock_configuration, Bucket="lockless")
fails("InvalidBucketState", s3.put_object_lock_configuration, Bucket="lockless", ObjectLockConfiguration=conf)
s3.delete_object(Bucket="lockless", Key="x")
s3.delete_bucket(Bucket="lockless")

print("boto3 versioning checks passed")
