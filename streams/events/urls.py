"""One canonical form per page URL, applied at every entrance (docs/streaming.md "URLs").

A page is one key in Redis, one Kafka key (its host) and one token bucket, so two spellings
of one URL must become the same string before anything else looks at them.  The parsing
and normalisation are yarl's (the URL library of aiohttp, which the project already uses):
RFC 3986 Sec. 6.2.2 syntax-based normalisation, plus scheme-based normalisation
(Sec. 6.2.3) and the rules a crawler needs:

* scheme and host lower-cased; an internationalised host in its IDNA ASCII form
  (``bücher.de`` -> ``xn--bcher-kva.de``); a trailing dot of the host dropped
  (``example.com.`` names the same host);
* the default port dropped (``:80`` for http, ``:443`` for https), others kept;
* credentials (``user:pw@``) dropped: they are never stored nor sent in an order;
* dot segments removed (``/a/./b/../c`` -> ``/a/c``), percent-encoding normalised
  (``%61`` -> ``a``, hex digits upper-cased), an empty path written ``/``;
* the fragment dropped (never sent to the server).

The query is kept as given (order and repeats): sorting it, as some crawlers do, can name
another resource on sites that read parameters in order.  ``canonical_url`` is idempotent
(tests/unit/test_urls.py checks it on generated URLs).
"""

from __future__ import annotations

import functools
import re

from yarl import URL

__all__ = [
    "MAX_URL_BYTES",
    "canonical_host",
    "canonical_url",
    "host_of_canonical",
    "in_scope",
    "parse_canonical",
    "simple_canonical",
    "url_host",
]

MAX_URL_BYTES = 2048
#: the longest host name, in its ASCII (IDNA) form
MAX_HOST_CHARS = 253
_SPACE_RE = re.compile(r"\s")  # the same characters as str.isspace (Py_UNICODE_ISSPACE)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
#: URLs already in canonical form, recognised without parsing (most of what producers send):
#: lower-case scheme and ASCII host name, no port, credentials or fragment, a path and
#: query of unreserved characters only; :func:`simple_canonical` also refuses ``//``, dot
#: segments and labels of digits alone (an IP literal, which yarl rewrites).  Each one is
#: its own canonical form (tests/unit/test_urls.py compares them with yarl's).
_SIMPLE_RE = re.compile(
    rf"https?://((?:{_LABEL}\.)*{_LABEL})(/[A-Za-z0-9._~/-]*)(\?[A-Za-z0-9._~=&-]+)?")
_DOT_SEGMENT_RE = re.compile(r"//|/\.\.?(?:/|$)")


def canonical_host(host: str) -> str:
    """A host name as :func:`canonical_url` writes it (IDNA ASCII, lower case, no trailing
    dot); ``ValueError`` if it is not a host name.  A name is at most
    :data:`MAX_HOST_CHARS` characters in its ASCII form (RFC 1035 Sec. 2.3.4 with RFC 1123
    Sec. 2.1) and an IDNA encoding is never shorter than the name it encodes, so a longer
    string is refused before it is encoded (Python's IDNA codec takes seconds on a
    megabyte-long Kafka key)."""
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]  # an IPv6 literal: the key is its compressed form, without brackets
    h = h.rstrip(".")
    if not h:
        raise ValueError("empty host")
    if len(h) > MAX_HOST_CHARS:
        raise ValueError(f"host name longer than {MAX_HOST_CHARS} characters: {host[:100]!r}")
    try:
        raw = URL.build(scheme="http", host=h).raw_host
    except (ValueError, TypeError, UnicodeError) as exc:
        raise ValueError(f"not a host name: {host[:100]!r} ({exc})") from None
    if not raw:
        raise ValueError(f"not a host name: {host[:100]!r}")
    if len(raw) > MAX_HOST_CHARS:
        raise ValueError(f"host name longer than {MAX_HOST_CHARS} characters once encoded: "
                         f"{host[:100]!r}")
    return raw.lower()


def simple_canonical(url: str) -> tuple[str, str] | None:
    """``(url, host)`` when ``url`` is recognised as canonical already (:data:`_SIMPLE_RE`:
    no IDNA ``xn--`` label nor one of digits alone, a host of at most 253 characters),
    else None: :func:`canonical_url` then parses it with yarl."""
    m = _SIMPLE_RE.fullmatch(url)
    if (m is None or len(url) > MAX_URL_BYTES or len(m[1]) > MAX_HOST_CHARS or "xn--" in m[1]
            or _DOT_SEGMENT_RE.search(m[2])
            or any(label.isdigit() for label in m[1].split("."))):
        return None
    return url, m[1]


@functools.lru_cache(maxsize=1 << 16)
def _canonical(url: str) -> tuple[str, str]:
    return simple_canonical(url) or parse_canonical(url)


def parse_canonical(url: str) -> tuple[str, str]:
    """``(canonical url, host)`` by yarl's parsing (module docstring); ``ValueError``."""
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise ValueError(f"url longer than {MAX_URL_BYTES} bytes")
    if _SPACE_RE.search(url):
        raise ValueError("url contains whitespace")
    try:
        u = URL(url)
        scheme = u.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"url scheme must be http or https, not {u.scheme!r}")
        raw_host = u.raw_host
        if not raw_host:
            raise ValueError("url has no host")
        host = raw_host.lower().rstrip(".")
        if not host:
            raise ValueError("url has no host")
        if len(host) > MAX_HOST_CHARS:
            raise ValueError(f"url host longer than {MAX_HOST_CHARS} characters")
        port = u.explicit_port
        if port is not None and port == _DEFAULT_PORTS[scheme]:
            port = None
        out = URL.build(scheme=scheme, host=f"[{host}]" if ":" in host else host, port=port,
                        path=u.raw_path or "/",
                        query_string=u.raw_query_string, encoded=True)
        text = str(out)
    except UnicodeError as exc:  # a host that is not IDNA (a ValueError, said plainly)
        raise ValueError(f"url does not parse: {exc}") from None
    except TypeError as exc:
        raise ValueError(f"url does not parse: {exc}") from None
    if "?" in url.split("#", 1)[0] and not u.raw_query_string:
        text += "?"  # "a?" and "a" may differ for a server: keep what was written
    if len(text.encode()) > MAX_URL_BYTES:
        raise ValueError(f"url longer than {MAX_URL_BYTES} bytes once normalised")
    return text, host


def canonical_url(url: str) -> str:
    """The canonical form of an absolute http(s) URL (module docstring); ``ValueError``
    with the reason if it is not one (no host, other scheme, whitespace, over
    :data:`MAX_URL_BYTES`, a host that is not a valid name)."""
    return _canonical(url)[0]


def host_of_canonical(url: str) -> str:
    """The host of a URL already in canonical form (what :func:`canonical_url` returns), read
    off its text: ``scheme://host[:port]/...``, an IPv6 host without its brackets; the same
    as :func:`url_host` of it (tests/unit/test_urls.py), without parsing it again.  A
    validated event's host is read this way: ``url_host`` parses the url again whenever its
    cache (65,536 urls) has dropped it, as it does once the pages outnumber it."""
    authority = url.split("/", 3)[2]
    if authority.startswith("["):
        return authority[1 : authority.index("]")]
    return authority.rpartition(":")[0] if ":" in authority else authority


def url_host(url: str) -> str:
    """The canonical host of an http(s) URL (no port): the Kafka key and the Redis hash
    tag; ``ValueError`` if it is not an absolute http(s) URL."""
    return _canonical(url)[1]


def in_scope(url: str, scope: str) -> bool:
    """Whether ``url`` lies under ``scope``, a canonical URL ending in ``/`` (a key file's
    or a sitemap's folder): the same scheme, host and port, and a path under the folder,
    both compared in canonical form (so ``/blog/../admin`` is not under ``/blog/``)."""
    try:
        return canonical_url(url).startswith(canonical_url(scope))
    except ValueError:
        return False
