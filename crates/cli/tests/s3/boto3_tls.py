"""HTTPS through boto3 against a Shoal gateway started with --tls-cert/--tls-key (driven by
crates/cli/tests/s3.rs): the certificate is verified against the test's own CA file, requests
with boto3's default CRC32 trailers work over TLS, and `aws:SecureTransport` in a bucket policy
tells the HTTPS gateway from a plain-HTTP one on the same cluster.

Environment: S3_TLS_ENDPOINT (https://...), S3_TLS_CA (the certificate file), S3_ENDPOINT (a
plain-HTTP gateway of the same cluster), S3_ACCESS_KEY, S3_SECRET_KEY, ALT_ACCESS_KEY,
ALT_SECRET_KEY, ALT_NAME (a second user). Exits non-zero on the first failed check.
"""
import json
import os
import socket
import urllib.parse

from s3common import client, fails
from botocore.exceptions import SSLError


TLS, CA, PLAIN = os.environ["S3_TLS_ENDPOINT"], os.environ["S3_TLS_CA"], os.environ["S3_ENDPOINT"]
owner = (os.environ["S3_ACCESS_KEY"], os.environ["S3_SECRET_KEY"])
alt = (os.environ["ALT_ACCESS_KEY"], os.environ["ALT_SECRET_KEY"])
s3 = client(TLS, *owner, verify=CA)
plain = client(PLAIN, *owner)

# The certificate verifies against the CA file, and an unverified client is refused by boto3.
B = "tls-bucket"
s3.create_bucket(Bucket=B)
data = os.urandom(3 << 20) + b"tail"
put = s3.put_object(Bucket=B, Key="over-tls", Body=data)  # boto3's default: a CRC32 trailer
assert s3.get_object(Bucket=B, Key="over-tls")["Body"].read() == data
assert plain.get_object(Bucket=B, Key="over-tls")["ETag"] == put["ETag"]  # one cluster, two gateways
try:
    client(TLS, *owner, verify=True).list_buckets()  # the system's CAs do not know the test's
    raise AssertionError("a client trusting only the system CAs accepted the test certificate")
except SSLError:
    pass

# A multipart upload over TLS.
mp = s3.create_multipart_upload(Bucket=B, Key="mp")
parts = []
for n in (1, 2):
    chunk = bytes([n]) * (5 << 20)
    etag = s3.upload_part(Bucket=B, Key="mp", UploadId=mp["UploadId"], PartNumber=n, Body=chunk)["ETag"]
    parts.append({"PartNumber": n, "ETag": etag})
s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=mp["UploadId"], MultipartUpload={"Parts": parts})
assert s3.head_object(Bucket=B, Key="mp")["ContentLength"] == 10 << 20

# aws:SecureTransport: the second user may read only over HTTPS.
policy = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{os.environ['ALT_NAME']}:root"},
            "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{B}/*",
            "Condition": {"Bool": {"aws:SecureTransport": "true"}},
        }
    ],
}
s3.put_bucket_policy(Bucket=B, Policy=json.dumps(policy))
assert client(TLS, *alt, verify=CA).get_object(Bucket=B, Key="over-tls")["Body"].read() == data
fails("AccessDenied", client(PLAIN, *alt).get_object, Bucket=B, Key="over-tls")

# Plain HTTP sent to the TLS port ends that connection only; the gateway keeps serving.
host, port = urllib.parse.urlsplit(TLS).netloc.rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as raw:
    raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answer = raw.recv(4096)
    except (ConnectionResetError, socket.timeout):
        answer = b""
    assert not answer.startswith(b"HTTP/"), answer
assert s3.get_object(Bucket=B, Key="over-tls")["Body"].read() == data

s3.delete_bucket_policy(Bucket=B)
for key in ("over-tls", "mp"):
    s3.delete_object(Bucket=B, Key=key)
s3.delete_bucket(Bucket=B)
print("boto3 TLS checks passed")
