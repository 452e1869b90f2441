#!/usr/bin/env bash
# Creates the virtual environment of the test authorization server (django-oauth-toolkit,
# scripts/oauth-server/serve.py) when it is missing, and prints its python's path.
#
# Where: $URLTASKMANAGER_DOT_VENV if set (the tests then need URLTASKMANAGER_DOT_PYTHON set to
# the path this prints), else
#   ${XDG_CACHE_HOME:-$HOME/.cache}/urltaskmanager/oauth-venv-<first 16 hex digits of the
#   SHA-256 of requirements.txt>
# so a changed pin makes a new environment (the tests look there too, and skip, saying to run
# this script, when it is absent). Every package is installed at the version and hash
# requirements.txt pins (pip --require-hashes). Needs python3 with its venv module (Debian:
# python3-venv, installed here with apt-get when missing and apt-get is there) and PyPI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
requirements="$here/requirements.txt"
python="${PYTHON:-python3}"

key="$("$python" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])' "$requirements")"
venv="${URLTASKMANAGER_DOT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/urltaskmanager/oauth-venv-$key}"

# A complete environment has the marker written after its last install step.
if [ -x "$venv/bin/python" ] && [ -e "$venv/.complete" ]; then
    echo "$venv/bin/python"
    exit 0
fi

if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "== installing python3-venv for the test authorization server" >&2
        apt-get install -y python3-venv >/dev/null || { apt-get update >/dev/null && apt-get install -y python3-venv >/dev/null; }
    else
        echo "python3's venv module is missing: install python3-venv (Debian/Ubuntu) or a python3 that has it" >&2
        exit 1
    fi
fi

# Built beside its final place and moved there when complete, so a half-made environment (an
# interrupted install, a PyPI outage) is never taken for a complete one.
mkdir -p "$(dirname "$venv")"
staging="$(mktemp -d "$venv.partial.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
echo "== creating the test authorization server's environment in $venv" >&2
"$python" -m venv "$staging"
"$staging/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --require-hashes \
    --only-binary=:all: -r "$requirements" >&2
touch "$staging/.complete"
rm -rf "$venv"
mv "$staging" "$venv"
trap - EXIT
echo "$venv/bin/python"
