"""Plain result objects. Each keeps the API's object as ``data`` for fields
this package does not name."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, Optional


def _b64_or_text(d: Dict[str, Any], key: str) -> bytes:
    """The exact bytes of a text field that may come with a ``*_b64`` twin
    (present when the text is not the exact bytes: invalid UTF-8, a NUL)."""
    b64 = d.get(key + "_b64")
    if isinstance(b64, str):
        return base64.b64decode(b64)
    text = d.get(key)
    return text.encode("utf-8") if isinstance(text, str) else b""


@dataclass(frozen=True)
class ExecResult:
    """What a command did. ``stdout``/``stderr`` are its exact bytes (at
    most ``max_output_bytes`` each; ``*_truncated`` says when more was
    written). A command that exits non-zero is still a result, not an
    error: look at ``exit_code``."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    signal: int = 0
    timed_out: bool = False
    duration_ms: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cancelled: bool = False
    data: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, d: Optional[Dict[str, Any]]) -> "ExecResult":
        d = d or {}
        return cls(
            exit_code=int(d["exit_code"]) if d.get("exit_code") is not None else -1,
            stdout=_b64_or_text(d, "stdout"),
            stderr=_b64_or_text(d, "stderr"),
            signal=int(d.get("signal") or 0),
            timed_out=bool(d.get("timed_out")),
            duration_ms=int(d.get("duration_ms") or 0),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            cancelled=bool(d.get("cancelled")),
            data=d,
        )

    @property
    def ok(self) -> bool:
        """True when the command exited 0 (and was not killed or timed out)."""
        return self.exit_code == 0 and not self.timed_out and not self.signal

    @property
    def text(self) -> str:
        """stdout as text (UTF-8; invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr as text (UTF-8; invalid bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a running command's output. ``offset`` is the position of
    its first byte in the one sequence of both streams, as the worker read
    them (docs/api.md, Live exec output)."""

    stream: str
    data: bytes
    offset: int

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @classmethod
    def from_api(cls, d: Dict[str, Any]) -> "OutputChunk":
        return cls(stream=str(d.get("stream", "")), data=_b64_or_text(d, "data"), offset=int(d.get("offset") or 0))


@dataclass(frozen=True)
class FileEntry:
    """A path in a sandbox: ``type`` is ``file``, ``dir``, ``symlink`` or
    ``other``, ``mode`` its permission bits."""

    name: str
    type: str
    size: int
    mode: int
    mtime: Optional[str]
    link_target: Optional[str]
    data: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, d: Dict[str, Any]) -> "FileEntry":
        mode = d.get("mode")
        if isinstance(mode, str):
            mode = int(mode, 8)
        return cls(
            name=str(d.get("name", "")),
            type=str(d.get("type", "")),
            size=int(d.get("size") or 0),
            mode=int(mode or 0),
            mtime=d.get("mtime"),
            link_target=d.get("link_target") or None,
            data=d,
        )

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"


@dataclass(frozen=True)
class LogLine:
    """A piece of the sandbox's main process output (``stream``: ``stdout``,
    ``stderr``, or ``output`` for the kept tail of a container that is
    gone). Pieces end anywhere, not at line ends."""

    stream: str
    data: str


@dataclass(frozen=True)
class Route:
    """A shared port. ``access_token`` (``sbr_…``) is only in the answer of
    the share that made a ``token`` route: keep it, it is not shown again."""

    id: str
    url: str
    port: int
    auth: str
    access_token: Optional[str] = None
    state: Optional[str] = None
    data: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, d: Dict[str, Any], access_token: Optional[str] = None) -> "Route":
        return cls(
            id=str(d.get("id", "")),
            url=str(d.get("url", "")),
            port=int(d.get("port") or 0),
            auth=str(d.get("auth", "")),
            access_token=access_token,
            state=d.get("state"),
            data=d,
        )
