"""psql's aligned table layout, for the demo and the CLI: a result shown exactly as a DBA reads it
in psql (header, dashes joined by +, a "(n rows)" footer), from cells already turned into text."""
from __future__ import annotations


def aligned_table(headers: list[str], cells: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(values) -> str:
        return " " + " | ".join(v.ljust(w) for v, w in zip(values, widths))

    out = [line(headers), "-" + "-+-".join("-" * w for w in widths) + "-"]
    out += [line(row) for row in cells]
    out.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'})")
    return "\n".join(out)
