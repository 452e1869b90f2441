#!/usr/bin/env bash
# Builds the DocC documentation of the package's libraries, URLTaskManager, URLTaskResilience,
# URLTaskOAuth2, URLTaskRedis and LoopbackServer, into one static site, with the toolchain's own `docc` (no package dependency),
# and fails on any DocC warning.
#
#   scripts/build-docs.sh [OUTPUT_DIR]     (default: .build-docs-site in the package root)
#
# For each library (its catalog is Sources/<Library>/<Library>.docc):
# 1. `swift build` of that target alone emits its symbol graph (public symbols, without members
#    synthesized from other modules' protocols, such as Foundation's LocalizedError defaults).
# 2. `docc convert` turns the catalog and that symbol graph into an archive for static hosting,
#    with --warnings-as-errors.
# 3. Checks on the result: only the library's own symbols are in it, every public symbol has a
#    doc comment of its own or implements a protocol requirement (whose comment DocC shows), and
#    the landing page curates every top-level symbol (a new public type must be added to a
#    topic group in <Library>.docc/<Library>.md).
# Then `docc merge` puts the archives in one site: documentation/urltaskmanager/,
# documentation/urltaskresilience/, documentation/urltaskoauth2/, documentation/urltaskredis/ and
# documentation/loopbackserver/,
# with a page listing them at documentation/.
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
archives="$root/$build_path/archives"
libraries=(URLTaskManager URLTaskResilience URLTaskOAuth2 URLTaskRedis LoopbackServer)

hosting=()
if [ -n "${DOCS_HOSTING_BASE_PATH:-}" ]; then
    hosting=(--hosting-base-path "$DOCS_HOSTING_BASE_PATH")
fi
mkdir -p "$symbol_graphs"
rm -rf "$archives"
mkdir -p "$archives"

for library in "${libraries[@]}"; do
    echo "== symbol graph of $library ($build_path)"
    # The graph is written whenever the module is compiled, that is whenever one of its files changed.
    swift build --target "$library" --build-path "$build_path" \
        -Xswiftc -emit-symbol-graph \
        -Xswiftc -emit-symbol-graph-dir -Xswiftc "$symbol_graphs" \
        -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public \
        -Xswiftc -symbol-graph-skip-synthesized-members
    staged="$root/$build_path/symbol-graphs-for-docc/$library"
    rm -rf "$staged"
    mkdir -p "$staged"
    cp "$symbol_graphs/$library.symbols.json" "$staged"/
    # Extensions of other modules' types, if the library ever makes public ones.
    find "$symbol_graphs" -maxdepth 1 -name "$library@*.symbols.json" -exec cp {} "$staged"/ \;

    echo "== docc convert Sources/$library/$library.docc"
    docc convert "Sources/$library/$library.docc" \
        --additional-symbol-graph-dir "$staged" \
        --fallback-display-name "$library" \
        --fallback-bundle-identifier "$library" \
        --output-path "$archives/$library.doccarchive" \
        --transform-for-static-hosting \
        ${hosting[@]+"${hosting[@]}"} \
        --warnings-as-errors

    echo "== checks of $library"
    python3 - "$library" "$staged" "$archives/$library.doccarchive" <<'PY'
import json, os, sys

library, graphs, archive = sys.argv[1], sys.argv[2], sys.argv[3]
module = library.lower()
catalog = f"{library}.docc/{library}.md"
failures = []

# Only the library's own symbols: every symbol in the graph is declared in the module.
prefix = f"s:{len(library)}{library}"
foreign, undocumented, symbols = [], [], 0
for name in os.listdir(graphs):
    graph = json.load(open(os.path.join(graphs, name)))
    # `Library@Other.symbols.json`: the library's public extensions of another module's types,
    # whose symbols are named in that module (a `URLRequest` helper, an extension of the manager).
    extension_graph = "@" in name
    symbols += len(graph["symbols"])
    # A member that implements a protocol requirement shows that requirement's comment.
    implementations = {r["source"] for r in graph["relationships"]
                       if r.get("sourceOrigin") or r["kind"] == "defaultImplementationOf"}
    for symbol in graph["symbols"]:
        usr = symbol["identifier"]["precise"]
        path = ".".join(symbol["pathComponents"])
        if not usr.startswith(prefix) and not extension_graph:
            foreign.append(f"{path} ({usr})")
        if not symbol.get("docComment") and usr not in implementations:
            undocumented.append(path)
if foreign:
    failures.append(f"symbols from other modules in {library}'s symbol graph:\n  " + "\n  ".join(sorted(foreign)[:20]))
if undocumented:
    failures.append(f"public symbols of {library} without a doc comment:\n  " + "\n  ".join(sorted(undocumented)))

data = os.path.join(archive, "data", "documentation")
roots = sorted(os.listdir(data))
if roots != [module, module + ".json"]:
    failures.append(f"the {library} archive documents more than {library}: " + ", ".join(roots))

# Every top-level symbol is curated in a topic group of the landing page.
landing = json.load(open(os.path.join(data, module + ".json")))
for section in landing.get("topicSections", []):
    if section.get("generated"):
        names = [landing["references"][id]["title"] for id in section.get("identifiers", [])]
        failures.append(f"not curated in {catalog} ({section['title']}): " + ", ".join(names))

roles = {}
for folder, _, files in os.walk(data):
    for file in files:
        if file.endswith(".json"):
            role = json.load(open(os.path.join(folder, file))).get("metadata", {}).get("role", "other")
            roles[role] = roles.get(role, 0) + 1
print(f"{library}: {sum(roles.values())} pages: " + ", ".join(f"{count} {role}" for role, count in sorted(roles.items()))
      + f"; the symbol graph has {symbols} symbols, all {library}'s, each documented")
if failures:
    print("\n".join("error: " + f for f in failures), file=sys.stderr)
    sys.exit(1)
PY
done

echo "== docc merge -> $output"
rm -rf "$output"
archive_paths=()
for library in "${libraries[@]}"; do archive_paths+=("$archives/$library.doccarchive"); done
docc merge "${archive_paths[@]}" --output-path "$output" --synthesized-landing-page-name "URLTaskManager package"
python3 - "$output" "${libraries[@]}" <<'PY'
import os, sys
site, libraries = sys.argv[1], sys.argv[2:]
expected = sorted([name.lower() for name in libraries] + [name.lower() + ".json" for name in libraries])
found = sorted(os.listdir(os.path.join(site, "data", "documentation")))
if found != expected:
    sys.exit("error: the merged site documents " + ", ".join(found) + ", not " + ", ".join(expected))
PY
echo "docs built: $output/index.html (one landing page per library under documentation/)"
