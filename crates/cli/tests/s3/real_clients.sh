#!/usr/bin/env bash
# Real S3 clients at their defaults against a Shoal gateway (driven by crates/cli/tests/s3.rs):
# aws-cli, s3cmd and rclone each make a bucket, put a small object and a 64 MiB one that they
# upload in parts, list, get both back and compare, delete both and the bucket.
#
# Environment: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, AWS (the aws-cli to run), WORK (a
# scratch directory). Exits non-zero naming the first step that failed.
set -euo pipefail
unset AWS_CA_BUNDLE AWS_PROFILE AWS_CONFIG_FILE
host="${S3_ENDPOINT#http://}"
cd "$WORK"
head -c 1000 /dev/urandom > small
head -c $((64 << 20)) /dev/urandom > big
step() { echo "== $*" >&2; }

check_back() { # $1: client name; compares got.small and got.big with the originals
  cmp small got.small || { echo "$1: the small object came back different" >&2; exit 1; }
  cmp big got.big || { echo "$1: the 64 MiB object came back different" >&2; exit 1; }
  rm -f got.small got.big
}

step "aws-cli $("$AWS" --version 2>&1)"
export AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY" AWS_DEFAULT_REGION=us-east-1
aws=("$AWS" --endpoint-url "$S3_ENDPOINT")
parts_of() { # $1 bucket, $2 key: the number after the dash of a multipart ETag
  local etag
  etag=$("${aws[@]}" s3api head-object --bucket "$1" --key "$2" --query ETag --output text)
  etag="${etag//\"/}"
  echo "${etag##*-}"
}
"${aws[@]}" s3 mb s3://cli-aws
"${aws[@]}" s3 cp --only-show-errors small s3://cli-aws/dir/small
"${aws[@]}" s3 cp --only-show-errors big s3://cli-aws/dir/big
listing=$("${aws[@]}" s3 ls s3://cli-aws/dir/)
grep -q " 67108864 big" <<<"$listing" || { echo "aws-cli: listing lacks big: $listing" >&2; exit 1; }
[[ $(parts_of cli-aws dir/big) == 8 ]] || { echo "aws-cli: the 64 MiB object is not in 8 parts" >&2; exit 1; }
"${aws[@]}" s3 cp --only-show-errors s3://cli-aws/dir/small got.small
"${aws[@]}" s3 cp --only-show-errors s3://cli-aws/dir/big got.big
check_back aws-cli
"${aws[@]}" s3 rm --only-show-errors --recursive s3://cli-aws/dir/
"${aws[@]}" s3 rb s3://cli-aws

step "s3cmd $(s3cmd --version)"
cat > s3cfg <<CFG
[default]
access_key = $S3_ACCESS_KEY
secret_key = $S3_SECRET_KEY
host_base = $host
host_bucket = $host
use_https = False
bucket_location = us-east-1
CFG
s3c=(s3cmd -c s3cfg --no-progress)
"${s3c[@]}" mb s3://cli-s3cmd
"${s3c[@]}" put small s3://cli-s3cmd/small
"${s3c[@]}" put big s3://cli-s3cmd/big
listing=$("${s3c[@]}" ls s3://cli-s3cmd/)
grep -q "67108864 *s3://cli-s3cmd/big" <<<"$listing" || { echo "s3cmd: listing lacks big: $listing" >&2; exit 1; }
[[ $(parts_of cli-s3cmd big) == 5 ]] || { echo "s3cmd: the 64 MiB object is not in 5 parts of 15 MiB" >&2; exit 1; }
"${s3c[@]}" get s3://cli-s3cmd/small got.small
"${s3c[@]}" get s3://cli-s3cmd/big got.big
check_back s3cmd
"${s3c[@]}" del s3://cli-s3cmd/small s3://cli-s3cmd/big
"${s3c[@]}" rb s3://cli-s3cmd

step "$(rclone version | head -1)"
export RCLONE_CONFIG_SHOAL_TYPE=s3 RCLONE_CONFIG_SHOAL_PROVIDER=Other RCLONE_CONFIG_SHOAL_ENV_AUTH=false
export RCLONE_CONFIG_SHOAL_ACCESS_KEY_ID="$S3_ACCESS_KEY" RCLONE_CONFIG_SHOAL_SECRET_ACCESS_KEY="$S3_SECRET_KEY"
export RCLONE_CONFIG_SHOAL_ENDPOINT="$S3_ENDPOINT" RCLONE_CONFIG_SHOAL_REGION=us-east-1
# rclone's default cut-over to multipart is 200 MiB; 16 MiB makes the 64 MiB object four parts.
rc=(rclone --config /dev/null --s3-upload-cutoff 16M --s3-chunk-size 16M)
"${rc[@]}" mkdir shoal:cli-rclone
"${rc[@]}" copyto small shoal:cli-rclone/small
"${rc[@]}" copyto big shoal:cli-rclone/big
listing=$("${rc[@]}" ls shoal:cli-rclone)
grep -q "67108864 big" <<<"$listing" || { echo "rclone: listing lacks big: $listing" >&2; exit 1; }
[[ $(parts_of cli-rclone big) == 4 ]] || { echo "rclone: the 64 MiB object is not in 4 parts" >&2; exit 1; }
"${rc[@]}" copyto shoal:cli-rclone/small got.small
"${rc[@]}" copyto shoal:cli-rclone/big got.big
check_back rclone
"${rc[@]}" delete shoal:cli-rclone
"${rc[@]}" rmdir shoal:cli-rclone

echo "real clients passed"
