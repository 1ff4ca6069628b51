"""What every boto3 script of crates/cli/tests/s3.rs shares: a client at boto3's defaults (no
retries, so every answer is the gateway's first) and the check that a call fails with an S3
error code."""
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def client(endpoint=None, access=None, secret=None, verify=None, **cfg):
    """A client of `endpoint` (default S3_ENDPOINT) signing with `access`/`secret` (default
    S3_ACCESS_KEY/S3_SECRET_KEY); `cfg` goes to botocore's Config."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint or os.environ["S3_ENDPOINT"],
        aws_access_key_id=access or os.environ["S3_ACCESS_KEY"],
        aws_secret_access_key=secret or os.environ["S3_SECRET_KEY"],
        region_name="us-east-1",
        verify=verify,
        config=Config(retries={"max_attempts": 1}, **cfg),
    )


def fails(code, fn, *args, **kwargs):
    """Calls fn, which must fail with S3 error `code` (and a request id); returns the error."""
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        got = e.response["Error"]["Code"]
        assert got == code, f"expected {code}, got {got}: {e}"
        assert e.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-request-id"), "no request id"
        return e
    raise AssertionError(f"expected {code}, the call succeeded")
