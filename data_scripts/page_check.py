#!/usr/bin/env python
"""Check the rendered book the way a reader meets it: headless Chromium opens every chapter
page of a built book (``_build/html``) at a laptop's width and measures, after the theme's
scripts have laid the page out,

* what the page opens with: the first block under the title must be prose, not a code cell
  (a collapsed cell, shown as a one-line "Show code cell" bar, is fine);
* every code block (cell inputs, outputs, literal blocks in prose) and every table, with all
  collapsed cells opened: its content must fit the text column (``scrollWidth`` against the
  block's own width; a block that scrolls sideways hides the end of its lines);
* figures: every image must fit the text column, and no raw ``{glue}`` role may show;
* the page's own table of contents (the right-hand "Contents"), so a test can ask for a
  section such as chapter 12's "The table";
* math: a page with math must load MathJax from the build (a relative path: no http(s) URL,
  the book is read offline) and MathJax must have typeset every formula (each ``.math``
  element holds an ``mjx-container``; raw ``\\( ... \\)`` left on the page is a problem).

    python data_scripts/page_check.py _build/html --out results/diagnostics/page-check.json
    python data_scripts/page_check.py _build/html --screenshot /tmp/shots  # PNG per chapter

Chromium comes from Debian's package (``apt-get install chromium``); nothing is downloaded at
run time. The measurement script is added to a temporary copy of each page beside the page
(so its stylesheets load) and read back from the DOM Chromium dumps; the copies are removed.
Exit code 1 when a page breaks a rule, 2 when no browser is found (0 with
``--skip-without-browser``: ``make test-nb`` runs this after the -W build; ``.ci/run`` installs
Chromium first). ``tests/test_chapter_shape.py`` checks the committed report.
"""
from __future__ import annotations

import argparse
import html as html_lib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1280, 1600  # a laptop screen; the theme shows both sidebars at this width
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MARK = "dk-page-check"

# Runs in the page once the theme has laid it out. Opens every collapsed cell (a reader may),
# then measures. Tolerance 2 px: sub-pixel rounding.
MEASURE_JS = r"""
(() => {
  const art = document.querySelector('article.bd-article') || document.querySelector('main');
  const out = {title: (art.querySelector('h1') || {}).textContent || '', opening: null,
               toc: [], overflows: [], blocks: 0};
  const h1 = art.querySelector('h1');
  // The first block after the title, in document order, skipping empty wrappers.
  if (h1) {
    let el = h1.nextElementSibling;
    while (el && !el.textContent.trim() && !el.querySelector('img')) el = el.nextElementSibling;
    if (el) {
      const cell = el.matches('.cell') ? el : null;
      const collapsed = cell && (cell.matches('.tag_hide-input, .tag_hide-cell, .tag_remove-input')
                                 || cell.querySelector('details.hide') !== null);
      out.opening = {kind: cell ? (collapsed ? 'collapsed cell' : 'code cell') : el.tagName.toLowerCase(),
                     text: el.textContent.trim().slice(0, 80)};
    }
  }
  document.querySelectorAll('.bd-toc-nav a, nav.page-toc a').forEach(a => out.toc.push(a.textContent.trim()));
  art.querySelectorAll('details').forEach(d => d.open = true);
  const where = el => el.closest('.cell_input, .cell .highlight') && !el.closest('.cell_output') ? 'input'
                    : el.closest('.cell_output, .output') ? 'output' : 'prose';
  const line = el => {
    const lines = el.textContent.split('\n');
    let widest = '';
    for (const l of lines) if (l.length > widest.length) widest = l;
    return widest.slice(0, 120);
  };
  art.querySelectorAll('pre, table').forEach(el => {
    if (el.closest('pre') && el.closest('pre') !== el) return;  // a table inside a pre
    const box = el.tagName === 'TABLE'
      ? (el.closest('.table-wrapper, .pst-scrollable-table-container, .output_html, .cell_output') || el.parentElement)
      : el;
    const tw = el.tagName === 'TABLE' ? el.getBoundingClientRect().width : el.scrollWidth;
    const cw = el.tagName === 'TABLE' ? Math.min(box.clientWidth || 1e9, art.clientWidth) : el.clientWidth;
    if (!cw) return;  // not laid out (display: none)
    out.blocks += 1;
    if (tw > cw + 2) {
      const cell = el.closest('.cell');
      const cells = Array.from(art.querySelectorAll('.cell'));
      out.overflows.push({kind: el.tagName.toLowerCase(), where: where(el),
                          cell: cell ? cells.indexOf(cell) : null,
                          excess_px: Math.round(tw - cw), width_px: Math.round(cw),
                          widest: el.tagName === 'TABLE' ? (el.rows[0] ? el.rows[0].textContent.replace(/\s+/g, ' ').trim().slice(0, 120) : '') : line(el)});
    }
  });
  out.column_px = Math.round(art.clientWidth);
  // Figures: an image wider than the column is cut or scrolls; raw glue roles never rendered.
  out.images = 0; out.wide_images = [];
  art.querySelectorAll('img').forEach(img => {
    const w = img.getBoundingClientRect().width;
    if (!w) return;
    out.images += 1;
    if (w > art.clientWidth + 2) out.wide_images.push({src: (img.getAttribute('src') || '').slice(-60),
                                                       width_px: Math.round(w)});
  });
  const text = art.textContent;
  out.raw_glue = (text.match(/\{glue(:[a-z]+)?\}`[^`]*`/g) || []).slice(0, 3);
  // Math: which MathJax the page loads (as written in its script tag) and what it typeset.
  const formulas = Array.from(document.querySelectorAll('.math'));
  const raw = formulas.filter(m => !m.querySelector('mjx-container'));
  out.math = {formulas: formulas.length,
              scripts: Array.from(document.querySelectorAll('script[src]'))
                .map(s => s.getAttribute('src')).filter(s => /mathjax|tex-(chtml|svg|mml)/i.test(s)),
              typeset: document.querySelectorAll('mjx-container').length,
              n_raw: raw.length, raw: raw.slice(0, 3).map(m => m.textContent.trim().slice(0, 60))};
  const pre = document.createElement('pre');
  pre.id = 'MARK';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
""".replace("'MARK'", repr(MARK))


def find_browser(name: str | None = None) -> str | None:
    """The Chromium executable: ``name`` if given, else the first of :data:`BROWSERS` on PATH."""
    for b in ([name] if name else BROWSERS):
        path = shutil.which(b)
        if path:
            return path
    return None


def chapter_pages(html_dir: Path) -> list[Path]:
    """The chapter pages of a built book (``book/*.html`` beside the sources' names)."""
    pages = sorted((html_dir / "book").glob("*.html"))
    return [p for p in pages if re.match(r"\d", p.name)]


def measure(browser: str, page: Path, screenshot: Path | None = None,
            timeout: float = 90) -> dict:
    """Lay ``page`` out in headless Chromium and return :data:`MEASURE_JS`'s findings."""
    page = page.resolve()
    html = page.read_text(encoding="utf-8")
    # Measured once MathJax has typeset (its startup promise), or at once on a page without it.
    script = ("<script>window.addEventListener('load', () => setTimeout(() => {"
              "const mj = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;"
              f"Promise.resolve(mj).then(() => {{{MEASURE_JS}}}, () => {{{MEASURE_JS}}});"
              "}, 300));</script>")
    fd, tmp = tempfile.mkstemp(prefix=".page-check-", suffix=".html", dir=page.parent)
    os.close(fd)
    tmp = Path(tmp).resolve()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=8000",
             "--disable-dev-shm-usage"]
    try:
        tmp.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
        p = subprocess.run(flags + ["--dump-dom", tmp.as_uri()], capture_output=True,
                           text=True, timeout=timeout)
        m = re.search(rf'<pre id="{MARK}"[^>]*>(.*?)</pre>', p.stdout, re.S)
        if not m:
            raise RuntimeError(f"{page}: no measurement came back from {browser} "
                               f"(exit {p.returncode}): {p.stderr.strip()[-300:]}")
        found = json.loads(html_lib.unescape(m.group(1)))
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(flags + [f"--screenshot={screenshot}", page.as_uri()],
                           capture_output=True, timeout=timeout)
        return found
    finally:
        tmp.unlink(missing_ok=True)


def problems(found: dict, required_toc: tuple[str, ...] = ()) -> list[str]:
    """The rules a page breaks, as readable lines."""
    out = []
    opening = found.get("opening") or {}
    if opening.get("kind") == "code cell":
        out.append(f"opens with a code cell ({opening.get('text', '')[:50]!r}), not prose")
    for o in found.get("overflows", []):
        where = f"cell {o['cell']}" if o.get("cell") is not None else "prose"
        out.append(f"{o['kind']} in {o['where']} ({where}) is {o['excess_px']} px wider than "
                   f"its {o['width_px']} px column: {o['widest'][:70]!r}")
    for title in required_toc:
        if title not in found.get("toc", []):
            out.append(f"no {title!r} in the page's contents")
    for img in found.get("wide_images", []):
        out.append(f"figure {img['src']!r} is {img['width_px']} px, wider than the "
                   f"{found.get('column_px')} px column")
    if found.get("raw_glue"):
        out.append(f"raw glue role on the page: {found['raw_glue'][0][:60]!r}")
    out += math_problems(found.get("math"))
    return out


def math_problems(math: dict | None) -> list[str]:
    """A page with math must load MathJax from the build and show it typeset."""
    if not math or not math.get("formulas"):
        return []
    out = []
    scripts = math.get("scripts", [])
    remote = [s for s in scripts if re.match(r"(https?:)?//", s)]
    if not scripts:
        out.append(f"{math['formulas']} formulas but no MathJax script")
    if remote:
        out.append(f"MathJax is loaded from {remote[0]}: the offline book shows raw math "
                   "(serve it from _static, _config.yml mathjax_path)")
    if not math.get("typeset") or math.get("n_raw"):
        out.append(f"{math.get('n_raw', math['formulas'])} of {math['formulas']} formulas not "
                   f"typeset by MathJax, e.g. {(math.get('raw') or [''])[0]!r}")
    return out


# Sections a chapter's page must list in its contents (issue: the headline is findable).
REQUIRED_TOC = {"12_results": ("The table",)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html_dir", type=Path, nargs="?", default=ROOT / "_build" / "html")
    ap.add_argument("--out", type=Path, help="write the findings as JSON")
    ap.add_argument("--browser", help="the Chromium executable (default: found on PATH)")
    ap.add_argument("--screenshot", type=Path, help="folder for a PNG of each page's top")
    ap.add_argument("--only", nargs="*", default=None, help="chapter stems, e.g. 12_results")
    ap.add_argument("--skip-without-browser", action="store_true",
                    help="exit 0, saying so, where no Chromium is installed (make test-nb)")
    args = ap.parse_args()
    browser = find_browser(args.browser)
    if browser is None:
        print("page check skipped: no Chromium found (apt-get install chromium, Debian's "
              "package)", file=sys.stderr)
        return 0 if args.skip_without_browser else 2
    pages = chapter_pages(args.html_dir)
    if args.only:
        pages = [p for p in pages if p.stem in args.only]
    if not pages:
        print(f"no chapter pages under {args.html_dir}/book: build the book first",
              file=sys.stderr)
        return 2
    version = subprocess.run([browser, "--version"], capture_output=True, text=True).stdout
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "browser": version.strip().splitlines()[-1] if version.strip() else browser,
              "window": [WIDTH, HEIGHT], "pages": {}}
    bad = 0
    for page in pages:
        shot = args.screenshot / f"{page.stem}.png" if args.screenshot else None
        found = measure(browser, page, shot)
        issues = problems(found, REQUIRED_TOC.get(page.stem, ()))
        bad += bool(issues)
        report["pages"][page.stem] = {**found, "problems": issues}
        math = found.get("math") or {}
        print(f"{page.stem}: {found['blocks']} code blocks and tables, column {found['column_px']} px, opens "
              f"with {found['opening']['kind'] if found['opening'] else '?'}, "
              f"{math.get('typeset', 0)} of {math.get('formulas', 0)} formulas typeset: "
              + ("ok" if not issues else f"{len(issues)} problem(s)"), flush=True)
        for line in issues:
            print("   ", line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"{len(pages) - bad} of {len(pages)} pages pass")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
