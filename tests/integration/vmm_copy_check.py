#!/usr/bin/env python3
"""A microvm snapshot's copy between two reference drivers (sandbox-vmm),
spoken to as a worker speaks (docs/runtime-drivers.md: JSON-RPC on stdin and
stdout, raw byte streams on $SBX_DRIVER_RUNDIR/streams.sock), with no VM
booted: driver A holds a snapshot made of files (a qcow2 made by qemu-img
and its meta.json, as a snapshot call leaves them, with a saved machine for
the memory case); snapshot_export sends it as a tar; driver B's
snapshot_import keeps it as its own (its labels, the disk given to QEMU's
user, the same bytes) and a second import answers the same. Then B is sent
what a hostile worker could send, and each is refused with nothing kept: a
disk with a backing file (a host file QEMU would read), with an external
data file, of another size than its meta.json says, a member outside the
snapshot's directory, a symlink, another tenant's or installation's
snapshot, a memory snapshot without its saved state or with a kernel
command line holding a newline, a member that is no file of a snapshot, a
cut stream. Usage: vmm_copy_check.py SANDBOX_VMM WORKDIR. Prints "ok ..."
per check; exits 1 at the first failure."""
import io
import json
import os
import pwd
import secrets
import socket
import subprocess
import sys
import tarfile
import threading
import time

VMM, WORK = sys.argv[1], sys.argv[2]
CLUSTER = "cl-" + secrets.token_hex(4)
TENANT = "acme"


def fail(msg):
    print("FAIL " + msg, flush=True)
    sys.exit(1)


def ok(msg):
    print("ok " + msg, flush=True)


class Driver:
    def __init__(self, name):
        self.state = os.path.join(WORK, name, "state")
        self.rundir = os.path.join(WORK, name, "run")
        os.makedirs(self.state)
        os.makedirs(self.rundir, mode=0o700)
        env = dict(os.environ, SBX_DRIVER_RUNDIR=self.rundir)
        self.proc = subprocess.Popen([VMM, "--state", self.state, "--accel", "tcg"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(os.path.join(WORK, name + ".log"), "wb"),
                                     env=env)
        self.next_id = 0
        self.answers = {}
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        hello = self.call("hello", {"protocols": [1], "worker": name})
        if "snapshot_copy" not in hello.get("result", {}).get("capabilities", []):
            fail(f"driver {name} does not offer snapshot_copy: {hello}")

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.cv:
                self.answers[msg.get("id")] = msg
                self.cv.notify_all()

    def send(self, method, params):
        self.next_id += 1
        i = self.next_id
        line = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        return i

    def answer(self, i, timeout=60):
        end = time.time() + timeout
        with self.cv:
            while i not in self.answers:
                if time.time() > end or self.proc.poll() is not None:
                    fail(f"no answer to call {i} (driver exit {self.proc.poll()})")
                self.cv.wait(0.5)
            return self.answers.pop(i)

    def call(self, method, params):
        return self.answer(self.send(method, params))

    def stream(self, token):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(self.rundir, "streams.sock"))
        s.sendall(token.encode() + b"\n")
        return s

    def export(self, snp):
        token = secrets.token_hex(16)
        i = self.send("snapshot_export", {"snapshot_id": snp, "stream": token})
        s = self.stream(token)
        a = self.answer(i)  # the answer comes before the body, as files_get's
        if "result" not in a:
            s.close()
            return a, b""
        data = bytearray()
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        return a, bytes(data)

    def import_(self, snp, data, tenant=TENANT, cluster=None):
        token = secrets.token_hex(16)
        labels = {"dev.sandbox.managed": "snapshot", "dev.sandbox.cluster": cluster or CLUSTER,
                  "dev.sandbox.worker": "worker-b"}
        i = self.send("snapshot_import", {"snapshot_id": snp, "tenant": tenant, "labels": labels, "stream": token})
        s = self.stream(token)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the driver refused before taking it all: its answer says why
        a = self.answer(i)
        s.close()
        return a

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def snp_id():
    return "snp_" + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(26))


def qcow2(path, size, *extra):
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *extra, path, str(size)], check=True)


def make_snapshot(d, snp, memory=False, disk_bytes=64 << 20):
    """A snapshot in driver d's state as its snapshot call leaves one."""
    sdir = os.path.join(d.state, "snapshots", snp)
    os.makedirs(sdir, mode=0o711)
    qcow2(os.path.join(sdir, "disk.qcow2"), disk_bytes)
    # some data in it, to be carried
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 1M 2M", os.path.join(sdir, "disk.qcow2")],
                   check=True, stdout=subprocess.DEVNULL)
    meta = {"id": snp, "tenant": TENANT, "image": "sandbox/busybox:latest", "disk_bytes": disk_bytes,
            "size_bytes": 3 << 20, "memory": memory, "source": "sbx_x", "created_at": int(time.time()),
            "labels": {"dev.sandbox.managed": "snapshot", "dev.sandbox.cluster": CLUSTER,
                       "dev.sandbox.worker": "worker-a"}}
    if memory:
        machine = {"vcpus": 1, "memory_mb": 256, "disk_bytes": disk_bytes, "accel": "tcg", "release": "6.1.0",
                   "initrd": "/var/cache/x/initramfs-6.1.0-0123456789abcdef.cpio", "append": "console=ttyS0"}
        open(os.path.join(sdir, "machine.json"), "w").write(json.dumps(machine))
        open(os.path.join(sdir, "append"), "w").write("console=ttyS0 panic=-1")
        open(os.path.join(sdir, "state.mig"), "wb").write(os.urandom(1 << 20))
    open(os.path.join(sdir, "meta.json"), "w").write(json.dumps(meta))
    return sdir


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() if m.isfile() else m for m in t.getmembers()}


def tar_of(entries):
    """entries: (name, bytes) for files, (name, None, target) for symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            ti = tarfile.TarInfo(e[0])
            if e[1] is None:
                ti.type, ti.linkname = tarfile.SYMTYPE, e[2]
                t.addfile(ti)
            else:
                ti.size, ti.mode = len(e[1]), 0o600
                t.addfile(ti, io.BytesIO(e[1]))
    return buf.getvalue()


def refused(b, snp, data, code, text, what, **kw):
    a = b.import_(snp, data, **kw)
    err = a.get("error")
    if not err:
        fail(f"{what}: taken ({a})")
    if err.get("data", {}).get("code") != code or text not in err.get("message", ""):
        fail(f"{what}: refused as {err}, expected {code} with {text!r}")
    left = sorted(os.listdir(os.path.join(b.state, "snapshots"))) if os.path.isdir(
        os.path.join(b.state, "snapshots")) else []
    if any(n.startswith(snp) for n in left):
        fail(f"{what}: refused, but {left} stayed in the driver's state")
    listed = [s["id"] for s in b.call("snapshots", {})["result"]["snapshots"]]
    if snp in listed:
        fail(f"{what}: refused, but listed")
    ok(f"{what}: refused ({code}: {err['message'][:120]})")


def main():
    a, b = Driver("a"), Driver("b")
    try:
        run(a, b)
    finally:
        a.stop()
        b.stop()


def run(a, b):
    # ---- a disk snapshot: exported, imported, the same bytes, B's labels
    snp = snp_id()
    sdir = make_snapshot(a, snp)
    ans, data = a.export(snp)
    if "result" not in ans:
        fail(f"export: {ans}")
    m = members(data)
    if sorted(m) != ["disk.qcow2", "meta.json"]:
        fail(f"export's members: {sorted(m)}")
    if m["disk.qcow2"] != open(os.path.join(sdir, "disk.qcow2"), "rb").read():
        fail("the exported disk differs from the snapshot's")
    ok(f"export of a disk snapshot: meta.json and disk.qcow2 ({len(data)} bytes)")
    missing, _ = a.export(snp_id())
    if missing.get("error", {}).get("data", {}).get("code") != "not_found":
        fail(f"export of no snapshot: {missing}")
    ok("export of a snapshot the driver does not hold: not_found")

    ans = b.import_(snp, data)
    res = ans.get("result")
    if not res or res.get("id") != snp or res.get("tenant") != TENANT or res.get("image_bytes") != 64 << 20:
        fail(f"import: {ans}")
    listed = {s["id"]: s for s in b.call("snapshots", {})["result"]["snapshots"]}
    if listed.get(snp, {}).get("labels", {}).get("dev.sandbox.worker") != "worker-b":
        fail(f"the copy is not listed as B's: {listed}")
    bdir = os.path.join(b.state, "snapshots", snp)
    bmeta = json.load(open(os.path.join(bdir, "meta.json")))
    if bmeta.get("copied_from") != "worker-a":
        fail(f"the copy's meta.json does not say where it came from: {bmeta}")
    if open(os.path.join(bdir, "disk.qcow2"), "rb").read() != m["disk.qcow2"]:
        fail("B's disk differs from A's")
    st = os.stat(os.path.join(bdir, "disk.qcow2"))
    qemu_user = next((u for u in ("sandbox-vmm", "nobody") if _uid(u) is not None), None)
    if st.st_uid != _uid(qemu_user) or (st.st_mode & 0o777) != 0o600:
        fail(f"B's disk is uid {st.st_uid} mode {oct(st.st_mode & 0o777)}; QEMU's user {qemu_user} 0600 expected")
    ok(f"import: listed as B's, the same disk, given to {qemu_user} (0600), copied_from worker-a")
    again = b.import_(snp, data)
    if again.get("result", {}).get("id") != snp:
        fail(f"a second import: {again}")
    ok("a second import answers the copy it has")
    back, data2 = b.export(snp)
    if "result" not in back or members(data2)["disk.qcow2"] != m["disk.qcow2"]:
        fail(f"B's copy does not export again: {back}")
    ok("B sends its copy on as A did")

    # ---- a memory snapshot: the saved machine travels with it
    msnp = snp_id()
    make_snapshot(a, msnp, memory=True)
    ans, mdata = a.export(msnp)
    mm = members(mdata)
    if sorted(mm) != ["append", "disk.qcow2", "machine.json", "meta.json", "state.mig"]:
        fail(f"a memory snapshot's members: {sorted(mm)}")
    ans = b.import_(msnp, mdata)
    if not ans.get("result", {}).get("memory"):
        fail(f"import of a memory snapshot: {ans}")
    for f in ("state.mig", "machine.json", "append"):
        if open(os.path.join(b.state, "snapshots", msnp, f), "rb").read() != mm[f]:
            fail(f"B's {f} differs from A's")
    ok("a memory snapshot: its RAM, machine and command line carried whole")

    # ---- what a hostile worker could send: each refused, nothing kept
    def hostile(disk=None, meta=None, extra=(), drop=(), memory=False, name_disk="disk.qcow2"):
        h = snp_id()
        d = make_snapshot(a, h, memory=memory)
        mj = json.load(open(os.path.join(d, "meta.json")))
        if meta:
            mj.update(meta)
        files = [("meta.json", json.dumps(mj).encode())]
        files.append((name_disk, disk if disk is not None else open(os.path.join(d, "disk.qcow2"), "rb").read()))
        if memory:
            for f in ("machine.json", "append", "state.mig"):
                files.append((f, open(os.path.join(d, f), "rb").read()))
        files = [f for f in files if f[0] not in drop] + list(extra)
        return h, tar_of(files)

    tmp = os.path.join(WORK, "hostile.qcow2")
    qcow2(tmp, 64 << 20, "-b", "/etc/passwd", "-F", "raw")
    h, t = hostile(disk=open(tmp, "rb").read())
    refused(b, h, t, "invalid_argument", "backing file", "a disk backed by a host file")
    os.unlink(tmp)
    qcow2(tmp, 64 << 20, "-o", f"data_file={WORK}/data.raw")
    h, t = hostile(disk=open(tmp, "rb").read())
    refused(b, h, t, "invalid_argument", "external file", "a disk with an external data file")
    os.unlink(tmp)
    qcow2(tmp, 128 << 20)
    h, t = hostile(disk=open(tmp, "rb").read())
    refused(b, h, t, "invalid_argument", "snapshot says", "a disk of another size than its meta.json says")
    h, t = hostile(disk=b"not a disk" * 100)
    refused(b, h, t, "invalid_argument", "not a qcow2", "a disk that is no qcow2")
    h, t = hostile(extra=[("../../escaped", b"x")])
    refused(b, h, t, "invalid_argument", "which no snapshot has", "a member outside the snapshot's directory")
    if os.path.exists(os.path.join(b.state, "escaped")) or os.path.exists(os.path.join(WORK, "b", "escaped")):
        fail("the member outside the directory was written")
    h, t = hostile(drop=("disk.qcow2",), extra=[("disk.qcow2", None, "/etc/shadow")])
    refused(b, h, t, "invalid_argument", "not a plain file", "a disk that is a symlink to a host file")
    h, t = hostile(extra=[("authorized_keys", b"ssh-ed25519 AAAA")])
    refused(b, h, t, "invalid_argument", "which no snapshot has", "a member no snapshot has")
    h, t = hostile(extra=[("meta.json", b"{}")])
    refused(b, h, t, "invalid_argument", "twice", "a member that comes twice")
    h, t = hostile(meta={"tenant": "other"})
    refused(b, h, t, "policy_denied", "not snapshot", "another tenant's snapshot")
    h, t = hostile(meta={"labels": {"dev.sandbox.cluster": "elsewhere"}})
    refused(b, h, t, "policy_denied", "another installation", "another installation's snapshot")
    h, t = hostile(memory=True, drop=("state.mig",))
    refused(b, h, t, "invalid_argument", "lacks the saved machine", "a memory snapshot without its saved state")
    h, t = hostile(memory=True, drop=("append",), extra=[("append", b"console=ttyS0\ninit=/bin/sh")])
    refused(b, h, t, "invalid_argument", "kernel command line", "a command line with a newline")
    h, t = hostile()
    refused(b, h, t[: len(t) // 2], "invalid_argument", "not a whole archive", "a cut stream")
    h, t = hostile()
    other = snp_id()
    refused(b, other, t, "policy_denied", "not snapshot", "a copy sent under another snapshot's id")

    # ---- removed: nothing of either copy stays
    for s in (snp, msnp):
        r = b.call("snapshot_remove", {"snapshot_id": s})
        if "result" not in r:
            fail(f"remove {s}: {r}")
    left = os.listdir(os.path.join(b.state, "snapshots"))
    if left:
        fail(f"after removing the copies B's snapshots directory holds {left}")
    ok("snapshot_remove leaves nothing of the copies")


def _uid(name):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


if __name__ == "__main__":
    main()
    print("all checks passed", flush=True)
