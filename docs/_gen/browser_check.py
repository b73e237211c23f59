"""Look at the built site in a real browser: headless Chromium, served from 127.0.0.1.

The check builds the site (or takes a built one), serves it on a free local port and
drives Chromium through the DevTools protocol over a pipe (``--remote-debugging-pipe``,
so it needs nothing beyond the standard library and the suite's list of clauses). It loads

1. the home page,
2. the specification page, and checks that every clause anchor (``#G5``, ``#D2``, ...)
   exists and that the batch figure loaded,
3. the search: types a query into the search box and waits for results,
4. every page of the site, at a 1280 px wide window, and measures its content column:
   any element of the page's text (a table, a code block, a figure, a paragraph) that
   is wider than the column, or whose content is wider than its own box so that part
   of it hides behind a scroll bar, is a problem, reported with the page, the element
   and both widths; and any word that the layout breaks over two lines where a reader
   expects it whole (a table header, inline code in a table cell, a check ID anywhere,
   code blocks included) is a problem too, reported with the page, the element and the
   word,

and fails on any console error, uncaught exception, failed load, or request to a host
other than 127.0.0.1. Screenshots of the specification page and of the search results
are written as PNG files.

Usage::

    python docs/_gen/browser_check.py [--site DIR] [--out DIR] [--chromium PATH]

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``), or
any Chromium/Chrome binary given with ``--chromium`` or ``RTMM_DOCS_CHROMIUM``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import http.server
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtmm_conformance.clauses import CLAUSES

REPO = Path(__file__).resolve().parents[2]
SEARCH_QUERY = "lookahead"
#: The window the layout is measured in: a laptop screen, the theme's three-column layout.
WINDOW_WIDTH, WINDOW_HEIGHT = 1280, 900
#: Widths are compared with this slack (px), for sub-pixel rounding.
LAYOUT_SLACK_PX = 1

# Runs in the page: the elements of the content column that are wider than it, or whose
# content is wider than their own box (hidden behind a scroll bar). The column is the
# article's content box (688 px at the window above). The theme's table wrappers reach
# 0.8rem into the gutters by design (a 720 px box), so they are judged only by what they
# scroll, and reported as their table. Inline elements are measured line by line, as
# they wrap. Only the outermost offender is reported.
_MEASURE_COLUMN = """
(() => {
  const slack = SLACK_PX;
  const column = document.querySelector("article.md-content__inner");
  if (!column) return null;
  const style = getComputedStyle(column);
  const box = column.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft);
  const right = box.right - parseFloat(style.paddingRight);
  const themeWrapper = (el) =>
    el.classList.contains("md-typeset__scrollwrap") || el.classList.contains("md-typeset__table");
  const sectionOf = (el) => {
    for (let node = el; node && node !== column; node = node.parentElement) {
      for (let prev = node.previousElementSibling; prev; prev = prev.previousElementSibling) {
        if (/^H[1-6]$/.test(prev.tagName)) return prev.textContent.replace("\u00b6", "").trim();
      }
    }
    return "";
  };
  const describe = (el) => {
    let name = el.tagName.toLowerCase();
    if (el.id) name += "#" + el.id;
    const classes = [...el.classList].filter((c) => !c.startsWith("md-"));
    if (classes.length) name += "." + classes.slice(0, 2).join(".");
    const section = sectionOf(el);
    const text = (el.querySelector("th") || el).textContent.replace(/\\s+/g, " ").trim();
    return name + (section ? " under '" + section.slice(0, 60) + "'" : "")
      + " ('" + text.slice(0, 40) + "')";
  };
  const found = [];
  const reported = [];
  for (const el of column.querySelectorAll("*")) {
    if (reported.some((outer) => outer.contains(el))) continue;
    const css = getComputedStyle(el);
    const inline = css.display === "inline";
    const rects = inline ? [...el.getClientRects()] : [el.getBoundingClientRect()];
    const shown = rects.filter((r) => r.width > 0 || r.height > 0);
    if (!shown.length) continue;  // not rendered
    // An inline element's padding (inline code's background) may reach into the gutter
    // at a line end; its text may not.
    const inset = inline ? parseFloat(css.paddingRight) + parseFloat(css.borderRightWidth) : 0;
    const outset = inline ? parseFloat(css.paddingLeft) + parseFloat(css.borderLeftWidth) : 0;
    const spill = !themeWrapper(el) && shown.find(
      (r) => r.right - inset > right + slack || r.left + outset < left - slack);
    if (spill) {
      found.push({element: describe(el), width: Math.round(spill.width), kind: "box"});
      reported.push(el);
    } else if (css.overflowX !== "visible" && el.scrollWidth > el.clientWidth + slack) {
      const shownAs = el.querySelector(":scope > div > table, :scope > table") || el;
      found.push({element: describe(shownAs), width: el.scrollWidth, kind: "content",
                  box: el.clientWidth});
      reported.push(el);
    }
  }
  return {column: Math.round(right - left), found: found};
})()
""".replace("SLACK_PX", str(LAYOUT_SLACK_PX))
# Runs in the page: the words that the layout splits over two lines where a reader
# expects them whole. Table headers may wrap between words, never inside one ("clau /
# se"); inline code in table cells holds identifiers, options and commands, whose
# hyphens are no place to break; a check ID (`G5-rows-match-mask`) is one token wherever
# it appears, in prose, lists and code blocks too. A word is split when the boxes of its
# characters lie on more than one line. Each word is reported once.
_MEASURE_WRAPS = """
(() => {
  const column = document.querySelector("article.md-content__inner");
  if (!column) return null;
  const sectionOf = (el) => {
    for (let node = el; node && node !== column; node = node.parentElement) {
      for (let prev = node.previousElementSibling; prev; prev = prev.previousElementSibling) {
        if (/^H[1-6]$/.test(prev.tagName)) return prev.textContent.replace("\u00b6", "").trim();
      }
    }
    return "";
  };
  const lineCount = (range) => {
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    const tops = rects.map((r) => r.top).sort((a, b) => a - b);
    const tolerance = Math.min(...rects.map((r) => r.height)) / 2;
    let lines = 0;
    let last = -Infinity;
    for (const top of tops) {
      if (top - last > tolerance) lines += 1;
      last = top;
    }
    return lines;
  };
  const found = [];
  const seen = new Map();  // text node -> offsets of split words reported: each word once
  const firstReport = (node, offset) => {
    if (!seen.has(node)) seen.set(node, new Set());
    const offsets = seen.get(node);
    const fresh = !offsets.has(offset);
    offsets.add(offset);
    return fresh;
  };
  const measure = (name, el, chars, pattern) => {
    const text = chars.map(([node, i]) => node.data[i]).join("");
    for (const match of text.matchAll(pattern)) {
      const first = chars[match.index];
      const last = chars[match.index + match[0].length - 1];
      const range = document.createRange();
      range.setStart(first[0], first[1]);
      range.setEnd(last[0], last[1] + 1);
      const lines = lineCount(range);
      if (lines > 1 && firstReport(first[0], first[1])) {
        const section = sectionOf(el);
        found.push({element: name + (section ? " under '" + section.slice(0, 60) + "'" : ""),
                    word: match[0].slice(0, 80), lines: lines});
      }
    }
  };
  const charsOf = (el) => {  // [text node, offset] of every character under el, in order
    const chars = [];
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i += 1) chars.push([node, i]);
    }
    return chars;
  };
  // Check IDs first, in every text node of the column, so that they are named as such.
  const walker = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const chars = Array.from({length: node.data.length}, (_, i) => [node, i]);
    measure("check ID", node.parentElement, chars, /\\b[GCDRET][0-9]+(?:-[a-z0-9]+)+/g);
  }
  for (const el of column.querySelectorAll("th, td code")) {
    measure(el.tagName.toLowerCase(), el, charsOf(el), /[^\\s\u00b6]+/g);
  }
  return {found: found};
})()
"""
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--remote-debugging-pipe",
)


class BrowserCheckError(RuntimeError):
    """The browser could not be driven (as opposed to a finding about the site)."""


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium binary to use: the argument, ``RTMM_DOCS_CHROMIUM``, or one on PATH."""
    for candidate in (explicit, os.environ.get("RTMM_DOCS_CHROMIUM")):
        if candidate:
            return candidate
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class _Session:
    """A DevTools session with one page, over Chromium's debugging pipe."""

    process: subprocess.Popen[bytes]
    to_browser: int
    from_browser: int
    messages: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    events: list[dict[str, Any]] = field(default_factory=list)
    session_id: str | None = None
    _next_id: int = 0

    def start_reader(self) -> None:
        def read() -> None:
            buffer = b""
            while True:
                try:
                    chunk = os.read(self.from_browser, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                buffer += chunk
                while b"\0" in buffer:
                    raw, buffer = buffer.split(b"\0", 1)
                    self.messages.put(json.loads(raw))
            self.messages.put({"closed": True})

        threading.Thread(target=read, daemon=True).start()

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its reply, keeping the events that arrive meanwhile."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session_id is not None and not method.startswith("Target."):
            message["sessionId"] = self.session_id
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline, f"reply to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserCheckError(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for the next event named ``method`` (events seen earlier do not count)."""
        deadline = time.monotonic() + timeout
        while True:
            event = self._next(deadline, method)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its (JSON) value."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserCheckError(f"evaluating {expression!r} threw {result['exceptionDetails']}")
        return result["result"].get("value")

    def poll(self, expression: str, timeout: float = 20.0) -> Any:
        """Evaluate ``expression`` until it is truthy; return its last value."""
        deadline = time.monotonic() + timeout
        value = self.evaluate(expression)
        while not value and time.monotonic() < deadline:
            time.sleep(0.2)
            value = self.evaluate(expression)
        return value

    def drain(self) -> None:
        """Move events that arrived without a command into :attr:`events`."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.events.append(self.messages.get_nowait())

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrowserCheckError(f"timed out waiting for {waiting_for}")
        try:
            message = self.messages.get(timeout=remaining)
        except queue.Empty:
            raise BrowserCheckError(f"timed out waiting for {waiting_for}") from None
        if message.get("closed"):
            raise BrowserCheckError(f"Chromium closed its pipe while waiting for {waiting_for}")
        return message


@contextlib.contextmanager
def _chromium(binary: str, profile: Path) -> Iterator[_Session]:
    """Start Chromium with its debugging pipe on fds 3 (commands) and 4 (replies)."""
    commands_read, commands_write = os.pipe()
    replies_read, replies_write = os.pipe()

    def wire_pipes() -> None:  # runs in the child, before exec
        # Move both ends out of the way first, so that dup2 cannot clobber one with the other.
        commands = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
        replies = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    process = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=wire_pipes,  # safe: called before this module starts any thread
        pass_fds=(3, 4),
    )
    os.close(commands_read)
    os.close(replies_write)
    session = _Session(process, commands_write, replies_read)
    session.start_reader()
    try:
        yield session
    finally:
        with contextlib.suppress(BrowserCheckError, OSError):
            session.send("Browser.close", timeout=5)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(commands_write)
        os.close(replies_read)


@contextlib.contextmanager
def _serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on a free port of 127.0.0.1; yield the base URL."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _problems_in(events: Sequence[dict[str, Any]], page: str) -> list[str]:
    """Console errors, exceptions, failed loads and off-host requests among the events."""
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            problems.append(f"{page}: console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            problems.append(f"{page}: uncaught exception: {text}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            problems.append(
                f"{page}: {entry.get('source')} error: {entry.get('text')} {entry.get('url', '')}"
            )
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            host = urlsplit(url).hostname
            if urlsplit(url).scheme in {"http", "https", "ws", "wss"} and host != "127.0.0.1":
                problems.append(f"{page}: request to another host: {url}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            problems.append(f"{page}: a load failed: {params.get('errorText')}")
    return problems


def _open(session: _Session, url: str) -> None:
    session.events.clear()
    session.send("Page.navigate", url=url)
    session.wait_for_event("Page.loadEventFired")
    time.sleep(0.5)  # let deferred scripts run and report
    session.drain()


def _screenshot(session: _Session, path: Path) -> None:
    data = session.send("Page.captureScreenshot", format="png")["data"]
    path.write_bytes(base64.b64decode(data))


@dataclass
class BrowserReport:
    """What the browser saw: problems (empty means the check passed) and screenshots."""

    problems: list[str]
    screenshots: list[Path]
    notes: list[str]


def check_site(site: Path, out: Path, chromium: str) -> BrowserReport:
    """Load home, specification and search of the built ``site`` in headless Chromium."""
    out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    notes: list[str] = []
    shots: list[Path] = []
    with (
        tempfile.TemporaryDirectory(prefix="rtmm-chromium-") as profile,
        _chromium(chromium, Path(profile)) as session,
        _serve(site) as base,
    ):
        target = session.send("Target.createTarget", url="about:blank")["targetId"]
        attached = session.send("Target.attachToTarget", targetId=target, flatten=True)
        session.session_id = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            session.send(f"{domain}.enable")
        session.send(
            "Emulation.setDeviceMetricsOverride",
            width=WINDOW_WIDTH,
            height=WINDOW_HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )

        # 1. Home page.
        _open(session, base)
        title = session.evaluate("document.title")
        notes.append(f"home: title {title!r}")
        if "rtmm-protocol" not in str(title):
            problems.append(f"home: unexpected title {title!r}")
        problems += _problems_in(session.events, "home")

        # 2. Specification page: every clause anchor, and the figure.
        _open(session, base + "specification/#G5")
        missing = session.evaluate(
            f"{json.dumps(list(CLAUSES))}.filter(id => !document.getElementById(id))"
        )
        if missing:
            problems.append(f"specification: missing anchors {missing}")
        figure_width = session.evaluate(
            "(document.querySelector('img[src$=\"batch-figure.svg\"]') || {}).naturalWidth || 0"
        )
        if not figure_width:
            problems.append("specification: the batch figure did not load")
        notes.append(
            f"specification: {len(CLAUSES) - len(missing or [])}/{len(CLAUSES)} clause "
            f"anchors, batch figure {figure_width}px wide"
        )
        problems += _problems_in(session.events, "specification")
        shot = out / "docs-specification-G5.png"
        _screenshot(session, shot)
        shots.append(shot)
        session.evaluate("document.getElementById('figure').scrollIntoView()")
        time.sleep(0.3)
        shot = out / "docs-specification-figure.png"
        _screenshot(session, shot)
        shots.append(shot)

        # 3. Search: type a query, wait for results.
        _open(session, base)
        session.evaluate("document.querySelector('[data-md-component=\"search-query\"]').focus()")
        session.poll(
            "document.querySelector('[data-md-component=\"search-query\"]') === document.activeElement"
        )
        for char in SEARCH_QUERY:
            session.send("Input.dispatchKeyEvent", type="keyDown", text=char, key=char)
            session.send("Input.dispatchKeyEvent", type="keyUp", key=char)
        count = session.poll("document.querySelectorAll('.md-search-result__item').length")
        meta = session.evaluate(
            "(document.querySelector('.md-search-result__meta') || {}).textContent || ''"
        )
        notes.append(f"search {SEARCH_QUERY!r}: {count} results ({meta.strip()})")
        if not count:
            problems.append(f"search: no results for {SEARCH_QUERY!r} ({meta.strip()!r})")
        session.drain()
        problems += _problems_in(session.events, "search")
        shot = out / "docs-search.png"
        _screenshot(session, shot)
        shots.append(shot)

        # 4. Every page: nothing wider than the content column.
        pages = site_pages(site)
        wide: list[str] = []
        split: list[str] = []
        for page in pages:
            _open(session, base + page)
            wide += layout_problems(session.evaluate(_MEASURE_COLUMN), page)
            split += wrap_problems(session.evaluate(_MEASURE_WRAPS), page)
            problems += _problems_in(session.events, page)
        notes.append(
            f"layout: {len(pages)} pages at {WINDOW_WIDTH}px, "
            f"{len(wide)} elements wider than their column, "
            f"{len(split)} words split over lines"
        )
        problems += wide + split
    return BrowserReport(problems, shots, notes)


def site_pages(site: Path) -> list[str]:
    """The pages of a built site, as URL paths relative to its root (``specification/``)."""
    pages = []
    for html in site.rglob("index.html"):
        relative = html.parent.relative_to(site).as_posix()
        pages.append("" if relative == "." else relative + "/")
    return sorted(pages)


def layout_problems(measured: dict[str, Any] | None, page: str) -> list[str]:
    """Turn what :data:`_MEASURE_COLUMN` found on ``page`` into one problem per element."""
    where = page or "home"
    if measured is None:
        return [f"{where}: no content column (article.md-content__inner) to measure"]
    column = measured["column"]
    problems = []
    for item in measured["found"]:
        if item["kind"] == "box":
            problems.append(
                f"{where}: {item['element']} is {item['width']}px wide, "
                f"wider than the {column}px column"
            )
        else:
            problems.append(
                f"{where}: {item['element']} has content {item['width']}px wide in a "
                f"{item['box']}px box (the {column}px column): part of it is hidden"
            )
    return problems


def wrap_problems(measured: dict[str, Any] | None, page: str) -> list[str]:
    """Turn what :data:`_MEASURE_WRAPS` found on ``page`` into one problem per split word."""
    where = page or "home"
    if measured is None:
        return [f"{where}: no content column (article.md-content__inner) to measure"]
    return [
        f"{where}: {item['element']}: {item['word']!r} is split over {item['lines']} lines"
        for item in measured["found"]
    ]


def build_site(site: Path) -> None:
    """Build the docs strictly into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        check=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; exit status 0 when the browser saw no problem."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rtmm-docs-browser-check",
        help="screenshots go here",
    )
    parser.add_argument("--chromium", help="the Chromium binary (default: found on PATH)")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("no Chromium found: apt-get install -y chromium, or pass --chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rtmm-site-") as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build_site(site)
        report = check_site(site, args.out, chromium)
    for note in report.notes:
        print(note)
    for shot in report.screenshots:
        print(f"screenshot: {shot}")
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    print(
        "browser check: "
        + ("passed" if not report.problems else f"{len(report.problems)} problems")
    )
    return 0 if not report.problems else 1


if __name__ == "__main__":
    sys.exit(main())
