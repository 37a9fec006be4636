"""The agent's checkout's origin/main brought up to date by copying objects (pipeline/mirror.py)
leaves the checkout as ``git fetch -q origin`` does: the same objects, refs, FETCH_HEAD and
reflog messages."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

from pytest_sremarathon.pipeline.mirror import CheckoutMirror
from pytest_sremarathon.pipeline.repo import Author, GitRepo

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
WHO = Author("dev", "dev@example.com")


def _source(tmp: Path) -> GitRepo:
    template = tmp / "template"
    for i in range(6):
        f = template / "services" / f"s{i % 3}" / f"f{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"x = {i}\n")
    return GitRepo.create(tmp / "private" / "app", template, AT, "import")


def _commit(repo: GitRepo, path: str, text: str, message: str) -> str:
    (repo.path / path).write_text(text)
    return repo.commit_all(message, WHO, AT)


def _state(clone: GitRepo) -> dict[str, object]:
    git = clone.path / ".git"
    objects = sorted(str(p.relative_to(git / "objects")) for p in (git / "objects").rglob("*") if p.is_file())
    log = [line.split(" ")[:2] + [line.split("\t", 1)[1]]
           for line in (git / "logs" / "refs" / "remotes" / "origin" / "main").read_text().splitlines()]
    return {"objects": objects, "ref": clone.git("rev-parse", "refs/remotes/origin/main").strip(), "log": log,
            "fetch_head": (git / "FETCH_HEAD").read_text(),
            "fsck": subprocess.run(["git", "fsck", "--strict"], cwd=clone.path, capture_output=True).returncode}


def test_copy_leaves_what_a_fetch_leaves(tmp_path: Path) -> None:
    source = _source(tmp_path)
    fetched = source.clone_to(tmp_path / "a" / "app")
    copied = source.clone_to(tmp_path / "b" / "app")
    mirror = CheckoutMirror(source.path, copied.path, copied.env)
    calls: list[str] = []
    real = CheckoutMirror._fetch

    def counting(self: CheckoutMirror) -> subprocess.Popen:
        calls.append("fetch")
        return real(self)

    CheckoutMirror._fetch = counting  # type: ignore[method-assign]
    try:
        for i in range(4):
            if i == 2:  # a commit of the agent's checkout, pushed to main by the pipeline
                copied.git("merge", "-q", "--ff-only", "origin/main")
                _commit(copied, "services/s0/f0.py", "x = 'agent'\n", "agent fix")
                source.fast_forward_from(copied.path, "HEAD")
            _commit(source, f"services/s{i % 3}/f{i}.py", f"x = {i + 100}\n", f"change {i}")
            fetched.git("fetch", "-q", "origin")
            mirror.sync()()
            a, b = _state(fetched), _state(copied)
            assert a["ref"] == b["ref"] == source.head()
            assert a["fetch_head"] == b["fetch_head"]
            assert a["log"][-1][1:] == b["log"][-1][1:]
            assert b["fsck"] == 0
            assert set(a["objects"]) <= set(b["objects"])  # (b also has the agent's own commit)
    finally:
        CheckoutMirror._fetch = real  # type: ignore[method-assign]
    assert calls == ["fetch"]  # only the first sync fetched: it taught the formats


def test_a_changed_config_fetches(tmp_path: Path) -> None:
    source = _source(tmp_path)
    clone = source.clone_to(tmp_path / "b" / "app")
    mirror = CheckoutMirror(source.path, clone.path, clone.env)
    _commit(source, "services/s0/f0.py", "x = 1\n", "one")
    mirror.sync()()
    clone.git("config", "fetch.unpackLimit", "1")
    _commit(source, "services/s0/f0.py", "x = 2\n", "two")
    assert mirror._start_copy() is None  # the real fetch: the checkout's settings are not the cloned ones
    mirror.sync()()
    assert clone.git("rev-parse", "refs/remotes/origin/main").strip() == source.head()
