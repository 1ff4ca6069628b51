"""Who may do what, through boto3 against a Shoal gateway (driven by crates/cli/tests/s3.rs):
ACLs (canned, grant headers, documents), bucket policies, anonymous requests, CORS (rules,
browser preflights and the headers of actual requests).

Environment: S3_ENDPOINT; S3_ACCESS_KEY / S3_SECRET_KEY (the owner); ALT_ACCESS_KEY /
ALT_SECRET_KEY / ALT_ID / ALT_NAME (a second user). Exits non-zero on the first failed check.
"""
import json
import os

import boto3
from s3common import fails
import urllib3
from botocore import UNSIGNED
from botocore.config import Config

ENDPOINT = os.environ["S3_ENDPOINT"]


def client(access=None, secret=None, anonymous=False):
    cfg = Config(retries={"max_attempts": 1}, signature_version=UNSIGNED if anonymous else None)
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=cfg,
    )


owner = client(os.environ["S3_ACCESS_KEY"], os.environ["S3_SECRET_KEY"])
alt = client(os.environ["ALT_ACCESS_KEY"], os.environ["ALT_SECRET_KEY"])
anon = client(anonymous=True)
ALT_ID = os.environ["ALT_ID"]
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"

# A missing bucket is NoSuchBucket to anyone; a private one is AccessDenied to others.
fails("NoSuchBucket", anon.list_objects_v2, Bucket="nowhere")
fails("NoSuchBucket", alt.get_object, Bucket="nowhere", Key="k")
owner.create_bucket(Bucket="acl")
owner.put_object(Bucket="acl", Key="k", Body=b"secret")
fails("AccessDenied", alt.list_objects_v2, Bucket="acl")
fails("AccessDenied", alt.get_object, Bucket="acl", Key="k")
fails("AccessDenied", anon.get_object, Bucket="acl", Key="k")
fails("AccessDenied", alt.put_object, Bucket="acl", Key="k", Body=b"overwrite")
fails("AccessDenied", alt.get_bucket_acl, Bucket="acl")
fails("AccessDenied", anon.list_buckets)
# Without the right to list, a missing key is AccessDenied too (existence is not revealed).
fails("AccessDenied", alt.get_object, Bucket="acl", Key="missing")

# The default ACL: the owner's FULL_CONTROL.
acl = owner.get_bucket_acl(Bucket="acl")
assert [(g["Grantee"].get("ID"), g["Permission"]) for g in acl["Grants"]] == [(acl["Owner"]["ID"], "FULL_CONTROL")], acl
owner_id = acl["Owner"]["ID"]

# Canned public-read on the bucket: anyone lists, nobody else writes; objects stay private.
owner.put_bucket_acl(Bucket="acl", ACL="public-read")
assert [o["Key"] for o in anon.list_objects_v2(Bucket="acl")["Contents"]] == ["k"]
fails("AccessDenied", anon.get_object, Bucket="acl", Key="k")
fails("NoSuchKey", alt.get_object, Bucket="acl", Key="missing")
fails("AccessDenied", alt.put_object, Bucket="acl", Key="new", Body=b"x")

# An object ACL opens one object.
owner.put_object_acl(Bucket="acl", Key="k", ACL="public-read")
assert anon.get_object(Bucket="acl", Key="k")["Body"].read() == b"secret"
grants = owner.get_object_acl(Bucket="acl", Key="k")["Grants"]
assert {(g["Grantee"].get("URI"), g["Permission"]) for g in grants} >= {(ALL_USERS, "READ")}, grants
fails("AccessDenied", alt.put_object_acl, Bucket="acl", Key="k", ACL="private")

# A grant by canonical id (document form) gives the other user WRITE on the bucket; objects it
# writes are its own: under bucket-owner-read the bucket owner reads the data but not the ACL,
# under bucket-owner-full-control both.
doc = {
    "Owner": {"ID": owner_id},
    "Grants": acl["Grants"] + [{"Grantee": {"ID": ALT_ID, "Type": "CanonicalUser"}, "Permission": "WRITE"}],
}
owner.put_bucket_acl(Bucket="acl", AccessControlPolicy=doc)
alt.put_object(Bucket="acl", Key="from-alt", Body=b"hi", ACL="bucket-owner-read")
assert owner.get_object(Bucket="acl", Key="from-alt")["Body"].read() == b"hi"
fails("AccessDenied", owner.get_object_acl, Bucket="acl", Key="from-alt")
alt.put_object_acl(Bucket="acl", Key="from-alt", ACL="bucket-owner-full-control")
got = owner.get_object_acl(Bucket="acl", Key="from-alt")
assert got["Owner"]["ID"] == ALT_ID, got
assert owner.get_object(Bucket="acl", Key="from-alt")["Body"].read() == b"hi"
bad = dict(doc, Grants=[{"Grantee": {"ID": "no-such-user", "Type": "CanonicalUser"}, "Permission": "READ"}])
fails("InvalidArgument", owner.put_bucket_acl, Bucket="acl", AccessControlPolicy=bad)
fails("InvalidArgument", owner.put_bucket_acl, Bucket="acl", ACL="bucket-owner-read")
mail = dict(doc, Grants=[{"Grantee": {"EmailAddress": "a@b.invalid", "Type": "AmazonCustomerByEmail"}, "Permission": "READ"}])
fails("UnresolvableGrantByEmailAddress", owner.put_bucket_acl, Bucket="acl", AccessControlPolicy=mail)

# Re-creating one's bucket with another ACL is refused (the name is taken).
fails("BucketAlreadyExists", owner.create_bucket, Bucket="acl", ACL="public-read-write")

# Bucket policies: Allow opens, Deny closes even what ACLs open, and conditions apply.
owner.create_bucket(Bucket="pol")
owner.put_object(Bucket="pol", Key="public/a", Body=b"a")
owner.put_object(Bucket="pol", Key="private/b", Body=b"b")
policy = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::pol/public/*"},
        {
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::pol",
            "Condition": {"StringLike": {"s3:prefix": "public/*"}},
        },
        {
            "Effect": "Deny",
            "Principal": {"AWS": f"arn:aws:iam::{os.environ['ALT_NAME']}:root"},
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::pol/public/denied*",
        },
    ],
}
owner.put_bucket_policy(Bucket="pol", Policy=json.dumps(policy))
assert json.loads(owner.get_bucket_policy(Bucket="pol")["Policy"]) == policy
assert anon.get_object(Bucket="pol", Key="public/a")["Body"].read() == b"a"
fails("AccessDenied", anon.get_object, Bucket="pol", Key="private/b")
assert [o["Key"] for o in alt.list_objects_v2(Bucket="pol", Prefix="public/")["Contents"]] == ["public/a"]
fails("AccessDenied", alt.list_objects_v2, Bucket="pol", Prefix="private/")
# A missing key under the listable prefix is 404, elsewhere 403.
fails("404", alt.head_object, Bucket="pol", Key="public/none")
fails("403", alt.head_object, Bucket="pol", Key="private/none")
owner.put_object(Bucket="pol", Key="public/denied", Body=b"d", ACL="public-read")
fails("AccessDenied", alt.get_object, Bucket="pol", Key="public/denied")
assert anon.get_object(Bucket="pol", Key="public/denied")["Body"].read() == b"d"
assert owner.get_bucket_policy_status(Bucket="pol")["PolicyStatus"]["IsPublic"] is True
# Only the owner configures the bucket; malformed policies name the problem.
fails("AccessDenied", alt.put_bucket_policy, Bucket="pol", Policy=json.dumps(policy))
for doc in ["{not json", json.dumps({"Statement": []}), json.dumps({"Statement": [dict(policy["Statement"][0], Resource="arn:aws:s3:::other/*")]})]:
    fails("MalformedPolicy", owner.put_bucket_policy, Bucket="pol", Policy=doc)
owner.delete_bucket_policy(Bucket="pol")
fails("NoSuchBucketPolicy", owner.get_bucket_policy, Bucket="pol")
fails("AccessDenied", anon.get_object, Bucket="pol", Key="public/a")

# Anonymous writes where the ACL allows them.
owner.create_bucket(Bucket="dropbox", ACL="public-read-write")
anon.put_object(Bucket="dropbox", Key="anon", Body=b"from nobody")
assert owner.list_objects_v2(Bucket="dropbox")["KeyCount"] == 1

# Public access blocks: public ACLs refused, public policies refused.
owner.create_bucket(Bucket="blocked")
fails("NoSuchPublicAccessBlockConfiguration", owner.get_public_access_block, Bucket="blocked")
block = {"BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": True, "RestrictPublicBuckets": False}
owner.put_public_access_block(Bucket="blocked", PublicAccessBlockConfiguration=block)
assert owner.get_public_access_block(Bucket="blocked")["PublicAccessBlockConfiguration"] == block
fails("AccessDenied", owner.put_object, Bucket="blocked", Key="k", Body=b"x", ACL="public-read")
owner.put_object(Bucket="blocked", Key="k", Body=b"x", ACL="private")
fails("AccessDenied", owner.put_bucket_acl, Bucket="blocked", ACL="public-read")
public = {"Version": "2012-10-17", "Statement": [policy["Statement"][0] | {"Resource": "arn:aws:s3:::blocked/*"}]}
fails("AccessDenied", owner.put_bucket_policy, Bucket="blocked", Policy=json.dumps(public))
owner.delete_public_access_block(Bucket="blocked")
owner.put_bucket_policy(Bucket="blocked", Policy=json.dumps(public))
assert anon.get_object(Bucket="blocked", Key="k")["Body"].read() == b"x"

# Ownership controls: under BucketOwnerEnforced objects belong to the bucket owner and ACLs are
# refused; a public bucket ACL must go first.
owner.create_bucket(Bucket="owned", ACL="public-read-write")
enforced = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
fails("InvalidBucketAclWithObjectOwnership", owner.put_bucket_ownership_controls, Bucket="owned", OwnershipControls=enforced)
fails("OwnershipControlsNotFoundError", owner.get_bucket_ownership_controls, Bucket="owned")
owner.put_bucket_acl(Bucket="owned", ACL="private")
owner.put_bucket_ownership_controls(Bucket="owned", OwnershipControls=enforced)
rules = owner.get_bucket_ownership_controls(Bucket="owned")["OwnershipControls"]["Rules"]
assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}], rules
owner.put_bucket_policy(Bucket="owned", Policy=json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::owned/*"}]}))
alt.put_object(Bucket="owned", Key="by-alt", Body=b"y")
assert owner.get_object_acl(Bucket="owned", Key="by-alt")["Owner"]["ID"] == owner_id
fails("AccessControlListNotSupported", alt.put_object, Bucket="owned", Key="p", Body=b"y", ACL="private")
fails("AccessControlListNotSupported", owner.put_bucket_acl, Bucket="owned", ACL="private")

# Tags: on PUT, on their own, counted on GET and HEAD, checked against S3's limits.
owner.put_object(Bucket="acl", Key="tagged", Body=b"t", Tagging="b=2&a=1")
assert owner.get_object_tagging(Bucket="acl", Key="tagged")["TagSet"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]
assert owner.get_object(Bucket="acl", Key="tagged")["TagCount"] == 2
assert owner.head_object(Bucket="acl", Key="tagged")["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"
owner.put_object_tagging(Bucket="acl", Key="tagged", Tagging={"TagSet": [{"Key": "only", "Value": "one"}]})
assert owner.get_object_tagging(Bucket="acl", Key="tagged")["TagSet"] == [{"Key": "only", "Value": "one"}]
eleven = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
fails("InvalidTag", owner.put_object_tagging, Bucket="acl", Key="tagged", Tagging=eleven)
owner.delete_object_tagging(Bucket="acl", Key="tagged")
assert owner.get_object_tagging(Bucket="acl", Key="tagged")["TagSet"] == []
fails("AccessDenied", alt.get_object_tagging, Bucket="acl", Key="tagged")
fails("NoSuchTagSet", owner.get_bucket_tagging, Bucket="acl")
owner.put_bucket_tagging(Bucket="acl", Tagging={"TagSet": [{"Key": "team", "Value": "storage"}]})
assert owner.get_bucket_tagging(Bucket="acl")["TagSet"] == [{"Key": "team", "Value": "storage"}]
owner.delete_bucket_tagging(Bucket="acl")

# CORS: rules checked and stored; a preflight is answered by the first rule allowing it, and
# an actual request from an allowed origin gets the grant whatever its status.
fails("NoSuchCORSConfiguration", owner.get_bucket_cors, Bucket="acl")
cors = {"CORSRules": [
    {"AllowedMethods": ["GET"], "AllowedOrigins": ["https://*.example.org"], "ExposeHeaders": ["ETag"]},
    {"ID": "uploads", "AllowedMethods": ["PUT", "POST"], "AllowedOrigins": ["https://up.example.org"],
     "AllowedHeaders": ["x-amz-*", "content-type"], "MaxAgeSeconds": 600},
]}
fails("InvalidRequest", owner.put_bucket_cors, Bucket="acl",
      CORSConfiguration={"CORSRules": [{"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}]})
owner.put_bucket_cors(Bucket="acl", CORSConfiguration=cors)
assert owner.get_bucket_cors(Bucket="acl")["CORSRules"] == cors["CORSRules"]
http = urllib3.PoolManager(retries=False)


def preflight(origin, method, headers=None):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return http.request("OPTIONS", f"{ENDPOINT}/acl/some/key", headers=h)


r = preflight("https://www.example.org", "GET")
assert r.status == 200, r.status
assert r.headers["Access-Control-Allow-Origin"] == "https://www.example.org"
assert r.headers["Access-Control-Allow-Methods"] == "GET"
r = preflight("https://up.example.org", "PUT", "X-Amz-Meta-A, Content-Type")
assert r.status == 200 and r.headers["Access-Control-Max-Age"] == "600", r.headers
assert r.headers["Access-Control-Allow-Headers"] == "x-amz-meta-a, content-type"
assert preflight("https://up.example.org", "PUT", "authorization").status == 403
assert preflight("https://evil.example.com", "GET").status == 403
assert http.request("OPTIONS", f"{ENDPOINT}/acl/k").status == 400, "a preflight without an Origin"
r = http.request("GET", f"{ENDPOINT}/acl/tagged", headers={"Origin": "https://a.example.org"})
assert r.status == 403, "anonymous: denied, but readable by the allowed origin's script"
assert r.headers["Access-Control-Allow-Origin"] == "https://a.example.org"
assert r.headers["Access-Control-Expose-Headers"] == "ETag"
r = http.request("GET", f"{ENDPOINT}/acl/tagged", headers={"Origin": "https://evil.example.com"})
assert "Access-Control-Allow-Origin" not in r.headers
owner.delete_bucket_cors(Bucket="acl")
fails("NoSuchCORSConfiguration", owner.get_bucket_cors, Bucket="acl")
assert preflight("https://www.example.org", "GET").status == 403

# x-amz-expected-bucket-owner: the right owner passes, another is refused whoever asks.
owner_id = owner.list_buckets()["Owner"]["ID"]
owner.list_objects_v2(Bucket="acl", ExpectedBucketOwner=owner_id)
fails("AccessDenied", owner.list_objects_v2, Bucket="acl", ExpectedBucketOwner=owner_id + "x")
fails("AccessDenied", owner.put_object, Bucket="acl", Key="e", Body=b"e", ExpectedBucketOwner=ALT_ID)

print("boto3 access checks passed")
