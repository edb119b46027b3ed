#!/usr/bin/env bash
# The report's browser test (tests/test_report_browser.py) drives a real headless Chromium through Playwright.
# Playwright's own browser download (`playwright install`) is not used: the distribution's chromium package
# is. Install it when we can (root + apt), otherwise say what to do; the test skips with that reason when no
# chromium is found. Idempotent: does nothing when chromium is already there.
for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    (apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }) \
        && echo "installed chromium for the report's browser test" \
        || echo "warning: could not install chromium (apt-get install chromium); the report's browser test will be skipped" >&2
elif command -v apt-get >/dev/null 2>&1; then
    echo "warning: chromium not found; install it as root (apt-get install chromium) for the report's browser test" >&2
else
    echo "warning: chromium not found and apt is unavailable; install your distribution's chromium package for the report's browser test (or set ROLECAST_CHROMIUM to its path)" >&2
fi
exit 0
