"""psql's aligned table layout, for the demo and the CLI: a result shown exactly as a DBA reads it
in psql (header, dashes joined by +, a "(n rows)" footer), from cells already turned into text.
Widths are display columns (wcwidth, as psql counts them): a CJK character takes two, a combining
accent none."""
from __future__ import annotations

from wcwidth import wcswidth, wcwidth


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal; a character wcwidth cannot size (a control
    character) counts as one, as psql shows it escaped."""
    width = wcswidth(text)
    if width >= 0:
        return width
    return sum(w if (w := wcwidth(ch)) >= 0 else 1 for ch in text)


def aligned_table(headers: list[str], cells: list[list[str]]) -> str:
    widths = [max([display_width(h)] + [display_width(row[i]) for row in cells])
              for i, h in enumerate(headers)]

    def line(values) -> str:
        return " " + " | ".join(v + " " * (w - display_width(v)) for v, w in zip(values, widths))

    out = [line(headers), "-" + "-+-".join("-" * w for w in widths) + "-"]
    out += [line(row) for row in cells]
    out.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'})")
    return "\n".join(out)
