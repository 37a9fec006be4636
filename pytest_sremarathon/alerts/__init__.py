"""Alerting: rules over metrics and objects, background noise, and the alert history."""
