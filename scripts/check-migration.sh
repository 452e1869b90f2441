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
# 3. BeforePatterns (0.2.0's patterns over OAuth2Error, which no declaration can give a message)
#    does not build, with exactly the diagnostics written under each form in its source, as
#    `// error: ...` and `// warning: ...` lines in column order; and the "Migrating from 0.2"
#    article shows each form followed by those lines. A compiler that words them differently (or
#    learns to diagnose them) fails this step: update the comments and the article.
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
rm -rf "$app/Before" "$app/After" "$app/BeforePatterns" "$app/ZeroThreeCodes" "$app/Package.swift"
cp -R Tests/Migration/Before Tests/Migration/After Tests/Migration/BeforePatterns Tests/Migration/ZeroThreeCodes "$app/"
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
echo "Before: $(wc -l <<<"$diagnostics") diagnostics, each naming its replacement"

echo "== BeforePatterns: 0.2.0's OAuth2Error patterns fail with the diagnostics the article quotes"
if patterns="$(cd "$app" && swift build --product BeforePatterns 2>&1)"; then
    echo "error: BeforePatterns built: 0.2.0's patterns are expected to be refused" >&2
    exit 1
fi
printf '%s\n' "$patterns" >"$work/BeforePatterns.log"
patterns_checked="$(python3 - "$app/BeforePatterns/main.swift" "$root/Sources/URLTaskManager/URLTaskManager.docc/MigratingFromZeroTwo.md" \
    "$work/BeforePatterns.log" "$(swift --version 2>&1 | head -1)" <<'PY'
import re
import sys

source_path, article_path, log_path, compiler = sys.argv[1:5]
output = open(log_path, encoding="utf-8").read()
source = open(source_path, encoding="utf-8").read().split("\n")
article = [line.strip() for line in open(article_path, encoding="utf-8").read().split("\n")]
failures = []

# What the compiler said about the source, per line, in column order (it repeats each
# diagnostic with context: once each).
pattern = re.compile(r"^/[^ ]*/BeforePatterns/main\.swift:(\d+):(\d+): (error|warning): (.*)$")
found = {}
for line in output.split("\n"):
    match = pattern.match(line)
    if match:
        found.setdefault(int(match[1]), set()).add((int(match[2]), f"{match[3]}: {match[4]}"))
said = {number: [text for _, text in sorted(items)] for number, items in found.items()}
other = [
    line for line in output.split("\n")
    if re.match(r"^(/[^ ]*:\d+:\d+: )?(error|warning):", line) and not pattern.match(line)
    and not re.match(r"^error: (emit-module|compile) command failed", line)
]
failures += [f"a diagnostic outside BeforePatterns/main.swift: {line}" for line in other]

# What the source says the compiler says: the `// error:` and `// warning:` lines under a form.
expected = {}
number = 0
while number < len(source):
    comments = []
    following = number + 1
    while following < len(source) and re.match(r"^\s*// (error|warning): ", source[following]):
        comments.append(source[following].strip()[3:])
        following += 1
    if comments:
        expected[number + 1] = comments
    number = following if comments else number + 1

for line_number in sorted(set(said) | set(expected)):
    form = source[line_number - 1].strip()
    if said.get(line_number) != expected.get(line_number):
        failures.append(
            f"line {line_number} `{form}`:\n  the compiler says {said.get(line_number, [])}\n"
            f"  the source expects {expected.get(line_number, [])}")
        continue
    # The article shows the form, then the compiler's lines, as in the source.
    block = [form] + ["// " + text for text in expected[line_number]]
    if not any(article[index:index + len(block)] == block for index in range(len(article))):
        failures.append(f"the article does not show line {line_number} followed by its diagnostics:\n  " + "\n  ".join(block))
if not expected:
    failures.append("BeforePatterns/main.swift expects no diagnostic")
if failures:
    print(f"error: BeforePatterns ({compiler}):", file=sys.stderr)
    for failure in failures:
        print(failure, file=sys.stderr)
    sys.exit(1)
for line_number in sorted(expected):
    print(f"BeforePatterns/main.swift:{line_number}: {source[line_number - 1].strip()}")
    for text in expected[line_number]:
        print(f"    {text}")
print(f"{len(expected)} forms, {sum(len(v) for v in expected.values())} diagnostics, as the source and the article quote them")
PY
)" || { echo "$patterns" | grep -E "BeforePatterns/main\.swift:[0-9]+:[0-9]+: (error|warning):" | sort -u >&2; exit 1; }
echo "$patterns_checked"

echo "== ZeroThreeCodes: 0.3's satellite error codes with URLTaskManager alone; each refusal names the import"
if codes="$(cd "$app" && swift build --product ZeroThreeCodes 2>&1)"; then
    echo "error: ZeroThreeCodes built: the satellites' codes are expected to need their module" >&2
    exit 1
fi
code_diagnostics="$(grep -E "^/[^ ]*/ZeroThreeCodes/main\.swift:[0-9]+:[0-9]+: error:" <<<"$codes" | sed "s|^$app/||" | sort -u)"
echo "$code_diagnostics"
for expected in "circuitOpen.*import URLTaskResilience" "rateLimitQueueFull.*import URLTaskResilience" "authenticationFailed.*import URLTaskOAuth2"; do
    if ! grep -qE "$expected" <<<"$code_diagnostics"; then
        echo "$codes" >&2
        echo "error: no diagnostic matching '$expected'" >&2
        exit 1
    fi
done
if [ "$(wc -l <<<"$code_diagnostics")" -ne 3 ]; then
    echo "error: ZeroThreeCodes: expected 3 diagnostics, one per code" >&2
    exit 1
fi
echo "migration check passed: $(wc -l <<<"$diagnostics") diagnostics in Before, each naming its replacement; BeforePatterns as the article quotes it; 0.3's satellite codes each name their import"
