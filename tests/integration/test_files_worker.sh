#!/usr/bin/env bash
# The worker side of file transfers (docs/worker.md "File transfers"),
# driven directly: a worker of our own, and a small Python client
# (files_client.py) that plays the controller on the worker's forwarder,
# signing grants from the worker's token as the controller does. Pins: a tar
# of a directory (3 MiB of random bytes, a 0750 file with an old mtime, a
# subdirectory, a symlink) up and back with bytes, modes, mtimes and the
# link equal; a raw binary file with NULs up and down; a listing; raw get of
# a directory refused; a missing path 404; an aborted raw upload leaves no
# complete file; "/../../etc/x" lands in the container's /etc, never the
# host's; hostile tar members ("../../escape", a symlink to /etc and a file
# through it) stay inside; max_bytes and the disk quota answer 413; a line
# that is not the signed one 403; a download past the sandbox's filesystem
# (a sparse file bigger than its image and disk_mib) refused 413 as a file
# and cut with the reason as a tree, the CLI exiting 3 with it and writing
# nothing of it; 128 MiB up and down with the worker's
# memory bounded (timed beside docker cp); over TLS; SIGTERM during an
# upload answers 503 and the worker exits 0; the transfer metrics;
# a gVisor sandbox too.
# itest-timeout: 300
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
itest_require_gvisor

tag=$RANDOM$RANDOM
wname="itest-files-$tag"
wlog="$ITEST_TMP/worker-files-$tag.log"
itest_watch_log "$wlog"
itest_as_member itest-files
client="$(dirname "$0")/files_client.py"

finish() {
  itest_delete_tracked
  [ -z "${wpid:-}" ] || itest_stop_pid "$wpid" worker 30
  rm -f "/etc/itest-files-$tag" "/itest-escape-$tag" "/tmp/itest-escape-$tag"
}
wpid=
itest_on_exit finish
wtoken=$(itest_token itest-workers worker "$wname")
# The disk watch measures once a minute (its first pass at registration):
# the download bound below keeps a sparse file over the quota for a moment,
# and a watch pass then would stop the sandbox before it is read.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1" \
  SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=8192 \
  SANDBOX_WORKER_LABELS="itest-files=$tag" SANDBOX_LOG_LEVEL=debug SANDBOX_WORKER_DISK_INTERVAL_MS=60000 \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
  --worker-health-listen 127.0.0.1:0 >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
itest_await "$wpid" "$wlog" 60 "worker exited before registering" "worker $wname not ready" itest_worker_ready "$wname"
hport=$(sed -n 's/.*health checks on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$wlog" | head -n 1)
[ -n "$hport" ] || fail "the worker did not log its health address"
read -r wid waddr < <("$ITEST_PGBIN/psql" -X -q -At -F ' ' "$DATABASE_URL" \
  -c "SELECT id, route_address FROM workers WHERE name = '$wname'")
[ -n "$wid" ] && [ -n "$waddr" ] || fail "no worker id or route address for $wname"
case "$waddr" in 127.0.0.1:*) ;; *) fail "the worker's route address $waddr is not on loopback" ;; esac

create() { # create [FLAGS...]: the id of a running sandbox on our worker
  local out
  out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 128 --ttl 600 --selector "itest-files=$tag" \
    --wait --timeout 120 "$@") || fail "create $* failed: $out"
  printf '%s\n' "${out%% *}"
}
fc() { python3 "$client" "$waddr" "$wtoken" "$wid" "$@"; }
sx() { sandbox exec "$@"; }

sbx=$(create)
itest_track "$sbx"
sx "$sbx" -- mkdir -p /work >/dev/null

# ---- a download is bounded by the sandbox's filesystem (its image's size
# and disk_mib): a sparse file past it (truncate costs no disk) is 413 as a
# file, and a tree holding it is cut at its header with the reason, through
# the forwarder and through the controller and CLI. Early, within the disk
# watch's first minute.
t_bound=$(date +%s%N)
small=$(create --disk 16)
itest_track "$small"
sx "$small" -- sh -c 'mkdir -p /work/sp && printf x > /work/sp/a && truncate -s 1G /work/sp/big.img' >/dev/null
assert_match "$(fc "$small" get /work/sp/big.img raw "$ITEST_TMP/x")" \
  "^413 payload_too_large the file is 1073741824 bytes, more than the sandbox's filesystem holds \\([0-9]+ bytes\\)$" \
  "a raw get of a sparse file past the sandbox's filesystem"
got=$(fc "$small" get /work/sp tar "$ITEST_TMP/sp.tar" || true)
assert_match "$got" "end: the download is larger than the sandbox's filesystem holds \\([0-9]+ bytes\\): member sp/big.img" \
  "a tree holding it, cut at its header"
assert_exit 3 sandbox cp "$small:/work/sp" "$ITEST_TMP/spdl"
assert_contains "$ITEST_ERR" "ended early (the download is larger than the sandbox's filesystem holds" "sandbox cp of the tree"
[ ! -e "$ITEST_TMP/spdl/big.img" ] || fail "sandbox cp wrote the sparse file that was cut"
assert_exit 3 sandbox cp "$small:/work/sp/big.img" "$ITEST_TMP/big.img"
assert_contains "$ITEST_ERR" "payload_too_large" "sandbox cp of the file"
[ ! -e "$ITEST_TMP/big.img" ] || fail "sandbox cp wrote the sparse file that was refused"
sx "$small" -- rm -f /work/sp/big.img >/dev/null
itest_log "download bound: $((($(date +%s%N) - t_bound) / 1000000)) ms"

# ---- a directory as a tar, up and back
src="$ITEST_TMP/files-src-$tag"
mkdir -p "$src/sub/deeper"
head -c $((3 * 1024 * 1024)) /dev/urandom >"$src/big.bin"
printf '#!/bin/sh\necho hi\n' >"$src/run.sh"
chmod 0750 "$src/run.sh"
touch -d '2001-02-03 04:05:06 UTC' "$src/run.sh"
printf 'deep\n' >"$src/sub/deeper/note.txt"
ln -s big.bin "$src/link"
tar -C "$src" -cf "$ITEST_TMP/src.tar" .
assert_eq '200 ok {"bytes":'"$(stat -c %s "$ITEST_TMP/src.tar")"'}' "$(fc "$sbx" put-tar /work "$ITEST_TMP/src.tar")" \
  "put of a tar"
assert_eq "$(sha256sum <"$src/big.bin" | cut -d' ' -f1)" "$(sx "$sbx" -- sha256sum /work/big.bin | cut -d' ' -f1)" \
  "the 3 MiB file inside the container"
got=$(fc "$sbx" get /work tar "$ITEST_TMP/back.tar")
assert_match "$got" '^200 ok \{"name":"work","size":[0-9]+,"mode":[0-9]+,"mtime":"[^"]+","link_target":"","type":"dir"\}$' \
  "the stat line of a directory"
python3 - "$src" "$ITEST_TMP/back.tar" <<'EOF' || fail "the tar that came back differs from what went up"
import hashlib, os, sys, tarfile
src, back = sys.argv[1], sys.argv[2]
t = tarfile.open(back)
members = {m.name[len("work/"):] if m.name.startswith("work/") else m.name: m for m in t.getmembers()}
def digest(b): return hashlib.sha256(b).hexdigest()
for rel in ["big.bin", "run.sh", "sub/deeper/note.txt"]:
    m = members[rel]
    p = os.path.join(src, rel)
    st = os.lstat(p)
    data = t.extractfile(m).read()
    assert digest(data) == digest(open(p, "rb").read()), rel + " bytes"
    assert m.mode & 0o7777 == st.st_mode & 0o7777, f"{rel} mode {oct(m.mode)} != {oct(st.st_mode)}"
    assert int(m.mtime) == int(st.st_mtime), f"{rel} mtime {m.mtime} != {st.st_mtime}"
assert members["run.sh"].mode & 0o777 == 0o750
assert int(members["run.sh"].mtime) == 981173106, members["run.sh"].mtime
assert members["link"].issym() and members["link"].linkname == "big.bin", "symlink"
assert members["sub"].isdir() and members["sub/deeper"].isdir(), "directories"
print("tar round trip ok")
EOF

# ---- raw: a binary file with NULs, up and down
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 4099 + b"\0\0end\0")' >"$ITEST_TMP/bin.dat"
size=$(stat -c %s "$ITEST_TMP/bin.dat")
assert_eq "200 ok {\"bytes\":$size}" "$(fc "$sbx" put-raw /work/data/../bin.dat "$ITEST_TMP/bin.dat" 0600)" "put of a raw file"
assert_eq "600 $size" "$(sx "$sbx" -- stat -c '%a %s' /work/bin.dat)" "the raw file's mode and size inside"
got=$(fc "$sbx" get /work/bin.dat raw "$ITEST_TMP/bin.back")
assert_match "$got" "^200 ok \\{\"name\":\"bin.dat\",\"size\":$size,\"mode\":384,\"mtime\":\"[^\"]+\",\"link_target\":\"\",\"type\":\"file\"\\}\$" \
  "the stat line of a raw get"
cmp "$ITEST_TMP/bin.dat" "$ITEST_TMP/bin.back" || fail "the raw file that came back differs"
# an empty raw file
: >"$ITEST_TMP/empty"
assert_eq '200 ok {"bytes":0}' "$(fc "$sbx" put-raw /work/empty "$ITEST_TMP/empty" 0644)" "put of an empty file"
assert_eq "0" "$(sx "$sbx" -- stat -c %s /work/empty)" "the empty file inside"

# ---- list
fc "$sbx" get /work list "$ITEST_TMP/list.json" >/dev/null
python3 - "$ITEST_TMP/list.json" <<'EOF' || fail "the listing of /work is wrong: $(cat "$ITEST_TMP/list.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
e = {x["name"]: x for x in doc["entries"]}
assert set(e) == {"big.bin", "run.sh", "sub", "link", "bin.dat", "empty"}, sorted(e)
assert e["sub"]["type"] == "dir" and e["link"]["type"] == "symlink" and e["link"]["link_target"] == "big.bin"
assert e["big.bin"]["type"] == "file" and e["big.bin"]["size"] == 3 * 1024 * 1024
assert e["run.sh"]["mode"] == 0o750 and e["run.sh"]["mtime"] == "2001-02-03T04:05:06Z", e["run.sh"]
assert doc["truncated"] is False
EOF

# a directory of 10001 entries lists 10000 and says it is truncated
sx "$sbx" -- sh -c 'mkdir -p /work/many && cd /work/many && i=0 && while [ $i -le 10000 ]; do : >f$i; i=$((i + 1)); done' \
  >/dev/null
fc "$sbx" get /work/many list "$ITEST_TMP/many.json" >/dev/null
python3 - "$ITEST_TMP/many.json" <<'EOF' || fail "the listing of 10001 entries is not 10000 and truncated"
import json, sys
doc = json.load(open(sys.argv[1]))
assert len(doc["entries"]) == 10000 and doc["truncated"] is True, (len(doc["entries"]), doc["truncated"])
EOF
sx "$sbx" -- rm -rf /work/many >/dev/null

# ---- refusals
assert_match "$(fc "$sbx" get /work raw "$ITEST_TMP/x")" '^400 invalid_argument work is a directory; use the tar form$' \
  "raw get of a directory"
assert_match "$(fc "$sbx" get /work/nope tar "$ITEST_TMP/x")" '^404 not_found ' "get of a missing path"
assert_match "$(fc "$sbx" put-tar /nope/dir "$ITEST_TMP/src.tar")" '^404 not_found ' "put into a missing directory"
assert_eq "403 forbidden the request does not match its grant" "$(fc "$sbx" digest-mismatch /etc/shadow)" \
  "a request line other than the signed one"
assert_match "$(fc sbx_nosuchsandbox00000000000 get /work tar "$ITEST_TMP/x")" '^404 not_found ' \
  "a sandbox this worker does not run"
assert_match "$(fc "$sbx" put-tar /work/bin.dat "$ITEST_TMP/src.tar")" '^400 invalid_argument ' \
  "a tar put into a path that is a file"
assert_match "$(fc "$sbx" put-raw /work/sub "$ITEST_TMP/empty" 0644)" '^400 invalid_argument ' \
  "a raw put over a directory (noOverwriteDirNonDir)"
assert_eq "directory" "$(sx "$sbx" -- stat -c %F /work/sub)" "the directory is still one"

# ---- an aborted upload leaves no complete file
assert_eq "(no answer)" "$(fc "$sbx" put-abort /work/aborted.bin 200000)" "an upload closed before its END frame"
left=$(sx "$sbx" -- sh -c 'stat -c %s /work/aborted.bin 2>/dev/null || echo none')
[ "$left" != 200000 ] || fail "the aborted upload left a complete /work/aborted.bin"
itest_log "after the aborted upload: /work/aborted.bin is $left"

# ---- paths outside the container's root
printf 'inside\n' >"$ITEST_TMP/x.txt"
assert_eq '200 ok {"bytes":7}' "$(fc "$sbx" put-raw "/../../etc/itest-files-$tag" "$ITEST_TMP/x.txt" 0644)" \
  "put to /../../etc/NAME"
[ ! -e "/etc/itest-files-$tag" ] || fail "a put to /../../etc/itest-files-$tag wrote the host's /etc"
assert_eq "inside" "$(sx "$sbx" -- cat "/etc/itest-files-$tag")" "the file is in the container's /etc"
python3 - "$ITEST_TMP/evil.tar" "$tag" <<'EOF'
import io, sys, tarfile
tag = sys.argv[2]
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    for name in [f"../../itest-escape-{tag}", f"../../../../../../tmp/itest-escape-{tag}"]:
        ti = tarfile.TarInfo(name); ti.size = 4; t.addfile(ti, io.BytesIO(b"evil"))
EOF
evil=$(fc "$sbx" put-tar /work "$ITEST_TMP/evil.tar")
itest_log "a tar with ../ members: $evil"
[ ! -e "/itest-escape-$tag" ] && [ ! -e "/tmp/itest-escape-$tag" ] || fail "a ../ tar member landed on the host"
found=$(find /var/lib/docker -maxdepth 6 -name "itest-escape-$tag" 2>/dev/null | grep -v '/diff/' || true)
[ -z "$found" ] || fail "a ../ tar member landed outside a container's layer: $found"
python3 - "$ITEST_TMP/link.tar" "$tag" <<'EOF'
import io, sys, tarfile
tag = sys.argv[2]
with tarfile.open(sys.argv[1], "w") as t:
    ti = tarfile.TarInfo("hostetc"); ti.type = tarfile.SYMTYPE; ti.linkname = "/etc"; t.addfile(ti)
    ti = tarfile.TarInfo(f"hostetc/itest-pwned-{tag}"); ti.size = 4; t.addfile(ti, io.BytesIO(b"evil"))
EOF
linked=$(fc "$sbx" put-tar /work "$ITEST_TMP/link.tar")
itest_log "a tar with a symlink to /etc and a file through it: $linked"
[ ! -e "/etc/itest-pwned-$tag" ] || { rm -f "/etc/itest-pwned-$tag"; fail "a file through a symlink member reached the host's /etc"; }
case "$linked" in
  "200 ok "*) assert_eq "evil" "$(sx "$sbx" -- cat "/etc/itest-pwned-$tag")" "the file through the symlink, in the container's /etc" ;;
  "400 invalid_argument "*) ;;
  *) fail "a tar with a symlink to /etc: unexpected answer [$linked]" ;;
esac
assert_match "$evil" '^400 invalid_argument .*is outside of' "a tar with ../ members is refused"

# ---- bounds: max_bytes and the disk quota
assert_match "$(fc "$sbx" put-raw-size /work/big2 $((2 * 1024 * 1024)) $((1024 * 1024)))" \
  '^413 payload_too_large the upload is larger than the 1048576 bytes' "a raw upload over max_bytes"
assert_match "$(fc "$sbx" put-tar-stream /work $((3 * 1024 * 1024)) $((1024 * 1024)))" \
  '^413 payload_too_large the upload is larger than the 1048576 bytes' "a tar upload streaming past max_bytes"
assert_match "$(fc "$small" put-raw-size /tmp/fill $((20 * 1024 * 1024)))" \
  "^413 payload_too_large the upload's 20971520 bytes do not fit in what the sandbox's disk quota of 16 MiB has left" \
  "a raw upload over the disk quota"
assert_match "$(fc "$small" put-tar-stream /tmp $((20 * 1024 * 1024)))" \
  "^413 payload_too_large the upload does not fit in what the sandbox's disk quota of 16 MiB has left" \
  "a tar upload streaming past the disk quota"

# ---- gVisor: the root filesystem is shared with the host; /tmp is the
# sandbox's own tmpfs, which the worker cannot reach, and says so
gv=$(create --isolation gvisor)
itest_track "$gv"
sx "$gv" -- mkdir -p /work >/dev/null
assert_eq "200 ok {\"bytes\":$size}" "$(fc "$gv" put-raw /work/bin.dat "$ITEST_TMP/bin.dat" 0640)" "put into a gVisor sandbox"
assert_eq "$(sha256sum <"$ITEST_TMP/bin.dat" | cut -d' ' -f1)" "$(sx "$gv" -- sha256sum /work/bin.dat | cut -d' ' -f1)" \
  "the file as the gVisor sandbox sees it"
sx "$gv" -- sh -c 'printf made-inside > /work/inside.txt' >/dev/null
fc "$gv" get /work/inside.txt raw "$ITEST_TMP/inside.txt" >/dev/null
assert_eq "made-inside" "$(cat "$ITEST_TMP/inside.txt")" "a file written inside the gVisor sandbox, downloaded"
assert_match "$(fc "$gv" put-raw /tmp/x "$ITEST_TMP/x.txt" 0644)" \
  '^400 invalid_argument in a gvisor sandbox /tmp is on the sandbox.s own tmpfs' "a put into gVisor's /tmp"
assert_match "$(fc "$gv" get /tmp tar "$ITEST_TMP/x")" '^400 invalid_argument in a gvisor sandbox /tmp' \
  "a get of gVisor's /tmp"

# ---- 128 MiB up and down: streamed (the worker's peak memory grows by
# less than 32 MiB), equal bytes; timed beside docker cp of the same file
MIB128=$((128 * 1024 * 1024))
bigf="$ITEST_TMP/big128.bin"
head -c "$MIB128" /dev/urandom >"$bigf"
hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$wpid/status"; }
hwm0=$(hwm)
t0=$(date +%s%N)
assert_eq "200 ok {\"bytes\":$MIB128}" "$(fc "$sbx" put-raw /work/big128.bin "$bigf" 0644)" "put of 128 MiB"
t1=$(date +%s%N)
fc "$sbx" get /work/big128.bin raw "$ITEST_TMP/big128.back" >/dev/null
t2=$(date +%s%N)
cmp "$bigf" "$ITEST_TMP/big128.back" || fail "the 128 MiB file that came back differs"
rm -f "$ITEST_TMP/big128.back"
hwm1=$(hwm)
[ $((hwm1 - hwm0)) -lt 32768 ] || fail "the worker's peak RSS grew by $((hwm1 - hwm0)) KiB moving 128 MiB"
docker cp "$bigf" "sbx-$sbx:/work/dcp.bin"
t3=$(date +%s%N)
docker cp "sbx-$sbx:/work/dcp.bin" - >/dev/null
t4=$(date +%s%N)
ms() { echo $((($2 - $1) / 1000000)); }
itest_log "128 MiB: forwarder put $(ms "$t0" "$t1") ms, get $(ms "$t1" "$t2") ms; docker cp in $(ms "$t2" "$t3") ms," \
  "out $(ms "$t3" "$t4") ms; worker peak RSS +$((hwm1 - hwm0)) KiB"
rm -f "$bigf"
sx "$sbx" -- rm -f /work/big128.bin /work/dcp.bin >/dev/null

# ---- over TLS (worker_route_tls_cert): a worker of its own, no gVisor
pki="$ITEST_TMP/files-pki-$tag"
mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=itest files ca" -keyout "$pki/ca.key" \
  -out "$pki/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$pki/server.ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
  -extfile "$pki/server.ext" -out "$pki/server.pem" 2>/dev/null
[ -s "$pki/server.pem" ] || fail "openssl could not make the test certificates"
tname="itest-files-tls-$tag"
tlog="$ITEST_TMP/worker-files-tls-$tag.log"
itest_watch_log "$tlog"
ttoken=$(itest_token itest-workers worker "$tname")
tpid=
start_tls_worker() {
  SANDBOX_WORKER_TOKEN="$ttoken" SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=8192 \
    SANDBOX_WORKER_LABELS="itest-files-tls=$tag" SANDBOX_WORKER_GVISOR_RUNTIME='' \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$tname" --docker-socket /var/run/docker.sock \
    --worker-route-tls-cert "$pki/server.pem" --worker-route-tls-key "$pki/server.key" >>"$tlog" 2>&1 </dev/null &
  tpid=$!
  itest_track_pid "$tpid"
  itest_await "$tpid" "$tlog" 60 "TLS worker exited before registering" "worker $tname not ready" \
    itest_worker_ready "$tname"
}
stop_tls_worker() { [ -z "$tpid" ] || itest_stop_pid "$tpid" worker 30; }
itest_on_exit stop_tls_worker
start_tls_worker
read -r tid taddr < <("$ITEST_PGBIN/psql" -X -q -At -F ' ' "$DATABASE_URL" \
  -c "SELECT id, route_address FROM workers WHERE name = '$tname'")
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 128 --ttl 600 --selector "itest-files-tls=$tag" \
  --wait --timeout 120) || fail "create on the TLS worker failed: $out"
tsbx=${out%% *}
itest_track "$tsbx"
ftls() { FILES_CA="$pki/ca.pem" python3 "$client" "$taddr" "$ttoken" "$tid" "$tsbx" "$@"; }
assert_eq "200 ok {\"bytes\":$size}" "$(ftls put-raw /tmp/bin.dat "$ITEST_TMP/bin.dat" 0600)" "a put over TLS"
ftls get /tmp/bin.dat raw "$ITEST_TMP/bin.tls" >/dev/null
cmp "$ITEST_TMP/bin.dat" "$ITEST_TMP/bin.tls" || fail "the file that came back over TLS differs"
assert_eq "(no answer)" "$(ftls put-abort /tmp/aborted.bin 200000)" "an aborted upload over TLS"
left=$(sx "$tsbx" -- sh -c 'stat -c %s /tmp/aborted.bin 2>/dev/null || echo none')
[ "$left" != 200000 ] || fail "the aborted TLS upload left a complete file"
assert_eq "" "$(FILES_CA="" python3 "$client" "$taddr" "$ttoken" "$tid" "$tsbx" get /tmp/bin.dat raw "$ITEST_TMP/x" \
  2>/dev/null | grep ' 200 ok' || true)" "plain TCP to a TLS forwarder gets no file"
# a grant this worker signed (its token) for a sandbox another worker runs
# on the same Docker host: that container's labels are not ours
assert_match "$(fc "$tsbx" get /tmp/bin.dat raw "$ITEST_TMP/x")" '^404 not_found ' \
  "a sandbox of another worker on the same Docker host"
assert_match "$(fc "$tsbx" put-raw /tmp/other "$ITEST_TMP/x.txt" 0644)" '^404 not_found ' \
  "a put into another worker's sandbox"

# SIGTERM during an upload: the transfer is answered 503 and the worker
# exits 0 promptly
ftls put-slow /tmp/slow.bin >"$ITEST_TMP/slow.out" 2>&1 &
slowpid=$!
itest_track_pid "$slowpid"
sleep 1
kill -TERM "$tpid"
t0=$(date +%s)
rc=0
wait "$tpid" || rc=$?
assert_eq 0 "$rc" "the TLS worker's exit status after SIGTERM during an upload"
[ $(($(date +%s) - t0)) -le 15 ] || fail "the worker took more than 15 s to stop during an upload"
tpid=
wait "$slowpid" || true
assert_eq "503 busy the worker is shutting down" "$(cat "$ITEST_TMP/slow.out")" "the upload's answer when the worker stops"
start_tls_worker   # back, so that its sandbox can be deleted

# ---- metrics and the log
metrics=$(curl -sf --max-time 5 "http://127.0.0.1:$hport/metrics")
assert_match "$metrics" 'sandbox_worker_file_transfers_total\{op="put",outcome="ok"\} [1-9]' "put transfers counted"
assert_match "$metrics" 'sandbox_worker_file_transfers_total\{op="put",outcome="aborted"\} [1-9]' "the aborted upload counted"
assert_match "$metrics" 'sandbox_worker_file_transfers_total\{op="put",outcome="refused"\} [1-9]' "refusals counted"
assert_match "$metrics" 'sandbox_worker_file_bytes_total\{op="get"\} [1-9]' "bytes sent counted"
assert_contains "$(cat "$wlog")" "file put for sandbox $sbx" "the worker logs each transfer"
echo "files move through the worker's forwarder, bounded and inside the container"
