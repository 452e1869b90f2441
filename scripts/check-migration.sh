#!/usr/bin/env bash
# Checks the "Migrating from 0.2" article on code written against 0.2.0: the package in
# Tests/Migration (a copy here, depending on this checkout by path) has two targets, Before (0.2.0's
# README and articles, with only the article's first step done: the products and imports) and
# After (the same code after the article's steps).
#
#   scripts/check-migration.sh [WORK_DIR]     (default: .build-migration in the package root)
#
# 1. After builds, with no warning.
# 2. Before does not build, and each of its errors and warnings says what to write instead: its
#    message names a replacement ("use", "remove", "is mode:", "pass it in", "drop", ...), and no
#    line says the compiler failed to produce a diagnostic. Its diagnostics are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi

work="${1:-.build-migration}"
case "$work" in /*) ;; *) work="$root/$work" ;; esac
app="$work/Migration"
mkdir -p "$app"
rm -rf "$app/Before" "$app/After" "$app/Package.swift"
cp -R Tests/Migration/Before Tests/Migration/After "$app/"
# The copy is elsewhere: its path dependency names this checkout itself.
python3 - "$root/Tests/Migration/Package.swift" "$app/Package.swift" "$root" <<'PY'
import sys
source, target, root = sys.argv[1:4]
text = open(source, encoding="utf-8").read()
line = '.package(name: "URLTaskManager", path: "../..")'
if text.count(line) != 1:
    sys.exit(f"{source}: expected the line {line!r} once")
open(target, "w", encoding="utf-8").write(text.replace(line, f'.package(name: "URLTaskManager", path: "{root}")'))
PY

echo "== After: 0.2.0's code after the article's steps builds without a warning"
after="$(cd "$app" && swift build --product After 2>&1)" || { echo "$after" >&2; echo "error: After does not build" >&2; exit 1; }
if grep -E "(^|/)(Before|After)/[^ ]*: warning:" <<<"$after"; then
    echo "error: After builds with warnings (above)" >&2
    exit 1
fi
echo "After builds"

echo "== Before: 0.2.0's code; each diagnostic says what to write instead"
if before="$(cd "$app" && swift build --product Before 2>&1)"; then
    echo "error: Before built: 0.2.0's spellings are expected to be refused" >&2
    exit 1
fi
if grep -q "failed to produce diagnostic" <<<"$before"; then
    grep "failed to produce diagnostic" <<<"$before" >&2
    echo "error: the compiler failed to produce a diagnostic for Before" >&2
    exit 1
fi
# The diagnostics in Before's own source, once each (the compiler repeats them with context).
diagnostics="$(grep -E "^/[^ ]*/Before/main\.swift:[0-9]+:[0-9]+: (error|warning):" <<<"$before" | sed "s|^$app/||" | sort -u | sort -t: -k2,2n -k3,3n)"
if [ -z "$diagnostics" ]; then
    echo "$before" >&2
    echo "error: Before failed without a diagnostic in its source" >&2
    exit 1
fi
echo "$diagnostics"
guidance='(use |remove |drop |is mode:|is afterwards:|pass it in|renamed to|instead)'
silent="$(grep -vE "$guidance" <<<"$diagnostics" || true)"
if [ -n "$silent" ]; then
    echo "error: these diagnostics do not say what to write instead:" >&2
    echo "$silent" >&2
    exit 1
fi
other="$(grep -E "^(/[^ ]*:[0-9]+:[0-9]+: )?(error|warning):" <<<"$before" \
    | grep -vE "^/[^ ]*/Before/main\.swift:|^error: (emit-module|compile) command failed" || true)"
if [ -n "$other" ]; then
    echo "error: Before's build reported something else than its own diagnostics:" >&2
    echo "$other" >&2
    exit 1
fi
echo "migration check passed: $(wc -l <<<"$diagnostics") diagnostics in Before, each naming its replacement"
