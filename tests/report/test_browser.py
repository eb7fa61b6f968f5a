"""The report in a real headless browser: the chart renders, the page paints, no console errors."""

import numpy as np
import pytest

from chaosbench.report import render_run

from . import browser
from .htmltext import Page
from .png import read_png

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not browser.available(), reason=f"no chromium at {browser.CHROMIUM} (apt-get install chromium)"),
]

NODE0_BLUE = (0x25, 0x63, 0xEB)  # chart.PALETTE[0]
FAULT_RED = (0xDC, 0x26, 0x26)  # chart.FAULT_COLOURS[0]: fault line, failed-save marks


def test_console_capture_sees_errors(tmp_path):
    """The check below can fail: a page with an uncaught error is caught by the same capture."""
    page = tmp_path / "bad.html"
    page.write_text("<p>x</p><script>console.error('boom'); undefinedFunction();</script>")
    _, console = browser.run(page.as_uri(), ["--dump-dom"], tmp_path / "profile")
    assert any("boom" in m for m in console)
    assert any("undefinedFunction is not defined" in m for m in console)


def test_network_capture_sees_page_requests(tmp_path):
    """The self-containedness check below can fail: a page that fetches anything is caught."""
    page = tmp_path / "net.html"
    page.write_text('<img src="http://example.com/x.png"><script src="https://cdn.example.org/l.js"></script>')
    browser.run(page.as_uri(), ["--dump-dom", f"--log-net-log={tmp_path / 'net.json'}"], tmp_path / "profile")
    assert browser.page_requests(tmp_path / "net.json") == ["http://example.com/x.png", "https://cdn.example.org/l.js"]


def test_report_renders_chart_without_console_errors(failing_run, tmp_path):
    report = render_run(failing_run)
    net_log = tmp_path / "net.json"
    dom, console = browser.run(report.as_uri() + "#q=checkpoint_loaded", ["--dump-dom", f"--log-net-log={net_log}"],
                               tmp_path / "profile")
    assert console == []
    assert browser.page_requests(net_log) == []  # self-contained: nothing fetched
    page = Page(dom)
    svg = [a for t, a in page.tags if t == "svg" and a.get("id") == "timeline"]
    assert svg, "no timeline SVG in the browser's DOM"
    polylines = [a for t, a in page.tags if t == "polyline"]
    assert len(polylines) == 5 and all(len(a["points"].split()) > 10 for a in polylines)
    # The inline script ran: the #q= filter hid every line but the two checkpoint_loaded events.
    shown = [a for t, a in page.tags if t == "span" and a.get("class") == "hit"]
    assert len(shown) == 2
    assert "2 matching lines" in page.all_text()


def test_screenshot_is_painted(failing_run, tmp_path):
    report = render_run(failing_run)
    png = tmp_path / "report.png"
    _, console = browser.run(report.as_uri(), [f"--screenshot={png}", "--window-size=1280,1100"],
                             tmp_path / "profile")
    assert console == []
    pixels = read_png(png)
    assert pixels.shape == (1100, 1280, 3)
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 200, "screenshot looks blank"
    for name, rgb in (("node-0 series", NODE0_BLUE), ("fault marker", FAULT_RED)):
        near = (np.abs(pixels.astype(int) - rgb).sum(axis=2) < 40).sum()  # antialiased edges count too
        assert near > 200, f"{name} not painted ({near} pixels)"
