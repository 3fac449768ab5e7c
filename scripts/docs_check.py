"""Open every page of the built docs site in headless Chromium at given widths (default 1280 and 1400 px: a laptop
and a desktop window) and fail on what a reader would not see whole:

- a code block whose lines are wider than the block: clipped behind a scroll bar (`pre > code` with scrollWidth >
  clientWidth), or wrapped onto more rows than it has lines (the site's stylesheet wraps them rather than clip);
- a table wider than the column, so that some of its columns hide behind a horizontal scroll bar;
- a page that scrolls sideways;
- a one-word code token in a table cell (a `weights=` name, a hub id, a flag) broken across lines.

Run by `make docs-check`, which builds the site first:

    python scripts/docs_check.py SITE_DIR [--width 1280 1400] [--chromium PATH]

Chromium: the Debian/Ubuntu package `chromium` (`apt-get install chromium`), or any Chrome/Chromium binary given
with --chromium or $CHROMIUM. Each page is copied with a small script added that measures the laid-out page after
load and writes the findings into the DOM, which `chromium --headless --dump-dom` prints; nothing else is needed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

MARK = "vit-keras-docs-check"
# Runs after the page's own scripts; writes {"pre": [...], "tables": [...], "page": ..., "tokens": [...]}.
PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const text = (el, n) => el.textContent.replace(/\\s+/g, " ").trim().slice(0, n);
  const found = {pre: [], tables: [], tokens: [], page: null, counts: {pre: 0, tables: 0, tokens: 0}};
  for (const code of document.querySelectorAll("article pre > code")) {
    found.counts.pre += 1;
    const lines = code.textContent.replace(/\\n$/, "").split("\\n");
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
    const style = getComputedStyle(code);
    const height = code.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    const lineHeight = parseFloat(style.lineHeight);
    if (code.scrollWidth > code.clientWidth + 1) {
      found.pre.push({how: `clipped by ${code.scrollWidth - code.clientWidth} px`, line: longest.slice(0, 160)});
    } else if (height > (lines.length + 0.5) * lineHeight) {
      found.pre.push({how: `wrapped (${Math.round(height / lineHeight)} rows for ${lines.length} lines)`,
                      line: longest.slice(0, 160)});
    }
  }
  for (const table of document.querySelectorAll("article table")) {
    found.counts.tables += 1;
    const wrap = table.closest(".md-typeset__scrollwrap");  // Material's scrolling box around a table
    const column = table.closest("article").clientWidth;
    const width = Math.max(table.getBoundingClientRect().width, table.scrollWidth);
    if ((wrap && wrap.scrollWidth > wrap.clientWidth + 1) || width > column + 1) {
      found.tables.push({width: Math.round(table.getBoundingClientRect().width), column: column,
                         header: text(table.querySelector("tr") || table, 120)});
    }
    for (const code of table.querySelectorAll("td code")) {
      if (/\\s/.test(code.textContent.trim())) continue;  // several words: may wrap between them
      found.counts.tokens += 1;
      const lines = new Set(Array.from(code.getClientRects()).map((r) => Math.round(r.top)));
      if (lines.size > 1) found.tokens.push(text(code, 120));
    }
  }
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) found.page = root.scrollWidth - root.clientWidth;
  const out = document.createElement("pre");
  out.id = "MARK";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}, 300));
</script>""".replace("MARK", MARK)
RESULT = re.compile(rf'<pre id="{MARK}">(.*?)</pre>', re.DOTALL)
INSTALL = ("Chromium is needed: install it with `apt-get install chromium` (Debian, Ubuntu), or pass --chromium PATH "
           "(or set CHROMIUM) to a Chrome or Chromium binary.")


def find_chromium(given: str | None) -> str:
    for candidate in (given, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    sys.exit(INSTALL)


def measure(chromium: str, page: pathlib.Path, width: int) -> dict:
    """The findings of PROBE on `page` (a copy of it, beside it, with PROBE added) laid out `width` px wide."""
    html = page.read_text(encoding="utf-8")
    probe_page = page.with_name(f".{MARK}-{page.name}")
    probe_page.write_text(html.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as profile:
            result = subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={profile}", f"--window-size={width},1000", "--virtual-time-budget=4000",
                 "--dump-dom", probe_page.as_uri()],
                capture_output=True, text=True, timeout=120)
    finally:
        probe_page.unlink()
    match = RESULT.search(result.stdout)
    if match is None:
        raise RuntimeError(f"{page}: Chromium printed no measurement (exit {result.returncode}): "
                           f"{result.stderr.strip()[-1000:]}")
    return json.loads(match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


def problems(name: str, found: dict) -> list[str]:
    lines = [f"{name}: code block {item['how']}: {item['line']!r}" for item in found["pre"]]
    lines += [f"{name}: table {item['width']} px wide in a {item['column']} px column (columns hidden behind "
              f"a scroll bar): {item['header']!r}" for item in found["tables"]]
    lines += [f"{name}: code in a table cell broken across lines: {token!r}" for token in found["tokens"]]
    if found["page"]:
        lines.append(f"{name}: the page scrolls sideways by {found['page']} px")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=pathlib.Path, help="the built site (mkdocs build --site-dir)")
    parser.add_argument("--width", type=int, nargs="+", default=[1280, 1400],
                        help="window widths in CSS pixels, each page checked at each")
    parser.add_argument("--chromium", help="Chrome/Chromium binary (default: chromium on PATH, or $CHROMIUM)")
    parser.add_argument("--pages", nargs="*", help="only these pages (paths relative to the site)")
    parser.add_argument("--jobs", type=int, default=2, help="Chromium processes at a time")
    args = parser.parse_args(argv)

    chromium = find_chromium(args.chromium)
    site = args.site.resolve()
    if not (site / "index.html").is_file():
        sys.exit(f"{site} holds no built site (index.html); run `make docs` or mkdocs build first.")
    pages = ([site / page for page in args.pages] if args.pages else
             sorted(p for p in site.rglob("index.html") if p.parent.name not in ("search", "assets")))
    runs = [(page, width) for width in args.width for page in pages]
    found_all, counts = [], {"pre": 0, "tables": 0, "tokens": 0}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for (page, width), found in zip(runs, pool.map(lambda run: measure(chromium, *run), runs)):
            name = str(page.parent.relative_to(site)) + "/" + (f" at {width} px" if len(args.width) > 1 else "")
            found_all += problems(name, found)
            for key in counts:
                counts[key] += found["counts"][key]
    widths = " and ".join(map(str, args.width))
    print(f"{len(pages)} pages at {widths} px: {counts['pre']} code blocks, {counts['tables']} tables, "
          f"{counts['tokens']} table-cell code tokens measured")
    for line in found_all:
        print(line)
    print("OK" if not found_all else f"{len(found_all)} problems")
    return 1 if found_all else 0


if __name__ == "__main__":
    sys.exit(main())
