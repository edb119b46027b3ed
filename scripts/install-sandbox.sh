#!/usr/bin/env bash
# The code sandbox prefers bubblewrap (bwrap). Install it when we can (root + apt), otherwise say so:
# rolecast then falls back to a weaker rlimit-only sandbox and logs a warning.
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }) \
        && echo "installed bubblewrap for the code sandbox" \
        || echo "warning: could not install bubblewrap; the code sandbox will use its weaker fallback" >&2
else
    echo "warning: bubblewrap (bwrap) not found; install it for the strong code sandbox (see README)" >&2
fi
exit 0
