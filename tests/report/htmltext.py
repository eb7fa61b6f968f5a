"""Parse a rendered report with the standard library: tags seen and text per element id/class."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.log_lines: list[str] = []
        self.text: list[str] = []
        self._in_pre = 0
        self._line: list[str] | None = None
        self.rows: list[list[str]] = []  # table rows: cell texts
        self._cell = False
        self._svg = 0
        self._hidden = 0  # inside <style>, <script> or <head><title>: not page text
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "svg":
            self._svg += 1
        if tag in ("style", "script") or (tag == "title" and not self._svg):
            self._hidden += 1
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self.rows[-1].append("")
            self._cell = True
        if tag == "pre":
            self._in_pre += 1
        elif tag == "span" and self._in_pre:
            self._line = []

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg -= 1
        if (tag in ("style", "script") or (tag == "title" and not self._svg)) and self._hidden:
            self._hidden -= 1
        if tag in ("td", "th"):
            self._cell = False
        if tag == "pre":
            self._in_pre -= 1
        elif tag == "span" and self._line is not None:
            self.log_lines.append("".join(self._line))
            self._line = None

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)
            if self._cell and self.rows and self.rows[-1]:
                self.rows[-1][-1] = " ".join((self.rows[-1][-1] + " " + data).split())
        if self._line is not None:
            self._line.append(data)

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)

    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())

    def row_after(self, header_first_cell: str) -> dict[str, str]:
        """The first data row under the header row whose first cell is `header_first_cell`, by column."""
        for i, row in enumerate(self.rows):
            if row and row[0] == header_first_cell and i + 1 < len(self.rows):
                return dict(zip(row, self.rows[i + 1]))
        raise AssertionError(f"no table with header {header_first_cell!r}")
