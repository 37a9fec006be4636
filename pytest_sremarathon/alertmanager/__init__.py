"""Alerts as Alertmanager shows them: its API v2 over the alert engine's alerts, with silences
that pass the policy point. See docs/TRACES-AND-ALERTS.md for the contract with the callers."""

from .api import AlertmanagerAPI, SilenceRequest, Verdict, VersionInfo
from .matchers import Matcher, MatcherError, parse_matchers
from .model import AlertmanagerConfig, AlertRecord, AmAlert, Route, fingerprint, from_record
from .silences import Silence, SilenceStore

__all__ = ["AlertRecord", "AlertmanagerAPI", "AlertmanagerConfig", "AmAlert", "Matcher", "MatcherError", "Route",
           "Silence", "SilenceRequest", "SilenceStore", "Verdict", "VersionInfo", "fingerprint", "from_record",
           "parse_matchers"]
