"""The report page in a real browser: Debian's Chromium, headless, as a new reader would open it.

The page is the quick suite's shape (three workloads, PyTorch against TensorFlow and JAX, 3 repeats each) rendered
from synthetic stored results (:func:`fake_results.quick_results`): no trial runs. Cost, measured on 2 cores under
a load of about 2: 4–7 s in all, 2 s of it rendering the report, the rest Chromium's start and six page loads.
Chromium is driven over its DevTools pipe with the standard library only (:mod:`browser`); without it, every test
here skips and says how to install it (``make test`` does, as root with apt).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import browser
from bakeoff.analysis.bootstrap import OUTCOMES
from bakeoff.analysis.stats import summarise_groups
from bakeoff.report.render import render_report
from bakeoff.report.write import decisions
from fake_results import quick_results

CHROMIUM = browser.find()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: `apt-get install chromium` (Debian's "
                                                         "package; `make test` installs it when root with apt)")

WIDE = (1400, 900)  # a laptop's first screen
PHONE = (390, 844)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return render_report(quick_results(), tmp_path_factory.mktemp("browser"), title="bakeoff: quick")["html"]


@pytest.fixture(scope="module")
def chromium(report):
    assert CHROMIUM is not None
    with browser.Chromium(CHROMIUM, *WIDE) as page:
        page.open(report)
        yield page


def test_the_page_loads_with_no_console_error_and_every_plot_decodes_and_shows(chromium):
    images = chromium.evaluate("""Promise.all([...document.images].map(async img => {
        let decoded = true;
        try { await img.decode(); } catch (e) { decoded = false; }
        const box = img.getBoundingClientRect(), style = getComputedStyle(img);
        const canvas = document.createElement("canvas");  // the decoded pixels: a plot's background is opaque
        canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
        const context = canvas.getContext("2d");
        context.drawImage(img, 0, 0);
        const pixels = canvas.width ? context.getImageData(0, 0, canvas.width, canvas.height).data : [];
        let opaque = 0;
        for (let i = 3; i < pixels.length; i += 4) opaque += pixels[i] === 255;
        return {alt: img.alt, decoded, opaque: opaque / Math.max(1, pixels.length / 4), complete: img.complete,
                width: img.naturalWidth, height: img.naturalHeight,
                left: box.left, right: box.right, shown_width: box.width, shown_height: box.height,
                page: document.documentElement.clientWidth, visible: style.visibility === "visible"
                && style.display !== "none" && img.offsetParent !== null};
    }))""")
    assert [i["alt"] for i in images] == ["steady throughput per configuration",
                                          "quality against training time, one line per trial"]
    for image in images:
        assert image["decoded"] and image["complete"] and image["visible"], image
        assert image["width"] > 0 and image["height"] > 0, image
        assert image["opaque"] == 1, image  # every pixel decoded (a cut-off PNG leaves its lower part transparent)
        assert image["shown_width"] > 0 and image["shown_height"] > 0, image
        assert 0 <= image["left"] and image["right"] <= image["page"], image  # inside the layout, not cut off
    assert chromium.console == []


def test_the_card_is_on_the_first_screen_and_the_page_says_each_verdict_once(chromium):
    box = chromium.evaluate("""(() => { const r = document.querySelector("#decision").getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, screen: innerHeight, width: innerWidth}; })()""")
    assert box["width"] == WIDE[0]
    assert 0 <= box["top"] and box["bottom"] <= box["screen"], box
    text = chromium.evaluate("document.body.innerText")
    decided = decisions(summarise_groups(quick_results()), None, None)
    assert len(decided) == 3
    for d in decided.values():
        assert text.count(d.verdict) == 1, d.verdict  # said once, in its section
    card = chromium.evaluate("document.querySelector('#decision').innerText")
    assert "Recommendation: PyTorch: it wins 2 of 3 compared workloads" in card
    outcomes = chromium.evaluate("""[...document.querySelectorAll("#decision td")].map(td => [td.className,
        getComputedStyle(td).backgroundColor])""")
    colours = {kind: colour for kind, colour in outcomes if kind in OUTCOMES}
    assert "better" not in colours and {"worse", "unsettled"} <= set(colours)  # PyTorch leads everywhere
    assert len(set(colours.values())) == len(colours) and "rgba(0, 0, 0, 0)" not in colours.values()
    folded = chromium.evaluate("""[...document.querySelectorAll("details")].map(d => [d.open,
        d.querySelector("summary").innerText])""")
    assert folded == [[False, "Environment"]] * 3
    assert "intra_op_threads" not in text  # folded away


def test_at_1280_px_the_whole_card_shows_without_scrolling_sideways(chromium, report):
    chromium.resize(1280, 800)
    try:
        chromium.open(report)
        card = chromium.evaluate("""(() => { const box = document.querySelector("#decision div.scroll");
            return {inner: box.scrollWidth, shown: box.clientWidth,
                    page: document.documentElement.scrollWidth}; })()""")
    finally:
        chromium.resize(*WIDE)
        chromium.open(report)
    assert card["inner"] <= card["shown"] and card["page"] <= 1280, card


def test_on_a_phone_the_page_does_not_widen_and_tables_scroll_in_their_box(chromium, report):
    chromium.resize(*PHONE, mobile=True)
    try:
        chromium.open(report)
        widths = chromium.evaluate("""({page: document.documentElement.scrollWidth,
            screen: document.documentElement.clientWidth,
            boxes: [...document.querySelectorAll("div.scroll")].map(d => [d.scrollWidth > d.clientWidth,
                                                                          d.getBoundingClientRect().right])})""")
    finally:
        chromium.resize(*WIDE)
        chromium.open(report)
    assert widths["screen"] == PHONE[0] and widths["page"] <= widths["screen"], widths
    assert any(wider for wider, _ in widths["boxes"])  # the card and the wide tables scroll sideways...
    assert all(right <= PHONE[0] for _, right in widths["boxes"])  # ...within boxes that fit the screen
    assert chromium.console == []


def test_printed_the_tables_are_whole_and_the_environment_unfolded(chromium):
    shown = "[...document.querySelectorAll('details p.env')].map(p => p.checkVisibility())"
    assert chromium.evaluate(shown) == [False] * 3  # folded away on the screen
    chromium.media("print")
    try:
        printed = chromium.evaluate(f"""({{scroll: getComputedStyle(document.querySelector("div.scroll")).overflowX,
            environment: {shown}, text: document.body.innerText}})""")
    finally:
        chromium.media("")
    assert printed["scroll"] == "visible"  # a table printed whole, not cut at a scroll box's edge
    assert printed["environment"] == [True] * 3 and "intra_op_threads" in printed["text"]
