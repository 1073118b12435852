"""A change log from Debian package changelogs (``/usr/share/doc/*/changelog.Debian.gz``).

Each installed package is a page whose content changes at each upload: every changelog
entry's trailer line `` -- Name <email>  Thu, 01 Jan 2020 12:00:00 +0000`` is a change at
that date (RFC 5322).  Real, public, and on every Debian machine: a change history that was
not drawn from recrawl's own model (uploads come in bursts around releases, many packages
go quiet for years)::

    python -m streams.histories.debian /usr/share/doc var/debian.jsonl --since 2021-01-01

Only uploads at or after ``--since`` (UTC) are written; every package is declared, so a
package without an upload since then is a page that never changes.
"""

from __future__ import annotations

import argparse
import calendar
import email.utils
import gzip
import json
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["main", "upload_times", "write_debian_changes"]

_TRAILER = re.compile(r"^ -- .+?>\s+(.+)$")


def upload_times(changelog: Path) -> Iterator[float]:
    """Unix times of the uploads in one ``changelog.Debian.gz`` (unreadable dates skipped)."""
    with gzip.open(changelog, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _TRAILER.match(line.rstrip("\n"))
            if not m:
                continue
            parsed = email.utils.parsedate_tz(m.group(1).strip())
            if parsed is None:
                continue
            yield float(email.utils.mktime_tz(parsed))


def write_debian_changes(doc_root: Path, out: Path, since_s: float) -> tuple[int, int]:
    """Write the change log; returns ``(pages, changes)``."""
    pages = changes = 0
    with open(out, "w", encoding="utf-8") as f:
        for cl in sorted(doc_root.glob("*/changelog.Debian.gz")):
            url = f"https://packages.debian.org/{cl.parent.name}"
            f.write(json.dumps({"url": url, "page": True}) + "\n")
            pages += 1
            for t in sorted(set(upload_times(cl))):
                if t >= since_s:
                    f.write(json.dumps({"url": url, "time": t}) + "\n")
                    changes += 1
    return pages, changes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streams.histories.debian",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("doc_root", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--since", default="2021-01-01", help="first day kept, YYYY-MM-DD (UTC)")
    a = p.parse_args(argv)
    since = float(calendar.timegm(time.strptime(a.since, "%Y-%m-%d")))
    n_pages, n_changes = write_debian_changes(a.doc_root, a.out, since)
    print(f"{a.out}: {n_pages} pages, {n_changes} changes since {a.since}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
