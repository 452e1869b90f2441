#!/usr/bin/env bash
# Checks the README's Installation section on a package that depends on this one: the package in
# Tests/Installation (its manifest is the README's listing, its sources use the README's imports)
# is built and tested against this checkout, with the `.package(url: ...)` line replaced by a
# path dependency, as a user of a local clone would write it.
#
#   scripts/check-installation.sh [WORK_DIR]     (default: .build-installation in the package root)
#
# 1. WORK_DIR/URLTaskManager is a link to this checkout (whatever its own folder is called), and
#    the depending package's `.package(path: "../URLTaskManager")` makes the products'
#    `package: "URLTaskManager"` right: `swift test` builds both products and runs a test that
#    uses them together over 127.0.0.1.
# 2. The same manifest with a path to a folder of another name is refused by SwiftPM, naming the
#    folder: a path dependency is named after its folder, as the README says.
# 3. Where this checkout has the release tag the README's `from:` names, the README's own line,
#    pointed at a bare clone of this checkout instead of GitHub, resolves to that version: the
#    release can be installed by version. A clone without tags prints SKIP for this step.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi

work="${1:-.build-installation}"
case "$work" in /*) ;; *) work="$root/$work" ;; esac
mkdir -p "$work"
app="$work/MyApp"
version="0.3.0"
url_line=".package(url: \"https://github.com/OWNER/URLTaskManager.git\", from: \"$version\")"

# A fresh copy of the depending package (its .build is kept between runs, so a rerun is quick).
mkdir -p "$app"
rm -rf "$app/Sources" "$app/Tests" "$app/Package.swift"
cp -R Tests/Installation/Sources Tests/Installation/Tests Tests/Installation/Package.swift "$app/"
ln -sfn "$root" "$work/URLTaskManager"
ln -sfn "$root" "$work/url-task-manager-clone"

with_line() {  # the manifest with the README's url dependency replaced by another line
    python3 - "$app/Package.swift" "$url_line" "$1" <<'PY'
import sys
path, url_line, replacement = sys.argv[1:4]
text = open(path, encoding="utf-8").read()
if text.count(url_line) != 1:
    sys.exit(f"{path}: expected the line {url_line!r} once (it is the README's dependency line)")
open(path, "w", encoding="utf-8").write(text.replace(url_line, replacement))
PY
}

with_path() {  # the manifest with the url dependency replaced by a path
    with_line ".package(path: \"../$1\")"
}

echo "== a package that depends on URLTaskManager by path (../URLTaskManager -> $root)"
with_path URLTaskManager
(cd "$app" && swift test)
(cd "$app" && swift run MyApp)

echo "== the same dependency through a folder of another name"
cp Tests/Installation/Package.swift "$app/Package.swift"
with_path url-task-manager-clone
if output="$(cd "$app" && swift package show-dependencies 2>&1)"; then
    echo "error: a path dependency on a folder not named URLTaskManager was accepted with package: \"URLTaskManager\"" >&2
    exit 1
fi
if ! grep -q "unknown package 'URLTaskManager'" <<<"$output" || ! grep -q "'url-task-manager-clone'" <<<"$output"; then
    echo "error: SwiftPM refused the dependency, but not by naming the folder:" >&2
    echo "$output" >&2
    exit 1
fi
echo "refused as the README says: $(grep -o "unknown package 'URLTaskManager'.*" <<<"$output" | head -n 1)"
cp Tests/Installation/Package.swift "$app/Package.swift"

echo "== the README's version requirement (from: \"$version\") against this checkout's tags"
if git -C "$root" rev-parse -q --verify "refs/tags/$version" >/dev/null; then
    # Named URLTaskManager.git: a URL dependency is named after the last part of its URL.
    remote="$work/remote/URLTaskManager.git"
    rm -rf "$work/remote" "$app/.build/checkouts" "$app/.build/repositories" "$app/Package.resolved"
    git clone -q --bare "$root" "$remote"
    with_line ".package(url: \"file://$remote\", from: \"$version\")"
    dependencies="$(cd "$app" && swift package show-dependencies 2>&1)"
    cp Tests/Installation/Package.swift "$app/Package.swift"
    if ! grep -qF "$remote@$version>" <<<"$dependencies"; then
        echo "error: from: \"$version\" did not resolve to $version:" >&2
        echo "$dependencies" >&2
        exit 1
    fi
    echo "resolved: $(grep -F "$remote@$version>" <<<"$dependencies" | head -n 1)"
else
    echo "SKIP: this checkout has no tag $version (a clone without tags, or before the release)"
fi
echo "installation check passed"
