"""Reading and writing inside a run directory without following links.

A run directory is often someone else's (a CI artifact downloaded to look at, a colleague's tarball):
a symlink planted in it must not make `chaosbench recheck` or `chaosbench report` overwrite a file
outside it, nor pull a file from outside it into a report. So every file the analyse step and the
report write there is created fresh (O_EXCL | O_NOFOLLOW) and renamed over its name (a rename replaces
a link, never its target), and every part they read is looked at with lstat first: a link anywhere
below the run directory is a problem reported (`links`), never read. The run directory itself may be
a link (reports/latest -> reports/<run-id>): the user named it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

FIX = "replace the link with the file it stands for (or delete it), then recheck"


class LinkRefused(OSError):
    """A path below the run directory is a symlink (or not a plain file where one is needed)."""


def _below(run_dir: Path, rel: str | Path) -> list[Path]:
    """run_dir/a, run_dir/a/b, ...: each component of rel, for lstat (rel must stay inside)."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise LinkRefused(f"{rel}: not a path inside the run directory")
    out, p = [], Path(run_dir)
    for part in parts:
        p = p / part
        out.append(p)
    return out


def is_link_free(run_dir: Path, rel: str | Path) -> bool:
    """True when no component of run_dir/rel is a symlink (a missing path is link-free)."""
    for p in _below(run_dir, rel):
        try:
            if stat.S_ISLNK(os.lstat(p).st_mode):
                return False
        except FileNotFoundError:
            return True
    return True


def read_bytes(run_dir: Path, rel: str | Path) -> bytes:
    """The plain file run_dir/rel; LinkRefused if it or a folder above it (below run_dir) is a link,
    FileNotFoundError if absent."""
    if not is_link_free(run_dir, rel):
        raise LinkRefused(f"{rel}: a symlink in the run directory, not read ({FIX})")
    fd = os.open(Path(run_dir) / rel, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise LinkRefused(f"{rel}: not a plain file, not read")
        return f.read()


def read_text(run_dir: Path, rel: str | Path) -> str | None:
    """run_dir/rel as text (undecodable bytes replaced), or None when absent or refused."""
    try:
        return read_bytes(run_dir, rel).decode("utf-8", errors="replace")
    except OSError:
        return None


def files(run_dir: Path, sub: str, suffix: str = "") -> list[str]:
    """Names of the plain files directly in run_dir/sub ending in suffix, sorted; links and folders
    left out (links() reports them). [] when sub is absent or itself a link."""
    d = Path(run_dir) / sub
    try:
        if not is_link_free(run_dir, sub):
            return []
    except LinkRefused:   # a folder name from result.json that leaves the run directory
        return []
    try:
        entries = list(os.scandir(d))
    except OSError:
        return []
    return sorted(e.name for e in entries if e.name.endswith(suffix) and e.is_file(follow_symlinks=False))


def links(run_dir: Path, max_depth: int = 3) -> list[str]:
    """Every symlink below run_dir (relative paths, sorted): the parts the analyse step and the
    report refuse to read. A linked folder is named once; nothing under it is walked."""
    out: list[str] = []

    def walk(d: Path, rel: str, depth: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            name = f"{rel}{e.name}"
            if e.is_symlink():
                out.append(name)
            elif depth < max_depth and e.is_dir(follow_symlinks=False):
                walk(Path(e.path), name + "/", depth + 1)
    walk(Path(run_dir), "", 0)
    return sorted(out)


def write_text(run_dir: Path, name: str, text: str) -> Path:
    """Write run_dir/name (a plain name, no folders) whole or not at all: a fresh temp file created
    with O_EXCL | O_NOFOLLOW, renamed over the name. A link planted at either name is replaced, its
    target never written; a CI upload never sees half a file."""
    if Path(name).name != name or name in ("", ".", ".."):
        raise LinkRefused(f"{name}: not a plain file name")
    path = Path(run_dir) / name
    tmp = Path(run_dir) / f".{name}.tmp"
    try:
        os.unlink(tmp)   # a stale temp file, or a link planted at its name: unlink removes the link only
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
