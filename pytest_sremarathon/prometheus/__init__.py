"""A self-contained Prometheus: an in-memory TSDB, a PromQL evaluator and the HTTP API as a
pure handler. See docs/PROMETHEUS.md for what is supported."""

from .api import (
    Alert,
    BuildInfo,
    PrometheusAPI,
    Response,
    Rule,
    RuleGroup,
    RuleSource,
    StaticRules,
    StaticTargets,
    Target,
    TargetSource,
)
from .promql import Engine, QueryResult, parse
from .tsdb import TSDB, Labels, Matcher, MatchOp, MetricMetadata, make_labels
from .values import BadData, ExecutionError, PromQLError, Unsupported

__all__ = [
    "TSDB",
    "Alert",
    "BadData",
    "BuildInfo",
    "Engine",
    "ExecutionError",
    "Labels",
    "MatchOp",
    "Matcher",
    "MetricMetadata",
    "PromQLError",
    "PrometheusAPI",
    "QueryResult",
    "Response",
    "Rule",
    "RuleGroup",
    "RuleSource",
    "StaticRules",
    "StaticTargets",
    "Target",
    "TargetSource",
    "Unsupported",
    "make_labels",
    "parse",
]
