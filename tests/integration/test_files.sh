#!/usr/bin/env bash
# Files into and out of a sandbox (issue 16 item 1): `sandbox cp` and
# PUT/GET /v1/sandboxes/{id}/files through the real controller, worker
# forwarder and Docker Engine. Pins: a directory with a 100 MiB binary
# file, an executable with an old mtime, a subdirectory, a symlink and a
# name with a space goes up and comes back equal (checksums, modes, mtimes,
# the link); a controller's (a second one on the database, uploaded through)
# and the worker's RSS grow by less than 32 MiB
# while 100 MiB move; docker cp's rule (an existing directory takes the copy
# inside it); a tar on stdin and on stdout (`-`); the raw form both ways with
# NUL bytes; the listing and stat forms; create --upload; each transfer is a
# files.* event; another tenant gets 404, a sandbox that does not run 409,
# bad paths 400, a missing path 404, an upload over files_max_bytes 413 and a
# bad token 401 before a byte of the body is read; a hostile tar (a member
# named ../../x, an absolute one, a symlink pointing out then written
# through) leaves the host untouched; a setuid file of another uid comes out
# without its setuid bit and the CLI user's; a sparse member of every dialect
# GNU tar writes (6 GiB each) is refused 400 with nothing written and the
# sandbox's disk use unchanged; and a gVisor sandbox's files move too.
# itest-timeout: 240
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-files)
other=$(itest_tenant itest-files-other)
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN
stranger=$(itest_token "$other" member)

make_sandbox() {
  local out id
  out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 256 "$@" --wait --timeout 120) ||
    fail "create failed: $out"
  id=${out%% *}
  itest_track "$id"
  printf '%s\n' "$id"
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
in_sbx() { sandbox exec "$1" -- sh -c "$2"; }

sbx=$(make_sandbox)
itest_log "sandbox $sbx"
work="$ITEST_TMP/files-$$"
mkdir -p "$work/src/sub dir"
head -c $((100 * 1024 * 1024)) /dev/urandom >"$work/src/big.bin"
printf 'a\0b\377c\n' >"$work/src/sub dir/nul.bin"
printf '#!/bin/sh\necho hi\n' >"$work/src/run.sh"
chmod 0750 "$work/src/run.sh"
touch -d '2001-02-03 04:05:06 UTC' "$work/src/run.sh"
ln -s "sub dir/nul.bin" "$work/src/link"
big_sum=$(sha256sum <"$work/src/big.bin" | cut -d' ' -f1)

# ---- 1. a directory up: /work does not exist, so /work becomes the copy.
# The memory check reads a second controller on the same database with one
# HTTP thread and ASan's quarantine kept small (freed buffers must not count
# as growth), as test_logs does.
c2port=$(itest_free_port)
c2log="$ITEST_TMP/controller-files.log"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1" \
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c2port" \
  --route-listen "127.0.0.1:$(itest_free_port)" --http-threads 1 >>"$c2log" 2>&1 </dev/null &
cpid=$!
itest_track_pid "$cpid"
itest_watch_log "$c2log"
itest_wait_healthz "http://127.0.0.1:$c2port" "$cpid" "second controller" "$c2log" || fail "second controller did not start"
wpid=$ITEST_WORKER_PID
c0=$(rss_kb "$cpid") w0=$(rss_kb "$wpid")
cmax=$c0 wmax=$w0
( while :; do
    c=$(rss_kb "$cpid") w=$(rss_kb "$wpid")
    printf '%s %s\n' "$c" "$w" >>"$work/rss"
    sleep 0.2
  done ) &
sampler=$!
itest_track_pid "$sampler"
t0=$(date +%s%N)
out=$(SANDBOX_URL="http://127.0.0.1:$c2port" sandbox cp "$work/src" "$sbx:/work") || fail "sandbox cp up failed: $out"
t1=$(date +%s%N)
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
while read -r c w; do
  [ "$c" -gt "$cmax" ] && cmax=$c
  [ "$w" -gt "$wmax" ] && wmax=$w
done <"$work/rss"
itest_log "up: $out in $(((t1 - t0) / 1000000)) ms; controller RSS $c0 -> max $cmax KiB, worker $w0 -> max $wmax KiB"
assert_contains "$out" "copied" "cp's line"
[ $((cmax - c0)) -lt 32768 ] || fail "the controller's RSS grew by $((cmax - c0)) KiB during a 100 MiB upload"
[ $((wmax - w0)) -lt 32768 ] || fail "the worker's RSS grew by $((wmax - w0)) KiB during a 100 MiB upload"
assert_eq "$big_sum" "$(in_sbx "$sbx" 'sha256sum /work/big.bin' | cut -d' ' -f1)" "the 100 MiB file's checksum in the sandbox"
assert_eq "750 981173106" "$(in_sbx "$sbx" 'stat -c "%a %Y" /work/run.sh')" "run.sh's mode and mtime in the sandbox"
assert_eq "sub dir/nul.bin" "$(in_sbx "$sbx" 'readlink /work/link')" "the symlink in the sandbox"
assert_eq "hi" "$(in_sbx "$sbx" '/work/run.sh')" "the executable runs"

# ---- 2. and back down: ./down does not exist, so it becomes the copy
out=$(sandbox cp "$sbx:/work" "$work/down") || fail "sandbox cp down failed: $out"
assert_eq "$big_sum" "$(sha256sum <"$work/down/big.bin" | cut -d' ' -f1)" "the 100 MiB file's checksum back"
cmp "$work/src/sub dir/nul.bin" "$work/down/sub dir/nul.bin" || fail "the NUL file came back different"
assert_eq "750 981173106" "$(stat -c '%a %Y' "$work/down/run.sh")" "run.sh's mode and mtime back"
assert_eq "sub dir/nul.bin" "$(readlink "$work/down/link")" "the symlink back"
# an existing directory takes the copy inside it (docker cp's rule), both ways
mkdir -p "$work/into"
sandbox cp "$sbx:/work/run.sh" "$work/into" >/dev/null || fail "cp of a file into a local directory failed"
[ -x "$work/into/run.sh" ] || fail "cp SBX:/work/run.sh DIR: no DIR/run.sh"
sandbox cp "$work/into/run.sh" "$sbx:/work/sub dir" >/dev/null || fail "cp of a file into a sandbox directory failed"
assert_eq "750" "$(in_sbx "$sbx" 'stat -c %a "/work/sub dir/run.sh"')" "the file copied into an existing directory"
sandbox cp "$work/into/run.sh" "$sbx:/work/renamed.sh" >/dev/null || fail "cp of a file onto a new name failed"
assert_eq "hi" "$(in_sbx "$sbx" '/work/renamed.sh')" "the file copied onto a new name"

# ---- 3. tar streams on stdin and stdout
tar -c -C "$work/src" run.sh "sub dir" | sandbox cp - "$sbx:/tmp" >/dev/null || fail "cp - (tar on stdin) failed"
assert_eq "hi" "$(in_sbx "$sbx" '/tmp/run.sh')" "a file from the stdin tar"
listing=$(sandbox cp "$sbx:/work/sub dir" - | tar -t) || fail "cp SBX:path - failed"
assert_contains "$listing" "sub dir/nul.bin" "the tar on stdout"

# ---- 4. the raw form, the listing and stat, through the API
auth=(-H "Authorization: Bearer $SANDBOX_TOKEN")
code=$(curl -s -o "$work/put.json" -w '%{http_code}' -X PUT "${auth[@]}" --data-binary @"$work/src/sub dir/nul.bin" \
  "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp/raw.bin&format=raw&mode=600")
assert_eq 200 "$code" "a raw upload ($(cat "$work/put.json"))"
assert_eq 6 "$(itest_json "$(cat "$work/put.json")" bytes)" "the raw upload's byte count"
# A client that asks for 100 Continue (curl does on every PUT) gets it
# before it sends the body, not with the answer after its own timeout
# (before: curl waited out its 1 s, here 5 s, on every upload).
trace=$(curl -sv -o "$work/put100.json" -w 'status=%{http_code}\n' -X PUT "${auth[@]}" -H 'Expect: 100-continue' \
  --expect100-timeout 5 --data-binary @"$work/src/sub dir/nul.bin" \
  "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp/raw100.bin&format=raw" 2>&1 |
  grep -E 'status=|100 Continue|Done waiting' || true)
assert_contains "$trace" "status=200" "an upload with Expect: 100-continue ($(cat "$work/put100.json"))"
assert_contains "$trace" "HTTP/1.1 100 Continue" "the 100 Continue"
assert_not_contains "$trace" "Done waiting for 100-continue" "curl's wait for the 100 Continue"
curl -sf "${auth[@]}" "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp/raw.bin&format=raw" -o "$work/raw.back" ||
  fail "a raw download failed"
cmp "$work/src/sub dir/nul.bin" "$work/raw.back" || fail "the raw file came back different"
assert_eq "600" "$(in_sbx "$sbx" 'stat -c %a /tmp/raw.bin')" "the raw upload's mode"
itest_http GET "/v1/sandboxes/$sbx/files?path=/work&format=list" "$SANDBOX_TOKEN"
assert_http 200 "" "the listing"
assert_contains "$HTTP_BODY" '"big.bin"' "the listing names big.bin"
assert_contains "$HTTP_BODY" '"sub dir"' "the listing names the subdirectory"
itest_http GET "/v1/sandboxes/$sbx/files?path=/work/big.bin&format=stat" "$SANDBOX_TOKEN"
assert_http 200 "" "the stat"
assert_eq $((100 * 1024 * 1024)) "$(itest_json "$HTTP_BODY" stat.size)" "the stat's size"

# ---- 4b. a file where no directory is yet, in an image with no mkdir (nor
# sh: its one program is busybox named sleep, which the sandbox runs): the
# worker makes the directories in the upload itself (parents=true, what MCP
# sandbox_write_file sends); nothing in the image is called
nomk="sandbox/itest-nomkdir:$$"
mkdir -p "$work/nomk/bin"
cp /bin/busybox "$work/nomk/bin/sleep"
tar -C "$work/nomk" -c . | docker import - "$nomk" >/dev/null || fail "docker import of $nomk failed"
out=$(sandbox create --image "$nomk" --memory-mib 64 --wait --timeout 120) || fail "create on $nomk failed: $out"
nsb=${out%% *}
itest_track "$nsb"
assert_exit 127 sandbox exec "$nsb" -- mkdir -p /tmp/agent
put_raw() { # put_raw SANDBOX PATH QUERY -> code, body in $work/p.json
  curl -s -o "$work/p.json" -w '%{http_code}' -X PUT "${auth[@]}" --data-binary 'notes, no mkdir' \
    "$SANDBOX_URL/v1/sandboxes/$1/files?path=$2&format=raw$3"
}
assert_eq 404 "$(put_raw "$nsb" /tmp/agent/deep/notes.txt '')" "a raw upload into a missing directory"
assert_eq 200 "$(put_raw "$nsb" /tmp/agent/deep/notes.txt '&parents=true')" \
  "a raw upload with parents=true into missing directories ($(cat "$work/p.json"))"
assert_eq "notes, no mkdir" "$(curl -sf "${auth[@]}" \
  "$SANDBOX_URL/v1/sandboxes/$nsb/files?path=/tmp/agent/deep/notes.txt&format=raw")" "the file read back"
itest_http GET "/v1/sandboxes/$nsb/files?path=/tmp/agent&format=stat" "$SANDBOX_TOKEN"
assert_eq "dir 493" "$(itest_json "$HTTP_BODY" stat.type) $(itest_json "$HTTP_BODY" stat.mode)" "the directory made (0755)"
assert_eq 200 "$(put_raw "$nsb" /tmp/agent/second.txt '&parents=true')" "parents=true where the directory exists"
assert_eq 400 "$(put_raw "$nsb" /tmp/agent/x.txt '&parents=maybe')" "parents that is not a boolean"
itest_http PUT "/v1/sandboxes/$nsb/files?path=/tmp&parents=true" "$SANDBOX_TOKEN" ''
assert_http 400 invalid_argument "parents with a tar upload"
assert_eq 200 "$(put_raw "$sbx" /work/a/b/c.txt '&parents=true')" "parents=true in a busybox sandbox"
assert_eq "notes, no mkdir" "$(in_sbx "$sbx" 'cat /work/a/b/c.txt')" "the file made with its directories"
sandbox delete "$nsb" --wait >/dev/null || fail "delete of the no-mkdir sandbox failed"
docker image rm "$nomk" >/dev/null || true

# ---- 5. errors
itest_http GET "/v1/sandboxes/$sbx/files?path=/work" "$stranger"
assert_http 404 not_found "another tenant's download"
code=$(curl -s -o "$work/e.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $stranger" --data-binary @"$work/src/run.sh" \
  "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp/x&format=raw")
assert_eq 404 "$code" "another tenant's upload ($(cat "$work/e.json"))"
itest_http GET "/v1/sandboxes/$sbx/files?path=relative" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "a relative path"
itest_http GET "/v1/sandboxes/$sbx/files" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "no path"
itest_http GET "/v1/sandboxes/$sbx/files?path=/work&format=zip" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "an unknown format"
itest_http GET "/v1/sandboxes/$sbx/files?path=/no/such/file" "$SANDBOX_TOKEN"
assert_http 404 not_found "a missing path"
# in the sandbox's words: the path, not Docker's container id
assert_contains "$HTTP_BODY" "no such file or directory in the sandbox: /no/such/file" "a missing path's message"
assert_not_contains "$HTTP_BODY" "container" "a missing path's message"
itest_http PUT "/v1/sandboxes/$sbx/files?path=/work" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "an empty upload"
assert_exit 3 sandbox cp "$sbx:/no/such" "$work/nothing"
assert_contains "$ITEST_ERR" "not_found" "cp of a missing path"
assert_contains "$ITEST_ERR" "/no/such" "cp of a missing path names it"
assert_eq "" "$(printf '%s' "$ITEST_ERR" | grep -oE '[0-9a-f]{64}' || true)" "a container id in cp's error"
# over files_max_bytes, and a bad token: refused at the head, the body never read
r=$(python3 - "$SANDBOX_URL" "$sbx" "$SANDBOX_TOKEN" "$stranger" <<'PY'
import socket, sys, time, json
url, sbx, tok = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = url.split("//")[1].split(":")
def ask(token, length):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall((f"PUT /v1/sandboxes/{sbx}/files?path=/tmp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
               f"Content-Length: {length}\r\n\r\n").encode())
    t = time.monotonic()
    b = b""
    while b"\r\n\r\n" not in b:
        c = s.recv(4096)
        if not c:
            break
        b += c
    s.close()
    return {"status": int(b.split(b" ", 2)[1]) if b else 0, "ms": round((time.monotonic() - t) * 1000)}
def refused_with_body(token, n):
    # a refused upload whose body was sent anyway, then a request smuggled in the body
    s = socket.create_connection((host, int(port)), timeout=10)
    body = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * (n // 40)
    s.sendall((f"PUT /v1/sandboxes/{sbx}/files?path=/tmp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    b = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            b += c
    except OSError:
        pass
    s.close()
    return {"status": int(b.split(b" ", 2)[1]) if b else 0, "answers": b.count(b"HTTP/1.1 "),
            "close": b"Connection: close" in b}
print(json.dumps({"big": ask(tok, 5 << 40), "bad": ask("sbx_bad_token", 100 << 20),
                  "stranger": refused_with_body(sys.argv[4], 300 << 10)}))
PY
)
assert_eq 413 "$(itest_json "$r" big.status)" "an upload over files_max_bytes, before its body ($r)"
assert_eq 401 "$(itest_json "$r" bad.status)" "an upload with a bad token, before its body ($r)"
assert_eq 404 "$(itest_json "$r" stranger.status)" "another tenant's upload with its body sent ($r)"
assert_eq 1 "$(itest_json "$r" stranger.answers)" "answers to a refused upload whose body held requests ($r)"
assert_eq true "$(itest_json "$r" stranger.close)" "a refused upload's answer closes the connection ($r)"
# a sandbox that does not run
gone=$(make_sandbox)
sandbox delete "$gone" --wait --timeout 120 >/dev/null || fail "delete failed"
itest_http GET "/v1/sandboxes/$gone/files?path=/" "$SANDBOX_TOKEN"
assert_http 409 conflict "a deleted sandbox's files"

# ---- 6. a hostile tar leaves the host alone
python3 - "$work" <<'PY'
import io, sys, tarfile
def evil(name, members):
    t = tarfile.open(f"{sys.argv[1]}/{name}.tar", "w")
    for m, kind, link in members:
        i = tarfile.TarInfo(m); i.type = kind; i.linkname = link
        i.size = 1 if kind == tarfile.REGTYPE else 0
        t.addfile(i, io.BytesIO(b"x") if kind == tarfile.REGTYPE else None)
    t.close()
evil("dotdot", [("../../../../sbx-itest-escape-dotdot", tarfile.REGTYPE, "")])
evil("abs", [("/sbx-itest-escape-abs", tarfile.REGTYPE, "")])
evil("link", [("out", tarfile.SYMTYPE, "/"), ("out/sbx-itest-escape-link", tarfile.REGTYPE, "")])
evil("dirlink", [("d", tarfile.SYMTYPE, "/etc"), ("d/", tarfile.DIRTYPE, ""), ("d/sbx-itest-escape-dirlink", tarfile.REGTYPE, "")])
PY
for e in dotdot abs link dirlink; do
  curl -s -o "$work/evil.json" -X PUT "${auth[@]}" --data-binary @"$work/$e.tar" \
    "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp" || true
  itest_log "hostile tar ($e): $(cat "$work/evil.json")"
done
for f in /sbx-itest-escape-dotdot /sbx-itest-escape-abs /sbx-itest-escape-link /etc/sbx-itest-escape-dirlink; do
  [ ! -e "$f" ] || { rm -f "$f"; fail "a hostile tar member reached the host: $f"; }
done
kill -0 "$ITEST_WORKER_PID" || fail "the worker died on a hostile tar"
# a symlink the sandbox made to / is resolved inside the sandbox, not on the host
in_sbx "$sbx" 'ln -s / /tmp/root && echo sandbox-side > /etc/sbx-itest-mark' >/dev/null
curl -sf "${auth[@]}" "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/tmp/root/etc/sbx-itest-mark&format=raw" \
  -o "$work/mark" || fail "a download through the sandbox's own symlink failed"
assert_eq "sandbox-side" "$(cat "$work/mark")" "a download through a symlink to / reads the sandbox's file"
[ ! -e /etc/sbx-itest-mark ] || fail "the sandbox's file is on the host"
# parents=true through symlinks the sandbox made: the missing directories
# are looked up and made inside the sandbox, never on the host (one link to
# a host-looking path, one climbing out with ..)
mark="sbx-itest-parents-$$"
in_sbx "$sbx" "mkdir /tmp/$mark-host /tmp/$mark-up && ln -s /tmp/$mark-host /tmp/plink &&
  ln -s ../../../../../../tmp/$mark-up /tmp/pup && ln -s /tmp/$mark-dangling /tmp/pdangle" >/dev/null
assert_eq 200 "$(put_raw "$sbx" "/tmp/plink/a/b.txt" '&parents=true')" "parents=true through a symlink ($(cat "$work/p.json"))"
assert_eq 200 "$(put_raw "$sbx" "/tmp/pup/c/d.txt" '&parents=true')" "parents=true through a symlink with .. ($(cat "$work/p.json"))"
assert_eq 404 "$(put_raw "$sbx" "/tmp/pdangle/e/f.txt" '&parents=true')" "parents=true through a dangling symlink"
for f in "/tmp/$mark-host" "/tmp/$mark-up" "/tmp/$mark-dangling"; do
  [ ! -e "$f" ] || { rm -rf "$f"; fail "parents=true through a sandbox's symlink made $f on the host"; }
done
assert_eq "notes, no mkdir|notes, no mkdir" \
  "$(in_sbx "$sbx" "cat /tmp/$mark-host/a/b.txt; echo '|'; cat /tmp/$mark-up/c/d.txt" | tr -d '\n')" \
  "the files landed in the sandbox, where its links point there"

# ---- 6b. files out are data: a root-run CLI keeps no setuid or setgid bit
# and no owner of the sandbox's
t6=$(date +%s%N)
in_sbx "$sbx" 'mkdir -p /work/sx/sg && printf "#!/bin/sh\n" > /work/sx/suid && chown 1234:1234 /work/sx/suid &&
  chmod 4755 /work/sx/suid && chown 1234:1234 /work/sx/sg && chmod 2775 /work/sx/sg' >/dev/null
sandbox cp "$sbx:/work/sx/suid" "$work/suid" >/dev/null || fail "cp of a setuid file failed"
assert_eq "755 $(id -u):$(id -g)" "$(stat -c '%a %u:%g' "$work/suid")" "a 4755 file of uid 1234, copied out by uid $(id -u)"
sandbox cp "$sbx:/work/sx" "$work/sx" >/dev/null || fail "cp of a directory with setuid and setgid entries failed"
assert_eq "755 775 $(id -u)" "$(stat -c %a "$work/sx/suid") $(stat -c '%a %u' "$work/sx/sg")" \
  "a 4755 file and a 2775 directory of uid 1234, copied out as a tree"

# ---- 6c. sparse members (every dialect GNU tar writes, each 6 GiB with 4
# bytes of data) are refused before a byte reaches Docker: 400, nothing in
# the directory, the writable layer as large as before
truncate -s 6G "$work/sparse.img"
printf data | dd of="$work/sparse.img" bs=1 seek=1048576 conv=notrunc status=none
for v in 1.0 0.1 0.0; do tar -C "$work" --sparse --format=posix --sparse-version="$v" -cf "$work/sp-$v.tar" sparse.img; done
tar -C "$work" --sparse --format=gnu -cf "$work/sp-gnu.tar" sparse.img
in_sbx "$sbx" 'mkdir -p /work/sp' >/dev/null
size_rw() { docker inspect --size -f '{{.SizeRw}}' "sbx-$sbx"; }
rw0=$(size_rw)
for v in 1.0 0.1 0.0 gnu; do
  code=$(curl -s -o "$work/sp.json" -w '%{http_code}' -X PUT "${auth[@]}" --data-binary @"$work/sp-$v.tar" \
    "$SANDBOX_URL/v1/sandboxes/$sbx/files?path=/work/sp")
  assert_eq 400 "$code" "a sparse upload ($v: $(cat "$work/sp.json"))"
  assert_contains "$(cat "$work/sp.json")" "member sparse.img is a sparse file" "the refusal of a sparse upload ($v)"
done
assert_eq "" "$(in_sbx "$sbx" 'ls -A /work/sp')" "what the sparse uploads left in /work/sp"
assert_eq "$rw0" "$(size_rw)" "the sandbox's writable layer (bytes) after the sparse uploads"
rm -f "$work/sparse.img" "$work"/sp-*.tar
itest_log "setuid and sparse steps: $((($(date +%s%N) - t6) / 1000000)) ms"

# ---- 7. create --upload, events, and a gVisor sandbox
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 128 --upload "$work/src/sub dir:/src" --timeout 120) ||
  fail "create --upload failed: $out"
up=${out%% *}
itest_track "$up"
nul_sum=$(sha256sum <"$work/src/sub dir/nul.bin" | cut -d' ' -f1)
assert_eq "$nul_sum" "$(in_sbx "$up" 'sha256sum /src/nul.bin' | cut -d' ' -f1)" "create --upload: /src/nul.bin"
# --upload of a project leaves out .git and what .gitignore lists, and
# --exclude's patterns; --no-ignore sends them; cp sends everything but
# --exclude's (issue 28 item 7)
proj="$work/proj"
mkdir -p "$proj/src" "$proj/build" "$proj/node_modules/m"
git init -q "$proj" || fail "git init failed"
printf 'build/\n*.o\n' >"$proj/.gitignore"
printf 'int main;\n' >"$proj/src/a.c"
printf 'obj' >"$proj/src/a.o"
printf 'out' >"$proj/build/out"
printf 'x' >"$proj/node_modules/m/i.js"
printf 'tmp' >"$proj/src/scratch.tmp"
files() { in_sbx "$1" "find $2 -type f | sort | tr '\n' ' ' | sed 's/ \$//'"; }
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --upload "$proj:/p" --exclude node_modules \
  --exclude '*.tmp' --timeout 120) || fail "create --upload with --exclude failed: $out"
pu=${out%% *}
itest_track "$pu"
assert_eq "/p/.gitignore /p/src/a.c" "$(files "$pu" /p)" \
  "what --upload sent of a git project (.git, what .gitignore lists and --exclude's patterns left out)"
# not a git work tree: tar's reading of .gitignore (patterns like *.o) and no VCS folder
plain="$work/plainproj"
mkdir -p "$plain/.hg" "$plain/src"
printf '*.o\n' >"$plain/.gitignore"
printf 'int main;\n' >"$plain/src/a.c"
printf 'obj' >"$plain/src/a.o"
printf 'x' >"$plain/.hg/store"
sandbox cp "$plain" "$pu:/q" >/dev/null || fail "cp of a plain folder failed"
assert_eq "/q/.gitignore /q/.hg/store /q/src/a.c /q/src/a.o" "$(files "$pu" /q)" "cp sends everything"
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --upload "$proj:/p" --no-ignore --timeout 120) ||
  fail "create --upload --no-ignore failed: $out"
pn=${out%% *}
itest_track "$pn"
assert_eq "/p/.gitignore /p/build/out /p/node_modules/m/i.js /p/src/a.c /p/src/a.o /p/src/scratch.tmp" \
  "$(files "$pn" /p | tr ' ' '\n' | grep -v '^/p/\.git/' | tr '\n' ' ' | sed 's/ $//')" "what --upload --no-ignore sent"
assert_contains "$(files "$pn" /p)" "/p/.git/HEAD" "--upload --no-ignore sends .git"
sandbox cp "$proj" "$pn:/c" --exclude .git --exclude 'build' >/dev/null || fail "cp --exclude failed"
assert_eq "/c/.gitignore /c/node_modules/m/i.js /c/src/a.c /c/src/a.o /c/src/scratch.tmp" "$(files "$pn" /c)" \
  "what cp --exclude sent"
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --upload "$plain:/r" --timeout 120) ||
  fail "create --upload of a plain folder failed: $out"
pr=${out%% *}
itest_track "$pr"
assert_eq "/r/src/a.c" "$(files "$pr" /r)" "what --upload sent of a folder outside git (tar's reading)"
# a folder git ignores as a whole (a build output) is sent as it is
out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --upload "$proj/build:/b" --timeout 120) ||
  fail "create --upload of an ignored folder failed: $out"
pb=${out%% *}
itest_track "$pb"
assert_eq "/b/out" "$(files "$pb" /b)" "what --upload sent of a folder git ignores"
assert_exit 2 sandbox cp "$pn:/c" "$work/cback" --exclude x
assert_contains "$ITEST_ERR" "--exclude applies to an upload" "cp --exclude on a download"
assert_exit 2 sandbox create --exclude x
assert_contains "$ITEST_ERR" "--exclude applies to --upload" "create --exclude without --upload"
for x in "$pu" "$pn" "$pr" "$pb"; do sandbox delete "$x" >/dev/null || fail "delete $x failed"; done
ev=$(curl -sf "${auth[@]}" "$SANDBOX_URL/v1/events?sandbox=$sbx&kind=files.")
assert_contains "$ev" '"files.uploaded"' "an upload's event"
assert_contains "$ev" '"files.downloaded"' "a download's event"
itest_require_gvisor
gv=$(make_sandbox --isolation gvisor)
sandbox cp "$work/src/sub dir" "$gv:/g" >/dev/null || fail "cp into a gVisor sandbox failed"
assert_eq "$nul_sum" "$(in_sbx "$gv" 'sha256sum /g/nul.bin' | cut -d' ' -f1)" "the file a gVisor sandbox sees"
sandbox cp "$gv:/g" "$work/gback" >/dev/null || fail "cp out of a gVisor sandbox failed"
cmp "$work/src/sub dir/nul.bin" "$work/gback/nul.bin" || fail "the gVisor copy came back different"
rm -rf "$work"
echo "files up and down: 100 MiB equal with bounded RSS, modes, mtimes, links, docker cp's rule, tar on stdin/stdout, raw, list, stat, errors, a hostile tar, create --upload (with .git, .gitignore and --exclude left out), events, gVisor"
