"""POST object (browser-form uploads) against a Shoal gateway (driven by crates/cli/tests/s3.rs):
boto3's presigned POST (SigV4 policies) sent with urllib3, as a browser would send the form;
policy conditions, content-length-range enforced while the file streams, signatures, expiry,
anonymous forms, success_action_status and _redirect, checksum fields, and a large file.

Environment: S3_ENDPOINT; S3_ACCESS_KEY / S3_SECRET_KEY. Exits non-zero on the first failed check.
"""
import base64
import hashlib
import hmac
import json
import os
import re

import urllib3
from s3common import client, fails

s3 = client()
http = urllib3.PoolManager(retries=False)
ENDPOINT = os.environ["S3_ENDPOINT"]


def post(bucket, fields, data, filename="upload.bin"):
    """Sends a form upload with `fields` (in order) and the file last, as browsers do."""
    form = list(fields.items()) + [("file", (filename, data, "application/octet-stream"))]
    return http.request("POST", f"{ENDPOINT}/{bucket}", fields=form, redirect=False)


def code_of(r):
    m = re.search(rb"<Code>([^<]+)</Code>", r.data)
    return m.group(1).decode() if m else None


def refused(r, status, code):
    assert r.status == status and code_of(r) == code, f"expected {status} {code}, got {r.status}: {r.data[:300]}"
    assert re.search(rb"<RequestId>[^<]+</RequestId>", r.data), r.data
    assert r.headers.get("x-amz-request-id"), "no request id header"


def sigv2_form(policy_doc, key=os.environ["S3_ACCESS_KEY"], secret=os.environ["S3_SECRET_KEY"]):
    policy = base64.b64encode(json.dumps(policy_doc).encode()).decode()
    sig = base64.b64encode(hmac.new(secret.encode(), policy.encode(), hashlib.sha1).digest()).decode()
    return {"AWSAccessKeyId": key, "policy": policy, "signature": sig}


def absent(bucket, key):
    fails("404", s3.head_object, Bucket=bucket, Key=key)


s3.create_bucket(Bucket="forms")

# boto3's presigned POST (SigV4): the object arrives with its metadata and content type.
data = os.urandom(700)
pp = s3.generate_presigned_post(
    "forms",
    "up/${filename}",
    Fields={"x-amz-meta-color": "blue", "Content-Type": "text/plain"},
    Conditions=[["starts-with", "$key", "up/"], ["content-length-range", 1, 1024],
                {"x-amz-meta-color": "blue"}, ["starts-with", "$Content-Type", "text/"]],
    ExpiresIn=600,
)
r = post("forms", pp["fields"], data, filename="photo.jpg")
assert r.status == 204, (r.status, r.data)
assert r.headers["ETag"] == '"%s"' % hashlib.md5(data).hexdigest(), r.headers
got = s3.get_object(Bucket="forms", Key="up/photo.jpg")
assert got["Body"].read() == data
assert got["Metadata"] == {"color": "blue"} and got["ContentType"] == "text/plain", got

# content-length-range is enforced while the file streams: nothing becomes visible.
pp_small = s3.generate_presigned_post("forms", "up/big", Conditions=[["content-length-range", 10, 100]])
refused(post("forms", pp_small["fields"], b"x" * 101), 400, "EntityTooLarge")
absent("forms", "up/big")
refused(post("forms", pp_small["fields"], b"x" * 9), 400, "EntityTooSmall")
absent("forms", "up/big")
assert post("forms", pp_small["fields"], b"x" * 100).status == 204

# A policy changed after signing, a wrong secret, an unknown key: refused by their S3 names.
bad = dict(pp["fields"])
bad["policy"] = base64.b64encode(base64.b64decode(bad["policy"]).replace(b"up/", b"xx/")).decode()
refused(post("forms", bad, data), 403, "SignatureDoesNotMatch")
doc = {"expiration": "2100-01-01T00:00:00Z", "conditions": [{"bucket": "forms"}, ["starts-with", "$key", ""]]}
refused(post("forms", {"key": "k", **sigv2_form(doc, secret="wrong")}, b"d"), 403, "SignatureDoesNotMatch")
refused(post("forms", {"key": "k", **sigv2_form(doc, key="NOSUCHKEY0000000000")}, b"d"), 403, "InvalidAccessKeyId")
assert post("forms", {"key": "v2/k", **sigv2_form(doc)}, b"v2").status == 204

# The policy's own rules: expiry, every condition, every field named, a well-formed document.
expired = dict(doc, expiration="2001-01-01T00:00:00Z")
refused(post("forms", {"key": "k", **sigv2_form(expired)}, b"d"), 403, "AccessDenied")
refused(post("forms", {"key": "k", "x-amz-meta-extra": "1", **sigv2_form(doc)}, b"d"), 403, "AccessDenied")
assert post("forms", {"key": "k", "x-ignore-me": "1", **sigv2_form(doc)}, b"d").status == 204
wrong_bucket = dict(doc, conditions=[{"bucket": "other"}])
refused(post("forms", {"key": "k", **sigv2_form(wrong_bucket)}, b"d"), 403, "AccessDenied")
refused(post("forms", {"key": "k", "bucket": "other", **sigv2_form(doc)}, b"d"), 403, "AccessDenied")
refused(post("forms", {"key": "k", **sigv2_form(dict(doc, expiration="2100-01-01 00:00:00"))}, b"d"), 400,
        "InvalidPolicyDocument")
refused(post("forms", {"key": "k", "AWSAccessKeyId": "x", "policy": sigv2_form(doc)["policy"]}, b"d"), 400,
        "InvalidArgument")
refused(post("forms", sigv2_form(doc), b"d"), 400, "InvalidArgument")  # no key field
r = http.request("POST", f"{ENDPOINT}/forms", body=b"--nope\r\n", headers={"Content-Type": "multipart/form-data; boundary=b"})
assert r.status == 400, (r.status, r.data)

# A checksum field is verified against the file.
good = base64.b64encode(hashlib.sha256(b"sum").digest()).decode()
assert post("forms", {"key": "ck", "x-amz-checksum-sha256": good, **sigv2_form(doc)}, b"sum").status == 204
r = post("forms", {"key": "ck2", "x-amz-checksum-sha256": good, **sigv2_form(doc)}, b"other")
assert r.status == 400, (r.status, r.data)
absent("forms", "ck2")

# Answers: 201 with a PostResponse document, 200 empty, and a redirect with bucket, key, ETag.
status_doc = dict(doc, conditions=doc["conditions"] + [["starts-with", "$success_action_status", ""],
                                                       ["starts-with", "$success_action_redirect", ""]])
r = post("forms", {"key": "s201", "success_action_status": "201", **sigv2_form(status_doc)}, b"a")
assert r.status == 201 and b"<Key>s201</Key>" in r.data and b"<Bucket>forms</Bucket>" in r.data, r.data
r = post("forms", {"key": "s200", "success_action_status": "200", **sigv2_form(status_doc)}, b"a")
assert r.status == 200 and r.data == b"", (r.status, r.data)
r = post("forms", {"key": "a b", "success_action_redirect": "http://example.invalid/done?x=1", **sigv2_form(status_doc)}, b"a")
etag = hashlib.md5(b"a").hexdigest()
assert r.status == 303, (r.status, r.data)
assert r.headers["Location"] == f"http://example.invalid/done?x=1&bucket=forms&key=a%20b&etag=%22{etag}%22", r.headers

# Anonymous forms: refused on a private bucket, accepted where the ACL lets anyone write, and
# the form's acl and tagging fields apply to the object.
refused(post("forms", {"key": "anon"}, b"a"), 403, "AccessDenied")
s3.create_bucket(Bucket="public-forms", ACL="public-read-write")
tagging = "<Tagging><TagSet><Tag><Key>k</Key><Value>v w</Value></Tag></TagSet></Tagging>"
assert post("public-forms", {"key": "anon", "acl": "public-read", "tagging": tagging}, b"hi").status == 204
assert s3.get_object(Bucket="public-forms", Key="anon")["Body"].read() == b"hi"
assert s3.get_object_tagging(Bucket="public-forms", Key="anon")["TagSet"] == [{"Key": "k", "Value": "v w"}]

# A large file streams through: s3.rs gives the gateway an in-flight budget far below it and
# checks its peak memory afterwards.
big = os.urandom(96 << 20)
pp_big = s3.generate_presigned_post("forms", "large", Conditions=[["content-length-range", 0, 128 << 20]])
r = post("forms", pp_big["fields"], big)
assert r.status == 204, (r.status, r.data[:300])
got = s3.get_object(Bucket="forms", Key="large")["Body"].read()
assert hashlib.md5(got).digest() == hashlib.md5(big).digest()

print("boto3 POST checks passed")
