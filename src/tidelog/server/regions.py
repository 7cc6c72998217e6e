"""Record data a response carries as file regions (sent with ``sendfile`` by a plain transport, copied by
others), never as bytes pulled through Python."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.storage.fetch_data import FileRegion

__all__ = ["RegionList"]


class RegionList:
    """Several file regions sent back to back as one ``records`` field (``nbytes`` is their sum)."""

    __slots__ = ("nbytes", "regions")

    def __init__(self, regions: Sequence[FileRegion]) -> None:
        self.regions = list(regions)
        self.nbytes = sum(r.nbytes for r in regions)
