"""The SSRF guard's decisions, with a stubbed resolver: nothing here sends a packet or asks DNS.

Every internal form an address can take — as a literal in any spelling, or as what a name resolves
to — is refused unless the operator allowlisted it; public addresses (used only as stub answers,
never contacted) are accepted and come back as the addresses the fetcher must connect to.
"""

from __future__ import annotations

import socket

import pytest
from yarl import URL

from hearth.capabilities.address_guard import AddressGuard, CheckedTarget, resolve_with_getaddrinfo
from hearth.errors import HearthError

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:4700::1111"

DNS: dict[str, list[str]] = {
    "public.example": [PUBLIC_V4],
    "public6.example": [PUBLIC_V6],
    "internal.example": ["10.0.0.5"],
    "metadata.example": ["169.254.169.254"],
    "loopback6.example": ["::1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "zoned.example": ["fe80::1%eth0"],
    "mixed.example": [PUBLIC_V4, "10.0.0.5"],
    "mixed6.example": [PUBLIC_V6, "fd00::1"],
    "files.internal": ["10.9.9.9", "fd00::9"],
    "other.internal": ["10.9.9.9"],
    "empty.example": [],
}


class StubResolver:
    """Answers from :data:`DNS`; an unknown name fails like a real lookup. Records every question."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if host not in DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(DNS[host])


def guard(*allow: str) -> tuple[AddressGuard, StubResolver]:
    resolver = StubResolver()
    return AddressGuard(allow, resolver), resolver


async def refusal(g: AddressGuard, url: str) -> HearthError:
    with pytest.raises(HearthError) as caught:
        await g.check_url(url)
    return caught.value


INTERNAL_LITERALS = [
    "http://127.0.0.1/", "http://127.255.255.254/", "http://[::1]/", "http://10.0.0.1/", "http://172.16.0.1/",
    "http://172.31.255.255/", "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/", "http://[fc00::1]/", "http://[fd12:3456::1]/", "http://0.0.0.0/", "http://[::]/",
    "http://224.0.0.1/", "http://[ff02::1]/", "http://255.255.255.255/", "http://240.0.0.1/",
    "http://100.64.0.1/", "http://100.127.255.254/", "http://192.0.2.1/", "http://[2001:db8::1]/",
    # IPv6 forms carrying an internal IPv4 address
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "http://[::127.0.0.1]/",
    "http://[64:ff9b::10.0.0.1]/", "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    # other spellings of 127.0.0.1 (and of 0.0.0.0)
    "http://2130706433/", "http://0177.0.0.1/", "http://0x7f.1/", "http://127.1/", "http://0x7f000001/",
    "http://017700000001/", "http://0x7F.0.0.1/", "http://127.0.0.1./", "http://0/",
    "https://127.0.0.1:8443/x", "http://[::ffff:7f00:1]:8080/",
]


@pytest.mark.parametrize("url", INTERNAL_LITERALS)
async def test_a_literal_internal_address_is_refused_in_every_spelling_without_asking_dns(url: str) -> None:
    g, resolver = guard()
    error = await refusal(g, url)
    assert (error.code, error.details["reason"]) == ("file_url_refused", "address_not_public")
    assert resolver.asked == []


@pytest.mark.parametrize("url", ["http://internal.example/", "http://metadata.example/latest/meta-data/",
                                 "http://loopback6.example/", "http://mapped.example/", "http://zoned.example/",
                                 "http://INTERNAL.example./"])
async def test_a_name_resolving_to_an_internal_address_is_refused(url: str) -> None:
    g, _ = guard()
    error = await refusal(g, url)
    assert (error.code, error.details["reason"]) == ("file_url_refused", "address_not_public")


@pytest.mark.parametrize("url", ["http://mixed.example/", "http://mixed6.example/"])
async def test_a_name_with_one_public_and_one_internal_address_is_refused(url: str) -> None:
    g, _ = guard()
    assert (await refusal(g, url)).details["reason"] == "address_not_public"


@pytest.mark.parametrize(("url", "reason"), [
    ("file:///etc/passwd", "scheme"), ("ftp://public.example/x", "scheme"), ("gopher://public.example/", "scheme"),
    ("javascript:alert(1)", "scheme"), ("data:text/plain,hi", "scheme"), ("httpx://public.example/", "scheme"),
    ("//public.example/x", "scheme"), ("public.example/x", "scheme"),
    ("http://user:pass@public.example/", "userinfo"), ("http://user@public.example/", "userinfo"),
    ("http://:@public.example/", "userinfo"), ("http://@public.example/", "userinfo"),
    ("http://[fe80::1%25eth0]/", "zone_id"), ("http://[fe80::1%eth0]/", "zone_id"), ("http://[::1%25lo]/", "zone_id"),
    ("http:///x", "host_missing"), ("http:public.example", "invalid_url"),
    ("http://public.example:0/", "port"), ("http://public.example:65536/", "port"),
    ("http://public.example:99999/", "port"),
    ("http://256.0.0.1/", "invalid_host"), ("http://1.2.3.4.5/", "invalid_host"), ("http://08.0.0.1/", "invalid_host"),
    ("http://public.example.123/", "invalid_host"), ("http://under$core.example/", "invalid_host"),
    ("http://a b.example/", "invalid_url"), ("http://93.184.216.34\\@127.0.0.1/", "invalid_url"),
    ("http://public.example/\r\nX: y", "invalid_url"),
])
async def test_a_url_that_is_not_plain_http_to_a_host_is_refused_with_its_reason(url: str, reason: str) -> None:
    g, resolver = guard("127.0.0.0/8", "10.0.0.0/8")
    error = await refusal(g, url)
    assert (error.code, error.details["reason"]) == ("file_url_refused", reason)
    assert resolver.asked == []


async def test_a_name_resolving_to_public_addresses_is_accepted_with_them_as_the_addresses_to_connect_to() -> None:
    g, resolver = guard()
    target = await g.check_url("http://Public.Example/doc.txt?x=1")
    assert (target.host, target.port, target.addresses, target.literal) == ("public.example", 80, (PUBLIC_V4,), False)
    assert resolver.asked == [("public.example", 80)]
    assert str(target.pinned_url(PUBLIC_V4)) == f"http://{PUBLIC_V4}/doc.txt?x=1"
    assert target.host_header == "public.example"
    assert target.server_hostname is None  # plain http: no TLS


async def test_an_https_target_keeps_its_name_for_the_host_header_and_tls_while_connecting_to_the_address() -> None:
    g, _ = guard()
    target = await g.check_url("https://public6.example:8443/a")
    assert target.addresses == (PUBLIC_V6,)
    assert str(target.pinned_url(PUBLIC_V6)) == f"https://[{PUBLIC_V6}]:8443/a"
    assert (target.host_header, target.server_hostname) == ("public6.example:8443", "public6.example")


@pytest.mark.parametrize(("url", "address"), [
    (f"https://{PUBLIC_V4}/x", PUBLIC_V4), (f"http://[{PUBLIC_V6}]/", PUBLIC_V6),
    ("http://[64:ff9b::5db8:d822]/", "64:ff9b::5db8:d822"),  # NAT64 of the public 93.184.216.34
])
async def test_a_public_address_literal_is_accepted_without_dns_and_without_a_tls_name(url: str, address: str) -> None:
    g, resolver = guard()
    target = await g.check_url(url)
    assert (target.addresses, target.literal, target.server_hostname) == ((address,), True, None)
    assert resolver.asked == []


async def test_a_pinned_url_only_takes_a_vetted_address() -> None:
    g, _ = guard()
    target = await g.check_url("http://public.example/")
    with pytest.raises(ValueError, match="vetted"):
        target.pinned_url("10.0.0.5")


@pytest.mark.parametrize(("allow", "url"), [
    (("10.1.2.0/24",), "http://10.1.2.3/"), (("127.0.0.1/32",), "http://127.0.0.1:8080/doc.txt"),
    (("127.0.0.1/32",), "http://2130706433/"), (("127.0.0.1/32",), "http://[::ffff:127.0.0.1]/"),
    (("fd00::/8",), "http://[fd00::1]/"), (("10.0.0.0/8",), "http://internal.example/"),
    (("10.0.0.0/8",), "http://mixed.example/"),
])
async def test_an_internal_address_inside_an_allowlisted_network_is_accepted(allow: tuple[str, ...], url: str) -> None:
    g, _ = guard(*allow)
    assert (await g.check_url(url)).addresses


async def test_a_spelled_out_literal_is_pinned_to_its_canonical_address() -> None:
    g, _ = guard("127.0.0.1/32")
    target = await g.check_url("http://0x7f.1:8080/doc.txt")
    assert (target.host, str(target.pinned_url("127.0.0.1")), target.host_header) == (
        "127.0.0.1", "http://127.0.0.1:8080/doc.txt", "127.0.0.1:8080")


@pytest.mark.parametrize(("allow", "url"), [
    (("10.1.2.0/24",), "http://10.1.3.1/"), (("127.0.0.1/32",), "http://127.0.0.2/"),
    (("127.0.0.1/32",), "http://[::1]/"), (("10.0.0.0/8",), "http://mixed6.example/"),
])
async def test_an_internal_address_outside_the_allowlisted_networks_is_refused(allow: tuple[str, ...],
                                                                              url: str) -> None:
    g, _ = guard(*allow)
    assert (await refusal(g, url)).details["reason"] == "address_not_public"


async def test_an_allowlisted_host_name_is_accepted_whatever_it_resolves_to_but_only_that_name() -> None:
    g, _ = guard("Files.Internal.")
    assert (await g.check_url("http://files.internal/doc.txt")).addresses == ("10.9.9.9", "fd00::9")
    assert (await g.check_url("http://FILES.internal./doc.txt")).host == "files.internal"
    assert (await refusal(g, "http://other.internal/")).details["reason"] == "address_not_public"
    assert (await refusal(g, "http://10.9.9.9/")).details["reason"] == "address_not_public"


@pytest.mark.parametrize("url", ["http://unknown.example/", "http://empty.example/"])
async def test_a_name_that_does_not_resolve_is_a_fetch_failure_not_a_refusal(url: str) -> None:
    g, _ = guard()
    error = await refusal(g, url)
    assert (error.code, error.details["reason"]) == ("file_url_fetch_failed", "dns_failed")


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not a host!", "*.example.com", "", "10.0.0.0/8/1"])
def test_an_allowlist_entry_that_is_neither_a_network_nor_a_host_name_is_a_configuration_error(entry: str) -> None:
    with pytest.raises(ValueError, match="allowlist"):
        AddressGuard([entry])


async def test_the_default_resolver_returns_address_strings() -> None:
    # A numeric host: getaddrinfo answers it without any DNS traffic.
    assert await resolve_with_getaddrinfo("127.0.0.1", 80) == ["127.0.0.1"]


def test_a_checked_target_is_immutable() -> None:
    target = CheckedTarget(URL("http://public.example/"), "public.example", 80, (PUBLIC_V4,))
    with pytest.raises(AttributeError):
        target.addresses = ("10.0.0.5",)  # type: ignore[misc]
