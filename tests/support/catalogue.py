"""The faulty-change kinds an application's catalogue covers, by what the change edits (the
apps' tests check their catalogues against these)."""

from __future__ import annotations

CODE_KINDS = {"code-exception", "code-latency", "code-crash-on-start", "code-memory-leak", "code-retry-storm",
              "code-contract-break"}
CONFIG_KINDS = {"config-bad-timeout", "config-wrong-endpoint", "config-feature-flag", "config-pool-size",
                "config-env-removed"}
MANIFEST_KINDS = {"manifest-memory-limit", "manifest-readiness-probe", "manifest-service-selector",
                  "manifest-target-port", "manifest-replicas-cut", "manifest-zone-affinity"}
