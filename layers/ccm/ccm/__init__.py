"""Shared library of the serverless cloud controller (the Lambda layer)."""
