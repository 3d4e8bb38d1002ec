"""Deployment assets and their offline checks."""
