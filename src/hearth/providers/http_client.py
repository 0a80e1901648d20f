"""The one shared aiohttp session for outbound HTTP other than model calls (callbacks, webhooks,
``file_url`` fetches, usage sinks, MCP servers): connection pooling, keep-alive, no limit.

Model calls go through :mod:`hearth.providers.http1_client` instead (the hop every request pays for).
Concurrency is limited by admission, not by the connection pool, so the pool is unbounded.
"""

from __future__ import annotations

import aiohttp


def create_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=30,
                                     enable_cleanup_closed=True)
    # An explicit User-Agent (rather than skip_auto_headers) keeps aiohttp on its fast header path.
    return aiohttp.ClientSession(connector=connector, auto_decompress=True, headers={"User-Agent": "hearth"})
