"""Resource limits on the agent's process tree (scenario ``agent.memory_limit``,
``agent.max_processes``, ``agent.workspace_limit``; README: Bring your own agent).

An untrusted agent must not take the machine down: hold 3 GB, fork without end, fill the disk.
Two layers, because neither is enough alone on every machine:

* **rlimits**, set by the worker's prelude before the agent runs (``worker.py --rlimit``;
  inherited by everything it starts):
  ``RLIMIT_DATA`` = the memory limit (a single process's private writable memory; unlike
  ``RLIMIT_AS`` it does not count the address space Go and V8 reserve without using, so kubectl
  and Node-based agents still start) and ``RLIMIT_FSIZE`` = the workspace limit (no single file
  grows past it: ``SIGXFSZ``, or ``EFBIG`` where the signal is ignored, as Python does). ``RLIMIT_NPROC`` counts a user's processes machine-wide and root
  ignores it, so it is not used.
* a **watchdog** thread that reads ``/proc`` every :data:`POLL_SECONDS` during a step
  (:data:`IDLE_POLL_SECONDS` between steps): the whole tree's
  resident memory, its process count and the workspace's size. Crossing one kills the tree at
  once and remembers which limit it was (:attr:`Watchdog.tripped`), which the host turns into
  the step's ``limit`` outcome. It also knows every descendant, so a child that left the process
  group (``setsid``) is killed with the rest (:func:`kill_tree`).

A cgroup would be exact (memory.max, pids.max), but the agent runs on machines where the
cgroup tree is read-only or still v1; the watchdog works everywhere ``/proc`` does.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .k8s.quantity import memory_bytes

__all__ = ["AgentLimits", "Watchdog", "DEFAULT_MEMORY", "DEFAULT_PROCESSES", "DEFAULT_WORKSPACE"]

#: Defaults (documented in the README and ``sremarathon init``'s file): room for an LLM-driven CLI
#: agent (Node or Python, a few kubectl children), far below what takes a CI machine down.
DEFAULT_MEMORY = "2Gi"
DEFAULT_PROCESSES = 64
DEFAULT_WORKSPACE = "2Gi"
#: How often the watchdog reads /proc while a step runs, and between steps (a scan of every
#: process's stat costs a few milliseconds on a busy machine: ~3% of a core at 0.1 s).
POLL_SECONDS = 0.1
IDLE_POLL_SECONDS = 1.0
#: Walking a workspace with the apps' checkouts takes tens of milliseconds: every 2 s while a
#: step runs, sooner when its filesystem's used space (one statvfs a poll) grew by
#: WORKSPACE_GROWTH since the last walk, and once more when the step ends (RLIMIT_FSIZE bounds a
#: single file meanwhile). Between the steps of a long-lived agent only that growth walks it
#: (the growth is counted from the last walk, so slow writes add up to it too).
WORKSPACE_POLL_SECONDS = 2.0
WORKSPACE_GROWTH = 32 * 2**20
# The step's first and last looks (on the marathon's critical path, twice a step) walk only when
# the workspace could be near its limit: the last walk's size plus the growth of its
# filesystem's used space since bounds what it holds now (other writers only loosen the bound;
# space freed elsewhere meanwhile could hide growth, which the periodic walks still see).


def _format(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n / 2**20:.1f}Mi" if n >= 2**20 else f"{n}B"


@dataclass(frozen=True)
class AgentLimits:
    """What the agent's process tree may use. ``None`` disables a limit."""

    memory: Optional[int] = memory_bytes(DEFAULT_MEMORY)
    processes: Optional[int] = DEFAULT_PROCESSES
    workspace: Optional[int] = memory_bytes(DEFAULT_WORKSPACE)

    @classmethod
    def parse(cls, memory: Optional[str], processes: Optional[int], workspace: Optional[str]) -> AgentLimits:
        return cls(memory=memory_bytes(memory) if memory else None, processes=processes,
                   workspace=memory_bytes(workspace) if workspace else None)

    def describe(self) -> str:
        parts = [f"memory {_format(self.memory)}" if self.memory else "memory unlimited",
                 f"{self.processes} processes" if self.processes else "processes unlimited",
                 f"workspace {_format(self.workspace)}" if self.workspace else "workspace unlimited"]
        return ", ".join(parts)

    def memory_error(self) -> str:
        return f"memory limit {_format(self.memory)} reached" if self.memory else "out of memory"

    def workspace_error(self) -> str:
        return f"workspace limit {_format(self.workspace)} reached" if self.workspace else "file too large"


#: No limit at all: the watchdog still knows the tree, to clean it up at the end.
NO_LIMITS = AgentLimits(memory=None, processes=None, workspace=None)


# --- reading /proc ------------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, start time in clock ticks), from every ``/proc/<pid>/stat`` (namespaced
    children included: the host's /proc sees them under their host pids)."""
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)  # (os.open: half of open()'s cost)
            try:
                stat = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: fields follow the last ')'
        rest = stat[stat.rfind(b")") + 2:].split(None, 20)
        if len(rest) > 19:
            out[int(name)] = (int(rest[1]), int(rest[19]))
    return out


def _read_stat(pid: int) -> Optional[bytes]:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # (os.open: half of open()'s cost)
        try:
            return os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None


def _start_time(stat: bytes) -> Optional[int]:
    """A process's start time (clock ticks) from its ``stat`` line."""
    rest = stat[stat.rfind(b")") + 2:].split(None, 20)
    return int(rest[19]) if len(rest) > 19 else None


def _children(pid: int) -> Optional[list[int]]:
    """The children of every thread of ``pid`` (``/proc/<pid>/task/<tid>/children``); None
    where the kernel has no such file (CONFIG_PROC_CHILDREN) or the process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None  # (the thread is there, its children file is not: not this kernel)
            continue  # (the thread ended meanwhile)
        except OSError:
            continue
        try:
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
        except OSError:
            continue
        finally:
            os.close(fd)
        out.extend(int(c) for c in data.split())
    return out


def _walk(roots: tuple[int, ...]) -> Optional[dict[int, int]]:
    """:func:`tree` from each process's children files: a few files per process of the tree,
    where :func:`_processes` reads every process's on the machine (~4 ms a poll on a busy one).
    The same answer (a child is listed by the thread that is its parent; a pid whose stat
    cannot be read is gone, as there); None where the kernel has no children files."""
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        stat = _read_stat(pid)
        started = _start_time(stat) if stat is not None else None
        if started is None:
            continue
        kids = _children(pid)
        if kids is None:
            if _read_stat(pid) is None:  # (gone between the two reads: as if never seen)
                continue
            return None
        out[pid] = started
        todo.extend(kids)
    return out


def tree(*roots: int, procs: Optional[dict[int, tuple[int, int]]] = None) -> dict[int, int]:
    """The ``roots`` and every descendant still alive: pid -> start time (a pid with another
    start time later is another process, never to be signalled)."""
    if procs is None:
        walked = _walk(roots)
        if walked is not None:
            return walked
        procs = _processes()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out:
            out[pid] = procs[pid][1]
            todo.extend(kids.get(pid, ()))
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def dir_size(path: Path, stop_at: Optional[int] = None) -> int:
    """Bytes the files under ``path`` take (allocated blocks; hard links once), stopping early
    once past ``stop_at``.

    The watchdog walks the workspace (the app checkouts and their git objects: ~2000 entries)
    twice a step, so the walk keeps to what it needs: no stat for a directory (its type comes
    with the entry), and only files with more than one link are remembered (a file with one
    link has one path in the tree)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    blocks = hasattr(os.stat_result, "st_blocks")
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                        continue
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1:
                    key = (st.st_dev, st.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += max(st.st_blocks * 512, 0) if blocks else st.st_size
                if stop_at is not None and total > stop_at:
                    return total
    return total


def _signal(pids: dict[int, int], sig: int, procs: dict[int, tuple[int, int]]) -> None:
    """Signal every pid that is still the process it was (same start time)."""
    for pid, started in pids.items():
        if procs.get(pid, (0, -1))[1] != started:
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(root: int, known: dict[int, int]) -> None:
    """Kill ``root``'s tree and the ``known`` processes (seen in it before, maybe re-parented
    since) with everything they started.

    Everything is stopped first, round after round until no new child shows up (a stopped
    process cannot fork), then killed leaves first and the root last: the agent's root is its
    tree's child subreaper (``worker.py``), so a child that lost its parent meanwhile is
    re-parented to the (stopped) root and found in the next round instead of escaping to init."""
    stopped: dict[int, int] = {}

    def rounds(sig: int, skip_root: bool) -> None:
        for _ in range(100):
            procs = _processes()
            live = [p for p, t in {**known, **stopped}.items() if procs.get(p, (0, -1))[1] == t]
            root_ok = root not in known or procs.get(root, (0, -1))[1] == known[root]
            current = {p: t for p, t in tree(*([root] if root_ok else []), *live, procs=procs).items()
                       if _state(p) not in ("Z", "X") and not (skip_root and p == root)}
            new = {p: t for p, t in current.items() if sig == signal.SIGKILL or stopped.get(p) != t}
            if not new:
                return
            _signal(new, sig, procs)
            _wait_state(new, ("T", "t", "Z", "X") if sig == signal.SIGSTOP else ("Z", "X"))
            stopped.update(new)

    rounds(signal.SIGSTOP, skip_root=False)
    rounds(signal.SIGKILL, skip_root=True)
    procs = _processes()
    _signal({root: procs[root][1]} if root in procs and (root not in known or procs[root][1] == known[root])
            else {}, signal.SIGKILL, procs)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rfind(b")") + 2:].split()[0].decode()
    except (OSError, IndexError):
        return "X"


def _wait_state(pids: dict[int, int], states: tuple[str, ...], timeout: float = 0.5) -> None:
    """Wait (briefly) until every pid is in one of ``states``: a signal is delivered later, and a
    fork in flight completes first."""
    deadline = time.monotonic() + timeout
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {p for p in waiting if _state(p) not in states}
        if waiting:
            time.sleep(0.002)


class Watchdog:
    """Watches one process tree until :meth:`stop`; kills it when a limit is crossed."""

    def __init__(self, root: int, limits: AgentLimits, workspace: Path) -> None:
        self.root = root
        self.limits = limits
        self.workspace = workspace
        self.tripped: Optional[str] = None  # which limit, in words, once crossed
        self.peak_memory = 0
        self.peak_processes = 0
        self.known: dict[int, int] = {}  # every process seen in the tree, with its start time (the cleanup)
        self.interval = POLL_SECONDS  # the host slows it down between steps (IDLE_POLL_SECONDS)
        self._stepping = True  # a step (or the agent's start) runs: the workspace is walked every 2 s
        self._stop = threading.Event()
        self._walked = (0, 0)  # the last walk: (filesystem used before it, the size it found)
        # The workspace may already hold more than the limit (the agent filled it in an earlier
        # step): only growth past the limit trips, so the agent can clean up in this step.
        self._workspace_base = self._workspace_size() if limits.workspace else 0
        self._thread = threading.Thread(target=self._run, name=f"agent-watchdog-{root}", daemon=True)
        self._thread.start()

    def _workspace_size(self) -> int:
        used = self._fs_used()
        size = dir_size(self.workspace, stop_at=None)
        self._walked = (used, size)
        return size

    def _may_exceed(self, limit: int) -> bool:
        """Could the workspace hold more than ``limit`` now? (See WORKSPACE_POLL_SECONDS.)"""
        used, size = self._walked
        return size + max(0, self._fs_used() - used) > limit

    def _fs_used(self) -> int:
        try:
            st = os.statvfs(self.workspace)
        except OSError:
            return 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def _workspace_crossed(self) -> Optional[str]:
        lim = self.limits.workspace
        if not lim:
            return None
        used = self._fs_used()
        size = dir_size(self.workspace, stop_at=max(lim, self._workspace_base))
        self._walked = (used, size)
        if size > lim and size > self._workspace_base:
            return f"{self.limits.workspace_error()} (the workspace holds more than {_format(lim)})"
        return None

    def begin_step(self) -> None:
        """A step of a long-lived agent process starts: watch closely, from what the workspace
        holds now."""
        lim = self.limits.workspace
        if lim:
            # a base at or under the limit trips exactly as none does: only a fuller one needs measuring
            self._workspace_base = self._workspace_size() if self._may_exceed(lim) else 0
        self.interval = POLL_SECONDS
        self._stepping = True

    def end_step(self) -> Optional[str]:
        """The step ended: the workspace's last look (a step may fill it between two polls and
        return); the limit crossed, or None. Watch lightly until the next step."""
        self.interval = IDLE_POLL_SECONDS
        self._stepping = False
        lim = self.limits.workspace
        if self.tripped is None and lim and self._may_exceed(lim):
            self.tripped = self._workspace_crossed()
        return self.tripped

    def _run(self) -> None:
        next_disk, fs_mark = 0.0, self._fs_used()
        while not self._stop.wait(self.interval):
            pids = tree(self.root)
            if not pids:
                return
            self.known.update(pids)
            rss = sum(_rss(p) for p in pids)
            self.peak_memory, self.peak_processes = max(self.peak_memory, rss), max(self.peak_processes, len(pids))
            lim = self.limits
            why = None
            if lim.memory and rss > lim.memory:
                why = f"{lim.memory_error()} (the agent's processes held {_format(rss)})"
            elif lim.processes and len(pids) > lim.processes:
                why = f"process limit {lim.processes} reached (the agent ran {len(pids)} processes)"
            elif lim.workspace:
                used = self._fs_used()
                if (self._stepping and time.monotonic() >= next_disk) or used - fs_mark > WORKSPACE_GROWTH:
                    next_disk, fs_mark = time.monotonic() + WORKSPACE_POLL_SECONDS, used
                    why = self._workspace_crossed()
            if why is not None:
                kill_tree(self.root, self.known)
                self.tripped = why  # (after the kill: whoever acts on it finds the tree gone)
                return

    def stop(self) -> None:
        """Stop watching and kill whatever of the tree is left (the end of a step command or of
        the agent's process: no descendant outlives it). Orphans were re-parented away from the
        tree: the processes seen in it are killed with theirs too."""
        self._stop.set()
        self._thread.join(timeout=30.0)
        kill_tree(self.root, self.known)
