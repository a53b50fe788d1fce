"""A sandbox and what can be done in it: exec, files, logs, routes, TTL,
snapshots, delete."""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import stat
import uuid
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Union,
    overload,
)

from ._http import Body, BytesBody, FileBody
from ._tar import TarDirBody, remote_prefix, safe_extract
from .errors import NotFound, SandboxError, error_from
from .models import ExecResult, FileEntry, LogLine, OutputChunk, Route
from .operation import Operation, OutputStream, _q

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .client import Client

Stdin = Union[str, bytes, bytearray, memoryview, None]


class Sandbox:
    """A sandbox (``sbx_…``). ``data`` is the API object as last fetched
    (``refresh()`` fetches it again). Used as a context manager it is
    deleted when the block ends, however it ends."""

    def __init__(self, client: "Client", data: Dict[str, Any], operations: Optional[List[Dict[str, Any]]] = None):
        self._client = client
        self.data: Dict[str, Any] = data
        self.operations: List[Dict[str, Any]] = operations or []
        self.files = Files(self)

    def __repr__(self) -> str:
        name = f" {self.name}" if self.name else ""
        return f"<Sandbox {self.id}{name} {self.phase}>"

    # ---------------------------------------------------------------- fields

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def name(self) -> Optional[str]:
        return self.data.get("name")

    @property
    def phase(self) -> str:
        return str(self.data.get("phase", ""))

    @property
    def tenant(self) -> Optional[str]:
        return self.data.get("tenant")

    @property
    def expires_at(self) -> Optional[str]:
        return self.data.get("expires_at")

    @property
    def from_(self) -> Optional[str]:
        """The id (``snp_…``) of the snapshot it was created from, or None
        (the API object's ``from``)."""
        return self.data.get("from")

    @property
    def volumes(self) -> List[Dict[str, Any]]:
        """The volumes it mounts (``[{"volume": "vol_…", "path", "read_only"}]``),
        empty when none."""
        return list(self.data.get("volumes") or [])

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{_q(self.id)}"

    def refresh(self) -> "Sandbox":
        body = self._client._transport.call("GET", self._path)
        self.data = body["sandbox"]
        self.operations = body.get("operations") or []
        return self

    # ---------------------------------------------------------------- exec

    def _exec_request(
        self,
        argv: Sequence[str],
        stdin: Stdin,
        env: Optional[Mapping[str, str]],
        cwd: Optional[str],
        timeout: Optional[int],
        max_output_bytes: Optional[int],
    ) -> Operation:
        if isinstance(argv, (str, bytes)):
            raise TypeError(
                "argv is a list of strings and never goes through a shell: "
                f"use [{argv!r}] or ['sh', '-c', {argv!r}]"
            )
        req: Dict[str, Any] = {"argv": list(argv)}
        if env:
            req["env"] = dict(env)
        if cwd is not None:
            req["cwd"] = cwd
        if timeout is not None:
            req["timeout_seconds"] = int(timeout)
        if max_output_bytes is not None:
            req["max_output_bytes"] = int(max_output_bytes)
        if isinstance(stdin, str):
            req["stdin"] = stdin
        elif stdin is not None:
            req["stdin_b64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        # The server answers a replay of the same key with the first exec,
        # so a retried request never runs the command twice.
        body = self._client._transport.call(
            "POST", self._path + "/exec", json=req, idempotency_key=str(uuid.uuid4())
        )
        return Operation(self._client, body["operation"])

    @overload
    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        stream: Literal[False] = False,
    ) -> ExecResult: ...

    @overload
    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        stream: Literal[True],
    ) -> "ExecStream": ...

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        stream: bool = False,
    ) -> Union[ExecResult, "ExecStream"]:
        """Runs argv (never through a shell) and returns its
        :class:`ExecResult` once it ended; a non-zero exit is a result, not an
        error. ``stdin``: text or bytes (at most 512 KiB), closed after.
        ``timeout``: seconds before the server kills it (default 600).
        ``stream=True`` returns an :class:`ExecStream` of its output as it
        comes; its ``result`` afterwards. Raises the operation's error class
        when the exec itself fails (:class:`SandboxExited`,
        :class:`Cancelled`, ...) and :class:`Conflict` when the sandbox is not
        running."""
        op = self._exec_request(argv, stdin, env, cwd, timeout, max_output_bytes)
        if stream:
            return ExecStream(op)
        op.wait()
        return op.exec_result()

    def exec_detached(
        self,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
    ) -> Operation:
        """Starts argv and returns its :class:`Operation` at once: follow it
        with ``output()``, end it with ``cancel()``, get its result with
        ``wait()`` and ``exec_result()``."""
        return self._exec_request(argv, stdin, env, cwd, timeout, max_output_bytes)

    # ---------------------------------------------------------------- tar

    def _existing_ancestor(self, remote_dir: str) -> str:
        """The nearest directory of remote_dir's ancestors (itself included) that exists."""
        cur = posixpath.normpath(remote_dir)
        while True:
            try:
                entry = self.files.stat(cur)
            except NotFound:
                if cur == "/":
                    raise
                cur = posixpath.dirname(cur)
                continue
            if not entry.is_dir:
                raise SandboxError(f"{cur} in the sandbox is a {entry.type}, not a directory", code="not_a_directory")
            return cur

    def upload(self, local_dir: Union[str, "os.PathLike[str]"], remote_dir: str) -> Dict[str, Any]:
        """Copies the contents of local_dir into remote_dir (created, with
        its missing parents, when absent) as one tar stream, packed while it
        is sent. Modes, mtimes and symlinks are kept; owners become root.
        Returns the server's ``{"sandbox_id","path","format","bytes"}``."""
        if not remote_dir.startswith("/"):
            raise ValueError(f"remote_dir must be an absolute path in the sandbox, not {remote_dir!r}")
        base = self._existing_ancestor(remote_dir)
        prefix = remote_prefix(base, remote_dir) or []
        body = TarDirBody(os.fspath(local_dir), prefix)
        return self._client._transport.call(
            "PUT",
            self._path + "/files",
            query={"path": base, "format": "tar"},
            body=body,
            timeout=max(self._client.timeout, 300.0),
        )

    def download(self, remote_path: str, local_dir: Union[str, "os.PathLike[str]"]) -> List[str]:
        """Copies remote_path (a file or a whole directory) into local_dir
        (created when missing) as ``local_dir/<its last component>``, as
        ``docker cp`` does. The stream is unpacked as it arrives, and safely:
        a member with an absolute name, a ``..``, a link leading out of
        local_dir, a device or a FIFO raises :class:`UnsafeArchive`. Returns
        the member names written."""
        resp = self._client._transport.request(
            "GET",
            self._path + "/files",
            query={"path": remote_path, "format": "tar"},
            accept="application/x-tar",
            timeout=max(self._client.timeout, 300.0),
        )
        with resp:
            return safe_extract(_ResponseFile(resp), os.fspath(local_dir))

    # ---------------------------------------------------------------- logs

    def logs(self, follow: bool = False, tail: Union[int, str, None] = None) -> "LogStream":
        """The main process's output as :class:`LogLine` s (``tail``: the
        last N lines; ``follow``: go on as it is written, until the container
        stops or the caller stops iterating). Close the stream (or use it as
        a context manager) to end a follow early."""
        query: Dict[str, Any] = {"follow": follow}
        if tail is not None:
            query["tail"] = tail
        # a quiet follow is not timed out by the server: neither by us
        resp = self._client._transport.request(
            "GET",
            self._path + "/logs",
            query=query,
            accept="application/x-ndjson",
            timeout=None if not follow else 24 * 3600.0,
        )
        return LogStream(resp)

    # ---------------------------------------------------------------- routes

    def share(self, port: int, auth: str = "token", ttl_seconds: Optional[int] = None, wait: bool = True) -> Route:
        """Serves the sandbox's port on the route listener. A ``token`` route
        needs the returned ``access_token`` (shown only now); ``public``
        needs none. With ``wait`` (the default) it returns once the
        controller completed the share and the route is active."""
        req: Dict[str, Any] = {"port": int(port), "auth": auth}
        if ttl_seconds is not None:
            req["ttl_seconds"] = int(ttl_seconds)
        body = self._client._transport.call("POST", self._path + "/routes", json=req)
        route = Route.from_api(body["route"], body.get("access_token"))
        if not wait:
            return route
        Operation(self._client, body["operation"]).wait()
        for r in self.routes():
            if r.id == route.id:
                return Route.from_api(r.data, route.access_token)
        return route

    def routes(self, all: bool = False) -> List[Route]:
        """The sandbox's routes (``all``: removed ones too)."""
        body = self._client._transport.call("GET", self._path + "/routes", query={"all": True} if all else None)
        return [Route.from_api(r) for r in body.get("routes") or []]

    def unshare(self, route_id: str, wait: bool = True) -> Operation:
        """Removes a route; its open connections close within 2 s."""
        body = self._client._transport.call("DELETE", f"{self._path}/routes/{_q(route_id)}")
        op = Operation(self._client, body["operation"])
        return op.wait() if wait else op

    # ---------------------------------------------------------------- life

    def extend(self, ttl_seconds: int) -> Operation:
        """Makes the sandbox expire ttl_seconds from now (shorter or longer
        than before). Returns the extend operation, already succeeded; its
        ``result`` has ``previous_expires_at`` and ``expires_at``."""
        body = self._client._transport.call(
            "POST",
            self._path + "/extend",
            json={"ttl_seconds": int(ttl_seconds)},
            idempotency_key=str(uuid.uuid4()),
        )
        op = Operation(self._client, body["operation"])
        result = op.result or {}
        if result.get("expires_at"):
            self.data["expires_at"] = result["expires_at"]
        return op

    def snapshot(
        self, name: Optional[str] = None, wait: bool = True, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        """Saves the sandbox's files as a snapshot (docs/snapshots.md), which
        ``client.sandboxes.create(from_=…)`` starts new sandboxes from; the
        sandbox goes on running. Returns the snapshot (a dict): with
        ``wait``, once it is ``ready`` (``size_bytes``, ``image_bytes``
        known); without, at once and ``pending`` (wait for it with
        ``client.operations.wait(snapshot["operation_id"])``). A snapshot
        that fails raises the class of its operation's error (``.operation``
        set); ``timeout`` (seconds; None: no bound) running out raises
        :class:`TimeoutError`. Refused with :class:`Conflict` (not running,
        or the name is taken), :class:`QuotaExceeded`,
        :class:`IsolationUnavailable` (``microvm``) or :class:`Unavailable`
        (its worker unreachable). The request carries an Idempotency-Key, so
        a retry after a lost answer makes no second snapshot."""
        req: Dict[str, Any] = {}
        if name is not None:
            req["name"] = name
        body = self._client._transport.call(
            "POST", self._path + "/snapshots", json=req, idempotency_key=str(uuid.uuid4())
        )
        snap: Dict[str, Any] = body["snapshot"]
        if not wait:
            return snap
        Operation(self._client, body["operation"]).wait(timeout)
        return self._client.snapshots.get(str(snap["id"]))

    def delete(self, wait: bool = True, timeout: Optional[float] = None) -> Operation:
        """Deletes the sandbox (its files, processes and routes go); with
        ``wait``, returns once it is deleted."""
        body = self._client._transport.call("DELETE", self._path, idempotency_key=str(uuid.uuid4()))
        op = Operation(self._client, body["operation"])
        if wait:
            op.wait(timeout)
            self.data["phase"] = "deleted"
        return op

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.delete(wait=True)
        except NotFound:
            pass  # deleted already (and gone)
        except SandboxError:
            # an error of the block itself says more than its cleanup's; the
            # sandbox's TTL still removes it
            if exc_type is None:
                raise


class ExecStream(Iterator[OutputChunk]):
    """An exec's output as it comes (:class:`OutputChunk` s: stdout and
    stderr interleaved as the worker read them). Once iterated to its end,
    ``result`` is the :class:`ExecResult`; reading ``result`` earlier reads
    (and drops) the rest of the output first. A failed or cancelled exec
    raises its error class at the end of the iteration."""

    def __init__(self, operation: Operation) -> None:
        self.operation = operation
        self._chunks: OutputStream = operation.output(follow=True)

    @property
    def skipped_bytes(self) -> int:
        return self._chunks.skipped_bytes

    def __iter__(self) -> "ExecStream":
        return self

    def __next__(self) -> OutputChunk:
        try:
            return next(self._chunks)
        except StopIteration:
            err = self.operation.exception()
            if err is not None:
                raise err from None
            raise

    @property
    def result(self) -> ExecResult:
        for _ in self:
            pass
        if not self.operation.done:
            self.operation.wait()
        return self.operation.exec_result()


class LogStream(Iterator[LogLine]):
    """NDJSON lines of GET /v1/sandboxes/{id}/logs as :class:`LogLine` s.
    ``truncated`` becomes True when the server stopped a read without follow
    at its 1 MiB bound (use ``tail`` for the end). A stream that could not go
    on raises its error class."""

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.truncated = False
        self._closed = False

    def __iter__(self) -> "LogStream":
        return self

    def __next__(self) -> LogLine:
        while not self._closed:
            raw = self._resp.readline()
            if not raw:
                self.close()
                break
            raw = raw.strip()
            if not raw:
                continue
            obj = json.loads(raw)
            if "error" in obj:
                self.close()
                err = obj["error"] or {}
                raise error_from(err.get("code"), err.get("message") or "the logs stream failed")
            if obj.get("truncated"):
                self.truncated = True
                continue
            return LogLine(stream=str(obj.get("stream", "")), data=str(obj.get("data", "")))
        raise StopIteration

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._resp.close()

    def __enter__(self) -> "LogStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _ResponseFile(io.RawIOBase):
    """A Response as the read-only file object tarfile reads."""

    def __init__(self, resp: Any) -> None:
        self._resp = resp

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        return self._resp.read(n)


class Files:
    """``sandbox.files``: single files and directory listings (one file's
    bytes, ``format=raw``, streamed both ways)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return self._sandbox._path + "/files"

    def write(
        self,
        path: str,
        data: Union[bytes, bytearray, memoryview, str, IO[bytes]],
        mode: int = 0o644,
        parents: bool = False,
    ) -> Dict[str, Any]:
        """Writes one file (replacing it). ``data``: bytes, text (UTF-8) or a
        binary file object, sent from its position to its end without being
        read into memory first when it has a size (a real file, BytesIO).
        ``parents``: make the missing directories above it (0755)."""
        body: Body
        if isinstance(data, str):
            body = BytesBody(data.encode("utf-8"))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = BytesBody(bytes(data))
        else:
            size = _remaining_size(data)
            # a raw upload needs its length: a pipe is read into memory first
            body = FileBody(data, size) if size is not None else BytesBody(data.read())
        query: Dict[str, Any] = {"path": path, "format": "raw", "mode": format(mode & 0o7777, "o")}
        if parents:
            query["parents"] = True
        client = self._sandbox._client
        return client._transport.call(
            "PUT", self._path, query=query, body=body, timeout=max(client.timeout, 300.0)
        )

    @overload
    def read(self, path: str) -> bytes: ...

    @overload
    def read(self, path: str, out: IO[bytes]) -> int: ...

    def read(self, path: str, out: Optional[IO[bytes]] = None) -> Union[bytes, int]:
        """One regular file's bytes; with ``out`` (a binary file object) they
        are written there as they arrive and the count is returned."""
        client = self._sandbox._client
        resp = client._transport.request(
            "GET",
            self._path,
            query={"path": path, "format": "raw"},
            accept="application/octet-stream",
            timeout=max(client.timeout, 300.0),
        )
        with resp:
            expected = resp.headers.get("Content-Length")
            data = b""
            got = 0
            if out is None:
                data = resp.read()
                got = len(data)
            else:
                for chunk in resp.iter_chunks():
                    out.write(chunk)
                    got += len(chunk)
        if expected is not None and got != int(expected):
            raise SandboxError(f"{path}: the download ended after {got} of {expected} bytes", code="incomplete")
        return data if out is None else got

    def list(self, path: str) -> List[FileEntry]:
        """The direct children of a directory (at most 10,000)."""
        body = self._sandbox._client._transport.call("GET", self._path, query={"path": path, "format": "list"})
        return [FileEntry.from_api(e) for e in body.get("entries") or []]

    def stat(self, path: str) -> FileEntry:
        """The path itself (a symlink is not followed)."""
        body = self._sandbox._client._transport.call("GET", self._path, query={"path": path, "format": "stat"})
        return FileEntry.from_api(body["stat"])


def _remaining_size(f: IO[bytes]) -> Optional[int]:
    """Bytes from f's position to its end, or None when it cannot say (a pipe)."""
    try:
        pos = f.tell()
    except (OSError, ValueError, AttributeError):
        return None
    try:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode):
            return max(0, st.st_size - pos)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        if not f.seekable():
            return None
        end = f.seek(0, io.SEEK_END)
        f.seek(pos)
        return max(0, end - pos)
    except (OSError, ValueError):
        return None
