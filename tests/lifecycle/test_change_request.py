"""The change request: the Markdown is read by a CommonMark parser we did not write
(markdown-it-py, GFM tables on) and must carry the same tables as our HTML; commands and
rollback commands are exact and inverse."""

from __future__ import annotations

from html.parser import HTMLParser

from tuner.lifecycle.change_request import ChangeRequest, Evidence, to_html, to_markdown
from tuner.settings import KNOBS

BASE = {k: KNOBS[k].default for k in KNOBS}
WIN = {**BASE, "kmin_bytes": 200_000, "kmax_bytes": 800_000, "pmax_percent": 20,
       "rpg_time_reset": 150}
CR = ChangeRequest(
    study="moe-7", experiment="moe-mix", description="AlltoAll | storage", values=WIN,
    baseline=BASE, switches=["leaf0"], nics=["host0/mlx5_0"], group="pod1",
    evidence=Evidence(improvement_percent=41.5, ci_low_percent=30.2, ci_high_percent=52.9,
                      pairs=5, busbw_gbps=(10.1, 14.2), p99_us=(420.0, 11.0),
                      pause_us_per_s=(8000.0, 35.0)))


class _Cells(HTMLParser):
    """Table cells of an HTML page, as rows of text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.open: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag not in ("meta", "br", "hr"):  # void elements have no end tag
            self.open.append(tag)
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (self.open, tag)  # well nested
        self.open.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> list[list[str]]:
    p = _Cells()
    p.feed(page)
    return p.rows


def test_markdown_and_html_carry_the_same_tables() -> None:
    import markdown_it as mdit
    md_html = mdit.MarkdownIt("commonmark").enable("table").render(to_markdown(CR))
    ours = to_html(CR)
    assert _tables(md_html) == _tables(ours)
    rows = _tables(ours)
    assert ["kmin_bytes", "switch", "bytes", "1048576", "200000"] in rows
    assert ["rpg_time_reset", "nic", "us", "300", "150"] in rows
    assert ["probe p99 latency (us)", "420", "11"] in rows
    assert len([r for r in rows if r and r[0] in WIN]) == 4  # only what changes


def test_evidence_commands_and_rollback() -> None:
    md = to_markdown(CR)
    assert "Paired change of busbw: +41.5 % (95% interval +30.2 % to +52.9 %, 5 pairs" in md
    apply_at, back_at = md.index("## Commands"), md.index("## Rollback")
    # export's generators: the host-facing ports get their own profile, and get it back
    apply, back = md[apply_at:back_at], md[back_at:]
    assert "green_min_threshold 200000 green_max_threshold 800000 green_drop_probability 20" \
        in apply and "wred_profile ECNTUNE_CANARY; done" in apply
    assert "wred_profile AZURE_LOSSLESS; done" in back and "DEL 'WRED_PROFILE|ECNTUNE_CANARY'" \
        in back and "green_min_threshold" not in back
    assert "roce_rp/rpg_time_reset" in md[apply_at:back_at]
    assert "echo 300 > /sys/class/net/$IF/ecn/roce_rp/rpg_time_reset" in md[back_at:]
    assert "ecntune verify pod1" in md
    assert "AlltoAll \\| storage" not in md  # paragraphs are not table cells: no escaping


def test_without_evidence_the_request_says_so() -> None:
    md = to_markdown(CR.model_copy(update={"evidence": None}))
    assert "not evidence for a change" in md
    assert "<script>" not in to_html(CR.model_copy(update={"study": "<script>"}))
