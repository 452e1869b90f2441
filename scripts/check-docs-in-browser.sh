#!/usr/bin/env bash
# Loads the built DocC site in headless Chromium and checks that pages really render: DocC
# pages are drawn by JavaScript, so a page whose script fails shows only "This page requires
# JavaScript". Builds nothing: pass the folder scripts/build-docs.sh wrote.
#
#   scripts/check-docs-in-browser.sh [--install-browser] SITE_DIR
#
# Serves SITE_DIR on 127.0.0.1 (python3 -m http.server on a free port), dumps the rendered DOM
# of each library's landing page, of URLTaskManager's "Getting started" and of LoopbackServer's
# "Misbehaving servers" article (chromium --headless --dump-dom, with a virtual-time budget so
# the page's scripts run), and checks in each: the document title and the page's <h1> set by
# the script, and a code listing with the expected code.
#
# Without Chromium (chromium, chromium-browser or google-chrome on PATH, or $CHROMIUM) it
# prints a SKIP line and exits 0. With --install-browser it first tries Debian's package
# (apt-get install chromium, as root), and skips if that fails.
set -euo pipefail

install_browser=false
if [ "${1:-}" = "--install-browser" ]; then
    install_browser=true
    shift
fi
if [ $# -ne 1 ] || [ ! -f "$1/index.html" ]; then
    echo "usage: $0 [--install-browser] SITE_DIR   (a site built by scripts/build-docs.sh)" >&2
    exit 2
fi
site="$(cd "$1" && pwd)"

find_browser() {
    for candidate in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
        if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

browser="$(find_browser || true)"
if [ -z "$browser" ] && $install_browser; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Chromium from Debian's packages (apt-get install chromium)"
        log="$(mktemp)"
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >"$log" 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get update >>"$log" 2>&1 || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >>"$log" 2>&1 || tail -n 3 "$log"
        fi
        rm -f "$log"
        browser="$(find_browser || true)"
    fi
fi
if [ -z "$browser" ]; then
    echo "SKIP: docs browser check: no Chromium here and none could be installed; the site was built but not loaded in a browser"
    exit 0
fi
echo "browser: $("$browser" --version 2>/dev/null || echo "$browser")"

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$site" >"$work/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$port"
python3 - "$base/index.html" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 15
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the site server on 127.0.0.1 did not answer within 15 s")
        time.sleep(0.2)
PY
echo "serving $site at $base"

# page path | title the page must show | text its code listing must contain
pages=(
    "documentation/urltaskmanager/|URLTaskManager|caller ── any URLSession API"
    "documentation/urltaskmanager/gettingstarted|Getting started|import URLTaskManager"
    "documentation/loopbackserver/|LoopbackServer|.product(name: \"LoopbackServer\""
    "documentation/loopbackserver/misbehavingservers|Misbehaving servers and raw sockets|gate.open()"
)
failed=0
for page in "${pages[@]}"; do
    IFS='|' read -r path title code <<<"$page"
    dom="$work/$(echo "$path" | tr '/' '_').html"
    if ! timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --no-first-run --user-data-dir="$work/profile" --virtual-time-budget=15000 \
        --dump-dom "$base/$path" >"$dom" 2>"$work/browser.log"; then
        echo "FAIL: $path: Chromium did not dump the page"
        tail -n 5 "$work/browser.log"
        failed=$((failed + 1))
        continue
    fi
    if python3 - "$dom" "$title" "$code" "$path" <<'PY'; then :; else failed=$((failed + 1)); fi
import html, re, sys
from html.parser import HTMLParser

path_dom, title, code, path = sys.argv[1:5]

class Page(HTMLParser):
    """Collects the document title, the text of each <h1 class="title">, and of each code listing."""
    def __init__(self):
        super().__init__()
        self.stack, self.title, self.headings, self.listings = [], "", [], []
    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        kind = "title" if tag == "title" else "h1" if tag == "h1" and "title" in classes else \
            "listing" if "code-listing" in classes else None
        if tag in ("br", "img", "input", "meta", "link", "hr", "wbr", "source", "col", "area"):
            return
        self.stack.append(kind)
        if kind == "h1": self.headings.append("")
        if kind == "listing": self.listings.append("")
    def handle_startendtag(self, tag, attrs):
        pass  # <tag/>: nothing inside it to collect
    def handle_endtag(self, tag):
        if self.stack: self.stack.pop()
    def handle_data(self, data):
        if "title" in self.stack: self.title += data
        if "h1" in self.stack: self.headings[-1] += data
        if "listing" in self.stack: self.listings[-1] += data

page = Page()
page.feed(open(path_dom, encoding="utf-8").read())
problems = []
if not page.title.strip().startswith(title):
    problems.append(f"document title is {page.title.strip()!r}, not {title!r} (did the page's JavaScript run?)")
if title not in [h.strip() for h in page.headings]:
    problems.append(f"no rendered <h1 class=\"title\"> reading {title!r} (found {[h.strip() for h in page.headings]})")
if not page.listings:
    problems.append("no code listing rendered")
elif not any(code in listing for listing in page.listings):
    problems.append(f"no code listing contains {code!r}")
if problems:
    print(f"FAIL: {path}: " + "; ".join(problems))
    sys.exit(1)
print(f"ok: {path}: title {title!r}, {len(page.listings)} code listing(s), one with {code!r}")
PY
done

if [ "$failed" -ne 0 ]; then
    echo "docs browser check failed on $failed page(s)"
    exit 1
fi
echo "docs browser check: ${#pages[@]} pages of both libraries rendered in Chromium"
