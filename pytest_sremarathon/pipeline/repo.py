"""A real git repository per application. Commits carry the virtual time as author and
committer date, so the same run produces the same commit ids."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from ..errors import SremarathonError

REPO_FILES = ("services", "config", "manifests", "tests")  # what of an app template is source
# Commands that never move HEAD: the cached HEAD survives them.
READ_ONLY_COMMANDS = frozenset({"rev-parse", "show", "ls-tree", "log", "status", "cat-file", "merge-base",
                                "rev-list", "fetch", "config"})


class GitError(SremarathonError):
    pass


@dataclass(frozen=True)
class Author:
    name: str
    email: str

    @classmethod
    def parse(cls, s: str) -> Author:
        name, _, rest = s.partition("<")
        return cls(name.strip(), rest.rstrip(">").strip() or "nobody@example.com")

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parents: list[str]
    author: str
    time: str  # ISO 8601
    message: str  # the subject line
    paths: list[str]  # what the commit touched
    diff: str  # its patch, as `git show --patch` prints it
    blobs: dict[str, Optional[str]]  # touched path -> its blob id after the commit (None: deleted)


class GitRepo:
    def __init__(self, path: Path) -> None:
        self.path = path
        # Keyed by object id, so never stale: blob id -> text, commit id -> every file's text.
        self._blobs: dict[str, str] = {}
        self._trees: dict[str, dict[str, str]] = {}
        self._shown: dict[str, CommitInfo] = {}  # commit id -> what `git show` tells of it
        self._head: str | None = None  # HEAD's commit, until a command that may move it runs
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path.parent), "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
            # No `git maintenance run --auto` after every commit and fetch: a second process each
            # time (~150 commits and ~150 fetches a default marathon) for repositories that never
            # grow to what it would pack. What is committed is the same either way.
            "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "maintenance.auto", "GIT_CONFIG_VALUE_0": "false",
        }

    @property
    def env(self) -> dict[str, str]:
        """The environment its git commands run in."""
        return dict(self._env)

    def git(self, *args: str, at: datetime | None = None, author: Author | None = None, check: bool = True,
            input: str | None = None) -> str:
        proc = self._run(args, at, author, input)
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(args)} failed in {self.path}: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def _run(self, args: tuple[str, ...], at: datetime | None = None, author: Author | None = None,
             input: str | None = None) -> subprocess.CompletedProcess:
        self._may_move_head(args)
        env = dict(self._env)
        if at is not None:
            stamp = at.strftime("%Y-%m-%dT%H:%M:%S+0000")
            env.update(GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
        who = author or Author("sremarathon pipeline", "pipeline@sremarathon.local")
        env.update(GIT_AUTHOR_NAME=who.name, GIT_AUTHOR_EMAIL=who.email,
                   GIT_COMMITTER_NAME="deploy-bot", GIT_COMMITTER_EMAIL="deploy-bot@sremarathon.local")
        return subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True, text=True, input=input)

    @classmethod
    def create(cls, path: Path, template: Path, at: datetime, message: str) -> GitRepo:
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        for name in REPO_FILES:
            if (template / name).exists():
                shutil.copytree(template / name, path / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        repo = cls(path)
        repo.git("init", "-q", "-b", "main")
        repo.git("add", "-A")
        repo.git("commit", "-q", "-m", message, at=at, author=Author("platform-team", "platform@sremarathon.local"))
        return repo

    def _may_move_head(self, args: tuple[str, ...]) -> None:
        if args[0] not in READ_ONLY_COMMANDS:
            self._head = None

    def head(self) -> str:
        if self._head is None:
            self._head = self.git("rev-parse", "HEAD").strip()
        return self._head

    def resolve(self, ref: str) -> str:
        if ref == "HEAD":
            return self.head()
        out = self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip()
        if not out:
            raise GitError(f"unknown ref {ref!r}: give a commit id, a change id, or a branch name")
        return out

    def commit_all(self, message: str, author: Author, at: datetime) -> str:
        """Commit every change to the tracked files (the pipeline's edits never add a file)."""
        self.git("commit", "-q", "-a", "-m", message, at=at, author=author)
        return self._new_head()

    def _new_head(self) -> str:
        """HEAD after a command made a commit, read together with what :meth:`show` tells of it."""
        info = self.show("HEAD")
        self._learn_blobs(info)
        self._head = info.id
        return self._head

    def _learn_blobs(self, info: CommitInfo) -> None:
        """The blobs a commit made here wrote: read from the working tree (a file read each,
        where :meth:`files_at` would start a ``cat-file`` for them), and kept only when the file
        hashes to the commit's blob id. The id is the SHA-1 of exactly the blob's bytes, so a
        file that matches is the blob; one that does not (a filter, a later edit) is left to
        ``cat-file``."""
        for path, sha in info.blobs.items():
            if sha is None or sha in self._blobs:
                continue
            try:
                data = (self.path / path).read_bytes()
            except OSError:
                continue
            if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != sha:
                continue
            try:
                self._blobs[sha] = data.decode()
            except UnicodeDecodeError:  # (cat-file's answer would not decode either: it says so)
                continue

    def revert(self, commit: str, author: Author, at: datetime) -> str:
        if self._run(("revert", "--no-edit", commit), at, author).returncode != 0:
            if not self.git("status", "--porcelain").strip():
                raise GitError(f"reverting {commit[:12]} changes nothing: what it did is undone already")
            self.git("revert", "--abort", check=False)
            raise GitError(f"reverting {commit[:12]} conflicts with later changes; revert those first or write a fix")
        return self._new_head()

    def show(self, commit: str) -> CommitInfo:
        """A commit's metadata, touched paths and patch, from one `git show`."""
        info = self._shown.get(commit)
        if info is None:
            out = self.git("show", "--no-color", "--raw", "--no-abbrev", "--patch",
                           "--format=%H%x1f%P%x1f%an <%ae>%x1f%aI%x1f%s%x1e", commit)
            header, _, body = out.partition("\x1e\n")
            sha, parents, author, when, subject = header.split("\x1f")
            raw, _, patch = body.lstrip("\n").partition("\n\n")
            paths: list[str] = []
            blobs: dict[str, Optional[str]] = {}
            for line in raw.splitlines():  # ":<old mode> <new mode> <old blob> <new blob> <status>\t<path>[\t<new path>]"
                if not line.startswith(":"):
                    continue
                meta, *names = line.split("\t")
                new_blob, status = meta.split()[3:5]
                if status[0] == "R":
                    blobs[names[0]] = None
                blobs[names[-1]] = None if status[0] == "D" else new_blob
                paths.append(names[-1])
            info = self._shown[sha] = CommitInfo(sha, parents.split(), author, when, subject, paths, patch, blobs)
        return info

    def files_at(self, commit: str) -> dict[str, str]:
        """Every file's text at a commit: the parent's files with what the commit changed when
        both are known, else one `ls-tree`; then one `cat-file --batch` for the blobs not read
        before."""
        files = self._trees.get(commit)
        if files is None:
            info = self._shown.get(commit)
            parent = self._trees.get(info.parents[0]) if info is not None and len(info.parents) == 1 else None
            if info is not None and parent is not None:
                entries = [(path, sha) for path, sha in info.blobs.items() if sha is not None]
                files = {path: text for path, text in parent.items() if path not in info.blobs}
            else:
                entries, files = [], {}
                for line in self.git("ls-tree", "-r", commit).splitlines():
                    meta, path = line.split("\t", 1)
                    _mode, type_, sha = meta.split()
                    if type_ == "blob":
                        entries.append((path, sha))
            self._read_blobs([sha for _, sha in entries if sha not in self._blobs])
            files.update((path, self._blobs[sha]) for path, sha in entries)
            self._trees[commit] = files = dict(sorted(files.items()))
        return dict(files)

    def _read_blobs(self, shas: list[str]) -> None:
        if not shas:
            return
        out = subprocess.run(["git", "cat-file", "--batch"], cwd=self.path, env=self._env, capture_output=True,
                             input="\n".join(shas).encode() + b"\n", check=True).stdout
        pos = 0
        for sha in shas:
            header_end = out.index(b"\n", pos)
            size = int(out[pos:header_end].split()[2])
            self._blobs[sha] = out[header_end + 1: header_end + 1 + size].decode()
            pos = header_end + 1 + size + 1

    def start(self, *args: str) -> subprocess.Popen:
        """Run a git command in the background (its output is discarded)."""
        self._may_move_head(args)
        return subprocess.Popen(["git", *args], cwd=self.path, env=self._env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def succeeds(self, *args: str) -> bool:
        """Whether a git command exits 0 (for questions git answers with its exit code)."""
        self._may_move_head(args)
        return subprocess.run(["git", *args], cwd=self.path, env=self._env, capture_output=True).returncode == 0

    def has(self, commit: str) -> bool:
        return self.succeeds("cat-file", "-e", f"{commit}^{{commit}}")

    def clone_to(self, dest: Path) -> GitRepo:
        """A working clone (the agent's checkout); its ``origin`` is this repository."""
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.git("clone", "-q", str(self.path), str(dest))
        clone = GitRepo(dest)
        clone.git("config", "user.name", "sre-agent")
        clone.git("config", "user.email", "sre-agent@sremarathon.local")
        return clone

    def fast_forward_from(self, source: Path, ref: str) -> list[str]:
        """Fetch ``ref`` from another repository and fast-forward onto it (a push to main);
        returns the new commits, oldest first."""
        self.git("fetch", "-q", str(source), ref)
        target = self.git("rev-parse", "FETCH_HEAD").strip()
        head = self.head()
        if not self.succeeds("merge-base", "--is-ancestor", head, target):
            raise GitError(f"{ref} is not based on the current main ({head[:12]}); "
                           f"`git pull --rebase` (origin/main) and deploy again")
        self.git("merge", "-q", "--ff-only", target)
        return self.git("rev-list", "--reverse", f"{head}..{target}").split()
