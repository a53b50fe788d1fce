#!/usr/bin/env python3
"""The Python SDK (client/python, sandbox_client) against the real
controllers test_sdk_python.sh started: every method of the surface, the
error classes the API can be made to answer, retries and idempotency, TLS
with a private CA. Prints one line per step; exits 1 naming the first
check that failed.

Environment (set by test_sdk_python.sh): SANDBOX_URL (the run's controller),
SDK_ADMIN, SDK_MEMBER, SDK_TENANT, SDK_QUOTA_MEMBER, SDK_QUOTA_TENANT,
ITEST_IMAGE, SDK_TLS_URL / SDK_TLS_CA / SDK_OTHER_CA / SDK_TLS_ADMIN /
SDK_TLS_WORKER / SDK_TLS_WORKER_NAME (a TLS controller with small rate
limits on a database of its own), SDK_WORK (a scratch folder), SDK_REPO."""

import hashlib
import http.client
import io
import os
import re
import socket
import sys
import tarfile
import threading
import time
import uuid

import sandbox_client as sc
from sandbox_client import Client
from sandbox_client._http import BytesBody
from sandbox_client._tar import safe_extract

E = os.environ
WORK = E["SDK_WORK"]
IMAGE = E["ITEST_IMAGE"]
MAIN_URL = E["SANDBOX_URL"]
T0 = time.monotonic()
SMALL = dict(memory_mib=128, cpu_millis=250)


def log(msg):
    print(f"[sdk-py {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def raises(cls, fn, what):
    """fn() must raise exactly the class cls; returns the exception."""
    try:
        fn()
    except sc.SandboxError as e:
        check(type(e) is cls, f"{what}: expected {cls.__name__}, got {type(e).__name__}: {e}")
        check(e.message, f"{what}: the error has no message")
        return e
    fail(f"{what}: expected {cls.__name__}, nothing was raised")


admin = Client(MAIN_URL, E["SDK_ADMIN"])
member = Client(MAIN_URL, E["SDK_MEMBER"])
tenant = E["SDK_TENANT"]
label = uuid.uuid4().hex[:12]
cleanup = []  # sandboxes to delete however the script ends


# ---------------------------------------------------------------- error table
def error_table():
    """Every code of common/errors.c and of docs/api.md's table maps to the
    class the shared surface names."""
    surface = {
        "invalid_argument": "InvalidArgument", "invalid_json": "InvalidJson", "unauthorized": "Unauthorized",
        "forbidden": "Forbidden", "not_found": "NotFound", "method_not_allowed": "MethodNotAllowed",
        "conflict": "Conflict", "stale_lease": "StaleLease", "payload_too_large": "PayloadTooLarge",
        "policy_denied": "PolicyDenied", "isolation_unavailable": "IsolationUnavailable",
        "quota_exceeded": "QuotaExceeded", "unavailable": "Unavailable", "internal": "InternalError",
        "image_unavailable": "ImageUnavailable", "runtime_error": "SandboxRuntimeError",
        "timeout": "OperationTimeout", "worker_lost": "WorkerLost", "cancelled": "Cancelled",
        "bad_gateway": "BadGateway", "headers_too_large": "HeadersTooLarge", "sandbox_exited": "SandboxExited",
        "rate_limited": "RateLimited", "request_timeout": "RequestTimeout",
    }
    repo = E["SDK_REPO"]
    with open(os.path.join(repo, "common/errors.c")) as f:
        c_codes = set(re.findall(r'\[API_[A-Z_]+\]\s*=\s*\{\s*"([a-z_]+)"', f.read()))
    with open(os.path.join(repo, "docs/api.md")) as f:
        doc = f.read()
    doc_codes = set(re.findall(r"^\| ([a-z_]+) \| \d{3} \|", doc, re.M))
    check(len(c_codes) >= 24 and len(doc_codes) >= 15, f"could not read the code tables: {c_codes} {doc_codes}")
    for code in sorted(c_codes | doc_codes):
        check(code in surface, f"API code {code} is not in the SDK surface's table")
        e = sc.error_from(code, "m", status=400, request_id="req_x", retry_after=2)
        check(type(e).__name__ == surface[code], f"{code} maps to {type(e).__name__}, not {surface[code]}")
        check(isinstance(e, sc.SandboxError) and e.code == code, f"{code}: not a SandboxError with its code")
        check(getattr(sc, surface[code]) is type(e), f"{surface[code]} is not exported by sandbox_client")
        if code in ("rate_limited", "quota_exceeded", "unavailable"):
            check(e.retry_after == 2, f"{code}: retry_after not kept")
    e = sc.error_from("a_future_code", "m")
    check(type(e) is sc.SandboxError and e.code == "a_future_code", "an unknown code is a plain SandboxError")
    log(f"error table: {len(c_codes | doc_codes)} codes map to their classes")


# ---------------------------------------------------------------- config
def config_resolution():
    cfgdir = os.path.join(WORK, "xdg")
    os.makedirs(os.path.join(cfgdir, "sandbox"), exist_ok=True)
    with open(os.path.join(cfgdir, "sandbox", "config"), "w") as f:
        f.write(
            "# written by the test\ncontext = main\n\n"
            f"[context main]\nurl = {MAIN_URL}\ntoken = \"{E['SDK_MEMBER']}\"\n\n"
            f"[context tls]\nurl = {E['SDK_TLS_URL']}\ntoken = {E['SDK_TLS_ADMIN']}\nca_file = {E['SDK_TLS_CA']}\n"
        )
    saved = {k: os.environ.pop(k, None) for k in ("SANDBOX_URL", "SANDBOX_TOKEN", "SANDBOX_CA_FILE", "SANDBOX_CONTEXT")}
    os.environ["XDG_CONFIG_HOME"] = cfgdir
    try:
        c = Client()
        check(c.url == MAIN_URL and c.context == "main", f"the file's default context: {c.url} {c.context}")
        check(c._transport.token == E["SDK_MEMBER"], "the context's quoted token")
        list(c.sandboxes.list())  # authenticated with the file's token (else Unauthorized)
        t = Client(context="tls")
        check(t.url == E["SDK_TLS_URL"] and t.ca_file == E["SDK_TLS_CA"], "context tls: url and ca_file")
        check(t.version()["api"] == "v1", "GET /v1/version over TLS with the context's ca_file")
        os.environ["SANDBOX_CONTEXT"] = "tls"
        check(Client().url == E["SDK_TLS_URL"], "SANDBOX_CONTEXT picks a context")
        os.environ["SANDBOX_URL"] = "http://127.0.0.1:1"
        check(Client().url == E["SDK_TLS_URL"], "a named context leaves SANDBOX_URL out")
        del os.environ["SANDBOX_CONTEXT"]
        os.environ["SANDBOX_TOKEN"] = "sbt_from_env"
        c = Client()
        check(c.url == "http://127.0.0.1:1", "SANDBOX_URL wins over the file")
        check(c._transport.token == "sbt_from_env", "SANDBOX_TOKEN wins over the file")
        check(Client(url="http://127.0.0.1:2").url == "http://127.0.0.1:2", "url= wins over SANDBOX_URL")
        try:
            Client(context="nope")
            fail("an unknown context was accepted")
        except sc.ConfigError as e:
            check("main, tls" in str(e), f"the unknown context's error lists the names: {e}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.environ.pop("SANDBOX_CONTEXT", None)
        os.environ["XDG_CONFIG_HOME"] = os.path.join(WORK, "empty-xdg")
    log("config: arguments, environment, config file contexts resolve as the CLI's")


# ---------------------------------------------------------------- TLS + rate limits + admin (own controller)
def tls_and_admin():
    url, ca = E["SDK_TLS_URL"], E["SDK_TLS_CA"]
    tok = E["SDK_TLS_ADMIN"]
    os.environ.pop("SANDBOX_CA_FILE", None)
    e = raises(sc.SandboxConnectionError, lambda: Client(url, tok, retries=0).version(), "TLS without the CA")
    check("certificate" in e.message and "ca_file" in e.message, f"the TLS error says why and what to do: {e}")
    raises(sc.SandboxConnectionError, lambda: Client(url, tok, ca_file=E["SDK_OTHER_CA"]).version(),
           "TLS with another CA")
    os.environ["SANDBOX_CA_FILE"] = ca
    check(Client(url, tok).version()["api"] == "v1", "TLS with SANDBOX_CA_FILE")
    del os.environ["SANDBOX_CA_FILE"]
    tls = Client(url, tok, ca_file=ca)
    v = tls.version()
    check(v["api"] == "v1" and v.get("version"), f"version over TLS: {v}")
    log("TLS: refused without the CA or with another one; verified with ca_file / SANDBOX_CA_FILE")

    # tenants
    tname = "sdkpy-" + uuid.uuid4().hex[:8]
    t = tls.tenants.create(tname)
    check(t["name"] == tname, f"tenants.create: {t}")
    raises(sc.Conflict, lambda: tls.tenants.create(tname), "a tenant name in use")
    check(tname in [x["name"] for x in tls.tenants.list()], "tenants.list has the new tenant")
    got = tls.tenants.get(tname)
    check("usage" in got and got["usage"]["live_sandboxes"] == 0, f"tenants.get with usage: {got}")
    pol = tls.tenants.set_policy(tname, {"max_cpu_millis": 500, "max_pool_size": 2})
    check(pol["policy"]["max_cpu_millis"] == 500, f"tenants.set_policy: {pol}")
    # tokens
    made = tls.tokens.create(tname, "member", name="sdk-member")
    secret = made["secret"]
    check(secret.startswith("sbt_") and made["token"]["role"] == "member", f"tokens.create: {made['token']}")
    check(made["token"]["id"] in [x["id"] for x in tls.tokens.list(tenant=tname)], "tokens.list has it")
    mem = Client(url, secret, ca_file=ca)
    check([x["name"] for x in mem.tenants.list()] == [tname], "a member lists its own tenant only")
    raises(sc.Forbidden, lambda: mem.tokens.list(), "a member token on an admin endpoint")
    # rate limits (this controller: 5 requests a second per token, bursts of 10)
    fast = Client(url, secret, ca_file=ca, retries=0)
    err = None
    for _ in range(40):
        try:
            fast.version()
        except sc.RateLimited as e:
            err = e
            break
    check(err is not None, "40 quick requests of one token past 5/s with bursts of 10 were never refused")
    check(err.status == 429 and err.retry_after is not None and err.retry_after >= 1,
          f"RateLimited carries Retry-After: {err!r} {err.retry_after}")
    check(err.request_id, "RateLimited carries the request id")
    patient = Client(url, secret, ca_file=ca, retries=4)
    t1 = time.monotonic()
    for _ in range(12):
        patient.version()
    log(f"rate limit: RateLimited(retry_after={err.retry_after}); with retries 12 more calls passed in "
        f"{time.monotonic() - t1:.1f}s")
    # pools (no worker on this database can run them: nothing is started)
    p = tls.pools.create("sdkpool", 1, tenant=tname, cpu_millis=250, memory_mib=128, image=IMAGE)
    check(p["name"] == "sdkpool" and p["size"] == 1, f"pools.create: {p}")
    check("sdkpool" in [x["name"] for x in tls.pools.list()], "pools.list")
    check(tls.pools.get("sdkpool")["tenant"] == tname, "pools.get")
    raises(sc.PolicyDenied, lambda: tls.pools.create("sdkpool2", 1, tenant=tname, cpu_millis=1000,
                                                    memory_mib=128, image=IMAGE), "a pool over max_cpu_millis")
    check("deleted_members" in tls.pools.delete("sdkpool"), "pools.delete")
    raises(sc.NotFound, lambda: tls.pools.get("sdkpool"), "a deleted pool")
    # workers: a worker registered by hand on this database (no sandbox reaches it)
    wname = E["SDK_TLS_WORKER_NAME"]
    wk = Client(url, E["SDK_TLS_WORKER"], ca_file=ca)
    reg = wk.request("POST", "/v1/workers/register", json={
        "name": wname, "runtime": "docker", "isolation": ["container"], "labels": {},
        "capacity": {"cpu_millis": 10, "memory_mib": 1, "slots": 1}, "version": "sdk-test"})
    wid = reg["worker"]["id"]
    # a create that stays pending (nothing fits the worker): reported by a worker it was never leased to
    pending = tls.sandboxes.create(IMAGE, wait=False, **SMALL)
    check(pending.state in ("pending", "admitted"), f"a create no worker can take: {pending!r}")
    raises(sc.StaleLease, lambda: wk.request("POST", f"/v1/workers/{wid}/report", json={
        "operation_id": pending.id, "attempt": 1, "outcome": "succeeded"}), "a report for an operation not leased")
    check(wname in [w["name"] for w in tls.workers.list()], "workers.list")
    check(tls.workers.drain(wname)["state"] == "draining", "workers.drain")
    check(tls.workers.resume(wname)["state"] == "ready", "workers.resume")
    raises(sc.NotFound, lambda: tls.workers.drain("no-such-worker-" + uuid.uuid4().hex[:6]), "drain of no worker")
    # the member token revoked: Unauthorized from then on
    check(tls.tokens.revoke(made["token"]["id"])["revoked_at"], "tokens.revoke")
    raises(sc.Unauthorized, lambda: mem.version(), "a revoked token")
    check(tls.tenants.delete(tname)["deleted"] is True, "tenants.delete")
    log("admin over TLS: tenants, tokens, pools, workers (drain/resume), Forbidden, StaleLease, Unauthorized")


# ---------------------------------------------------------------- errors on the run's controller
def errors_main(sbx):
    raises(sc.NotFound, lambda: member.sandboxes.get("no-such-sandbox-" + label), "get of no sandbox")
    raises(sc.Unauthorized, lambda: list(Client(MAIN_URL, "sbt_" + "a" * 26 + "_" + "b" * 43)
                                         .sandboxes.list()), "a token the server never made")
    raises(sc.Forbidden, lambda: member.workers.list(), "a member token on GET /v1/workers")
    e = raises(sc.InvalidArgument, lambda: member.sandboxes.create(IMAGE, cpu_millis=-1), "cpu_millis -1")
    check("cpu_millis" in e.message and e.status == 400 and e.request_id, f"InvalidArgument: {e!r}")
    raises(sc.Conflict, lambda: member.sandboxes.create(IMAGE, name=sbx.name, **SMALL), "a name in use")
    raises(sc.MethodNotAllowed, lambda: member.request("DELETE", "/v1/version"), "DELETE /v1/version")
    raises(sc.InvalidJson, lambda: member._transport.call(
        "POST", "/v1/sandboxes", body=BytesBody(b'{"image":', "application/json")), "a body that is not JSON")
    # 9 MiB: refused from its Content-Length before the body is read
    raises(sc.PayloadTooLarge, lambda: member.request("POST", "/v1/sandboxes", json={"env": {"A": "x" * (9 << 20)}}),
           "a 9 MiB body")
    quota = Client(MAIN_URL, E["SDK_QUOTA_MEMBER"])
    admin.tenants.set_policy(E["SDK_QUOTA_TENANT"], {"max_cpu_millis": 500, "max_total_memory_mib": 64})
    e = raises(sc.PolicyDenied, lambda: quota.sandboxes.create(IMAGE, cpu_millis=1000, memory_mib=64),
               "cpu over the tenant's max_cpu_millis")
    check("max_cpu_millis" in e.message and e.status == 422, f"PolicyDenied names the rule: {e}")
    e = raises(sc.QuotaExceeded, lambda: quota.sandboxes.create(IMAGE, cpu_millis=100, memory_mib=128),
               "memory over the tenant's max_total_memory_mib")
    check(e.status == 429 and "max_total_memory_mib" in e.message, f"QuotaExceeded: {e}")
    # the test's worker offers no microvm: the create operation fails
    e = raises(sc.IsolationUnavailable,
               lambda: member.sandboxes.create(IMAGE, isolation="microvm", labels={"sdk": label}, **SMALL),
               "isolation microvm")
    check(e.operation is not None and e.operation.state == "failed" and "microvm" in e.message,
          f"IsolationUnavailable carries its failed operation: {e!r}")
    member.sandboxes.get(e.operation.sandbox_id).delete()
    log("errors: NotFound Unauthorized Forbidden InvalidArgument Conflict MethodNotAllowed InvalidJson "
        "PayloadTooLarge PolicyDenied QuotaExceeded IsolationUnavailable")


# ---------------------------------------------------------------- a create whose answer is lost
class LossyProxy:
    """Forwards connections to the controller; the answer to the first
    POST /v1/sandboxes is read in full (the sandbox exists) and never
    delivered: the client's connection is closed instead."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.lost = None
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.srv.accept()
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _read_message(sock, buf=b""):
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                return buf
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        m = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I)
        n = int(m.group(1)) if m else 0
        while len(rest) < n:
            d = sock.recv(65536)
            if not d:
                break
            rest += d
        return head + b"\r\n\r\n" + rest

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, c):
        up = socket.create_connection(("127.0.0.1", self.upstream))
        req = self._read_message(c)
        up.sendall(req)
        if self.lost is None and req.startswith(b"POST /v1/sandboxes HTTP/"):
            self.lost = self._read_message(up)
            c.close()
            up.close()
            return
        threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()
        self._pipe(c, up)


def lost_answer_create():
    port = int(MAIN_URL.rsplit(":", 1)[1])
    proxy = LossyProxy(port)
    lossy = Client(f"http://127.0.0.1:{proxy.port}", E["SDK_MEMBER"], retries=3)
    lbl = {"sdk-lost": label}
    sbx = lossy.sandboxes.create(IMAGE, labels=lbl, network="none", **SMALL)
    cleanup.append(sbx)
    check(proxy.lost is not None and b" 202 " in proxy.lost.split(b"\r\n", 1)[0],
          "the proxy did not lose the first create's answer")
    lost_id = re.search(rb'"sandbox":\{"id":"(sbx_[a-z0-9]+)"', proxy.lost)
    check(lost_id and lost_id.group(1).decode() == sbx.id,
          f"the retried create returned {sbx.id}, the lost answer named {lost_id and lost_id.group(1)}")
    found = [s.id for s in member.sandboxes.list(labels=lbl)]
    check(found == [sbx.id], f"a retried create made exactly one sandbox: {found}")
    check(sbx.phase == "running", f"the retried create's sandbox runs: {sbx.phase}")
    sbx.delete()
    log(f"retried create after a lost answer: one sandbox ({sbx.id}), the one the lost answer named")


# ---------------------------------------------------------------- the sandbox itself
def sandbox_work(sbx):
    check(sbx.phase == "running" and sbx.id.startswith("sbx_") and sbx.name, f"created: {sbx!r}")
    check(member.sandboxes.get(sbx.name).id == sbx.id, "get by name")
    check(sbx.id in [s.id for s in member.sandboxes.list(labels={"sdk": label}, phase="running")], "list by label")
    check(sbx.refresh().data["network"] == "none", "refresh")

    # exec: exit code, exact bytes, stdin text and bytes, env, cwd
    r = sbx.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    check((r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n") and not r.ok, f"exec: {r}")
    r = sbx.exec(["sh", "-c", r"printf 'a\000b\377'"])
    check(r.stdout == b"a\x00b\xff", f"exec stdout bytes exact (stdout_b64): {r.stdout!r}")
    r = sbx.exec(["cat"], stdin="héllo\n")
    check(r.text == "héllo\n", f"stdin as text: {r.text!r}")
    blob = bytes(range(256)) * 4
    r = sbx.exec(["sha256sum"], stdin=blob)
    check(r.text.split()[0] == hashlib.sha256(blob).hexdigest(), "stdin as bytes (stdin_b64)")
    r = sbx.exec(["sh", "-c", 'echo "$GREETING $(pwd)"'], env={"GREETING": "hi"}, cwd="/tmp")
    check(r.text == "hi /tmp\n", f"env and cwd: {r.text!r}")
    r = sbx.exec(["sh", "-c", "head -c 5000 /dev/zero"], max_output_bytes=1000)
    check(len(r.stdout) == 1000 and r.stdout_truncated, f"max_output_bytes: {len(r.stdout)} {r.stdout_truncated}")
    r = sbx.exec(["sleep", "10"], timeout=1)
    check(r.timed_out, f"timeout: {r}")
    try:
        sbx.exec("echo hi")  # type: ignore[arg-type]
        fail("a string argv was accepted")
    except TypeError:
        pass
    log("exec: exit code, exact bytes, stdin text/bytes, env, cwd, max_output_bytes, timeout")

    # exec(stream=True): the first chunk before the command ends
    t0 = time.monotonic()
    st = sbx.exec(["sh", "-c", "echo first; sleep 2; echo second >&2; exit 4"], stream=True)
    seen = []
    for ch in st:
        seen.append((time.monotonic() - t0, ch))
    end = time.monotonic() - t0
    check(seen and seen[0][1].data == b"first\n" and seen[0][1].stream == "stdout" and seen[0][1].offset == 0,
          f"first chunk: {seen[:1]}")
    check(end - seen[0][0] >= 1.2, f"the first chunk came {seen[0][0]:.2f}s in, the end {end:.2f}s: not as it came")
    check(b"".join(c.data for _, c in seen if c.stream == "stderr") == b"second\n", "stderr chunk")
    check(st.result.exit_code == 4 and st.result.stdout == b"first\n", f"result after the stream: {st.result}")
    log(f"exec stream: first chunk at {seen[0][0]:.2f}s, end at {end:.2f}s; result exit 4")

    # exec_detached: followed, then cancelled
    op = sbx.exec_detached(["sh", "-c", "echo begin; sleep 300"], timeout=600)
    check(op.kind == "exec" and op.id.startswith("op_"), f"exec_detached: {op!r}")
    out = op.output(follow=True)
    first = next(out)
    check(first.data == b"begin\n", f"detached output: {first}")
    check(member.operations.get(op.id).state == "running", "operations.get of a running exec")
    op.cancel()
    e = raises(sc.Cancelled, lambda: op.wait(timeout=60), "wait of a cancelled exec")
    check(e.operation.state == "cancelled", f"Cancelled.operation: {e.operation!r}")
    rest = list(out)
    check(out.finished and not rest, f"the follow ends once the exec is cancelled: {rest}")
    raises(sc.Conflict, lambda: member.operations.cancel(op.id), "cancel of a cancelled exec")
    raises(sc.Cancelled, lambda: member.operations.wait(op.id), "operations.wait of a cancelled exec")
    check([c.data for c in member.operations.get(op.id).output(follow=False)] == [b"begin\n"],
          "output(follow=False) of the cancelled exec")
    log("exec_detached: output followed, cancel -> Cancelled from wait")

    # files: 50 MiB raw both ways, streamed from and to files
    big = os.path.join(WORK, "big.bin")
    with open(big, "wb") as f:
        for _ in range(50):
            f.write(os.urandom(1 << 20))
    with open(big, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    t1 = time.monotonic()
    with open(big, "rb") as f:
        w = sbx.files.write("/tmp/big.bin", f)
    check(w["bytes"] == 50 << 20, f"files.write answer: {w}")
    back = os.path.join(WORK, "back.bin")
    with open(back, "wb") as f:
        n = sbx.files.read("/tmp/big.bin", f)
    took = time.monotonic() - t1
    with open(back, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    check(n == 50 << 20 and got == want, f"50 MiB round trip: {n} bytes, sha256 {got} != {want}")
    inside = sbx.exec(["sha256sum", "/tmp/big.bin"]).text.split()[0]
    check(inside == want, "the sandbox's sha256 of the 50 MiB file")
    sbx.exec(["rm", "/tmp/big.bin"])
    log(f"files: 50 MiB written and read back in {took:.1f}s, sha256 equal")
    sbx.files.write("/tmp/deep/er/x.sh", b"#!/bin/sh\necho x\n", mode=0o755, parents=True)
    check(sbx.files.read("/tmp/deep/er/x.sh") == b"#!/bin/sh\necho x\n", "files.read -> bytes")
    stt = sbx.files.stat("/tmp/deep/er/x.sh")
    check(stt.type == "file" and stt.mode & 0o777 == 0o755 and stt.size == 17, f"files.stat: {stt}")
    check([(x.name, x.type) for x in sbx.files.list("/tmp/deep")] == [("er", "dir")], "files.list")
    sbx.files.write("/tmp/t.txt", io.BytesIO(b"from a BytesIO"))
    check(sbx.files.read("/tmp/t.txt") == b"from a BytesIO", "write from a BytesIO")
    raises(sc.NotFound, lambda: sbx.files.stat("/no/such/path"), "stat of a missing path")
    log("files: write (parents, mode, BytesIO), read, stat, list")

    # upload / download of a tree
    src = os.path.join(WORK, "tree")
    os.makedirs(os.path.join(src, "sub", "deep"))
    os.makedirs(os.path.join(src, "empty"))
    with open(os.path.join(src, "a.txt"), "w") as f:
        f.write("alpha\n")
    with open(os.path.join(src, "sub", "b.bin"), "wb") as f:
        f.write(b"\x00\xff" * 1000)
    with open(os.path.join(src, "sub", "deep", "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(src, "sub", "deep", "run.sh"), 0o755)
    os.symlink("a.txt", os.path.join(src, "link"))
    up = sbx.upload(src, "/work/proj")
    check(up["bytes"] > 0, f"upload: {up}")
    check(sbx.exec(["/work/proj/sub/deep/run.sh"]).text == "ran\n", "the uploaded script runs (mode kept)")
    check(sbx.exec(["cat", "/work/proj/link"]).text == "alpha\n", "the uploaded symlink")
    sbx.upload(src, "/work/proj")  # into an existing directory
    dest = os.path.join(WORK, "down")
    names = sbx.download("/work/proj", dest)
    check("proj/sub/deep/run.sh" in names, f"download members: {names}")
    base = os.path.join(dest, "proj")
    with open(os.path.join(base, "sub", "b.bin"), "rb") as f:
        check(f.read() == b"\x00\xff" * 1000, "downloaded binary file")
    check(os.stat(os.path.join(base, "sub", "deep", "run.sh")).st_mode & 0o777 == 0o755, "downloaded mode")
    check(os.readlink(os.path.join(base, "link")) == "a.txt", "downloaded symlink")
    check(os.path.isdir(os.path.join(base, "empty")), "downloaded empty directory")
    log("upload/download: a tree with modes, a symlink, binary and empty dir, both ways")

    # logs: what the main process writes
    sbx.exec(["sh", "-c", "echo log-line-1 >/proc/1/fd/1"])
    lines = list(sbx.logs())
    check(any("log-line-1" in ln.data for ln in lines), f"logs: {lines}")
    check(any("log-line-1" in ln.data for ln in sbx.logs(tail=5)), "logs(tail=5)")

    def later():
        time.sleep(1)
        sbx.exec(["sh", "-c", "echo log-follow >/proc/1/fd/2"])

    th = threading.Thread(target=later)
    th.start()
    with sbx.logs(follow=True, tail=0) as stream:
        for ln in stream:
            if "log-follow" in ln.data:
                check(ln.stream == "stderr", f"followed line's stream: {ln}")
                break
    th.join()
    log("logs: read, tail, follow")

    # share / routes / unshare
    rt = sbx.share(8080)
    check(rt.id.startswith("rt_") and rt.access_token and rt.access_token.startswith("sbr_") and rt.port == 8080,
          f"share: {rt}")
    listed = [(x.id, x.state) for x in sbx.routes()]
    check(listed == [(rt.id, "active")] and rt.state == "active", f"routes: {listed}")
    pub = sbx.share(8081, auth="public", ttl_seconds=120)
    check(pub.access_token is None and pub.auth == "public", f"a public route: {pub}")
    check(sbx.unshare(rt.id).state == "succeeded", "unshare")
    check({x.id for x in sbx.routes()} == {pub.id}, "routes after unshare")
    check(rt.id in {x.id for x in sbx.routes(all=True)}, "routes(all=True) keeps the removed one")

    # events with the cursor, then extend (an event of its own) seen by a follow
    evs = member.events(sandbox=sbx.id)
    kinds = [e["kind"] for e in evs]
    check("sandbox.pending" in kinds and "sandbox.running" in kinds, f"events of the sandbox: {kinds}")
    cursor = evs.next_after
    check(cursor > 0, "next_after after reading")
    check(list(member.events(after=cursor, sandbox=sbx.id)) == [], "nothing after the cursor yet")
    ext = sbx.extend(1800)
    check(ext.kind == "extend" and ext.state == "succeeded" and ext.result["ttl_seconds"] == 1800, f"extend: {ext}")
    check(sbx.refresh().expires_at == ext.result["expires_at"], "expires_at moved")
    follow = member.events(after=cursor, sandbox=sbx.id, follow=True, wait=10)
    ev = next(follow)
    while ev["kind"] != "sandbox.extended":
        ev = next(follow)
    check(ev["id"] > cursor and follow.next_after >= ev["id"], f"the follow resumes after the cursor: {ev}")
    log(f"routes; events ({len(kinds)} then sandbox.extended after cursor {cursor}); extend")


# ---------------------------------------------------------------- snapshots
def snapshot_work(sbx):
    """A snapshot of the running sandbox, a sandbox started from it that has
    the file written before, list, get, delete; another tenant's member
    does not see it."""
    sbx.exec(["sh", "-c", f"mkdir -p /work && echo {label} >/work/snap-state"])
    snap_name = "sdk-snap-" + label
    snap = sbx.snapshot(name=snap_name, timeout=120)
    cleanup.append(snap)
    check(snap["id"].startswith("snp_") and snap.get("name") == snap_name and snap["sandbox_id"] == sbx.id,
          f"snapshot: {snap}")
    check(snap["state"] == "ready" and (snap.get("size_bytes") or 0) > 0,
          f"a waited snapshot is ready, with its size: {snap}")
    child = member.sandboxes.create(from_=snap_name, network="none", labels={"sdk": label}, **SMALL)
    cleanup.append(child)
    check(child.from_ == snap["id"] and child.data.get("from") == snap["id"],
          f"the sandbox shows the snapshot it came from: {child.data.get('from')} != {snap['id']}")
    r = child.exec(["cat", "/work/snap-state"])
    check(r.exit_code == 0 and r.text == label + "\n", f"the file the snapshot kept: {r}")
    check(snap["id"] in [x["id"] for x in member.snapshots.list()], "snapshots.list has it")
    check(snap["id"] in [x["id"] for x in member.snapshots.list(sandbox=sbx.id)], "snapshots.list(sandbox=)")
    check(member.snapshots.get(snap_name)["id"] == snap["id"], "snapshots.get by name")
    raises(sc.NotFound, lambda: Client(MAIN_URL, E["SDK_QUOTA_MEMBER"]).snapshots.get(snap["id"]),
           "another tenant's snapshot")
    child.delete()
    gone = member.snapshots.delete(snap["id"])
    check(gone["id"] == snap["id"] and gone["state"] == "deleted", f"snapshots.delete: {gone}")
    check(snap["id"] not in [x["id"] for x in member.snapshots.list()], "a deleted snapshot leaves the list")
    log(f"snapshots: {snap['id']} ready ({snap['size_bytes']} bytes), a sandbox from it has the file; "
        "list, get by name, NotFound for another tenant, delete")


# ---------------------------------------------------------------- volumes
def volume_work():
    """A volume mounted read-write by a sandbox that writes a file (Conflict
    to delete it meanwhile), then read-only by a second that reads it; list,
    get, delete."""
    vname = "sdk-vol-" + label
    vol = member.volumes.create(vname, size_mib=16)
    check(vol["id"].startswith("vol_") and vol["name"] == vname and vol["state"] == "unplaced"
          and vol["size_mib"] == 16, f"volumes.create: {vol}")
    made = []
    try:
        a = member.sandboxes.create(IMAGE, network="none", labels={"sdk": label},
                                    volumes=[{"volume": vname, "path": "/data"}], **SMALL)
        made.append(a)
        check([m["volume"] for m in a.volumes] == [vol["id"]], f"the sandbox shows its mount by id: {a.volumes}")
        check(a.exec(["sh", "-c", f"echo {label} > /data/note && sync"]).exit_code == 0, "writing in the volume")
        got = member.volumes.get(vname)
        check(got["state"] == "ready" and [m["sandbox"] for m in got["mounted_by"]] == [a.id],
              f"volumes.get once mounted: {got}")
        raises(sc.Conflict, lambda: member.volumes.delete(vname), "deleting a mounted volume")
        a.delete()
        b = member.sandboxes.create(IMAGE, network="none", labels={"sdk": label},
                                    volumes=[{"volume": vol["id"], "path": "/data", "read_only": True}], **SMALL)
        made.append(b)
        r = b.exec(["cat", "/data/note"])
        check(r.exit_code == 0 and r.text == label + "\n", f"the file read through a read-only mount: {r}")
        b.delete()
        check(vol["id"] in [v["id"] for v in member.volumes.list()], "volumes.list has it")
        gone = member.volumes.delete(vol["id"])
        check(gone["id"] == vol["id"] and gone["state"] == "deleted", f"volumes.delete: {gone}")
        check(vol["id"] not in [v["id"] for v in member.volumes.list()], "a deleted volume leaves the list")
    finally:
        for sbx in made:
            try:
                sbx.delete()
            except Exception:
                pass
        try:
            member.volumes.delete(vol["id"])
        except Exception:
            pass
    log(f"volumes: {vol['id']} written through a read-write mount, read through a read-only one; "
        "Conflict while mounted, list, get, delete")


def local_unpack_refusals():
    """safe_extract refuses what would land outside the destination (a
    server never sends these: the worker checks, so they are made here)."""
    def tar_with(*members):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for ti, data in members:
                t.addfile(ti, io.BytesIO(data) if data is not None else None)
        buf.seek(0)
        return buf

    def reg(name, data=b"x"):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        return ti, data

    def special(name, typ, link=""):
        ti = tarfile.TarInfo(name)
        ti.type = typ
        ti.linkname = link
        return ti, None

    cases = {
        "dotdot": tar_with(reg("ok/../../escape")),
        "absolute": tar_with(reg("/etc/escape")),
        "symlink-out": tar_with(special("ok/l", tarfile.SYMTYPE, "../../x")),
        "symlink-abs": tar_with(special("ok/l", tarfile.SYMTYPE, "/etc")),
        "through-symlink": tar_with(special("ok", tarfile.DIRTYPE), special("ok/l", tarfile.SYMTYPE, "."),
                                    reg("ok/l/../../x")),
        "device": tar_with(special("ok/dev", tarfile.CHRTYPE)),
        "fifo": tar_with(special("ok/fifo", tarfile.FIFOTYPE)),
    }
    for what, t in cases.items():
        dest = os.path.join(WORK, "unsafe-" + what)
        try:
            safe_extract(t, dest)
            fail(f"an archive with {what} was unpacked")
        except sc.UnsafeArchive:
            pass
        check(not os.path.exists(os.path.join(WORK, "escape")) and not os.path.exists(os.path.join(WORK, "x")),
              f"{what}: something landed outside the destination")
    log(f"download unpacking refuses: {', '.join(cases)}")


def main():
    os.environ["XDG_CONFIG_HOME"] = os.path.join(WORK, "empty-xdg")
    for k in ("SANDBOX_CONTEXT", "SANDBOX_CA_FILE"):
        os.environ.pop(k, None)
    error_table()
    local_unpack_refusals()
    config_resolution()
    tls_and_admin()
    name = "sdk-" + label
    with member.sandboxes.create(IMAGE, name=name, network="none", labels={"sdk": label}, ttl_seconds=600,
                                 memory_mib=256, cpu_millis=1000) as sbx:
        cleanup.append(sbx)
        print(f"SANDBOX {sbx.id}", flush=True)
        errors_main(sbx)
        sandbox_work(sbx)
        snapshot_work(sbx)
    volume_work()
    after = member.sandboxes.get(sbx.id)
    check(after.phase == "deleted", f"the context manager deleted the sandbox: {after.phase}")
    raises(sc.Conflict, lambda: after.exec(["true"]), "exec on a deleted sandbox")
    raises(sc.NotFound, lambda: member.sandboxes.get(name), "the deleted sandbox's name no longer resolves")
    log("context manager: deleted on exit; exec on it is Conflict")
    # create(wait=False) and an operation waited by id
    op = member.sandboxes.create(IMAGE, network="none", labels={"sdk": label}, wait=False, **SMALL)
    check(isinstance(op, sc.Operation) and op.kind == "create", f"create(wait=False): {op!r}")
    cleanup.append(op)
    check(member.operations.wait(op.id, timeout=120).state == "succeeded", "operations.wait of the create")
    s2 = member.sandboxes.get(op.sandbox_id)
    d = s2.delete(wait=False)
    check(d.kind == "delete", f"delete(wait=False): {d!r}")
    d.wait(timeout=120)
    lost_answer_create()
    check(member.images()["images"], "images")
    log("create(wait=False) + operations.wait, delete(wait=False) + wait, images")
    cleanup.clear()
    print("SDK-PYTHON-OK", flush=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        for item in cleanup:
            try:
                if isinstance(item, dict):  # a snapshot
                    member.snapshots.delete(item["id"])
                    continue
                sid = item.sandbox_id if isinstance(item, sc.Operation) else item.id
                member.sandboxes.get(sid).delete(wait=False)
            except Exception:  # the shell's own cleanup deletes what is left
                pass
