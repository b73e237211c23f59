#!/usr/bin/env bash
# The docs in a real browser: install Debian's Chromium when it is missing (CI runs as
# root), then load the built site in headless Chromium and fail on console errors,
# missing clause anchors, a search without results, or any element wider than the
# content column (docs/_gen/browser_check.py). Takes the built site as its argument;
# without one the check builds the site itself. Run from the CI virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium > /dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq > /dev/null
    apt-get install -y -qq chromium > /dev/null
fi
chromium --version 2> /dev/null  # the Debian wrapper script prints a harmless shell warning

site_args=()
if [ "$#" -gt 0 ]; then
    site_args=(--site "$1")
fi
python docs/_gen/browser_check.py "${site_args[@]}" --out "${BROWSER_SHOTS:-${TMPDIR:-/tmp}/rtmm-browser-shots}"
