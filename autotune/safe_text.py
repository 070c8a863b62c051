"""Names made safe to show: a model's file, op and tensor names may carry control characters
(a terminal's escape sequences: ``\\x1b]0;...\\x07`` retitles it, ``\\x1b[2J`` clears it).
The CLI's consoles print every string through :func:`printable`; the HTML pages put names in
through :func:`html_text` (docs/reliability.md, "Hostile names")."""

from __future__ import annotations

import html
import re

__all__ = ["html_text", "printable"]

# C0 controls but tab and newline, DEL, the C1 controls (0x9b is a one-byte CSI), and the
# bytes of a file name that are not UTF-8 (read as lone surrogates: a raw 0x9b is one)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str, one_line: bool = False) -> str:
    """``text`` with each control character written as its Python escape (ESC as ``\\x1b``),
    a byte of a name that is not UTF-8 as ``\\x..``; ``one_line``: newlines and tabs too (an
    error line stays one line)."""
    pattern = _CONTROL_OR_NEWLINE if one_line else _CONTROL
    return pattern.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return repr(match.group())[1:-1]


def html_text(text: str) -> str:
    """``text`` as HTML text: markup characters escaped, control characters as in
    :func:`printable`."""
    return html.escape(printable(text, one_line=True))
