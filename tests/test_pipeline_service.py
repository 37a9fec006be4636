"""The pipeline's git side, through the public ``Pipelines`` operations on a real twin and real
git: what a revert deploys, what it refuses, and which files a deploy builds from."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.twins import AppTwin

from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.pipeline.service import PipelineError, Pipelines

SHOP = APPS_DIR / "shop"
CONFIG = "config/recommendation.yaml"


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Pipelines, list[tuple[str, Any]], Path]:
    events: list[tuple[str, Any]] = []
    twin = AppTwin([load_app(SHOP)], tmp_path / "repos", emit=lambda t, d: events.append((t, d)))
    twin.pipelines.attach_workspace(tmp_path / "workspace")
    return twin.pipelines, events, tmp_path / "workspace" / "shop"


def _edit_config(pipelines: Pipelines, old: str, new: str) -> str:
    return pipelines.commit_edits("shop", [(CONFIG, f"MAX_RECOMMENDATIONS: '{old}'", f"MAX_RECOMMENDATIONS: '{new}'")],
                                  f"recommendation: show {new}", "Dev <dev@example.com>").id


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout


def test_a_change_records_its_author_paths_and_patch(shop) -> None:
    pipelines, _, _ = shop
    change_id = _edit_config(pipelines, "5", "4")
    change = pipelines.changes("shop")[-1]
    assert change.id == change_id and change.author == "Dev <dev@example.com>"
    assert change.kind == "config" and change.service == "recommendation"
    assert change.message == "recommendation: show 4"
    assert change.diff.startswith(f"diff --git a/{CONFIG} b/{CONFIG}")
    assert "-MAX_RECOMMENDATIONS: '5'\n+MAX_RECOMMENDATIONS: '4'" in change.diff


def test_an_agents_revert_deploys_main_not_its_unpushed_work(shop) -> None:
    pipelines, events, checkout = shop
    change_id = _edit_config(pipelines, "5", "4")
    pipelines.deploy("shop", "HEAD", "orchestrator")
    # The agent has a commit of its own in its checkout, not deployed.
    (checkout / "NOTES.md").write_text("half-done idea\n")
    _git(checkout, "add", "NOTES.md")
    _git(checkout, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "wip")

    reverted = pipelines.revert("shop", change_id, "agent")

    assert reverted.message.startswith('Revert "recommendation: show 4"')
    assert pipelines.head_file("shop", "NOTES.md") == ""  # the work in progress stayed in the checkout
    assert [c.message for c in pipelines.changes("shop")] == ["recommendation: show 4", reverted.message]
    deploys = [d for t, d in events if t == "pipeline.deploy"]
    assert deploys[-1].actor == "agent" and deploys[-1].commit == reverted.id
    assert "MAX_RECOMMENDATIONS: '5'" in pipelines.deployed_file("shop", CONFIG)


def test_reverting_an_undone_change_again_is_refused_with_the_reason(shop) -> None:
    pipelines, _, _ = shop
    change_id = _edit_config(pipelines, "5", "4")
    pipelines.revert("shop", change_id, "agent")
    with pytest.raises(PipelineError, match="changes nothing: what it did is undone already") as refused:
        pipelines.revert("shop", change_id, "agent")
    assert refused.value.status == 409
    assert len(pipelines.changes("shop")) == 2


def test_a_conflicting_revert_is_refused_and_leaves_main_clean(shop, tmp_path: Path) -> None:
    pipelines, _, _ = shop
    first = _edit_config(pipelines, "5", "4")
    _edit_config(pipelines, "4", "3")
    with pytest.raises(PipelineError, match="conflicts with later changes") as refused:
        pipelines.revert("shop", first, "agent")
    assert refused.value.status == 409
    assert _git(tmp_path / "repos" / "shop", "status", "--porcelain") == ""
    assert "MAX_RECOMMENDATIONS: '3'" in pipelines.head_file("shop", CONFIG)


def test_deploying_an_older_change_builds_that_commits_files(shop) -> None:
    pipelines, _, _ = shop
    four = _edit_config(pipelines, "5", "4")
    _edit_config(pipelines, "4", "3")
    pipelines.deploy("shop", "HEAD", "orchestrator")
    assert "MAX_RECOMMENDATIONS: '3'" in pipelines.deployed_file("shop", CONFIG)
    pipelines.deploy("shop", four, "agent")
    assert "MAX_RECOMMENDATIONS: '4'" in pipelines.deployed_file("shop", CONFIG)
    pipelines.deploy("shop", "HEAD", "agent")
    assert "MAX_RECOMMENDATIONS: '3'" in pipelines.deployed_file("shop", CONFIG)


def test_files_at_each_commit_match_a_fresh_read_of_the_repository(tmp_path: Path) -> None:
    """The repository remembers files per commit and builds a commit's files from its parent's;
    after edits, a rename, a deletion and a revert, every commit reads as a cold clone sees it."""
    from pytest_sremarathon.pipeline.repo import Author, GitRepo

    repo = GitRepo.create(tmp_path / "shop", SHOP, EPOCH, "import")
    who = Author("Dev", "dev@example.com")
    commits = [repo.head()]
    repo.files_at(commits[0])
    config = repo.path / CONFIG
    config.write_text(config.read_text().replace("'5'", "'4'"))
    commits.append(repo.commit_all("edit", who, EPOCH))
    _git(repo.path, "mv", "config/ad.yaml", "config/ads.yaml")
    commits.append(repo.commit_all("rename", who, EPOCH))
    _git(repo.path, "rm", "-q", "tests/test_handlers.py")
    commits.append(repo.commit_all("delete", who, EPOCH))
    commits.append(repo.revert(commits[1], who, EPOCH))
    for commit in commits[1:]:
        repo.show(commit)
        repo.files_at(commit)

    cold = GitRepo(repo.path)
    for commit in commits:
        assert repo.files_at(commit) == cold.files_at(commit)
    latest = repo.files_at(commits[-1])
    assert "config/ads.yaml" in latest and "config/ad.yaml" not in latest
    assert "tests/test_handlers.py" not in latest and "MAX_RECOMMENDATIONS: '5'" in latest[CONFIG]
    renamed = repo.show(commits[2]).blobs
    assert set(renamed) == {"config/ad.yaml", "config/ads.yaml"} and renamed["config/ad.yaml"] is None


def test_builds_take_their_time_one_at_a_time_and_roll_out(shop) -> None:
    """With build times: a deploy queues a build; one runs at a time per app; the orchestrator's
    queued builds coalesce into the newest, the agent's never; a finished build's deploy starts
    its rollout (``deploying``) and is ``deployed`` once its Deployments rolled out; ``status``
    shows all of it with times."""
    import random
    from datetime import timedelta

    from pytest_sremarathon.pipeline.builds import BuildTimes

    pipelines, events, _ = shop
    cluster, clock = pipelines.cluster, pipelines.clock
    pipelines.configure(BuildTimes(1, ["shop"], mu=1.0, sigma=0.0, low=120, high=120, jitter=0.0))
    first = _edit_config(pipelines, "5", "4")
    b1 = pipelines.deploy("shop", "HEAD", "orchestrator")
    assert b1["state"] == "building" and set(b1) >= {"build", "commit", "queued_at"}
    _edit_config(pipelines, "4", "3")
    pipelines.deploy("shop", "HEAD", "orchestrator")
    third = _edit_config(pipelines, "3", "2")
    pipelines.deploy("shop", "HEAD", "orchestrator")
    queued: list = []
    pipelines.revert("shop", third, "agent", queued=queued)
    pipelines.attach_action(queued, "act-00001")

    def states() -> dict[str, str]:
        return {b["id"]: b["state"] for b in pipelines.status("shop")["builds"]}

    assert list(states().values()) == ["building", "queued", "queued", "queued"]
    assert not pipelines.is_deployed("shop", first)  # nothing is live before its build is done
    assert "MAX_RECOMMENDATIONS: '5'" in pipelines.deployed_file("shop", CONFIG)

    def run(seconds: float) -> None:
        for i in range(int(seconds // 30)):
            clock.advance(30)
            pipelines.advance(clock())
            cluster.tick(30, random.Random(i))

    clock.advance(120)
    pipelines.advance(clock())
    ids = [b1["build"], "build-00002", "build-00003", queued[0].id]
    assert states() == {ids[0]: "deploying", ids[1]: "superseded", ids[2]: "building", ids[3]: "queued"}
    assert pipelines.is_deployed("shop", first)
    [done] = [b for b in pipelines.status("shop")["builds"] if b["id"] == ids[0]]
    assert done["started_at"] == done["queued_at"] and done["rollout_started_at"] == done["finished_at"]
    run(600)  # the orchestrator's build, then the agent's, built and rolled out
    final = states()
    assert final[ids[3]] == "deployed" and final[ids[2]] in ("deployed", "superseded")
    assert "MAX_RECOMMENDATIONS: '3'" in pipelines.deployed_file("shop", CONFIG)  # the revert of 3 -> 2
    agent_deploy = [d for t, d in events if t == "pipeline.deploy" and d.actor == "agent"]
    assert [d.action for d in agent_deploy] == ["act-00001"] and agent_deploy[0].build == ids[3]
    record = [d for t, d in events if t == "pipeline.build" and d.id == ids[3]]
    assert [r.state for r in record] == ["queued", "building", "deploying", "deployed"]
    assert all(r.action == "act-00001" for r in record)
    assert timedelta(seconds=record[1].seconds) == timedelta(minutes=2)
