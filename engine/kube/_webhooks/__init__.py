"""Admission and conversion webhooks: declarations, the HTTPS server, configurations, certificates."""
