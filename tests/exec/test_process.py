"""``run_process``: how a container's main process ended (code, its own virtual time, stopped by
the runaway guard), and the view's ``aliases`` (an image's bash played by the shell)."""

from __future__ import annotations

import pytest
from support.exec_fixtures import make_container

from pytest_sremarathon.exec import ExecNotFound, run_process
from pytest_sremarathon.exec.shell import BufIn, BufOut


def run(argv: list[str], **view: object) -> tuple[int, float, bool, str]:
    out = BufOut()
    end = run_process(make_container(**view), argv, BufIn(b""), out, out)
    return end.code, end.seconds, end.stopped, bytes(out.data).decode()


def test_exit_code_and_virtual_seconds() -> None:
    assert run(["sh", "-c", "echo a; sleep 90; exit 3"]) == (3, 90.0, False, "a\n")
    assert run(["true"])[:3] == (0, 0.0, False)


def test_sleep_infinity_and_a_stopped_loop_mean_the_process_runs_on() -> None:
    code, seconds, stopped, _ = run(["sleep", "infinity"])
    assert code == 0 and seconds == float("inf") and not stopped
    code, _, stopped, out = run(["sh", "-c", "while true; do sleep 5; done"])
    assert code == 137 and stopped and "runaway loop stopped by the simulation" in out
    code, _, stopped, out = run(["sh", "-c", "sleep inf; date +%Y"])
    assert code == 0 and out == "2056\n"  # the shell's clock saturates instead of overflowing


def test_aliases_play_an_images_bash_as_the_shell() -> None:
    with pytest.raises(ExecNotFound):
        run(["bash", "-c", "echo hi"])
    assert run(["bash", "-c", "echo hi"], aliases={"bash": "sh"})[3] == "hi\n"
    assert run(["/bin/bash", "-c", "echo hi"], aliases={"bash": "sh"})[3] == "hi\n"
