"""A report as a list of plain blocks, and the two writers that turn it into Markdown and self-contained HTML.

:mod:`bakeoff.report.render` decides *what* the report says; this module only decides how it looks, so the
Markdown and the HTML can never say different things.
"""

from __future__ import annotations

import base64
import dataclasses
import html
from collections.abc import Sequence


@dataclasses.dataclass
class Heading:
    level: int
    text: str


@dataclasses.dataclass
class Para:
    text: str
    kind: str = ""  # "verdict" | "warning" | "env" | "" (plain)


@dataclasses.dataclass
class Facts:
    """A list of labelled lines: ``- **Data:** shipped ...``."""

    items: list[tuple[str, str]]  # (label, text)


@dataclasses.dataclass
class Code:
    """Lines to copy as they are (commands), in a fenced block / ``<pre>``."""

    lines: list[str]


@dataclasses.dataclass
class Table:
    header: list[str]
    rows: list[list[str]]  # a cell's "\n" is a line break in HTML, a space in Markdown
    notes: list[str] = dataclasses.field(default_factory=list)  # footnotes printed under the table
    align: str = ""  # "l" or "r" per column; default: the first column left, the others (numbers) right
    classes: list[list[str]] | None = None  # per cell, the HTML classes beside its alignment (the card's colours)

    def alignment(self) -> str:
        return self.align or "l" + "r" * (len(self.header) - 1)


@dataclasses.dataclass
class Image:
    filename: str  # the PNG written next to report.md, which Markdown links to
    alt: str
    png: bytes  # embedded into the HTML


@dataclasses.dataclass
class Section:
    """Blocks that belong together, ``<section id=...>`` in HTML (the decision card); as they are in Markdown."""

    id: str
    blocks: list[Block]


@dataclasses.dataclass
class Details:
    """Blocks folded away under a one-line summary (the environment): ``<details>`` in both writers."""

    summary: str
    blocks: list[Block]


Block = Heading | Para | Facts | Code | Table | Image | Section | Details

_PARA_PREFIX = {"verdict": "Verdict:", "warning": "Not like with like:", "recommendation": "Recommendation:",
                "decides": "What decides it:"}

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; max-width: 76rem;
       margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; } h3 { margin-top: 1.4rem; }
p.verdict { font-size: 1.08rem; background: #f3f7ee; border-left: 4px solid #5a8f29; padding: .6rem .9rem; }
p.warning { background: #fdf3e7; border-left: 4px solid #c77c02; padding: .6rem .9rem; }
p.env { color: #555; font-size: .9rem; overflow-wrap: anywhere; }
ul.facts { padding-left: 1.2rem; } pre { background: #f6f6f6; padding: .5rem .8rem; overflow-x: auto; }
div.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: .5rem 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .25rem .55rem; text-align: right; vertical-align: top; }
th.l, td.l { text-align: left; }
th { background: #f5f5f5; }
ol.notes, ul.notes { font-size: .85rem; color: #555; margin-top: .2rem; }
img { max-width: 100%; height: auto; }
details { margin: 1rem 0; } summary { cursor: pointer; font-weight: 600; }
#decision h2 { margin-top: 1rem; }
#decision p.recommendation { font-size: 1.15rem; background: #eef4fb; border-left: 4px solid #2c6fb7;
                             padding: .6rem .9rem; margin-bottom: .3rem; }
#decision p.decides { margin-top: .3rem; }
#decision td:not(.l) { white-space: nowrap; }
td.better { background: #dcefd0; color: #1d4d05; } td.worse { background: #f8d9d6; color: #7a1610; }
td.equal { background: #e3ecf6; color: #1f3b5c; } td.unsettled { background: #f1f1f1; color: #444; }
td.leader { font-weight: 600; }
tr td.group { border-top: 2px solid #999; }
@media (max-width: 40rem) {
  body { margin: 1rem auto; padding: 0 .6rem; font-size: 14px; }
  th, td { padding: .2rem .35rem; }
}
@media print {
  body { max-width: none; margin: 0; font-size: 10pt; }
  div.scroll { overflow: visible; }
  td.better, td.worse, td.equal, td.unsettled, th { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  h2, h3 { break-after: avoid; } table, img, p.verdict { break-inside: avoid; }
}
@media print { details::details-content { content-visibility: visible; } }
""".strip()


def _md_cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def to_markdown(title: str, blocks: Sequence[Block]) -> str:
    """GitHub-flavoured Markdown; images link to the PNG files written next to it."""
    return "\n".join([f"# {title}", "", *_markdown(blocks)]).rstrip() + "\n"


def _markdown(blocks: Sequence[Block]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * b.level} {b.text}", ""]
        elif isinstance(b, Para):
            if b.kind in _PARA_PREFIX:
                text = f"**{_PARA_PREFIX[b.kind]}** {b.text}"
                out += [f"> {text}" if b.kind == "warning" else text, ""]
            else:
                out += [f"_{b.text}_" if b.kind == "env" else b.text, ""]
        elif isinstance(b, Facts):
            out += [f"- **{label}:** {text}" for label, text in b.items] + [""]
        elif isinstance(b, Code):
            out += ["```", *b.lines, "```", ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            out.append("|" + "|".join(":--" if a == "l" else "--:" for a in b.alignment()) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
            if b.notes:
                out += [f"- {note}" for note in b.notes] + [""]
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({b.filename})", ""]
        elif isinstance(b, Section):
            out += _markdown(b.blocks)
        elif isinstance(b, Details):  # GitHub renders it folded; the blank lines keep the Markdown inside
            out += [f"<details><summary>{html.escape(b.summary)}</summary>", "", *_markdown(b.blocks), "</details>",
                    ""]
    return out


def to_html(title: str, blocks: Sequence[Block]) -> str:
    """One self-contained page: inline CSS, images as base64 data URIs, no external reference; all text escaped.
    Tables scroll within their box on a narrow screen rather than widen the page."""
    e = html.escape
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{e(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n<h1>{e(title)}</h1>\n"
            + "\n".join(_html(blocks)) + "\n</body>\n</html>\n")


def _html(blocks: Sequence[Block]) -> list[str]:
    e = html.escape
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            cls = f' class="{e(b.kind)}"' if b.kind else ""
            prefix = f"<strong>{_PARA_PREFIX[b.kind]}</strong> " if b.kind in _PARA_PREFIX else ""
            body.append(f"<p{cls}>{prefix}{e(b.text)}</p>")
        elif isinstance(b, Facts):
            body.append('<ul class="facts">' + "".join(f"<li><strong>{e(label)}:</strong> {e(text)}</li>"
                                                       for label, text in b.items) + "</ul>")
        elif isinstance(b, Code):
            body.append(f"<pre><code>{e(chr(10).join(b.lines))}</code></pre>")
        elif isinstance(b, Table):
            body.append(_html_table(b))
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            body.append(f'<p><img alt="{e(b.alt)}" src="data:image/png;base64,{data}"></p>')
        elif isinstance(b, Section):
            body += [f'<section id="{e(b.id)}">', *_html(b.blocks), "</section>"]
        elif isinstance(b, Details):
            body += [f"<details><summary>{e(b.summary)}</summary>", *_html(b.blocks), "</details>"]
    return body


def _html_table(b: Table) -> str:
    e = html.escape

    def attr(align: str, extra: str = "") -> str:
        names = " ".join(n for n in ("l" if align == "l" else "", extra) if n)
        return f' class="{e(names)}"' if names else ""

    aligns = b.alignment()
    head = "".join(f"<th{attr(a)}>{e(h)}</th>" for a, h in zip(aligns, b.header, strict=True))
    classes = b.classes or [[""] * len(aligns) for _ in b.rows]
    rows = "".join("<tr>" + "".join(f"<td{attr(a, k.strip())}>{e(c).replace(chr(10), '<br>')}</td>"
                                    for a, c, k in zip(aligns, row, kinds, strict=True)) + "</tr>\n"
                   for row, kinds in zip(b.rows, classes, strict=True))
    text = (f'<div class="scroll">\n<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n'
            "</div>")
    if b.notes:
        text += '\n<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in b.notes) + "</ul>"
    return text
