"""Held-out evaluation, forgetting metrics, Prometheus metrics and the dashboard."""
