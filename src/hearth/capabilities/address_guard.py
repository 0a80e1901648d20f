"""The SSRF guard of ``file_url``: which URLs Hearth may fetch, and at which addresses.

A caller-supplied URL is fetched from inside the operator's network, so without a guard any caller
could read the cloud metadata service, an admin port on localhost or a database console on the LAN.
:meth:`AddressGuard.check_url` accepts a URL only if it is plain ``http``/``https`` without userinfo
and every address its host resolves to is public — or explicitly allowlisted by the operator.

Address literals are judged the way a resolver would read them (``2130706433``, ``0177.0.0.1``,
``0x7f.1``, ``127.1`` are all 127.0.0.1), and IPv6 forms that embed an IPv4 address (mapped,
compatible, NAT64, 6to4) are judged by that IPv4 address.

**Pinning.** The check returns a :class:`CheckedTarget` holding the vetted addresses; the fetcher
connects to one of them (:meth:`CheckedTarget.pinned_url`, an IP-literal URL, so the HTTP client
never resolves the name again) and sends the original name as ``Host`` header and TLS server name
(:attr:`CheckedTarget.host_header`, :attr:`CheckedTarget.server_hostname`). A DNS answer that
changes between the check and the connection (DNS rebinding) therefore changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from yarl import URL

from hearth.errors import HearthError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Awaitable[list[str]]]

SCHEMES = ("http", "https")
MAX_URL_CHARS = 8192

# Checked in addition to ``is_global`` (which, for one, calls multicast global).
_BLOCKED_V4 = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"))
_BLOCKED_V6 = tuple(ipaddress.IPv6Network(n) for n in (
    "::/128", "::1/128", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10", "fec0::/10",
    "ff00::/8"))
# IPv6 ranges whose low 32 bits are an IPv4 address that is what the packet actually reaches.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f\\]")
_HEX = re.compile(r"0[xX][0-9a-fA-F]*")
_OCTAL = re.compile(r"0[0-7]+")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_ENDS_IN_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


@dataclass(frozen=True, slots=True)
class CheckedTarget:
    """A URL that passed the guard: where to connect (``addresses``, in resolver order) and what to
    call the server (``host``). ``literal`` means the URL named an address, not a host name."""

    url: URL
    host: str
    port: int
    addresses: tuple[str, ...]
    literal: bool = False

    def pinned_url(self, address: str) -> URL:
        """The URL with its host replaced by one of the vetted ``addresses``: the connection goes
        there and nowhere else, whatever DNS says by then."""
        if address not in self.addresses:
            raise ValueError("not a vetted address of this target")
        return self.url.with_host(address.partition("%")[0])

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.url.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def server_hostname(self) -> str | None:
        """The TLS server name (SNI, certificate check): the host name; None for an address literal."""
        return None if self.literal or self.url.scheme != "https" else self.host


async def resolve_with_getaddrinfo(host: str, port: int) -> list[str]:
    """The default resolver: the system's, every address (IPv4 and IPv6) in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class AddressGuard:
    """Decides whether a URL may be fetched. ``allow`` lists what the operator trusts although it is
    not public: CIDR networks (``"10.1.2.0/24"``, ``"127.0.0.1/32"``) and exact host names
    (``"files.internal"``, every address it resolves to is then accepted). No wildcards.

    A bad allowlist entry raises :class:`ValueError` here, at configuration time."""

    def __init__(self, allow: Sequence[str] = (), resolve: Resolve | None = None) -> None:
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for entry in allow:
            entry = entry.strip()
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = _normalize_name(entry)
            if name is None:
                raise ValueError(f"url allowlist entry {entry!r} is neither a CIDR network nor a host name")
            hosts.add(name)
        self._networks = tuple(networks)
        self._hosts = frozenset(hosts)
        self._resolve = resolve or resolve_with_getaddrinfo

    async def check_url(self, url: str) -> CheckedTarget:
        """The vetted target of ``url``, or :class:`HearthError` ``file_url_refused`` (``details.reason``
        says why). A host name that does not resolve is ``file_url_fetch_failed`` (reason ``dns_failed``):
        nothing was refused, it just cannot be reached now."""
        parsed = _parse(url)
        host = parsed.raw_host or ""
        port = parsed.port
        if port is None or not 0 < port < 65536:
            raise _refused("port", "The URL's port is not allowed.")
        literal = _address_literal(host)
        if literal is not None:
            text = str(literal)
            if not self._accepts(literal, by_name=False):
                raise _refused("address_not_public", "The URL names an address Hearth does not fetch from.")
            return CheckedTarget(parsed, text, port, (text,), literal=True)
        name = _normalize_name(host)
        if name is None:
            raise _refused("invalid_host", "The URL's host is not a valid host name.")
        try:
            answers = await self._resolve(name, port)
        except OSError as exc:
            raise HearthError("file_url_fetch_failed", "The URL's host name could not be resolved.",
                              details={"reason": "dns_failed", "host": name}) from exc
        if not answers:
            raise HearthError("file_url_fetch_failed", "The URL's host name has no address.",
                              details={"reason": "dns_failed", "host": name})
        by_name = name in self._hosts
        for answer in answers:
            address = _parse_answer(answer)
            if address is None or not self._accepts(address, by_name=by_name):
                raise _refused("address_not_public", "The URL's host resolves to an address Hearth does not fetch "
                               "from.", host=name)
        return CheckedTarget(parsed, name, port, tuple(answers))

    def _accepts(self, address: IPAddress, *, by_name: bool) -> bool:
        if by_name or is_public(address):
            return True
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and (embedded := embedded_ipv4(address)) is not None:
            candidates.append(embedded)
        return any(c in n for c in candidates for n in self._networks if c.version == n.version)


def is_public(address: IPAddress) -> bool:
    """Whether a packet to ``address`` leaves for the public internet. IPv6 forms that carry an IPv4
    address are judged by it; anything special-purpose (loopback, private, link-local, unique-local,
    CGNAT, multicast, reserved, documentation, unspecified, a zone id) is not public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return False
        embedded = embedded_ipv4(address)
        if embedded is not None:
            return is_public(embedded)
        blocked: tuple[IPNetwork, ...] = _BLOCKED_V6
    else:
        blocked = _BLOCKED_V4
    special = (address.is_loopback or address.is_private or address.is_link_local or address.is_multicast
               or address.is_reserved or address.is_unspecified)
    return address.is_global and not special and not any(address in n for n in blocked)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for: mapped (``::ffff:a.b.c.d``), translated, NAT64
    (``64:ff9b::/96``), 6to4 (``2002::/16``) or IPv4-compatible (``::a.b.c.d``, not ``::`` or ``::1``)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64 or address in _IPV4_TRANSLATED:
        return low
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return low
    return None


def _parse(url: str) -> URL:
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or _URL_FORBIDDEN.search(url):
        raise _refused("invalid_url", "The URL is not valid.")
    scheme, sep, rest = url.partition(":")
    if not sep or scheme.lower() not in SCHEMES:
        raise _refused("scheme", "Only http and https URLs are fetched.")
    if not rest.startswith("//"):
        raise _refused("invalid_url", "The URL is not valid.")
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    if "@" in authority:
        raise _refused("userinfo", "URLs with user information (user:password@) are not fetched.")
    if "%" in authority:
        raise _refused("zone_id", "URLs with an IPv6 zone id (or an escaped host) are not fetched.")
    try:
        parsed = URL(url)
    except ValueError as exc:
        reason = "port" if "port" in str(exc).lower() else "invalid_url"
        raise _refused(reason, "The URL is not valid.") from exc
    if not parsed.raw_host:
        raise _refused("host_missing", "The URL has no host.")
    return parsed


def _address_literal(host: str) -> IPAddress | None:
    """The address a literal host names (None for a host name); an unparseable literal is refused."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise _refused("invalid_host", "The URL's host is not a valid address.") from exc
    try:
        return _legacy_ipv4(host)
    except ValueError as exc:
        raise _refused("invalid_host", "The URL's host is not a valid address.") from exc


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address in a host, in every form ``inet_aton`` (and the URL standard) accepts: one to
    four parts, each decimal, octal (leading 0) or hex (0x), the last filling the remaining bytes.
    None if the host does not end in a number (it is a name); ValueError if it does but is invalid."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not _ENDS_IN_NUMBER.fullmatch(parts[-1]):
        return None
    numbers = [_number(p) for p in parts]
    if len(parts) > 4 or any(n is None for n in numbers):
        raise ValueError("not an IPv4 address")
    values = [n for n in numbers if n is not None]
    if any(v > 255 for v in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise ValueError("IPv4 part out of range")
    value = values[-1]
    for i, v in enumerate(values[:-1]):
        value += v << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _number(part: str) -> int | None:
    if _HEX.fullmatch(part):
        return int(part[2:], 16) if len(part) > 2 else 0
    if _OCTAL.fullmatch(part):
        return int(part, 8)
    if _DECIMAL.fullmatch(part):
        return int(part, 10)
    return None


def _parse_answer(answer: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(answer)
    except ValueError:
        return None


def _normalize_name(host: str) -> str | None:
    name = host.lower()
    name = name[:-1] if name.endswith(".") else name
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return None
    return name


def _refused(reason: str, message: str, **details: Any) -> HearthError:
    return HearthError("file_url_refused", message, details={"reason": reason, **details})
