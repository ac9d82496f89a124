"""Price sources: what ``nodus catalog update`` fetches, and fetching one.

A source is a URL or a file (``[catalog] sources`` in config.toml, or a ``nodus catalog
update`` argument), optionally named ``NAME=URL``. Without a name the URL's path names
it: the folder of a ``vms.csv`` (``.../catalogs/v7/aws/vms.csv`` is ``aws``), else the
file name without its extension. For a SkyPilot file the name is the supplier.

:func:`fetch` reads a ``file://`` source from the disk (its modification time and size
stand for an ETag: an unchanged file is "not modified"). Of an http(s) source it makes one
conditional GET (``If-None-Match`` / ``If-Modified-Since`` from the previous fetch),
through the proxy the environment names (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``),
retrying with exponential backoff only what may pass: timeouts, connection errors (a
download cut short included), HTTP 5xx and 429. The whole of it, every attempt and pause
included, is bounded by one timeout (``[catalog] timeout``): each attempt may wait its
share of what is left, so a server that accepts and never answers is given up on in time
and is tried again. A body shorter than its ``Content-Length`` is never used. httpx is
imported here, lazily, only when something is fetched over the network: ``import
nodus_cli``, ``nodus validate`` and ``nodus plan`` never load it.
"""

from __future__ import annotations

import email.utils
import time
import urllib.request
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from nodus_cli import config
from nodus_cli.errors import NodusError
from nodus_cli.hardware import gpus
from nodus_cli.structs import struct
from nodus_cli.version import VERSION

if TYPE_CHECKING:
    import ssl

    import httpx

#: Seconds one source may take, every attempt and pause included.
DEFAULT_TIMEOUT = config.DEFAULT_CATALOG_TIMEOUT
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 0.5
#: The longest a server's Retry-After is honoured, seconds.
MAX_RETRY_AFTER = 30.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))
#: What ``nodus catalog`` calls the catalog that ships with nodus: no source has this name.
EMBEDDED_NAME = "embedded"


@struct(frozen=True)
class Source:
    name: str
    #: An http(s) URL or a ``file://`` URL.
    url: str

    @property
    def path(self) -> Path | None:
        """The file of a ``file://`` source (None for a URL)."""
        parts = urlsplit(self.url)
        if parts.scheme.lower() != "file":
            return None
        return Path(urllib.request.url2pathname(parts.path))

    @property
    def where(self) -> str:
        """Where it is, as a user would write it: the URL, or the file's path."""
        path = self.path
        return str(path) if path is not None else self.url

    def __str__(self) -> str:
        return f"{self.name} ({self.where})"


class SourceError(NodusError):
    """A source that could not be used; names it."""

    def __init__(self, source: Source | None, message: str, hint: str | None = None) -> None:
        super().__init__(message, exit_code=1, hint=hint)
        self.source = source


def name_from_url(url: str) -> str | None:
    """The name a URL's path gives a source (None when it gives none)."""
    parts = [unquote(p) for p in urlsplit(url).path.split("/") if p]
    if not parts:
        return None
    last = parts[-1]
    if last.lower() == "vms.csv" and len(parts) >= 2:
        candidate = parts[-2]
    else:
        candidate = last.rsplit(".", 1)[0] if "." in last else last
    candidate = candidate.strip().lower()
    return candidate or None


def resolve(entries: list[config.CatalogSource]) -> list[Source]:
    """Named sources, every name unique; NodusError (exit 2) with what to write otherwise."""
    found: list[Source] = []
    seen: dict[str, str] = {}
    for entry in entries:
        name = entry.name or name_from_url(entry.url)
        if not name:
            raise NodusError(
                f"{entry.url}: the URL does not name the supplier",
                exit_code=2,
                hint=f"name it: NAME={entry.url}",
            )
        shown = entry.written or entry.url
        if not entry.name and _downloaded_vms_csv(entry.url, name):
            raise NodusError(
                f"{shown}: a SkyPilot vms.csv in a folder named {name!r} does not say whose "
                "prices it holds (a URL's path does: .../catalogs/v7/aws/vms.csv is aws)",
                exit_code=2,
                hint=f"name its supplier: aws={shown}",
            )
        if name == EMBEDDED_NAME:
            raise NodusError(
                f"{entry}: a source may not be named {EMBEDDED_NAME!r} (the catalog that ships "
                "with nodus is)",
                exit_code=2,
                hint=f"name it otherwise: NAME={entry.written or entry.url}",
            )
        if name in seen:
            raise NodusError(
                f"two sources are named {name!r}: {seen[name]} and {entry.url}",
                exit_code=2,
                hint="give each its own name: NAME=URL",
            )
        seen[name] = entry.url
        found.append(Source(name, entry.url))
    return found


def _downloaded_vms_csv(url: str, name: str) -> bool:
    """A ``file://`` source named ``vms.csv`` whose folder is not a supplier's name (a
    download in ``~/Downloads``): its name would be the folder's."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file" or not parts.path.lower().endswith("/vms.csv"):
        return False
    return not gpus.table().is_supplier(name)


@struct(frozen=True)
class Validators:
    """What the previous fetch of a source answered, for a conditional request."""

    etag: str | None = None
    last_modified: str | None = None


@struct(frozen=True)
class Fetched:
    #: 200 (``body`` holds the file) or 304 (not modified: keep the previous rows).
    status: int
    body: bytes
    etag: str | None
    last_modified: str | None
    attempts: int


class FetchProgress(Protocol):
    """How a fetch reports itself (a progress bar, plain lines, or nothing)."""

    def start(self, source: Source, total: int | None) -> None: ...
    def advance(self, source: Source, received: int) -> None: ...
    def retry(self, source: Source, attempt: int, reason: str, delay: float) -> None: ...


class Silent:
    """Progress that shows nothing: of a fetch, and of a whole update (``done``,
    ``changing``)."""

    def start(self, source: Source, total: int | None) -> None:
        pass

    def advance(self, source: Source, received: int) -> None:
        pass

    def retry(self, source: Source, attempt: int, reason: str, delay: float) -> None:
        pass

    def done(self, result: object) -> None:
        pass

    def changing(self, changes: object) -> None:
        pass


class _Retry(Exception):
    """A failure worth another attempt."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def proxy_for(url: str) -> str | None:
    """The proxy the environment sends ``url`` through (for messages), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    chosen = proxies.get(parts.scheme) or proxies.get("all")
    if not chosen:
        return None
    host = parts.hostname or ""
    try:
        if urllib.request.proxy_bypass(host):
            return None
    except (OSError, ValueError):
        return chosen
    return chosen


def client() -> httpx.Client:
    """An HTTP client that honours the proxy environment and follows redirects (each
    request is given its own timeout by :func:`fetch`)."""
    import httpx

    return httpx.Client(
        timeout=httpx.Timeout(DEFAULT_TIMEOUT),
        verify=_tls(),
        follow_redirects=True,
        trust_env=True,
        headers={"User-Agent": f"nodus/{VERSION}", "Accept-Encoding": "gzip, deflate"},
    )


@cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of every client: httpx's own (its CA bundle, or SSL_CERT_FILE /
    SSL_CERT_DIR), made once per process: loading the CA bundle costs more than fetching
    a large price file from a nearby server (benchmarks/README.md)."""
    import httpx

    return httpx.create_ssl_context(trust_env=True)


def fetch(
    http: httpx.Client | None,
    source: Source,
    previous: Validators | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    backoff: float = DEFAULT_BACKOFF,
    progress: FetchProgress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Fetched:
    """Read ``source`` (conditionally when ``previous`` has validators); SourceError naming
    the source when it fails, after ``retries`` more attempts if it may pass, or when
    ``timeout`` seconds (every attempt and pause included) are up. ``http`` may be None for
    a ``file://`` source."""
    shown = progress or Silent()
    if source.path is not None:
        return _read_file(source, source.path, previous, shown)
    import httpx

    assert http is not None, "an http(s) source needs a client"
    headers: dict[str, str] = {}
    if previous is not None:
        if previous.etag:
            headers["If-None-Match"] = previous.etag
        if previous.last_modified:
            headers["If-Modified-Since"] = previous.last_modified
    attempts = max(0, retries) + 1
    deadline = time.monotonic() + timeout
    last = ""
    tried = 0
    for attempt in range(1, attempts + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        tried = attempt
        # This attempt waits its share of what is left, so a server that never answers
        # leaves time for the next attempts.
        wait = left / (attempts - attempt + 1)
        try:
            return _once(http, source, headers, attempt, shown, wait, deadline)
        except _Retry as exc:
            last = exc.reason
            if attempt == attempts:
                break
            delay = backoff * 2 ** (attempt - 1)
            if exc.retry_after is not None:
                delay = max(delay, min(exc.retry_after, MAX_RETRY_AFTER))
            if time.monotonic() + delay >= deadline:
                break  # no time left for another attempt
            shown.retry(source, attempt, exc.reason, delay)
            sleep(delay)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # a bad URL, a TLS error: final
            raise SourceError(
                source, f"source {source} failed: {_describe(exc, source)}", hint=_hint(source)
            ) from None
    tries = f"{tried} attempt{'' if tried == 1 else 's'}"
    if time.monotonic() + 0.001 >= deadline or tried < attempts:
        raise SourceError(
            source,
            f"source {source} gave up after {tries} in {timeout:g} s, the time a source may "
            f"take: {last}",
            hint=f"{_hint(source)}; a slow server may be given longer with `timeout = "
            f"{max(60, 2 * timeout):g}` in [catalog] of config.toml, or --timeout",
        )
    raise SourceError(source, f"source {source} failed after {tries}: {last}", hint=_hint(source))


def _read_file(
    source: Source, path: Path, previous: Validators | None, progress: FetchProgress
) -> Fetched:
    """A ``file://`` source; "not modified" (304) when its modification time and size are
    what the previous update saw."""
    try:
        info = path.stat()
        tag = f'"{info.st_mtime_ns:x}-{info.st_size:x}"'
        if previous is not None and previous.etag == tag:
            return Fetched(304, b"", tag, None, 1)
        progress.start(source, info.st_size)
        body = path.read_bytes()
    except OSError as exc:
        raise SourceError(
            source,
            f"source {source} cannot be read: {exc.strerror or exc}",
            hint="check the path (a relative path in config.toml is from that file's folder); "
            "the catalog in use was left as it was",
        ) from None
    progress.advance(source, len(body))
    return Fetched(200, body, tag, None, 1)


def _once(
    http: httpx.Client,
    source: Source,
    headers: dict[str, str],
    attempt: int,
    progress: FetchProgress,
    wait: float,
    deadline: float,
) -> Fetched:
    import httpx

    received = 0
    expected: int | None = None
    try:
        with http.stream(
            "GET", source.url, headers=headers, timeout=httpx.Timeout(wait)
        ) as response:
            status = response.status_code
            if status == 304:
                return Fetched(
                    304,
                    b"",
                    response.headers.get("ETag"),
                    response.headers.get("Last-Modified"),
                    attempt,
                )
            if status in RETRY_STATUSES:
                raise _Retry(
                    f"HTTP {status} {response.reason_phrase}".rstrip(),
                    _retry_after(response.headers.get("Retry-After")),
                )
            if status != 200:
                raise SourceError(
                    source,
                    f"source {source} answered HTTP {status} {response.reason_phrase}".rstrip(),
                    hint=_hint(source),
                )
            expected = _content_length(response)
            progress.start(source, expected)
            chunks = []
            for chunk in response.iter_raw():
                chunks.append(chunk)
                received += len(chunk)
                progress.advance(source, received)
                if time.monotonic() > deadline:
                    raise _Retry(f"the download was not done in time ({received:,} bytes)")
            raw = b"".join(chunks)
            if expected is not None and received != expected:
                raise _Retry(_partial(received, expected))
            body = _decode_body(response, raw)
            return Fetched(
                200,
                body,
                response.headers.get("ETag"),
                response.headers.get("Last-Modified"),
                attempt,
            )
    except httpx.TimeoutException as exc:
        kind = "connecting" if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout) else ""
        detail = f" while {kind}" if kind else ""  # else: the server took the request
        raise _Retry(f"no answer{detail} within {wait:.3g} s") from None
    except httpx.RemoteProtocolError as exc:
        if expected is not None and received < expected:
            raise _Retry(_partial(received, expected)) from None
        raise _Retry(f"the connection broke: {exc}") from None
    except (httpx.NetworkError, httpx.ProxyError) as exc:
        if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # another attempt cannot help
            raise SourceError(
                source,
                f"source {source} failed: {_describe(exc, source)}",
                hint="the server's TLS certificate is not trusted here; if a proxy or your "
                "organisation signs it, point SSL_CERT_FILE at that CA bundle",
            ) from None
        raise _Retry(_describe(exc, source)) from None


def _decode_body(response: httpx.Response, raw: bytes) -> bytes:
    """The body with its Content-Encoding (gzip, deflate) undone."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(raw, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(raw)
            except zlib.error:
                return zlib.decompress(raw, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise _Retry(f"the {encoding} body does not decompress: {exc}") from None
    return raw  # an encoding we did not ask for: the parser will say if it is not a CSV


def _content_length(response: httpx.Response) -> int | None:
    text = response.headers.get("Content-Length")
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _partial(received: int, expected: int) -> str:
    return (
        f"partial download: received {received:,} of the {expected:,} bytes its "
        "Content-Length announces"
    )


def _retry_after(text: str | None) -> float | None:
    if not text:
        return None
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _describe(exc: Exception, source: Source) -> str:
    text = str(exc) or type(exc).__name__
    proxy = proxy_for(source.url)
    via = f" (through the proxy {proxy} named by the environment)" if proxy else ""
    return f"{text}{via}"


def _hint(source: Source) -> str:
    proxy = proxy_for(source.url)
    extra = (
        f"; it is fetched through the proxy {proxy}: check it, or list the host in NO_PROXY"
        if proxy
        else ""
    )
    return (
        f"check that {source.url} answers (e.g. curl -I), then run `nodus catalog update` "
        f"again; the catalog in use was left as it was{extra}"
    )
