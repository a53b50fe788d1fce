#!/bin/sh
# The sample project's test runner: busybox sh only (the sandbox image has
# no python). Prints a line per test as it goes (streamed by the example),
# writes report/summary.txt and report/junit.xml, exits 1 if a test failed.
cd "$(dirname "$0")/.." || exit 2
. ./calc.sh
mkdir -p report
passed=0
failed=0
cases=""
check() { # NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then
    passed=$((passed + 1))
    echo "ok   $1"
    cases="$cases<testcase name=\"$1\"/>"
  else
    failed=$((failed + 1))
    echo "FAIL $1: expected [$2], got [$3]" >&2
    cases="$cases<testcase name=\"$1\"><failure>expected $2, got $3</failure></testcase>"
  fi
  sleep 0.3 # a slow suite, so the output is seen arriving
}
check add_small 5 "$(add 2 3)"
check add_negative -1 "$(add 2 -3)"
check mul 42 "$(mul 6 7)"
check div 4 "$(div 9 2)"
check div_by_zero "division by zero" "$(div 1 0 2>&1)"
echo "$passed passed, $failed failed" | tee report/summary.txt
printf '<testsuite name="calc" tests="%d" failures="%d">%s</testsuite>\n' \
  $((passed + failed)) "$failed" "$cases" >report/junit.xml
[ "$failed" -eq 0 ]
