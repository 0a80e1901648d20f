"""YAML documents read the safe way, with libyaml's parser where PyYAML has it.

``yaml.safe_load`` is PyYAML's pure-Python parser: every start reads the configuration file and the
document pipeline's definition with it, and that was a measurable share of a start (tens of
milliseconds — the test suite starts a server in most of its tests). ``CSafeLoader`` builds the same
Python values from the same safe subset of YAML, in C.
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # PyYAML built without libyaml has only the Python one


def load_yaml(text: str | bytes) -> Any:
    """The Python value of one YAML document (safe tags only). Raises :class:`yaml.YAMLError` on bad YAML."""
    return yaml.load(text, Loader=_LOADER)
