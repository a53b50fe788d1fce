#!/usr/bin/env python3
"""A TEST FIXTURE, not a runtime: an external runtime driver (protocol 1,
docs/runtime-drivers.md) whose "sandboxes" are directories and host
processes, so the worker's external backend can be driven end to end. It
isolates nothing. It declares class `microvm` (FAKEDRIVER_CLASS) so the
whole --hostile path runs through it.

State (survives a driver restart): $FAKEDRIVER_STATE/<ref>/{meta.json,root/}.
Test modes, from the environment or, read again at every request, from the
JSON object in $FAKEDRIVER_CONTROL (keys in lower case without the prefix):
  FAKEDRIVER_CRASH_AT=N        exit at once on the Nth request of this process
  FAKEDRIVER_CRASH_ON=METHOD   exit at once on a request for METHOD
  FAKEDRIVER_HANG=METHOD       never answer METHOD
  FAKEDRIVER_GARBAGE=METHOD    answer METHOD with a line that is not JSON
  FAKEDRIVER_HUGE=METHOD       answer METHOD with a 2 MiB line
  FAKEDRIVER_PROTOCOL=N        hello claims protocol N
  FAKEDRIVER_PROBE_FAIL=1      exec in a probe sandbox exits 1
  FAKEDRIVER_FILES_GET=KIND    answer a tar files_get with a hostile archive, as a
                               guest that replaced its tar could: sibling (a member
                               beside the copy), dotdot (top/../../escape.txt),
                               symlink (top/sub/evil.txt with no entry for sub, to go
                               through a symlink the user's folder holds), device (a
                               character device 1,3), setuid (a 4755 file of uid 1234),
                               sparse (PAX 1.0, 6 GiB), huge (one member that says
                               1 TiB, then zeros), endless (1 MiB members, forever)
FAKEDRIVER_PIDFILE gets the driver's pid, FAKEDRIVER_PIDFILE.rundir its
$SBX_DRIVER_RUNDIR."""
import base64, io, json, os, shutil, signal, socket, struct, subprocess, sys, tarfile, threading, time

STATE = os.environ.get("FAKEDRIVER_STATE") or os.path.join(os.environ["SBX_DRIVER_RUNDIR"], "fake-state")
RUNDIR = os.environ["SBX_DRIVER_RUNDIR"]
CLASS = os.environ.get("FAKEDRIVER_CLASS", "microvm")
os.makedirs(STATE, exist_ok=True)
out_lock = threading.Lock()
streams = {}
streams_cv = threading.Condition()
execs = {}  # stream token -> Popen
calls = 0
calls_lock = threading.Lock()


class RpcError(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code, self.msg = code, msg


def mode(name):
    v = os.environ.get("FAKEDRIVER_" + name.upper(), "")
    ctl = os.environ.get("FAKEDRIVER_CONTROL")
    if ctl:
        try:
            with open(ctl) as f:
                doc = json.load(f)
            if name in doc:
                v = str(doc[name])
        except (OSError, ValueError):
            pass
    return v


def send(obj):
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def log(msg):
    sys.stderr.write("fakedriver[%d]: %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


# ---- sandboxes --------------------------------------------------------------

def sdir(ref):
    if not ref or not all(c.isalnum() or c in "_.-" for c in ref) or len(ref) > 64:
        raise RpcError("invalid_argument", "bad ref")
    return os.path.join(STATE, ref)


def meta(ref):
    try:
        with open(os.path.join(sdir(ref), "meta.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        raise RpcError("not_found", "no such sandbox " + ref)


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours is not alive
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def obj(m):
    o = {"ref": m["ref"], "sandbox_id": m["sandbox_id"], "tenant": m.get("tenant", ""), "labels": m["labels"]}
    o["state"] = "running" if alive(m["pid"]) else "exited"
    if o["state"] != "running":
        o["exit"] = {"exit_code": 137, "oom_killed": False, "finished_at": "", "error": ""}
    return o


def find_ref(p):
    if p.get("ref"):
        return p["ref"]
    for ref in os.listdir(STATE):
        try:
            m = meta(ref)
        except RpcError:
            continue
        if m["sandbox_id"] == p.get("sandbox_id"):
            return ref
    raise RpcError("not_found", "no sandbox for " + str(p.get("sandbox_id")))


def inside(m, path):
    root = os.path.join(sdir(m["ref"]), "root")
    full = os.path.normpath(os.path.join(root, (path or "/").lstrip("/")))
    if full != root and not full.startswith(root + "/"):
        raise RpcError("invalid_argument", "path outside the sandbox")
    return root, full


def m_hello(p):
    proto = int(mode("protocol") or 1)
    return {"name": "fakedriver", "version": "1.0", "protocol": proto,
            "classes": [{"class": CLASS, "network_modes": ["none"], "probe": "host directories (a test fixture)"}],
            "capabilities": ["files", "images", "dial", "shell"]}


def m_create(p):
    for ref in os.listdir(STATE):
        try:
            m = meta(ref)
        except RpcError:
            continue
        if m["sandbox_id"] == p["sandbox_id"] and alive(m["pid"]):
            return {"ref": ref, "state": "running"}
    if p.get("class") != CLASS:
        raise RpcError("isolation_unavailable", "fakedriver offers class %s only" % CLASS)
    if p.get("network", "none") != "none":
        raise RpcError("isolation_unavailable", "fakedriver offers network none only, not " + p.get("network"))
    ref = "fk" + os.urandom(6).hex()
    os.makedirs(os.path.join(STATE, ref, "root", "tmp"))
    # the sandbox's "main process": its own session, so it outlives the driver
    proc = subprocess.Popen(["sleep", "100000"], start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = {"ref": ref, "sandbox_id": p["sandbox_id"], "tenant": p.get("tenant", ""), "labels": p.get("labels", {}),
         "pid": proc.pid, "probe": bool(p.get("probe"))}
    with open(os.path.join(STATE, ref, "meta.json"), "w") as f:
        json.dump(m, f)
    return {"ref": ref, "state": "running"}


def m_remove(p):
    try:
        ref = find_ref(p)
        m = meta(ref)
    except RpcError:
        return {}
    pids = [m["pid"]] + [int(f[5:]) for f in os.listdir(sdir(ref)) if f.startswith("exec.")]
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(sdir(ref), ignore_errors=True)
    return {}


def m_inventory(p):
    out = []
    for ref in sorted(os.listdir(STATE)):
        try:
            out.append(obj(meta(ref)))
        except RpcError:
            pass
    return {"sandboxes": out}


def m_inspect(p):
    return obj(meta(find_ref(p)))


def m_images(p):
    return {"images": []}


# ---- streams ----------------------------------------------------------------

def stream_server():
    path = os.path.join(RUNDIR, "streams.sock")
    try:
        os.unlink(path)
    except OSError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=stream_hello, args=(c,), daemon=True).start()


def stream_hello(c):
    tok = b""
    c.settimeout(10)
    try:
        while not tok.endswith(b"\n") and len(tok) < 40:
            b = c.recv(1)
            if not b:
                break
            tok += b
    except OSError:
        pass
    c.settimeout(None)
    with streams_cv:
        streams[tok.strip().decode(errors="replace")] = c
        streams_cv.notify_all()


def take_stream(tok):
    deadline = time.time() + 10
    with streams_cv:
        while tok not in streams:
            left = deadline - time.time()
            if left <= 0:
                raise RpcError("invalid_argument", "the stream never connected")
            streams_cv.wait(left)
        return streams.pop(tok)


def close_stream(c):
    """Ends a stream for both sides at once (a thread blocked reading it
    would keep a plain close from reaching the worker)."""
    try:
        c.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    c.close()


def frame(t, data=b""):
    return struct.pack(">BI", t, len(data)) + data


def recv_exact(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            return None
        b += x
    return b


def m_exec(p):
    m = meta(p["ref"])
    if not alive(m["pid"]):
        raise RpcError("sandbox_exited", "the sandbox is not running")
    c = take_stream(p["stream"])
    root, cwd = inside(m, p.get("cwd") or "/")
    argv = p["argv"]
    if m.get("probe") and mode("probe_fail"):
        argv = ["false"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "SANDBOX_ROOT": root}
    env.update(p.get("env") or {})
    t0 = time.time()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        c.sendall(frame(5, b"exec: not found\n") + frame(4, struct.pack(">i", 127)))
        c.close()
        return {"exit_code": 127, "signal": 0, "timed_out": False, "cancelled": False, "duration_ms": 0}
    execs[p["stream"]] = proc
    mark = os.path.join(sdir(m["ref"]), "exec.%d" % proc.pid)  # remove kills it
    open(mark, "w").close()
    state = {"cancelled": False, "timed_out": False}
    wlock = threading.Lock()

    def pump(f, t):
        while True:
            d = os.read(f.fileno(), 16384)
            if not d:
                return
            with wlock:
                try:
                    c.sendall(frame(t, d))
                except OSError:
                    return

    def feed():
        while True:
            h = recv_exact(c, 5)
            if h is None:  # the worker closed the stream: kill
                if proc.poll() is None:
                    state["cancelled"] = True
                    kill_tree(proc)
                return
            t, n = struct.unpack(">BI", h)
            d = recv_exact(c, n) if n else b""
            if t == 1 and d:
                try:
                    proc.stdin.write(d)
                    proc.stdin.flush()
                except OSError:
                    pass
            elif t == 3:
                try:
                    proc.stdin.close()
                except OSError:
                    pass

    ts = [threading.Thread(target=pump, args=(proc.stdout, 1)), threading.Thread(target=pump, args=(proc.stderr, 5))]
    for t in ts:
        t.start()
    threading.Thread(target=feed, daemon=True).start()
    try:
        proc.wait(timeout=p.get("timeout_seconds") or None)
    except subprocess.TimeoutExpired:
        state["timed_out"] = True
        kill_tree(proc)
        proc.wait()
    for t in ts:
        t.join()
    execs.pop(p["stream"], None)
    try:
        os.unlink(mark)
    except OSError:
        pass
    rc = proc.returncode
    sig = -rc if rc < 0 else 0
    code = 128 + sig if sig else rc
    with wlock:
        try:
            c.sendall(frame(4, struct.pack(">i", code)))
        except OSError:
            pass
    close_stream(c)
    return {"exit_code": code, "signal": sig, "timed_out": state["timed_out"],
            "cancelled": state["cancelled"] or (proc.cancelled if hasattr(proc, "cancelled") else False),
            "duration_ms": int((time.time() - t0) * 1000)}


def kill_tree(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def m_cancel(p):
    proc = execs.get(p.get("stream"))
    if proc and proc.poll() is None:
        proc.cancelled = True
        kill_tree(proc)
    return {}


def fstat(full):
    st = os.lstat(full)
    import stat as S
    t = "dir" if S.S_ISDIR(st.st_mode) else "symlink" if S.S_ISLNK(st.st_mode) else \
        "file" if S.S_ISREG(st.st_mode) else "other"
    return {"name": os.path.basename(full.rstrip("/")) or "/", "size": st.st_size, "mode": st.st_mode & 0o7777,
            "type": t, "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
            "link_target": os.readlink(full) if t == "symlink" else ""}


def m_files_put(p):
    m = meta(p["ref"])
    root, full = inside(m, p["path"])
    c = take_stream(p["stream"])
    f = c.makefile("rb")
    n = 0
    try:
        if p["format"] == "raw":
            if not os.path.isdir(os.path.dirname(full)):
                raise RpcError("not_found", "no such directory for " + p["path"])
            tmp = full + ".fkpart"
            with open(tmp, "wb") as o:
                while True:
                    d = f.read(65536)
                    if not d:
                        break
                    n += len(d)
                    if n > p.get("max_bytes", 1 << 40):
                        raise RpcError("payload_too_large", "over max_bytes")
                    o.write(d)
            if n != p.get("size"):
                os.unlink(tmp)
                raise RpcError("invalid_argument", "raw size mismatch: %d of %d bytes" % (n, p.get("size")))
            os.chmod(tmp, p.get("mode", 0o644))
            os.rename(tmp, full)
        else:
            if not os.path.isdir(full):
                raise RpcError("not_found", "no such directory " + p["path"])
            with tarfile.open(fileobj=f, mode="r|") as t:
                for mem in t:
                    name = os.path.normpath(mem.name)
                    if name.startswith("/") or name == ".." or name.startswith("../") or \
                            not (mem.isfile() or mem.isdir()):
                        raise RpcError("invalid_argument", "tar member %s is refused" % mem.name)
                    mem.mode &= 0o777
                    t.extract(mem, full, set_attrs=mem.isfile())
                    n += mem.size
    except tarfile.TarError as e:
        raise RpcError("invalid_argument", "bad tar: %s" % e)
    except FileNotFoundError:
        raise RpcError("not_found", "no such directory for " + p["path"])
    finally:
        c.close()
    return {"bytes": n}


def hostile_tar(w, top, kind):
    """Writes the archive of KIND (FAKEDRIVER_FILES_GET) for the path named
    top to the stream w, as a guest that made its own could."""
    now = int(time.time())

    def add(name, kind_=tarfile.REGTYPE, data=b"", mode_=0o644, fmt=tarfile.PAX_FORMAT, size=None, **kw):
        ti = tarfile.TarInfo(name)
        ti.type, ti.size, ti.mode, ti.mtime = kind_, len(data) if size is None else size, mode_, now
        for k, v in kw.items():
            setattr(ti, k, v)
        w.write(ti.tobuf(format=fmt, encoding="utf-8", errors="surrogateescape"))
        if data:
            w.write(data + bytes(-len(data) % 512))

    add(top, tarfile.DIRTYPE, mode_=0o755)
    if kind == "sibling":
        add("sibling.txt", data=b"beside\n")
    elif kind == "dotdot":
        add(top + "/../../escape.txt", data=b"up\n")
    elif kind == "symlink":
        add(top + "/sub/evil.txt", data=b"through\n")
    elif kind == "device":
        add(top + "/null", tarfile.CHRTYPE, mode_=0o666, devmajor=1, devminor=3)
    elif kind == "setuid":
        add(top + "/suid", data=b"#!/bin/sh\n", mode_=0o4755, uid=1234, gid=1234)
    elif kind == "sparse":
        # GNU tar's PAX 1.0 form: the map (1 region: 1 byte at the last offset) heads the data
        add(top + "/GNUSparseFile.0/big", data=b"1\n6442450943\n1\n".ljust(512, b"\0") + b"x",
            pax_headers={"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": top + "/big",
                         "GNU.sparse.realsize": str(6 << 30)})
    elif kind == "huge":
        add(top + "/huge", size=1 << 40, fmt=tarfile.GNU_FORMAT)
        while True:
            w.write(bytes(65536))
    elif kind == "endless":
        for i in range(1 << 30):
            add("%s/f%d" % (top, i), data=bytes(1 << 20))
    w.write(bytes(1024))


def m_files_get(p):
    m = meta(p["ref"])
    root, full = inside(m, p["path"])
    if not os.path.lexists(full):
        raise RpcError("not_found", "no such file " + p["path"])
    st = fstat(full)
    if p["format"] == "raw" and st["type"] != "file":
        raise RpcError("invalid_argument", "%s is a directory; use the tar form" % p["path"])
    c = take_stream(p["stream"])

    def body():
        try:
            if p["format"] == "raw":
                with open(full, "rb") as f:
                    shutil.copyfileobj(f, c.makefile("wb"))
            elif p["format"] == "list":
                ents = [fstat(os.path.join(full, n)) for n in sorted(os.listdir(full))[:10000]]
                c.sendall(json.dumps({"entries": ents, "truncated": False}).encode())
            elif mode("files_get"):
                with c.makefile("wb") as w:
                    hostile_tar(w, st["name"], mode("files_get"))
            else:
                with c.makefile("wb") as w, tarfile.open(fileobj=w, mode="w|") as t:
                    t.add(full, arcname=st["name"])
        except OSError:
            pass  # the worker cut the stream
        finally:
            try:
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            c.close()
    threading.Timer(0.05, body).start()  # the body after the answer
    return {"stat": st}


def m_dial(p):
    meta(p["ref"])
    try:  # the fixture's "sandbox loopback" is the host's
        tcp = socket.create_connection(("127.0.0.1", int(p["port"])), timeout=max(p.get("timeout_ms", 5000), 1) / 1000)
    except OSError as e:
        raise RpcError("unavailable", "nothing accepts on port %s in the sandbox: %s" % (p["port"], e))
    tcp.settimeout(None)
    c = take_stream(p["stream"])

    def copy(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    threading.Thread(target=copy, args=(c, tcp), daemon=True).start()
    threading.Thread(target=copy, args=(tcp, c), daemon=True).start()
    return {}


def m_shell_open(p):
    import fcntl, pty, termios
    m = meta(p["ref"])
    root, cwd = inside(m, "/")
    master, slave = pty.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", p.get("rows", 24), p.get("cols", 80), 0, 0))

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for sig in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "xterm", "HOME": root, "PS1": "$ "}
    proc = subprocess.Popen(p["argv"], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                            start_new_session=True, preexec_fn=ctty)
    os.close(slave)
    mark = os.path.join(sdir(m["ref"]), "exec.%d" % proc.pid)  # remove kills it
    open(mark, "w").close()
    c = take_stream(p["stream"])
    wlock = threading.Lock()

    def out():
        while True:
            try:
                d = os.read(master, 16384)
            except OSError:
                d = b""
            if not d:
                break
            with wlock:
                try:
                    c.sendall(frame(1, d))
                except OSError:
                    break
        rc = proc.wait()
        try:
            os.unlink(mark)
        except OSError:
            pass
        code = 128 - rc if rc < 0 else rc
        with wlock:
            try:
                c.sendall(frame(4, struct.pack(">i", code)))
            except OSError:
                pass
            close_stream(c)
        os.close(master)

    def inp():
        while True:
            h = recv_exact(c, 5)
            if h is None:
                kill_tree(proc)
                return
            t, n = struct.unpack(">BI", h)
            d = recv_exact(c, n) if n else b""
            if t == 1 and d:
                os.write(master, d)
            elif t == 2 and len(d) == 4:
                cols, rows = struct.unpack(">HH", d)
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    threading.Thread(target=out, daemon=True).start()
    threading.Thread(target=inp, daemon=True).start()
    return {}


METHODS = {"hello": m_hello, "create": m_create, "remove": m_remove, "inventory": m_inventory,
           "inspect": m_inspect, "images": m_images, "exec": m_exec, "cancel": m_cancel,
           "files_put": m_files_put, "files_get": m_files_get,
           "dial": m_dial, "shell_open": m_shell_open, "shutdown": lambda p: {}}


def handle(req):
    rid, meth, p = req.get("id"), req.get("method"), req.get("params") or {}
    if mode("hang") == meth:
        log("hanging on " + meth)
        return
    if mode("garbage") == meth:
        with out_lock:
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
        return
    if mode("huge") == meth:
        with out_lock:
            sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":{"pad":"%s"}}\n' % (rid, "x" * (2 << 20)))
            sys.stdout.flush()
        return
    try:
        fn = METHODS.get(meth)
        if not fn:
            raise RpcError("invalid_argument", "unknown method " + str(meth))
        send({"jsonrpc": "2.0", "id": rid, "result": fn(p)})
    except RpcError as e:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": e.msg, "data": {"code": e.code}}})
    except Exception as e:  # a bug of the fixture: say it
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "%s: %s" % (type(e).__name__, e)}})
    if meth == "shutdown":
        os._exit(0)


def main():
    global calls
    if os.environ.get("FAKEDRIVER_PIDFILE"):
        with open(os.environ["FAKEDRIVER_PIDFILE"] + ".rundir", "w") as f:
            f.write(RUNDIR)
        with open(os.environ["FAKEDRIVER_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    threading.Thread(target=stream_server, daemon=True).start()
    log("started, state in " + STATE)
    for line in sys.stdin:
        req = json.loads(line)
        with calls_lock:
            calls += 1
            n = calls
        crash_at = mode("crash_at")
        if (crash_at and n == int(crash_at)) or (mode("crash_on") and mode("crash_on") == req.get("method")):
            log("crashing on request %d (%s)" % (n, req.get("method")))
            os._exit(3)
        threading.Thread(target=handle, args=(req,), daemon=True).start()
    os._exit(0)


if __name__ == "__main__":
    main()
