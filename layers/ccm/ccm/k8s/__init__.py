"""Kubernetes API access (plain JSON dicts, no model deserialisation)."""
