"""Unique ids for requests, calls and leases: a random per-process prefix plus a counter.

Ids only need to be unique — across processes, restarts and machines sharing one Redis or one
ledger — not unguessable: none of them grants anything. 64 random bits per process (drawn again
in a forked child) make collisions between processes negligible, and the counter makes ids of one
process distinct by construction. A random draw per id (``os.urandom``) cost a system call on
every request, call and lease, which showed up in the governed-call profile.
"""

from __future__ import annotations

import itertools
import os

_prefix = os.urandom(8).hex()
_counter = itertools.count(1)


def new_id() -> str:
    """32 lowercase hex characters, e.g. ``9f1c2b7a44e0d3a10000000000000001``."""
    return f"{_prefix}{next(_counter):016x}"


def _reseed() -> None:
    global _prefix, _counter
    _prefix = os.urandom(8).hex()
    _counter = itertools.count(1)


os.register_at_fork(after_in_child=_reseed)
