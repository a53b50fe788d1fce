"""Operations: what a create, delete, exec, share, unshare, extend or
snapshot is while the controller and a worker carry it out."""

from __future__ import annotations

import time
from urllib.parse import quote
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .errors import SandboxError, error_from
from .models import ExecResult, OutputChunk

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .client import Client

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
# One long-poll of GET /v1/operations/{id}?wait= (the server's bound is 60).
_POLL_SECONDS = 30


class Operation:
    """An operation (``op_…``). Attributes mirror the API object; ``data``
    is the whole of it as last fetched."""

    def __init__(self, client: "Client", data: Dict[str, Any]) -> None:
        self._client = client
        self.data: Dict[str, Any] = data

    def __repr__(self) -> str:
        return f"<Operation {self.id} {self.kind} {self.state}>"

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", ""))

    @property
    def state(self) -> str:
        return str(self.data.get("state", ""))

    @property
    def sandbox_id(self) -> Optional[str]:
        return self.data.get("sandbox_id")

    @property
    def error(self) -> Optional[Dict[str, Any]]:
        """``{"code","message"}`` of a failed or cancelled operation, else None."""
        return self.data.get("error")

    @property
    def result(self) -> Any:
        return self.data.get("result")

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def refresh(self) -> "Operation":
        self.data = self._client._transport.call("GET", f"/v1/operations/{_q(self.id)}")["operation"]
        return self

    def exception(self) -> Optional[SandboxError]:
        """The error class of a failed or cancelled operation (not raised)."""
        if self.state not in ("failed", "cancelled"):
            return None
        err = self.error or {}
        code = err.get("code") or ("cancelled" if self.state == "cancelled" else None)
        message = err.get("message") or f"operation {self.id} {self.state}"
        return error_from(code, message, operation=self)

    def wait(self, timeout: Optional[float] = None) -> "Operation":
        """Waits (long-polling the server) until the operation ends; returns
        it when it succeeded and raises its error class (``.operation`` set)
        when it failed or was cancelled. ``timeout`` (seconds; None: no
        bound) running out raises :class:`TimeoutError`; the operation goes
        on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            wait = _POLL_SECONDS
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"operation {self.id} is still {self.state} after {timeout} s")
                wait = max(1, min(wait, int(left + 0.999)))
            self.data = self._client._transport.call(
                "GET", f"/v1/operations/{_q(self.id)}", query={"wait": wait}, timeout=self._client.timeout + wait
            )["operation"]
        err = self.exception()
        if err is not None:
            raise err
        return self

    def cancel(self) -> "Operation":
        """Asks the server to cancel an exec: one not running yet ends
        ``cancelled`` at once, a running one once its worker killed it
        (wait() then raises :class:`Cancelled`)."""
        self.data = self._client._transport.call("POST", f"/v1/operations/{_q(self.id)}/cancel")["operation"]
        return self

    def output(self, follow: bool = True, offset: int = 0) -> "OutputStream":
        """The exec's output from ``offset`` on, as :class:`OutputChunk` s
        as they come (``follow``) or what is stored now."""
        return OutputStream(self, follow=follow, offset=offset)

    def exec_result(self) -> ExecResult:
        """The result of a finished exec (a cancelled one's: the output so far)."""
        return ExecResult.from_api(self.result)


class OutputStream(Iterator[OutputChunk]):
    """Iterates an exec's live output (GET /v1/operations/{id}/output,
    long-polled). Afterwards ``next_offset`` is where to resume,
    ``skipped_bytes`` how much was dropped before it could be read (the
    server keeps a bounded amount) and, once a followed exec ended,
    ``operation`` holds its final state."""

    def __init__(self, operation: Operation, *, follow: bool, offset: int = 0) -> None:
        self.operation = operation
        self.follow = follow
        self.next_offset = offset
        self.skipped_bytes = 0
        self.finished = False
        self._pending: List[OutputChunk] = []
        self._client = operation._client

    def __iter__(self) -> "OutputStream":
        return self

    def __next__(self) -> OutputChunk:
        while not self._pending:
            if self.finished:
                raise StopIteration
            self._fetch()
        return self._pending.pop(0)

    def _fetch(self) -> None:
        wait = _POLL_SECONDS if self.follow else 0
        query: Dict[str, Any] = {"offset": self.next_offset}
        if wait:
            query["wait"] = wait
        page = self._client._transport.call(
            "GET",
            f"/v1/operations/{_q(self.operation.id)}/output",
            query=query,
            timeout=self._client.timeout + wait,
        )
        chunks = [OutputChunk.from_api(c) for c in page.get("chunks") or []]
        self._pending.extend(chunks)
        self.skipped_bytes += int(page.get("skipped_bytes") or 0)
        self.next_offset = int(page.get("next_offset", self.next_offset))
        if page.get("done"):
            self.finished = True
            self.operation.refresh()
        elif not self.follow and not chunks:
            self.finished = True
        elif not self.follow and self.next_offset >= int(page.get("end_offset", self.next_offset)):
            self.finished = True


def _q(s: str) -> str:
    """An id or name as one path segment."""
    return quote(s, safe="")
