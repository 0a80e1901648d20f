"""Prompts and roles: versioned, localized templates with one active version per code."""
