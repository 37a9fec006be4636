"""Bringing the agent's checkout's ``origin/main`` up to date without ``git fetch``.

Each step whose apps' main moved starts a ``git fetch -q origin`` in the agent's checkouts: six
processes each (fetch, a shell, upload-pack, rev-list, pack-objects, unpack-objects), ~190 a
default marathon, ~3 s of CPU. Between two repositories on one disk, whose new objects are loose
files on one side, what such a fetch leaves behind is: the missing objects as loose files, the
remote-tracking ref moved (with its reflog line) and ``FETCH_HEAD``. :class:`CheckoutMirror`
does exactly that: it copies the object files, writes ``FETCH_HEAD`` and moves the ref with one
``git update-ref`` (git's own locking, reflog and hooks), with the same message.

It only does so where the result is provably the fetch's, and runs the real fetch otherwise:

* the first sync of a checkout is a real fetch, and teaches the two formats (``FETCH_HEAD``'s
  line, the reflog message), each accepted only when it is the expected one;
* the checkout's ``.git/config`` is still the one it was cloned with (the remote, its refspec,
  any setting that changes how a fetch behaves), and it has no pack, no alternates, no shallow
  file (every object it has is a loose file, so "has it" is a file's existence);
* the source has one branch, ``main``, no tags, no packed refs, HEAD on main, and every object
  to copy is a loose file there;
* the move is a fast-forward (the old ref's commit is reached walking back from the new one),
  fewer than 100 objects are copied (``fetch.unpackLimit``: from 100 on a fetch keeps a pack
  rather than loose files) and the walk stays short.
"""

from __future__ import annotations

import os
import re
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Optional

UNPACK_LIMIT = 100  # git's fetch.unpackLimit default: fewer objects are unpacked to loose files
MAX_WALK = 2000  # objects looked at before giving up on the copy (the real fetch then)
_SHA = re.compile(r"[0-9a-f]{40}\Z")
_REF = "refs/remotes/origin/main"
FAST_FORWARD = "fetch -q origin: fast-forward"  # its reflog message (git: "<command line>: fast-forward")


class CheckoutMirror:
    """The agent's checkout ``clone`` of the repository at ``source`` (see the module doc)."""

    def __init__(self, source: Path, clone: Path, env: dict[str, str]) -> None:
        self.source = source
        self.clone = clone
        self.env = env
        self._config = self._read(clone / ".git" / "config")  # as cloned
        self._fetch_head: Optional[str] = None  # FETCH_HEAD's line after the commit id
        self._message: Optional[str] = None  # the reflog message of the fetch's fast-forward
        self._fetched: Optional[str] = None  # the commit the last real fetch was to bring

    # -- the sync --------------------------------------------------------------------------
    def sync(self) -> Callable[[], None]:
        """Start bringing ``origin/main`` up to date; returns a function that waits for it."""
        proc = self._start_copy()
        if proc is not None:
            copied = proc

            def wait_copy() -> None:
                if copied.wait() != 0:  # the ref moved under us: the real fetch decides
                    fetch = self._fetch()
                    fetch.wait()
                    self._learn(fetch)

            return wait_copy
        fetch = self._fetch()

        def wait_fetch() -> None:
            fetch.wait()
            self._learn(fetch)

        return wait_fetch

    def _start_copy(self) -> Optional[subprocess.Popen]:
        """Copy what the fetch would bring, write FETCH_HEAD and start the ref's update; None
        where the real fetch must run."""
        if self._fetch_head is None or self._message is None:
            return None
        try:
            plan = self._plan()
        except (OSError, ValueError, zlib.error):
            return None
        if plan is None:
            return None
        new, old, missing = plan
        try:
            for sha in missing:
                self._copy(sha)
            (self.clone / ".git" / "FETCH_HEAD").write_text(f"{new}{self._fetch_head}")
        except OSError:
            return None  # (what was copied is content-addressed: the real fetch finds it there)
        if old == new:  # (a fetch that finds the ref current writes FETCH_HEAD alone)
            return subprocess.Popen(["true"])
        return subprocess.Popen(["git", "update-ref", "-m", self._message, _REF, new, old], cwd=self.clone,
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _fetch(self) -> subprocess.Popen:
        """The real ``git fetch -q origin``."""
        self._fetched = self._source_head()
        return subprocess.Popen(["git", "fetch", "-q", "origin"], cwd=self.clone, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _learn(self, proc: subprocess.Popen) -> None:
        """After a real fetch: the formats of what it wrote, each when it is the expected one."""
        sha = self._fetched
        if proc.returncode != 0 or sha is None or (self._fetch_head is not None and self._message is not None):
            return
        head = self._read(self.clone / ".git" / "FETCH_HEAD").decode(errors="replace")
        if self._fetch_head is None and head.startswith(sha) \
                and re.fullmatch(r"\t\tbranch 'main' of [^\n]+\n", head[40:]):
            self._fetch_head = head[40:]
        log = self._read(self.clone / ".git" / "logs" / _REF).decode(errors="replace").splitlines()
        if self._message is None and log and log[-1].split(" ", 2)[1:2] == [sha] \
                and log[-1].endswith("\t" + FAST_FORWARD):
            self._message = FAST_FORWARD

    # -- what to copy ------------------------------------------------------------------------
    def _plan(self) -> Optional[tuple[str, str, list[str]]]:
        if self._read(self.clone / ".git" / "config") != self._config or not self._plain_clone():
            return None
        new = self._source_head()
        old = self._clone_ref()
        if new is None or old is None:
            return None
        missing: list[str] = []
        seen: set[str] = set()
        commits, trees = [new], []
        found_old = False
        while commits:  # the commits new has and old has not; the ancestry walk passes the clone's own
            c = commits.pop()
            if c in seen:
                continue
            seen.add(c)
            if c == old:
                found_old = True
                continue
            if len(seen) > MAX_WALK:
                return None
            kind, body = self._object(c)
            if kind != b"commit":
                return None
            header = body.split(b"\n\n", 1)[0].split(b"\n")
            if not self._has(c):
                missing.append(c)
                trees.append(header[0][5:].decode() if header[0].startswith(b"tree ") else "")
            commits.extend(line[7:].decode() for line in header if line.startswith(b"parent "))
        if not found_old:
            return None
        while trees:  # their trees and blobs the clone lacks (a tree the clone has, it has whole)
            t = trees.pop()
            if t in seen:
                continue
            seen.add(t)
            if not _SHA.match(t) or len(seen) > MAX_WALK:
                return None
            if self._has(t):
                continue
            kind, body = self._object(t)
            if kind != b"tree":
                return None
            missing.append(t)
            pos = 0
            while pos < len(body):
                space = body.index(b" ", pos)
                nul = body.index(b"\0", space)
                mode, sha = body[pos:space], body[nul + 1: nul + 21].hex()
                pos = nul + 21
                if mode == b"40000":
                    trees.append(sha)
                elif mode != b"160000" and sha not in seen:  # (a submodule's commit is not here)
                    seen.add(sha)
                    if not self._has(sha):
                        if not (self._objects(self.source) / sha[:2] / sha[2:]).is_file():
                            return None
                        missing.append(sha)
        if len(missing) >= UNPACK_LIMIT:
            return None
        return new, old, missing

    def _plain_clone(self) -> bool:
        git = self.clone / ".git"
        if (git / "shallow").exists() or (git / "objects" / "info" / "alternates").exists():
            return False
        try:
            return not any(n.endswith((".pack", ".idx")) for n in os.listdir(git / "objects" / "pack"))
        except FileNotFoundError:
            return True

    def _source_head(self) -> Optional[str]:
        git = self.source / ".git"
        try:
            if (git / "HEAD").read_text() != "ref: refs/heads/main\n" or (git / "packed-refs").exists():
                return None
            refs = [os.path.relpath(os.path.join(d, f), git) for d, _, files in os.walk(git / "refs") for f in files]
            if refs != ["refs/heads/main"]:
                return None
            sha = (git / "refs" / "heads" / "main").read_text().strip()
        except OSError:
            return None
        return sha if _SHA.match(sha) else None

    def _clone_ref(self) -> Optional[str]:
        git = self.clone / ".git"
        loose = git / _REF
        try:
            sha = loose.read_text().strip()
        except FileNotFoundError:
            sha = None
            for line in self._read(git / "packed-refs").decode(errors="replace").splitlines():
                if line.endswith(" " + _REF):
                    sha = line.split(" ", 1)[0]
        return sha if sha is not None and _SHA.match(sha) else None

    # -- objects ---------------------------------------------------------------------------
    @staticmethod
    def _objects(repo: Path) -> Path:
        return repo / ".git" / "objects"

    def _has(self, sha: str) -> bool:
        return (self._objects(self.clone) / sha[:2] / sha[2:]).is_file()

    def _object(self, sha: str) -> tuple[bytes, bytes]:
        data = zlib.decompress((self._objects(self.source) / sha[:2] / sha[2:]).read_bytes())
        header, _, body = data.partition(b"\0")
        kind, _, size = header.partition(b" ")
        if int(size) != len(body):
            raise ValueError(f"object {sha}: size {size!r} is not its length {len(body)}")
        return kind, body

    def _copy(self, sha: str) -> None:
        """The object's file, as git writes one: a temporary file renamed into place, read-only."""
        data = (self._objects(self.source) / sha[:2] / sha[2:]).read_bytes()
        folder = self._objects(self.clone) / sha[:2]
        folder.mkdir(exist_ok=True)
        target = folder / sha[2:]
        if target.exists():
            return
        tmp = folder / f"tmp_obj_{os.getpid()}_{sha[2:10]}"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444), "wb") as f:
            f.write(data)
        os.replace(tmp, target)

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError:
            return b""
