"""The web console at ``/console``: server-rendered pages over the same services as the admin API.

Everything it shows is rendered here (Jinja2 templates, inline SVG charts, one stylesheet and one small
script shipped in the package): no CDN, no build step, works offline. See docs/console.md.
"""

from __future__ import annotations

from hearth.console.router import install_console

__all__ = ["install_console"]
