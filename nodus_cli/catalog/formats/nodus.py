"""nodus's own CSV format: the SPEC section 4 columns, one configuration per row.

The first line names the columns, in any order, with any case and spaces around them
(:data:`~nodus_cli.catalog.rows.REQUIRED_COLUMNS`, plus the optional ``disk_gb`` and
``host_size``); other columns are ignored. Every row names its own supplier, so the
source's name is not used. Each data row is one configuration, checked by the row rules
like any other: nothing is refused here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from nodus_cli.catalog.formats import Converted, FormatError
from nodus_cli.catalog.rows import COLUMNS, REQUIRED_COLUMNS
from nodus_cli.structs import struct

__all__ = ["FORMAT", "NodusFormat", "missing_columns"]


def _names(header: Sequence[str]) -> list[str]:
    return [h.strip().lower().lstrip("\ufeff") for h in header]


def missing_columns(header: Sequence[str]) -> list[str]:
    """The required columns a header lacks."""
    names = set(_names(header))
    return [c for c in REQUIRED_COLUMNS if c not in names]


@struct(frozen=True)
class NodusFormat:
    name: str = "nodus"

    def detect(self, header: Sequence[str]) -> bool:
        return bool(header) and not missing_columns(header)

    def convert(self, text: str, supplier: str) -> Converted:
        reader = csv.reader(io.StringIO(text, newline=""))
        out = Converted(self.name, "nodus CSV")
        rows_read = 0
        try:
            header = next(reader, [])
            missing = missing_columns(header)
            if missing:
                what = "is empty" if not header else f"lacks the column(s) {', '.join(missing)}"
                raise FormatError(f"the catalog {what}", line=1)
            index = {name: i for i, name in enumerate(_names(header))}
            width = len(header)
            picks = [index.get(c) for c in COLUMNS]  # None: an optional column it lacks
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue  # a blank line
                if len(cells) < width:
                    cells += [""] * (width - len(cells))
                rows_read += 1
                out.add([cells[i] if i is not None else "" for i in picks], (reader.line_num,))
        except csv.Error as exc:
            raise FormatError(
                f"not a readable CSV file at line {reader.line_num}: {exc}", line=reader.line_num
            ) from None
        out.rows_read = rows_read
        return out


FORMAT = NodusFormat()
