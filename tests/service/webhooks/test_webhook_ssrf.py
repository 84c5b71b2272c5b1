"""The SSRF guard: schemes, credentials, and every refused address class, with the admin
allow-list; a fake resolver stands in for DNS (rebinding: a name that resolves to a private
address is refused whatever the name)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service.errors import Unprocessable
from service.webhooks.ssrf import UrlRefused, check_url, parse_allow, refuse_unsafe


def fake_dns(*addresses: str):  # type: ignore[no-untyped-def]
    def _resolve(host: str, port: int) -> Sequence[str]:
        return list(addresses)

    return _resolve


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "fe80::1", "fc00::1",
        "::ffff:127.0.0.1", "ff02::1",
    ],
)  # fmt: skip
def test_private_and_special_addresses_are_refused(address: str) -> None:
    with pytest.raises(UrlRefused, match="SHUNTER_WEBHOOK_ALLOW"):
        check_url("https://hooks.example.com/x", resolve=fake_dns(address))


def test_public_address_passes_and_target_connects_to_it() -> None:
    t = check_url("https://hooks.example.com:8443/in?a=1", resolve=fake_dns("93.184.216.34"))
    assert t.address == "93.184.216.34"
    assert t.connect_url() == "https://93.184.216.34:8443/in?a=1"
    assert t.host_header() == "hooks.example.com:8443"


def test_one_private_answer_among_public_ones_is_refused() -> None:
    with pytest.raises(UrlRefused):
        check_url("http://x.example.com/", resolve=fake_dns("93.184.216.34", "10.0.0.1"))


@pytest.mark.parametrize(
    "url", ["ftp://x.example.com/", "file:///etc/passwd", "gopher://x/", "//x.example.com/"]
)
def test_only_http_and_https(url: str) -> None:
    with pytest.raises(UrlRefused, match="http"):
        check_url(url, resolve=fake_dns("93.184.216.34"))


def test_credentials_in_url_refused() -> None:
    with pytest.raises(UrlRefused, match="credentials"):
        check_url("https://u:p@x.example.com/", resolve=fake_dns("93.184.216.34"))


def test_allow_list_admits_named_addresses_only() -> None:
    allow = parse_allow(["127.0.0.1", "10.0.0.0/8"])
    assert check_url("http://localhost:9000/h", allow=allow, resolve=fake_dns("127.0.0.1"))
    assert check_url("http://a/", allow=allow, resolve=fake_dns("10.9.9.9"))
    with pytest.raises(UrlRefused):
        check_url("http://a/", allow=allow, resolve=fake_dns("192.168.0.1"))
    with pytest.raises(UrlRefused):
        check_url("http://a/", allow=allow, resolve=fake_dns("127.0.0.2"))


def test_bad_allow_entry_named() -> None:
    with pytest.raises(ValueError, match="nonsense"):
        parse_allow(["nonsense"])


def test_refuse_unsafe_is_a_422_naming_the_field() -> None:
    with pytest.raises(Unprocessable) as info:
        refuse_unsafe("http://a/", field="notify[0].url", resolve=fake_dns("10.0.0.1"))
    assert info.value.status_code == 422
    assert info.value.detail[0]["loc"] == "notify[0].url"


def test_unresolvable_host_refused() -> None:
    with pytest.raises(UrlRefused, match="does not resolve"):
        check_url("http://no-such-host.invalid/")
