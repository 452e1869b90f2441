#!/usr/bin/env bash
# Builds the DocC documentation of the URLTaskManager library into a static site, with the
# toolchain's own `docc` (no package dependency), and fails on any DocC warning.
#
#   scripts/build-docs.sh [OUTPUT_DIR]     (default: .build-docs-site in the package root)
#
# 1. `swift build` of the URLTaskManager target alone emits its symbol graph (public symbols,
#    without members synthesized from other modules' protocols, such as Foundation's
#    LocalizedError defaults).
# 2. `docc convert` turns the catalog Sources/URLTaskManager/URLTaskManager.docc and that
#    symbol graph into a site for static hosting, with --warnings-as-errors.
# 3. Checks on the result: only URLTaskManager's own symbols are in it, and the landing page
#    curates every top-level symbol (a new public type must be added to a topic group in
#    URLTaskManager.docc/URLTaskManager.md).
#
# Environment: DOCS_BUILD_PATH (default .build-docs-symbols), DOCS_HOSTING_BASE_PATH (default
# none: the site is served from its root).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi
if ! command -v docc >/dev/null 2>&1; then
    # docc ships next to swift in the toolchain.
    export PATH="$PATH:$(dirname "$(command -v swift)")"
fi

output="${1:-.build-docs-site}"
case "$output" in /*) ;; *) output="$root/$output" ;; esac
build_path="${DOCS_BUILD_PATH:-.build-docs-symbols}"
symbol_graphs="$root/$build_path/symbol-graphs"
staged_graphs="$root/$build_path/symbol-graphs-for-docc"
catalog="Sources/URLTaskManager/URLTaskManager.docc"

echo "== symbol graph of URLTaskManager ($build_path)"
mkdir -p "$symbol_graphs"
# The graph is written whenever the module is compiled, that is whenever one of its files changed.
swift build --target URLTaskManager --build-path "$build_path" \
    -Xswiftc -emit-symbol-graph \
    -Xswiftc -emit-symbol-graph-dir -Xswiftc "$symbol_graphs" \
    -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public \
    -Xswiftc -symbol-graph-skip-synthesized-members
rm -rf "$staged_graphs"
mkdir -p "$staged_graphs"
cp "$symbol_graphs"/URLTaskManager.symbols.json "$staged_graphs"/
# Extensions of other modules' types, if the library ever makes public ones.
find "$symbol_graphs" -maxdepth 1 -name 'URLTaskManager@*.symbols.json' -exec cp {} "$staged_graphs"/ \;

echo "== docc convert -> $output"
hosting=()
if [ -n "${DOCS_HOSTING_BASE_PATH:-}" ]; then
    hosting=(--hosting-base-path "$DOCS_HOSTING_BASE_PATH")
fi
rm -rf "$output"
docc convert "$catalog" \
    --additional-symbol-graph-dir "$staged_graphs" \
    --fallback-display-name URLTaskManager \
    --fallback-bundle-identifier URLTaskManager \
    --output-path "$output" \
    --transform-for-static-hosting \
    ${hosting[@]+"${hosting[@]}"} \
    --warnings-as-errors

echo "== checks"
python3 - "$staged_graphs" "$output" <<'PY'
import json, os, sys

graphs, site = sys.argv[1], sys.argv[2]
failures = []

# Only the package's own symbols: every symbol in the graph is declared in URLTaskManager.
foreign = []
for name in os.listdir(graphs):
    graph = json.load(open(os.path.join(graphs, name)))
    for symbol in graph["symbols"]:
        usr = symbol["identifier"]["precise"]
        if not usr.startswith("s:14URLTaskManager"):
            foreign.append(".".join(symbol["pathComponents"]) + " (" + usr + ")")
if foreign:
    failures.append("symbols from other modules in the symbol graph:\n  " + "\n  ".join(sorted(foreign)[:20]))

data = os.path.join(site, "data", "documentation")
roots = sorted(os.listdir(data))
if roots != ["urltaskmanager", "urltaskmanager.json"]:
    failures.append("the site documents more than URLTaskManager: " + ", ".join(roots))

# Every top-level symbol is curated in a topic group of the landing page.
landing = json.load(open(os.path.join(data, "urltaskmanager.json")))
generated = [section for section in landing.get("topicSections", []) if section.get("generated")]
for section in generated:
    names = [landing["references"][id]["title"] for id in section.get("identifiers", [])]
    failures.append("not curated in URLTaskManager.docc/URLTaskManager.md (" + section["title"] + "): " + ", ".join(names))

roles = {}
for folder, _, files in os.walk(data):
    for file in files:
        if file.endswith(".json"):
            role = json.load(open(os.path.join(folder, file))).get("metadata", {}).get("role", "other")
            roles[role] = roles.get(role, 0) + 1
symbols = sum(len(json.load(open(os.path.join(graphs, n)))["symbols"]) for n in os.listdir(graphs))
print(f"{sum(roles.values())} pages: " + ", ".join(f"{count} {role}" for role, count in sorted(roles.items()))
      + f"; the symbol graph has {symbols} symbols, all URLTaskManager's")
if failures:
    print("\n".join("error: " + f for f in failures), file=sys.stderr)
    sys.exit(1)
PY
echo "docs built: $output/index.html (landing page: documentation/urltaskmanager/)"
