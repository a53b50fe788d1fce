"""Tar streams for upload() and download(): a directory packed as it is
sent (never whole in memory), and a download unpacked safely."""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import time
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

from ._http import Body
from .errors import SandboxError

_COPY_BUFFER = 256 * 1024


class _SendFile:
    """The file object tarfile writes to: passes each write on."""

    def __init__(self, send: Callable[[bytes], None]) -> None:
        self._send = send

    def write(self, b: bytes) -> int:
        self._send(bytes(b))
        return len(b)


class TarDirBody(Body):
    """A tar of ``local_dir``'s contents, made while it is sent (chunked).
    ``prefix`` are directories to create first (remote ones that do not exist
    yet); members are put below them. Regular files, directories and
    symlinks are sent (hard links as links); sockets, FIFOs and devices are
    left out. Owners are not sent (the sandbox makes them root)."""

    content_type = "application/x-tar"

    def __init__(self, local_dir: str, prefix: Sequence[str] = ()) -> None:
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(f"{local_dir} is not a directory")
        self.local_dir = local_dir
        self.prefix = list(prefix)
        self.length = None
        self.replayable = True

    @staticmethod
    def _anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    def write_to(self, send: Callable[[bytes], None]) -> None:
        with tarfile.open(fileobj=_SendFile(send), mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            base = ""
            for part in self.prefix:
                base = posixpath.join(base, part)
                ti = tarfile.TarInfo(base)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                ti.mtime = int(time.time())
                tar.addfile(ti)
            for root, dirs, files in os.walk(self.local_dir):
                dirs.sort()
                rel_root = os.path.relpath(root, self.local_dir)
                for name in sorted(dirs) + sorted(files):
                    path = os.path.join(root, name)
                    st = os.lstat(path)
                    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        continue
                    rel = name if rel_root == "." else posixpath.join(*rel_root.split(os.sep), name)
                    arcname = posixpath.join(base, rel) if base else rel
                    tar.add(path, arcname=arcname, recursive=False, filter=self._anonymous)


class Readable(Protocol):
    def read(self, n: int = -1) -> bytes: ...


class UnsafeArchive(SandboxError):
    """A downloaded archive held a member that would land outside the
    destination (an absolute name, ``..``, a link leading out) or of a type
    that is never unpacked (a device, a FIFO, a sparse file). Nothing past
    that member was written."""

    code = "unsafe_archive"


def _parts(name: str, what: str) -> List[str]:
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise UnsafeArchive(f"the archive's {what} {name!r} is absolute or malformed; nothing of it was written")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"the archive's {what} {name!r} has a '..' component; nothing of it was written")
    return parts


def _ensure_dirs(dest: str, parts: Sequence[str]) -> str:
    """Makes dest/parts... as real directories (never through a symlink)
    and returns the last one."""
    cur = dest
    for p in parts:
        cur = os.path.join(cur, p)
        if os.path.islink(cur) or (os.path.lexists(cur) and not os.path.isdir(cur)):
            raise UnsafeArchive(f"{cur} is in the way of the archive's members (a symlink or a file, not a directory)")
        if not os.path.lexists(cur):
            os.mkdir(cur, 0o755)
    return cur


def safe_extract(fileobj: Readable, dest: str) -> List[str]:
    """Unpacks a tar stream into dest (created when missing); returns the
    member names written. Refuses (:class:`UnsafeArchive`) any member whose
    name is absolute or has ``..``, a symlink or hard link whose target
    leaves dest, devices, FIFOs and sparse files. Existing files are
    replaced (a symlink in the way is removed, never written through)."""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    written: List[str] = []
    dirs: List[Tuple[str, tarfile.TarInfo]] = []
    try:
        tar = tarfile.open(fileobj=fileobj, mode="r|")  # type: ignore[call-overload]
    except tarfile.ReadError as e:
        raise SandboxError(f"the download is not a tar archive: {e}", code="bad_response") from e
    with tar:
        try:
            for m in tar:
                parts = _parts(m.name, "member")
                if not parts:
                    continue
                if m.issparse():
                    raise UnsafeArchive(f"the archive's member {m.name!r} is a sparse file; refused")
                if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
                    raise UnsafeArchive(f"the archive's member {m.name!r} is a device, FIFO or other special file; refused")
                parent = _ensure_dirs(root, parts[:-1])
                target = os.path.join(parent, parts[-1])
                if m.isdir():
                    _ensure_dirs(root, parts)
                    dirs.append((target, m))
                    written.append(m.name)
                    continue
                if os.path.lexists(target):
                    if os.path.isdir(target) and not os.path.islink(target):
                        shutil.rmtree(target)
                    else:
                        os.unlink(target)
                if m.isreg():
                    src = tar.extractfile(m)
                    with open(target, "xb") as out:
                        if src is not None:
                            shutil.copyfileobj(src, out, _COPY_BUFFER)
                    os.chmod(target, m.mode & 0o777)
                    os.utime(target, (m.mtime, m.mtime))
                elif m.issym():
                    link = m.linkname
                    resolved = os.path.normpath(os.path.join(parent, link))
                    if os.path.isabs(link) or not (resolved == root or resolved.startswith(root + os.sep)):
                        raise UnsafeArchive(
                            f"the archive's symlink {m.name!r} -> {link!r} leads outside {dest}; refused"
                        )
                    os.symlink(link, target)
                else:
                    lparts = _parts(m.linkname, "hard link target")
                    src_path = os.path.join(root, *lparts)
                    if os.path.islink(src_path) or not os.path.isfile(src_path):
                        raise UnsafeArchive(
                            f"the archive's hard link {m.name!r} -> {m.linkname!r} names no file unpacked before it"
                        )
                    try:
                        os.link(src_path, target)
                    except OSError:
                        shutil.copy2(src_path, target)
                written.append(m.name)
        except tarfile.ReadError as e:
            raise SandboxError(
                f"the download ended early or is not a whole tar archive ({e}); the files events of the sandbox "
                "say why (GET /v1/events?kind=files.downloaded)",
                code="incomplete",
            ) from e
    # directories last: a read-only one would refuse its own members
    for path, m in reversed(dirs):
        os.chmod(path, m.mode & 0o777)
        os.utime(path, (m.mtime, m.mtime))
    return written


def remote_prefix(existing: str, wanted: str) -> Optional[List[str]]:
    """The components of ``wanted`` below its ancestor ``existing`` (None
    when it is not below it)."""
    e = posixpath.normpath(existing)
    w = posixpath.normpath(wanted)
    if e == w:
        return []
    rel = posixpath.relpath(w, e)
    if rel.startswith(".."):
        return None
    return rel.split("/")
