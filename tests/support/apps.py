"""What the tests of the applications and their catalogues share: the faulty-change kinds a
catalogue covers, and an app's source as its pipeline's repository holds it."""

from __future__ import annotations

from pathlib import Path

from pytest_sremarathon.pipeline.repo import REPO_FILES

CODE_KINDS = {"code-exception", "code-latency", "code-crash-on-start", "code-memory-leak", "code-retry-storm",
              "code-contract-break"}
CONFIG_KINDS = {"config-bad-timeout", "config-wrong-endpoint", "config-feature-flag", "config-pool-size",
                "config-env-removed"}
MANIFEST_KINDS = {"manifest-memory-limit", "manifest-readiness-probe", "manifest-service-selector",
                  "manifest-target-port", "manifest-replicas-cut", "manifest-zone-affinity"}


def source_files(root: Path) -> dict[str, str]:
    """The app template's source (its ``REPO_FILES`` directories, without bytecode), path ->
    text, as the pipeline imports it into the app's repository (cf. GitRepo.files_at)."""
    return {str(p.relative_to(root)): p.read_text() for d in REPO_FILES if (root / d).is_dir()
            for p in sorted((root / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            and p.suffix != ".pyc"}
