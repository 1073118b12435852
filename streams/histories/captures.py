"""From archive captures' digests to "changed since the URL's previous capture".

:class:`DigestMemory` keeps, per URL, the time and digest of its latest capture, both
compacted: the URL and the digest are each reduced to a 64-bit BLAKE2b hash (a Python
``int``), so the memory is one dict entry per *distinct URL* (about 200 bytes: the entry,
the key and a ``(float, int)`` tuple), whatever the URLs' and digests' lengths and however
many captures the file holds.  Two different digests of one URL collide with probability
``2**-64`` (a change then reads as unchanged).
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["DigestMemory", "hash64"]


def hash64(text: str) -> int:
    """A 64-bit hash of ``text`` (BLAKE2b, 8-byte digest)."""
    return int.from_bytes(blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


class DigestMemory:
    """Latest ``(time_s, digest hash)`` per URL hash: whether a capture changed."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def observe(self, url: str, time_s: float, digest: str) -> bool | str | None:
        """``changed`` of a capture (``None``: the URL's first), or why it is refused:
        a capture older than the URL's previous one (captures of a URL must come in
        time order, as CDX files sort them and crawlers write WARCs)."""
        key = hash64(url)
        d = hash64(digest)
        prev = self._last.get(key)
        if prev is not None and time_s < prev[0]:
            return f"capture at {time_s:.0f} s precedes the URL's previous one at {prev[0]:.0f} s"
        self._last[key] = (time_s, d)
        if prev is None:
            return None
        return prev[1] != d
