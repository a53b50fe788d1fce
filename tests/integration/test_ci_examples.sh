#!/usr/bin/env bash
# examples/ci/ run for real (issue 16 item 8): the GitHub Actions steps and
# the GitLab job's script/after_script, run by tests/integration/
# ci_examples.py as those systems would, against a small project this test
# makes (ci/run-tests.sh tests a shell calculator and writes report.txt).
# Pins: the checked-out repository is uploaded into a restricted, untrusted
# sandbox (--upload .:/work), the tests run there, the report comes back and
# the sandbox is deleted; when a test fails the test step fails, and the
# report is still copied back and the sandbox still deleted.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-ci)
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN
here=$(cd "$(dirname "$0")" && pwd)
examples="$here/../../examples/ci"
export PATH="$(dirname "$SANDBOX_CLI"):$PATH" # the examples call sandbox from PATH

# project DIR EXPECTED: a repository checkout whose test expects 2+3 = EXPECTED
project() {
  mkdir -p "$1/src" "$1/ci"
  printf 'echo $(($1 + $2))\n' >"$1/src/add.sh"
  cat >"$1/ci/run-tests.sh" <<EOF
echo "running the tests on \$(uname -n)"
got=\$(sh src/add.sh 2 3)
if [ "\$got" = "$2" ]; then echo "1 passed: add 2 3 = \$got" | tee report.txt
else echo "1 failed: add 2 3 = \$got, expected $2" | tee report.txt; exit 1; fi
EOF
}
# no sandbox of the tenant is left (every flow deletes its own)
none_left() {
  local n
  n=$(sandbox list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["sandboxes"]))')
  assert_eq 0 "$n" "the tenant's sandboxes left after the $1 flow"
}
steps_rc() { python3 -c 'import json,sys; print(" ".join(str(s["rc"]) for s in json.loads(sys.argv[1])["steps"]))' "$1"; }

for ci in github gitlab; do
  file="$examples/github-actions.yml"
  [ "$ci" = gitlab ] && file="$examples/gitlab-ci.yml"
  # passing tests
  w="$ITEST_TMP/ci-$ci-pass-$$"
  project "$w" 5
  r=$(GITHUB_RUN_ID=$RANDOM$RANDOM CI_JOB_ID=$RANDOM$RANDOM python3 "$here/ci_examples.py" "$ci" "$file" "$w")
  itest_log "$ci, passing: $r"
  [ "$ci" = github ] && assert_eq "0 0 0 0" "$(steps_rc "$r")" "the GitHub steps' exit codes (create, test, copy, delete)"
  [ "$ci" = gitlab ] && assert_eq "0 0" "$(steps_rc "$r")" "the GitLab script and after_script exit codes"
  assert_eq "1 passed: add 2 3 = 5" "$(cat "$w/report.txt")" "the report copied back ($ci)"
  none_left "$ci"
  # a failing test: the test step fails; the report still comes back and the sandbox still goes
  w="$ITEST_TMP/ci-$ci-fail-$$"
  project "$w" 6
  r=$(GITHUB_RUN_ID=$RANDOM$RANDOM CI_JOB_ID=$RANDOM$RANDOM python3 "$here/ci_examples.py" "$ci" "$file" "$w")
  itest_log "$ci, failing: $r"
  [ "$ci" = github ] && assert_eq "0 1 0 0" "$(steps_rc "$r")" "the GitHub steps' exit codes with a failing test"
  [ "$ci" = gitlab ] && assert_eq "1 0" "$(steps_rc "$r")" "the GitLab exit codes with a failing test"
  assert_contains "$(cat "$w/report.txt")" "1 failed: add 2 3 = 5, expected 6" "the failing report copied back ($ci)"
  none_left "$ci (failing)"
done
# the sandboxes were restricted and untrusted, as the examples say
ev=$(sandbox events --kind sandbox.pending --json |
  python3 -c 'import json,sys; print(sum(1 for l in sys.stdin if l.strip() and json.loads(l)["data"].get("network") == "restricted"))')
[ "$ev" -ge 4 ] || fail "expected 4 restricted creates among the events, saw $ev"
echo "examples/ci: the GitHub steps and the GitLab job upload, test, copy the report back and delete, also when the tests fail"
