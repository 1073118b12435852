"""Writers of the four history formats (for examples, tests and ``recrawl`` exports).

Each takes per-URL observations, ``{url: [(time_s, changed), ...]}`` in time order (the
first ``changed`` is ignored for captures: nothing precedes it), and writes what
:func:`~streams.histories.read_history` reads back to the same observations.  Capture
formats get a payload per URL version (the version counts the changes so far), so the
digest changes exactly when the page did.  CDX timestamps and WARC dates keep whole
seconds.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from streams.histories.kolobov import DAY_S, HISTORY, IMPORTANCE, URLS

__all__ = ["write_cdx", "write_changes", "write_kolobov", "write_ping_log", "write_warc"]

Observations = Mapping[str, Sequence[tuple[float, bool | None]]]


def write_changes(path: Path, changes: Mapping[str, Iterable[float]],
                  importance: Mapping[str, float] | None = None) -> None:
    """A change log: a page line per URL of ``changes``, then its change times."""
    with open(path, "w", encoding="utf-8") as f:
        for url, times in changes.items():
            page: dict[str, object] = {"url": url, "page": True}
            if importance is not None and url in importance:
                page["importance"] = importance[url]
            f.write(json.dumps(page) + "\n")
            for t in times:
                f.write(json.dumps({"url": url, "time": t}) + "\n")


def write_ping_log(path: Path, pings: Mapping[str, Iterable[float]],
                   source: Mapping[str, str] | None = None) -> None:
    """A ping log (:mod:`streams.histories.pings`): each URL's ping times, with its
    ``source`` where given (else none: the reader's default), in time order over all URLs."""
    rows = sorted((float(t), url) for url, times in pings.items() for t in times)
    with open(path, "w", encoding="utf-8") as f:
        for t, url in rows:
            line: dict[str, object] = {"url": url, "time": t}
            if source is not None and url in source:
                line["source"] = source[url]
            f.write(json.dumps(line) + "\n")


def _versions(obs: Sequence[tuple[float, bool | None]]) -> list[tuple[int, int]]:
    """``(whole second, version)`` of each capture."""
    out = []
    v = 0
    for k, (t, changed) in enumerate(obs):
        if k and changed:
            v += 1
        out.append((round(t), v))
    return out


def _payload(url: str, version: int) -> bytes:
    return f"{url} version {version}\n".encode()


def _stamp(t: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(t))


def write_cdx(path: Path, obs: Observations, *, cdxj: bool = False) -> None:
    """A CDX (11 fields, with header) or CDXJ index of the captures."""
    with open(path, "w", encoding="utf-8") as f:
        if not cdxj:
            f.write(" CDX N b a m s k r M S V g\n")
        for url, o in obs.items():
            for t, v in _versions(o):
                digest = hashlib.sha1(_payload(url, v)).hexdigest().upper()
                if cdxj:
                    block = {"url": url, "digest": digest, "status": "200", "mime": "text/html"}
                    f.write(f"{url} {_stamp(t)} {json.dumps(block)}\n")
                else:
                    f.write(f"{url} {_stamp(t)} {url} text/html 200 {digest} - - 0 0 x.warc\n")


def write_warc(path: Path, obs: Observations) -> None:
    """A gzipped WARC of ``response`` records, in time order over all URLs."""
    from io import BytesIO

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rows = sorted((t, url, v) for url, o in obs.items() for t, v in _versions(o))
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=str(path).endswith(".gz"))
        for t, url, v in rows:
            body = _payload(url, v)
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"),
                                               ("Content-Length", str(len(body)))],
                                    protocol="HTTP/1.1")
            date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
            rec = writer.create_warc_record(url, "response", payload=BytesIO(body),
                                            http_headers=http,
                                            warc_headers_dict={"WARC-Date": date})
            writer.write_record(rec)


def write_kolobov(folder: Path, obs: Observations,
                  importance: Mapping[str, float] | None = None) -> None:
    """The three Kolobov et al. files (times as days since 0, URL_IDs 0, 1, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (open(folder / URLS, "w") as fu, open(folder / IMPORTANCE, "w") as fi,
          open(folder / HISTORY, "w") as fh):
        for key, (url, o) in enumerate(obs.items()):
            fu.write(f"{url}\t{key}\t0\n")
            fi.write(f"{key}\t{(importance or {}).get(url, 1.0)!r}\n")
            days = [t / DAY_S for t, _ in o]
            pairs = [[days[k] - days[k - 1], int(bool(o[k][1]))] for k in range(1, len(o))]
            fh.write(f"{key}\t{days[0]!r}\t{json.dumps(pairs)}\n")
