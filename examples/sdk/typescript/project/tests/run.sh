#!/bin/sh
# A test suite for busybox's sh: each test prints "ok N - NAME" or
# "not ok N - NAME", the summary goes to report.txt, the exit code says
# whether everything passed.
cd "$(dirname "$0")/.." || exit 2
pass=0 fail=0 n=0
t() { # NAME EXPECTED COMMAND...
  name=$1 want=$2
  shift 2
  n=$((n + 1))
  got=$("$@" 2>&1)
  if [ "$got" = "$want" ]; then
    pass=$((pass + 1)); echo "ok $n - $name"
  else
    fail=$((fail + 1)); echo "not ok $n - $name: expected [$want], got [$got]"
  fi
  sleep 1 # (a slow suite: the output streams while it runs)
}
t "the default greeting" "Hello, world!" sh src/greet.sh
t "a greeting for a name" "Hello, Ada!" sh src/greet.sh Ada
t "the greeting names the user" "Hello, $(id -un)!" sh src/greet.sh "$(id -un)"
echo "$pass passed, $fail failed" | tee report.txt
[ "$fail" -eq 0 ]
