"""Table rendering the way the real tools do it.

``simple_table`` reproduces python-tabulate's ``tablefmt='simple'`` as sonic-utilities calls it:
columns two spaces apart, each at least header width + 2 (tabulate's MIN_PADDING with headers),
numbers right-aligned, strings aligned by ``stralign``.
"""

from __future__ import annotations


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def simple_table(headers: list[str], rows: list[list[str]], stralign: str = "left") -> str:
    cols = len(headers)
    widths, aligns = [], []
    for c in range(cols):
        cells = [r[c] for r in rows]
        widths.append(max([len(headers[c]) + 2, *(len(x) for x in cells)]))
        numeric = bool(cells) and all(_is_number(x) for x in cells)
        aligns.append("right" if numeric else stralign)

    def fmt(cell: str, c: int) -> str:
        return cell.rjust(widths[c]) if aligns[c] == "right" else cell.ljust(widths[c])

    lines = ["  ".join(fmt(h, c) for c, h in enumerate(headers)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(fmt(x, c) for c, x in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines)


def comma(n: int) -> str:
    """sonic-utilities ``format_number_with_comma``."""
    return f"{n:,}"


def click_no_such_command(command_path: str, name: str) -> str:
    """click 7.0's usage error for an unknown subcommand (sonic-utilities pins click==7.0:
    ``ctx.fail('No such command "%s".')``, shown as usage, help hint, error; exit 2)."""
    return (f"Usage: {command_path} [OPTIONS] COMMAND [ARGS]...\n"
            f'Try "{command_path} -h" for help.\n\n'
            f'Error: No such command "{name}".\n')
