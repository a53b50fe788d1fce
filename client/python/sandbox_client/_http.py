"""The HTTP layer: one connection per request (http.client, so streamed
bodies and answers need no third-party package), bearer auth, the JSON
error shape mapped to exceptions, and retries.

Retries (``retries`` attempts after the first; 0 disables):

* GET and HEAD, and requests carrying an ``Idempotency-Key`` (the server
  answers a replay with the first request's result), are retried on a
  connection failure and on 502, 503, 504 and 429 ``rate_limited``;
* any request whose body can be sent again is retried on 429
  ``rate_limited``: the API guarantees such a request did nothing;
* the wait is ``Retry-After`` when the server sent one, else exponential
  backoff (0.25 s doubling, at most 8 s) with jitter;
* ``quota_exceeded`` (also a 429) is never retried: waiting does not free a
  tenant's quota.
"""

from __future__ import annotations

import email.utils
import http.client
import json as _json
import random
import ssl
import time
import urllib.parse
from typing import IO, Any, Callable, Dict, Iterator, Mapping, Optional, Union

from .errors import SandboxConnectionError, SandboxError, error_from

QueryValue = Union[str, int, float, bool, None]

# An error answer without the API's JSON body (a proxy in between, say):
# the code its status most likely means.
_STATUS_CODES = {
    400: "invalid_argument",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    431: "headers_too_large",
    500: "internal",
    502: "bad_gateway",
    503: "unavailable",
}
# How much of an error answer is read (they are small JSON objects).
_ERROR_BODY_MAX = 1 << 20
# Bytes gathered before one write to the socket when streaming a body.
_SEND_CHUNK = 256 * 1024


class Body:
    """A request body that may be larger than memory should hold: its
    length (None: sent chunked) and how to write it. ``replayable`` bodies
    can be sent again by a retry (after :meth:`rewind`)."""

    length: Optional[int] = None
    replayable: bool = True
    content_type: str = "application/octet-stream"

    def write_to(self, send: Callable[[bytes], None]) -> None:
        raise NotImplementedError

    def rewind(self) -> None:
        """Makes the next :meth:`write_to` send the body from its start."""


class BytesBody(Body):
    def __init__(self, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.data = data
        self.length = len(data)
        self.content_type = content_type

    def write_to(self, send: Callable[[bytes], None]) -> None:
        view = memoryview(self.data)
        for i in range(0, len(view), _SEND_CHUNK):
            send(bytes(view[i : i + _SEND_CHUNK]))


class FileBody(Body):
    """A binary file object sent from its current position to its end, a
    buffer at a time. Its length is taken from the file (fstat, or a seek to
    the end); it can be replayed when it can seek back."""

    def __init__(self, f: IO[bytes], length: int) -> None:
        self.f = f
        self.length = self.size = length
        try:
            self.start: Optional[int] = f.tell() if f.seekable() else None
        except (OSError, ValueError):
            self.start = None
        self.replayable = self.start is not None

    def write_to(self, send: Callable[[bytes], None]) -> None:
        left = self.size
        while left > 0:
            b = self.f.read(min(_SEND_CHUNK, left))
            if not b:
                raise ValueError(f"the file ended {left} bytes before the length it had when the upload began")
            send(b)
            left -= len(b)

    def rewind(self) -> None:
        if self.start is not None:
            self.f.seek(self.start)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After as seconds (a number or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Response:
    """An answer whose body has not been read yet (or has, for JSON). Close
    it (or use it as a context manager) when reading a stream."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, method: str, path: str):
        self._conn = conn
        self._resp = resp
        self.method = method
        self.path = path
        self.status: int = resp.status
        self.headers = resp.headers
        self.request_id: Optional[str] = resp.getheader("X-Request-Id")

    def read(self, n: int = -1) -> bytes:
        try:
            return self._resp.read(n) if n >= 0 else self._resp.read()
        except (http.client.IncompleteRead, OSError, http.client.HTTPException) as e:
            raise SandboxConnectionError(
                f"the answer to {self.method} {self.path} ended early: {e}", request_id=self.request_id
            ) from e

    def read1(self, n: int = 65536) -> bytes:
        """What arrived, at most n bytes, without waiting for more than one read."""
        try:
            return self._resp.read1(n)
        except (http.client.IncompleteRead, OSError, http.client.HTTPException) as e:
            raise SandboxConnectionError(
                f"the answer to {self.method} {self.path} ended early: {e}", request_id=self.request_id
            ) from e

    def readline(self) -> bytes:
        try:
            return self._resp.readline()
        except (http.client.IncompleteRead, OSError, http.client.HTTPException) as e:
            raise SandboxConnectionError(
                f"the answer to {self.method} {self.path} ended early: {e}", request_id=self.request_id
            ) from e

    def iter_chunks(self, size: int = 256 * 1024) -> Iterator[bytes]:
        while True:
            b = self.read1(size)
            if not b:
                return
            yield b

    def json(self) -> Any:
        data = self.read()
        self.close()
        try:
            return _json.loads(data) if data else None
        except ValueError as e:
            raise SandboxError(
                f"{self.method} {self.path} answered {self.status} with a body that is not JSON: {data[:200]!r}",
                code="bad_response",
                status=self.status,
                request_id=self.request_id,
            ) from e

    def close(self) -> None:
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Transport:
    def __init__(
        self,
        url: str,
        token: Optional[str],
        *,
        ca_file: Optional[str],
        timeout: float,
        retries: int,
        user_agent: str,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"'{url}' is not an http:// or https:// URL")
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.base_path = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.user_agent = user_agent
        self.ssl_context: Optional[ssl.SSLContext] = None
        if self.https:
            # Verification is never turned off: a private CA is given as a file.
            try:
                self.ssl_context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise SandboxConnectionError(f"cannot load the CA file {ca_file}: {e}") from e

    # ------------------------------------------------------------ one attempt

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def target(self, path: str, query: Optional[Mapping[str, QueryValue]] = None) -> str:
        t = self.base_path + path
        if query:
            pairs = []
            for k, v in query.items():
                if v is None:
                    continue
                if isinstance(v, bool):
                    v = "true" if v else "false"
                pairs.append(f"{urllib.parse.quote(k)}={urllib.parse.quote(str(v), safe=',:=/')}")
            if pairs:
                t += "?" + "&".join(pairs)
        return t

    def _attempt(
        self,
        method: str,
        target: str,
        headers: Dict[str, str],
        body: Optional[Body],
        timeout: float,
    ) -> Response:
        conn = self._connection(timeout)
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            if body is not None:
                try:
                    self._send_body(conn, body)
                except OSError:
                    # The server may refuse a body it will not read (401
                    # before a large body, 413 from its length) and close:
                    # its answer is then the error to report, if it came.
                    try:
                        return Response(conn, conn.getresponse(), method, target)
                    except (OSError, http.client.HTTPException):
                        pass
                    raise
            return Response(conn, conn.getresponse(), method, target)
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _send_body(conn: http.client.HTTPConnection, body: Body) -> None:
        chunked = body.length is None
        buf = bytearray()

        def flush() -> None:
            if not buf:
                return
            if chunked:
                conn.send(b"%x\r\n" % len(buf) + bytes(buf) + b"\r\n")
            else:
                conn.send(bytes(buf))
            del buf[:]

        def send(b: bytes) -> None:
            buf.extend(b)
            if len(buf) >= _SEND_CHUNK:
                flush()

        body.write_to(send)
        flush()
        if chunked:
            conn.send(b"0\r\n\r\n")

    # ------------------------------------------------------------ with retries

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        json: Any = None,
        body: Optional[Body] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
        accept: str = "application/json",
    ) -> Response:
        """Sends the request (retrying as the module says) and returns the
        2xx answer unread; raises the error class of anything else."""
        if json is not None:
            body = BytesBody(_json.dumps(json, separators=(",", ":")).encode(), "application/json")
        target = self.target(path, query)
        headers = {"User-Agent": self.user_agent, "Accept": accept}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        if body is not None:
            headers["Content-Type"] = body.content_type
            if body.length is None:
                headers["Transfer-Encoding"] = "chunked"
            else:
                headers["Content-Length"] = str(body.length)
        elif method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = "0"
        safe = method in ("GET", "HEAD") or idempotency_key is not None
        attempt = 0
        while True:
            replayable = body is None or body.replayable
            if attempt > 0 and body is not None:
                body.rewind()
            try:
                resp = self._attempt(method, target, headers, body, timeout or self.timeout)
            except ssl.SSLCertVerificationError as e:
                raise SandboxConnectionError(
                    f"TLS: the certificate of {self.url} does not verify ({e.verify_message}); give the CA that "
                    "signed it as ca_file (or SANDBOX_CA_FILE, or ca_file in the CLI's config file)"
                ) from e
            except (OSError, http.client.HTTPException) as e:
                if safe and replayable and attempt < self.retries:
                    self._sleep(attempt, None)
                    attempt += 1
                    continue
                raise SandboxConnectionError(f"cannot reach the controller at {self.url}: {method} {path}: {e}") from e
            if 200 <= resp.status < 300:
                return resp
            err = self._error(resp)
            rate_limited = resp.status == 429 and err.code == "rate_limited"
            transient = resp.status in (502, 503, 504) or rate_limited
            if attempt < self.retries and replayable and ((safe and transient) or rate_limited):
                self._sleep(attempt, err._retry_after)
                attempt += 1
                continue
            raise err

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """request() for a JSON answer: the parsed body."""
        return self.request(method, path, **kw).json()

    @staticmethod
    def _sleep(attempt: int, retry_after: Optional[float]) -> None:
        if retry_after is not None:
            # as the server said, plus a little so many clients do not come back together
            time.sleep(retry_after + random.uniform(0, 0.1))
        else:
            time.sleep(min(8.0, 0.25 * (2**attempt)) * random.uniform(0.5, 1.0))

    @staticmethod
    def _error(resp: Response) -> SandboxError:
        try:
            data = resp._resp.read(_ERROR_BODY_MAX)
        except (OSError, http.client.HTTPException):
            data = b""
        finally:
            resp.close()
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        code: Optional[str] = None
        message = ""
        parsed: Any = None
        try:
            parsed = _json.loads(data) if data else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            code = parsed["error"].get("code")
            message = str(parsed["error"].get("message") or "")
        if not code:
            code = _STATUS_CODES.get(resp.status, f"http_{resp.status}")
            message = data[:300].decode("utf-8", "replace").strip() or f"HTTP {resp.status}"
        return error_from(
            code,
            message,
            status=resp.status,
            request_id=resp.request_id,
            retry_after=retry_after,
            body=parsed,
        )
