"""Hearth: a self-hosted AI capability service."""

__version__ = "0.1.0"
