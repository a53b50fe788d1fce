#!/usr/bin/env bash
# `meson install` of the build under test (into a folder of the test's own
# with --destdir): the binaries, the systemd units (whose ExecStart is the
# installed sandboxd) and the example settings, each of which the
# installed sandboxd reads without an error.
# itest-parallel
# itest-timeout: 120
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

dest="$ITEST_TMP/meson-install-$$"
itest_on_exit "rm -rf '$dest'"
assert_exit 0 meson install -C "$ITEST_BUILD" --destdir "$dest" --no-rebuild --quiet
prefix=$(meson introspect "$ITEST_BUILD" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
for b in sandboxd sandbox sandbox-egress sandbox-mcp; do
  [ -x "$dest$prefix/bin/$b" ] || fail "meson install put no $prefix/bin/$b"
done
for u in sandbox-controller sandbox-worker; do
  unit="$dest$prefix/lib/systemd/system/$u.service"
  [ -f "$unit" ] || fail "meson install put no $prefix/lib/systemd/system/$u.service"
  exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
  [ -n "$exec_start" ] || fail "$u.service has no ExecStart"
  [ -x "$dest$exec_start" ] || fail "$u.service starts $exec_start, which meson install did not put there"
done
examples="$dest$prefix/share/doc/sandbox/examples"
for c in controller worker all-in-one; do
  [ -f "$examples/$c.conf" ] || fail "meson install put no example $c.conf"
  # the installed sandboxd reads it (every key known, every value valid)
  role=$([ "$c" = all-in-one ] && echo all || echo "$c")
  assert_exit 0 "$dest$prefix/bin/sandboxd" "$role" --config "$examples/$c.conf" --print-config
done
echo "meson install puts the binaries, the systemd units and the example settings in place"
