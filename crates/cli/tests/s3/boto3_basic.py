"""S3 through boto3 at its defaults against a Shoal gateway (driven by crates/cli/tests/s3.rs).

Environment: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY. Exits non-zero on the first failed check,
naming it. Every check states what a real S3 server answers.
"""
import base64
import hashlib
import os
import time
import urllib.error
import urllib.request

import boto3
from s3common import fails
import botocore
from botocore.config import Config

ENDPOINT = os.environ["S3_ENDPOINT"]
ACCESS = os.environ["S3_ACCESS_KEY"]
SECRET = os.environ["S3_SECRET_KEY"]


def client(access=ACCESS, secret=SECRET, **cfg):
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, **cfg),
    )


s3 = client()
print("boto3", boto3.__version__, "botocore", botocore.__version__)

# Buckets.
s3.create_bucket(Bucket="alpha")
s3.create_bucket(Bucket="alpha")  # in us-east-1 an owner's re-creation succeeds and changes nothing
fails("InvalidBucketName", s3.create_bucket, Bucket="Bad_Name")

# botocore sends `Expect: 100-continue` with every upload and takes an answer that comes without a
# `100 Continue` (an empty body's, or a refusal's) as the last word on that connection: the next
# upload on it must still be answered at once, not after its read timeout.
quick = client(read_timeout=10)
started = time.monotonic()
quick.put_object(Bucket="alpha", Key="marker/", Body=b"")
quick.put_object(Bucket="alpha", Key="after-marker", Body=b"data")
fails("MetadataTooLarge", quick.put_object, Bucket="alpha", Key="m", Body=b"x", Metadata={"a": "x" * 2100})
quick.put_object(Bucket="alpha", Key="after-refusal", Body=b"data")
assert quick.get_object(Bucket="alpha", Key="after-refusal")["Body"].read() == b"data"
assert time.monotonic() - started < 10, "uploads after an empty one or a refusal waited"
quick.delete_objects(Bucket="alpha", Delete={"Objects": [{"Key": k} for k in ("marker/", "after-marker", "after-refusal")]})
# Every error document names its Code, Message, Resource and RequestId, refusals made before an
# operation ran (this one: the bucket name) included.
try:
    s3.create_bucket(Bucket="Bad_Name")
except botocore.exceptions.ClientError as e:
    err = e.response["Error"]
    assert err.get("Message") and err.get("Resource") == "/Bad_Name", err
    assert e.response["ResponseMetadata"].get("RequestId"), e.response
else:
    raise AssertionError("an invalid bucket name was accepted")
fails(
    "InvalidLocationConstraint",
    s3.create_bucket,
    Bucket="beta",
    CreateBucketConfiguration={"LocationConstraint": "eu-west-3"},
)
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert names == ["alpha"], names
assert s3.list_buckets()["Owner"]["ID"], "ListBuckets names the owner"
s3.head_bucket(Bucket="alpha")
fails("404", s3.head_bucket, Bucket="nosuchbucket")
fails("NoSuchBucket", s3.list_objects_v2, Bucket="nosuchbucket")

# Small objects, with the CRC32 checksum boto3 sends by default.
body = b"hello shoal\n"
put = s3.put_object(Bucket="alpha", Key="dir/hello.txt", Body=body, ContentType="text/plain",
                    Metadata={"colour": "blue"}, CacheControl="max-age=60")
assert put["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), put["ETag"]
got = s3.get_object(Bucket="alpha", Key="dir/hello.txt")
assert got["Body"].read() == body
assert got["ContentType"] == "text/plain", got["ContentType"]
assert got["Metadata"] == {"colour": "blue"}, got["Metadata"]
assert got["CacheControl"] == "max-age=60"
head = s3.head_object(Bucket="alpha", Key="dir/hello.txt", ChecksumMode="ENABLED")
assert head["ContentLength"] == len(body)
assert head.get("ChecksumCRC32"), f"the stored CRC32 is returned: {head}"
fails("404", s3.head_object, Bucket="alpha", Key="missing")
fails("NoSuchKey", s3.get_object, Bucket="alpha", Key="missing")

# Integrity: a wrong Content-MD5 or checksum is refused and stores nothing.
wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
fails("BadDigest", s3.put_object, Bucket="alpha", Key="bad", Body=b"data", ContentMD5=wrong_md5)
fails("BadDigest", s3.put_object, Bucket="alpha", Key="bad", Body=b"data", ChecksumCRC32="AAAAAA==")
fails("BadDigest", s3.put_object, Bucket="alpha", Key="bad", Body=b"data",
      ChecksumSHA256=base64.b64encode(hashlib.sha256(b"x").digest()).decode())
fails("NoSuchKey", s3.get_object, Bucket="alpha", Key="bad")
s3.put_object(Bucket="alpha", Key="good-sha", Body=b"data",
              ChecksumSHA256=base64.b64encode(hashlib.sha256(b"data").digest()).decode())

# A larger object: a head and two tails (chunks of 4 MiB), read whole and by ranges.
big = os.urandom(9 * 1024 * 1024 + 123)
s3.put_object(Bucket="alpha", Key="big.bin", Body=big)
assert s3.get_object(Bucket="alpha", Key="big.bin")["Body"].read() == big
for start, end in [(0, 0), (4194300, 4194400), (8388600, 9437300), (len(big) - 10, len(big) - 1)]:
    r = s3.get_object(Bucket="alpha", Key="big.bin", Range=f"bytes={start}-{end}")
    assert r["Body"].read() == big[start:end + 1], (start, end)
    assert r["ContentRange"] == f"bytes {start}-{end}/{len(big)}", r["ContentRange"]
r = s3.get_object(Bucket="alpha", Key="big.bin", Range="bytes=-5")
assert r["Body"].read() == big[-5:]
fails("InvalidRange", s3.get_object, Bucket="alpha", Key="big.bin", Range=f"bytes={len(big)}-")

# Conditional reads and writes.
etag = s3.head_object(Bucket="alpha", Key="dir/hello.txt")["ETag"]
fails("412", s3.head_object, Bucket="alpha", Key="dir/hello.txt", IfMatch='"0000"')
e = fails("304", s3.head_object, Bucket="alpha", Key="dir/hello.txt", IfNoneMatch=etag)
assert e.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == etag, "a 304 names the ETag it matched"
s3.put_object(Bucket="alpha", Key="lock", Body=b"v1", IfNoneMatch="*")
fails("PreconditionFailed", s3.put_object, Bucket="alpha", Key="lock", Body=b"v2", IfNoneMatch="*")
lock_etag = s3.head_object(Bucket="alpha", Key="lock")["ETag"]
fails("PreconditionFailed", s3.put_object, Bucket="alpha", Key="lock", Body=b"v2", IfMatch='"abc"')
s3.put_object(Bucket="alpha", Key="lock", Body=b"v2", IfMatch=lock_etag)
assert s3.get_object(Bucket="alpha", Key="lock")["Body"].read() == b"v2"
s3.put_object(Bucket="alpha", Key="lock", Body=b"v3", IfMatch="*")
assert s3.get_object(Bucket="alpha", Key="lock")["Body"].read() == b"v3"
# If-Match on a key with no object is S3's 404 NoSuchKey, not a failed precondition.
fails("NoSuchKey", s3.put_object, Bucket="alpha", Key="no-such-lock", Body=b"v1", IfMatch="*")
fails("NoSuchKey", s3.put_object, Bucket="alpha", Key="no-such-lock", Body=b"v1", IfMatch=lock_etag)
# If-None-Match with an ETag: written unless the current object has that ETag.
v3_etag = s3.head_object(Bucket="alpha", Key="lock")["ETag"]
fails("PreconditionFailed", s3.put_object, Bucket="alpha", Key="lock", Body=b"v4", IfNoneMatch=v3_etag)
s3.put_object(Bucket="alpha", Key="lock", Body=b"v4", IfNoneMatch=lock_etag)
assert s3.get_object(Bucket="alpha", Key="lock")["Body"].read() == b"v4"
s3.put_object(Bucket="alpha", Key="no-such-lock-2", Body=b"v1", IfNoneMatch=lock_etag)
fails("404", s3.head_object, Bucket="alpha", Key="no-such-lock")  # a HEAD error has no body

# Limits: metadata over 2 KiB, a key of 1024 bytes (stored under a hashed name), one longer.
fails("MetadataTooLarge", s3.put_object, Bucket="alpha", Key="m", Body=b"", Metadata={"a": "x" * 2100})
long_key = "k/" + "x" * 1022
s3.put_object(Bucket="alpha", Key=long_key, Body=b"long")
assert s3.get_object(Bucket="alpha", Key=long_key)["Body"].read() == b"long"
fails("KeyTooLongError", s3.put_object, Bucket="alpha", Key="y" * 1025, Body=b"")

# Listings: prefixes, delimiters, pages.
for i in range(25):
    s3.put_object(Bucket="alpha", Key=f"list/{i:03d}", Body=b"")
for i in range(3):
    s3.put_object(Bucket="alpha", Key=f"list/sub{i}/x", Body=b"")
keys, token = [], None
while True:
    kw = {"ContinuationToken": token} if token else {}
    page = s3.list_objects_v2(Bucket="alpha", Prefix="list/", MaxKeys=7, **kw)
    keys += [o["Key"] for o in page.get("Contents", [])]
    if not page["IsTruncated"]:
        break
    token = page["NextContinuationToken"]
assert keys == [f"list/{i:03d}" for i in range(25)] + [f"list/sub{i}/x" for i in range(3)], keys
page = s3.list_objects_v2(Bucket="alpha", Prefix="list/", Delimiter="/")
assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["list/sub0/", "list/sub1/", "list/sub2/"], page
assert len(page["Contents"]) == 25 and "Owner" not in page["Contents"][0]
page = s3.list_objects_v2(Bucket="alpha", Prefix="list/", StartAfter="list/020", FetchOwner=True)
assert page["Contents"][0]["Key"] == "list/021" and page["Contents"][0]["Owner"]["ID"], page["Contents"][0]
top = s3.list_objects_v2(Bucket="alpha", Delimiter="/")
assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["dir/", "k/", "list/"], top.get("CommonPrefixes")
v1 = s3.list_objects(Bucket="alpha", Prefix="list/0", Marker="list/010", MaxKeys=5)
assert [o["Key"] for o in v1["Contents"]] == [f"list/{i:03d}" for i in range(11, 16)], v1["Contents"]
assert v1["IsTruncated"]
# Pages of common prefixes: a marker that is a common prefix resumes after everything under it.
p1 = s3.list_objects(Bucket="alpha", Prefix="list/sub", Delimiter="/", MaxKeys=2)
assert [p["Prefix"] for p in p1["CommonPrefixes"]] == ["list/sub0/", "list/sub1/"] and p1["IsTruncated"], p1
p2 = s3.list_objects(Bucket="alpha", Prefix="list/sub", Delimiter="/", MaxKeys=2, Marker=p1["NextMarker"])
assert [p["Prefix"] for p in p2["CommonPrefixes"]] == ["list/sub2/"] and not p2["IsTruncated"], p2
z = s3.list_objects_v2(Bucket="alpha", MaxKeys=0)
assert not z["IsTruncated"] and "Contents" not in z, z
assert "Delimiter" not in s3.list_objects_v2(Bucket="alpha", Prefix="list/", Delimiter="")

# Deletes, single and batched; a non-empty bucket stays.
fails("BucketNotEmpty", s3.delete_bucket, Bucket="alpha")
s3.delete_object(Bucket="alpha", Key="dir/hello.txt")
s3.delete_object(Bucket="alpha", Key="never-there")
fails("NoSuchKey", s3.get_object, Bucket="alpha", Key="dir/hello.txt")
rest = [o["Key"] for o in s3.list_objects_v2(Bucket="alpha")["Contents"]]
out = s3.delete_objects(Bucket="alpha", Delete={"Objects": [{"Key": k} for k in rest]})
assert len(out["Deleted"]) == len(rest) and not out.get("Errors"), out
assert s3.list_objects_v2(Bucket="alpha")["KeyCount"] == 0

# Authentication: bad secret, unknown key, presigned URLs.
fails("SignatureDoesNotMatch", client(secret="wrong" + SECRET[5:]).list_buckets)
fails("InvalidAccessKeyId", client(access="AKIANOSUCHKEY0000000").list_buckets)
s3.put_object(Bucket="alpha", Key="shared", Body=b"presigned")
url = s3.generate_presigned_url("get_object", Params={"Bucket": "alpha", "Key": "shared"}, ExpiresIn=60)
assert urllib.request.urlopen(url).read() == b"presigned"
v4 = client(signature_version="s3v4")
for signer, too_long in ((s3, 7 * 24 * 3600 + 60), (v4, 7 * 24 * 3600 + 1), (v4, -7)):
    bad = signer.generate_presigned_url("get_object", Params={"Bucket": "alpha", "Key": "shared"}, ExpiresIn=too_long)
    try:
        urllib.request.urlopen(bad)
        raise AssertionError(f"a presigned URL valid for {too_long} s was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.code
        body = e.read()
        assert b"AccessDenied" in body and b"<RequestId>" in body, body
url = s3.generate_presigned_url("get_object", Params={"Bucket": "alpha", "Key": "shared"}, ExpiresIn=1)
time.sleep(2.5)
try:
    urllib.request.urlopen(url)
    raise AssertionError("an expired presigned URL was accepted")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code
    assert b"AccessDenied" in e.read()
try:
    urllib.request.urlopen(f"{ENDPOINT}/alpha/shared")
    raise AssertionError("an anonymous read was accepted")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code

s3.delete_object(Bucket="alpha", Key="shared")

# Multipart: boto3's managed transfer at its defaults (8 MiB threshold and parts).
import io
from boto3.s3.transfer import TransferConfig

big = os.urandom(21 << 20)
s3.upload_fileobj(io.BytesIO(big), "alpha", "big")
head = s3.head_object(Bucket="alpha", Key="big")
assert head["ContentLength"] == len(big) and head["ETag"].endswith('-3"'), head
md5s = b"".join(hashlib.md5(big[i : i + (8 << 20)]).digest() for i in range(0, len(big), 8 << 20))
assert head["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"', head["ETag"]
got = io.BytesIO()
s3.download_fileobj("alpha", "big", got, Config=TransferConfig(multipart_threshold=64 << 20))
assert got.getvalue() == big, "a multipart object reads back whole"
part2 = s3.get_object(Bucket="alpha", Key="big", PartNumber=2)
assert part2["PartsCount"] == 3 and part2["Body"].read() == big[8 << 20 : 16 << 20]
assert s3.head_object(Bucket="alpha", Key="big", PartNumber=3)["ContentLength"] == len(big) - (16 << 20)
fails("InvalidPart", s3.get_object, Bucket="alpha", Key="big", PartNumber=4)
fails("400", s3.head_object, Bucket="alpha", Key="big", PartNumber=4)  # a HEAD error has no body
r = s3.get_object(Bucket="alpha", Key="big", Range=f"bytes={(8 << 20) - 10}-{(8 << 20) + 9}")
assert r["Body"].read() == big[(8 << 20) - 10 : (8 << 20) + 10], "a range across parts"

# Multipart by hand: a re-uploaded part replaces the first, small parts are refused, bad ETags and
# orders are named, ListParts and ListMultipartUploads show what is there, abort forgets it.
up = s3.create_multipart_upload(Bucket="alpha", Key="hand", ContentType="text/x-parts", Metadata={"k": "v"})
uid = up["UploadId"]
p1a = os.urandom(5 << 20)
p1 = os.urandom(5 << 20)
p2 = b"tail end"
s3.upload_part(Bucket="alpha", Key="hand", UploadId=uid, PartNumber=1, Body=p1a)
e1 = s3.upload_part(Bucket="alpha", Key="hand", UploadId=uid, PartNumber=1, Body=p1)["ETag"]
e2 = s3.upload_part(Bucket="alpha", Key="hand", UploadId=uid, PartNumber=2, Body=p2, ChecksumAlgorithm="CRC32")["ETag"]
assert e1 == f'"{hashlib.md5(p1).hexdigest()}"', e1
fails(
    "BadDigest",
    s3.upload_part,
    Bucket="alpha",
    Key="hand",
    UploadId=uid,
    PartNumber=3,
    Body=b"x",
    ChecksumSHA256=base64.b64encode(hashlib.sha256(b"y").digest()).decode(),
)
parts = s3.list_parts(Bucket="alpha", Key="hand", UploadId=uid)["Parts"]
assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [(1, e1, len(p1)), (2, e2, len(p2))], parts
page = s3.list_parts(Bucket="alpha", Key="hand", UploadId=uid, MaxParts=1)
assert page["IsTruncated"] and page["NextPartNumberMarker"] == 1 and len(page["Parts"]) == 1, page
uploads = s3.list_multipart_uploads(Bucket="alpha")["Uploads"]
assert [(u["Key"], u["UploadId"]) for u in uploads] == [("hand", uid)], uploads
fails("InvalidPart", s3.complete_multipart_upload, Bucket="alpha", Key="hand", UploadId=uid,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e2}, {"PartNumber": 2, "ETag": e2}]})
fails("InvalidPartOrder", s3.complete_multipart_upload, Bucket="alpha", Key="hand", UploadId=uid,
      MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]})
fails("InvalidPart", s3.complete_multipart_upload, Bucket="alpha", Key="hand", UploadId=uid,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 3, "ETag": e2}]})
done = s3.complete_multipart_upload(Bucket="alpha", Key="hand", UploadId=uid,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
assert done["ETag"].endswith('-2"'), done
obj = s3.get_object(Bucket="alpha", Key="hand")
assert obj["Body"].read() == p1 + p2 and obj["ContentType"] == "text/x-parts" and obj["Metadata"] == {"k": "v"}
fails("NoSuchUpload", s3.upload_part, Bucket="alpha", Key="hand", UploadId=uid, PartNumber=3, Body=b"late")
again = s3.complete_multipart_upload(Bucket="alpha", Key="hand", UploadId=uid,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
assert again["ETag"] == done["ETag"], "a repeated completion answers with the object it made"
fails("NoSuchUpload", s3.complete_multipart_upload, Bucket="alpha", Key="hand", UploadId="0" * 32,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}]})
small = s3.create_multipart_upload(Bucket="alpha", Key="small")["UploadId"]
es = [s3.upload_part(Bucket="alpha", Key="small", UploadId=small, PartNumber=n, Body=b"tiny")["ETag"] for n in (1, 2)]
fails("EntityTooSmall", s3.complete_multipart_upload, Bucket="alpha", Key="small", UploadId=small,
      MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), es)]})
# A refused completion leaves the upload as it was: it can still be aborted.
s3.abort_multipart_upload(Bucket="alpha", Key="small", UploadId=small)
fails("NoSuchUpload", s3.list_parts, Bucket="alpha", Key="small", UploadId=small)
fails("NoSuchUpload", s3.abort_multipart_upload, Bucket="alpha", Key="small", UploadId=small)
assert not s3.list_multipart_uploads(Bucket="alpha").get("Uploads"), "no upload is left"
# A conditional completion: If-None-Match: * refuses to replace an existing key.
cond = s3.create_multipart_upload(Bucket="alpha", Key="hand")["UploadId"]
ec = s3.upload_part(Bucket="alpha", Key="hand", UploadId=cond, PartNumber=1, Body=b"c")["ETag"]
fails("PreconditionFailed", s3.complete_multipart_upload, Bucket="alpha", Key="hand", UploadId=cond,
      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": ec}]}, IfNoneMatch="*")
assert s3.get_object(Bucket="alpha", Key="hand")["Body"].read() == p1 + p2, "the refused completion changed nothing"
s3.abort_multipart_upload(Bucket="alpha", Key="hand", UploadId=cond)
# Server-side copies: metadata kept or replaced, across buckets, from a multipart source, with
# source conditions; part copies by range.
s3.put_object(Bucket="alpha", Key="src", Body=b"copy me", ContentType="text/bla", Metadata={"m": "1"},
              ChecksumAlgorithm="SHA256")
s3.create_bucket(Bucket="gamma")
lb = s3.list_buckets(MaxBuckets=1)
assert [b["Name"] for b in lb["Buckets"]] == ["alpha"] and lb["ContinuationToken"], lb
lb = s3.list_buckets(MaxBuckets=1, ContinuationToken=lb["ContinuationToken"])
assert [b["Name"] for b in lb["Buckets"]] == ["gamma"] and "ContinuationToken" not in lb, lb
r = s3.copy_object(Bucket="gamma", Key="dst", CopySource={"Bucket": "alpha", "Key": "src"})
assert r["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"copy me").hexdigest()}"', r
assert r["CopyObjectResult"]["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"copy me").digest()).decode()
got = s3.get_object(Bucket="gamma", Key="dst")
assert got["Body"].read() == b"copy me" and got["ContentType"] == "text/bla" and got["Metadata"] == {"m": "1"}, got
s3.copy_object(Bucket="gamma", Key="dst", CopySource="alpha/src", MetadataDirective="REPLACE",
               ContentType="text/new", Metadata={"n": "2"})
got = s3.head_object(Bucket="gamma", Key="dst")
assert got["ContentType"] == "text/new" and got["Metadata"] == {"n": "2"}, got
fails("InvalidRequest", s3.copy_object, Bucket="alpha", Key="src", CopySource="alpha/src")
s3.copy_object(Bucket="alpha", Key="src", CopySource="alpha/src", MetadataDirective="REPLACE", Metadata={"o": "3"})
assert s3.head_object(Bucket="alpha", Key="src")["Metadata"] == {"o": "3"}
fails("NoSuchKey", s3.copy_object, Bucket="gamma", Key="x", CopySource="alpha/none")
fails("NoSuchBucket", s3.copy_object, Bucket="gamma", Key="x", CopySource="nobucket/src")
src_etag = s3.head_object(Bucket="alpha", Key="src")["ETag"]
fails("PreconditionFailed", s3.copy_object, Bucket="gamma", Key="x", CopySource="alpha/src", CopySourceIfMatch='"00"')
fails("PreconditionFailed", s3.copy_object, Bucket="gamma", Key="x", CopySource="alpha/src",
      CopySourceIfNoneMatch=src_etag)
fails("404", s3.head_object, Bucket="gamma", Key="x")
s3.copy_object(Bucket="gamma", Key="x", CopySource="alpha/src", CopySourceIfMatch=src_etag)
s3.copy_object(Bucket="gamma", Key="bigcopy", CopySource="alpha/big")
assert s3.get_object(Bucket="gamma", Key="bigcopy")["Body"].read() == big, "a multipart source copies whole"
fails("InvalidArgument", s3.copy_object, Bucket="gamma", Key="x", CopySource="alpha/src",
      MetadataDirective="SOMETIMES")
pc = s3.create_multipart_upload(Bucket="gamma", Key="parts")["UploadId"]
p1r = s3.upload_part_copy(Bucket="gamma", Key="parts", UploadId=pc, PartNumber=1, CopySource="alpha/big",
                          CopySourceRange=f"bytes=0-{(6 << 20) - 1}")
p2r = s3.upload_part_copy(Bucket="gamma", Key="parts", UploadId=pc, PartNumber=2, CopySource="alpha/src")
fails("InvalidRange", s3.upload_part_copy, Bucket="gamma", Key="parts", UploadId=pc, PartNumber=3,
      CopySource="alpha/src", CopySourceRange="bytes=0-100")
fails("InvalidArgument", s3.upload_part_copy, Bucket="gamma", Key="parts", UploadId=pc, PartNumber=3,
      CopySource="alpha/src", CopySourceRange="bytes=0-1,3-4")
s3.complete_multipart_upload(Bucket="gamma", Key="parts", UploadId=pc, MultipartUpload={"Parts": [
    {"PartNumber": 1, "ETag": p1r["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": p2r["CopyPartResult"]["ETag"]}]})
assert s3.get_object(Bucket="gamma", Key="parts")["Body"].read() == big[: 6 << 20] + b"copy me"
for k in ("dst", "x", "bigcopy", "parts"):
    s3.delete_object(Bucket="gamma", Key=k)
s3.delete_bucket(Bucket="gamma")
s3.delete_object(Bucket="alpha", Key="src")
# An unversioned bucket lists each object as its one version, "null".
versions = s3.list_object_versions(Bucket="alpha")["Versions"]
assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions] == [("big", "null", True), ("hand", "null", True)]
fails("InvalidArgument", s3.delete_object, Bucket="alpha", Key="big", VersionId="not-a-version")
for k in ("big", "hand"):
    s3.delete_object(Bucket="alpha", Key=k)
s3.delete_bucket(Bucket="alpha")
assert s3.list_buckets()["Buckets"] == []
print("boto3 checks passed")
