"""Traces of the sampled requests through the apps' real handlers, and the Jaeger query API
over them. See docs/TRACES-AND-ALERTS.md for the contract with the traffic engine."""

from .jaeger import JaegerQuery
from .recorder import CLIENT, SERVER, ActiveTrace, Process, Span, TraceRecorder, Workload, resolve

__all__ = ["CLIENT", "SERVER", "ActiveTrace", "JaegerQuery", "Process", "Span", "TraceRecorder", "Workload",
           "resolve"]
