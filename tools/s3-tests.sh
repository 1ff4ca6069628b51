#!/usr/bin/env bash
# Runs the public S3 conformance suite ceph/s3-tests against a Shoal gateway and prints the
# passed / failed / error / skipped counts of the selection decision 0014's issue names:
# test_s3.py and test_headers.py, without the markers of features Shoal does not take on here
# (encryption and KMS, IAM/STS/SNS/S3 Select, bucket logging, website, cloud transition,
# tenants) and without fails_on_aws / fails_on_rgw.
#
#   tools/s3-tests.sh CHECKOUT [OUT_DIR] [-- PYTEST_ARGS...]
#
# CHECKOUT is a checkout of ceph/s3-tests. The script starts its own RAM cluster with `shoal up`
# (the `shoal` on PATH, or SHOAL=path), creates the suite's users, writes its configuration,
# makes a Python virtual environment with the suite's requirements (cached in OUT_DIR), runs
# pytest, writes junit XML and the list of failures to OUT_DIR, and stops the cluster.
set -euo pipefail
checkout=$(cd "${1:?usage: tools/s3-tests.sh CHECKOUT [OUT_DIR] [-- PYTEST_ARGS...]}" && pwd)
shift
out=${1:-$PWD/s3-tests-out}
[[ $# -gt 0 && "$1" != "--" ]] && shift
[[ $# -gt 0 && "$1" == "--" ]] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
shoal=${SHOAL:-$(command -v shoal || true)}
[[ -x "$shoal" ]] || { echo "no shoal binary: put it on PATH or set SHOAL" >&2; exit 2; }
[[ -f "$checkout/s3tests/functional/test_s3.py" ]] || { echo "$checkout is not an s3-tests checkout" >&2; exit 2; }

echo "== python environment ($out/venv)" >&2
if [[ ! -x "$out/venv/bin/pytest" ]]; then
  python3 -m venv "$out/venv"
  "$out/venv/bin/pip" install --quiet -r "$checkout/requirements.txt"
fi

echo "== cluster" >&2
cluster="$out/cluster"
rm -rf "$cluster"
trap '"$shoal" down --dir "$cluster" >/dev/null 2>&1 || true' EXIT
# The suite counts lifecycle days as lc_debug_interval (below) seconds; the gateway `up` starts
# takes its day length from the environment.
export SHOAL_LIFECYCLE_DAY_S=10
"$shoal" up --dir "$cluster" --osds 1 --backend mem --osd-size 4G --json > "$out/up.json"
endpoint=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gateway"]["endpoint"])' "$out/up.json")
hostport=${endpoint#http://}
export SHOAL_CONF="$cluster/shoal.toml"

user() { # NAME DISPLAY -> "access secret canonical_id"
  "$shoal" s3 user create "$1" --display-name "$2" --json |
    python3 -c 'import json,sys; u=json.load(sys.stdin); print(u["access_key"], u["secret_key"])'
}
canonical() {
  "$shoal" s3 user info "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["canonical_id"])'
}
read -r main_ak main_sk < <(user s3main "M. Tester")
read -r alt_ak alt_sk < <(user s3alt "john.doe")
read -r ten_ak ten_sk < <(user s3tenant "tenanteduser")

cat > "$out/s3tests.conf" <<CONF
[DEFAULT]
host = ${hostport%:*}
port = ${hostport#*:}
is_secure = False
ssl_verify = False

[fixtures]
bucket prefix = shoal-{random}-

[s3 main]
display_name = M. Tester
user_id = $(canonical s3main)
email = tester@example.com
api_name = default
access_key = $main_ak
secret_key = $main_sk
lc_debug_interval = 10

[s3 alt]
display_name = john.doe
user_id = $(canonical s3alt)
email = john.doe@example.com
access_key = $alt_ak
secret_key = $alt_sk

[s3 tenant]
display_name = tenanteduser
user_id = $(canonical s3tenant)
access_key = $ten_ak
secret_key = $ten_sk
email = tenanteduser@example.com
tenant = testx

[iam]
email = s3@example.com
user_id = 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
access_key = ABCDEFGHIJKLMNOPQRST
secret_key = abcdefghijklmnopqrstuvwxyzabcdefghijklmn
display_name = youruseridhere

[iam root]
access_key = AAAAAAAAAAAAAAAAAAaa
secret_key = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
user_id = RGW11111111111111111
email = account1@example.com

[iam alt root]
access_key = BBBBBBBBBBBBBBBBBBbb
secret_key = bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
user_id = RGW22222222222222222
email = account2@example.com

[webidentity]
token = none
aud = none
sub = none
azp = none
user_token = none
thumbprint = none
KC_REALM = none
CONF

excluded="encryption or sse_s3 or bucket_encryption or iam_account or iam_cross_account or iam_role"
excluded+=" or iam_tenant or iam_user or user_policy or role_policy or session_policy or group"
excluded+=" or group_policy or abac_test or test_of_sts or webidentity_test or token_claims_trust_policy_test"
excluded+=" or token_principal_tag_role_policy_test or token_request_tag_trust_policy_test"
excluded+=" or token_resource_tags_test or token_role_tags_test or token_tag_keys_test or sns or s3select"
excluded+=" or bucket_logging or bucket_logging_cleanup or fails_without_logging_rollover"
excluded+=" or s3website or s3website_routing_rules or s3website_redirect_location"
excluded+=" or cloud_transition or cloud_restore or lifecycle_transition or fails_on_aws or fails_on_rgw"

echo "== s3-tests against $endpoint" >&2
cd "$checkout"
set +e
S3TEST_CONF="$out/s3tests.conf" "$out/venv/bin/pytest" -p no:cacheprovider -q -rfE \
  -m "not ($excluded)" --junitxml="$out/junit.xml" \
  s3tests/functional/test_s3.py s3tests/functional/test_headers.py "$@" > "$out/pytest.log" 2>&1
set -e
python3 - "$out/junit.xml" "$out" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
failed = []
for case in root.iter("testcase"):
    kinds = [c.tag for c in case]
    name = case.get("name")
    if "failure" in kinds:
        counts["failed"] += 1; failed.append(("FAIL", name, case.find("failure").get("message", "")[:200]))
    elif "error" in kinds:
        counts["error"] += 1; failed.append(("ERROR", name, case.find("error").get("message", "")[:200]))
    elif "skipped" in kinds:
        counts["skipped"] += 1
    else:
        counts["passed"] += 1
ran = counts["passed"] + counts["failed"] + counts["error"]
with open(f"{sys.argv[2]}/failures.txt", "w") as f:
    for kind, name, msg in sorted(failed, key=lambda t: t[1]):
        f.write(f"{kind} {name}: {msg}\n")
print(f"passed {counts['passed']} failed {counts['failed']} error {counts['error']} skipped {counts['skipped']}"
      f" — {100 * counts['passed'] / max(ran, 1):.1f}% of {ran} run")
PY
