#!/usr/bin/env bash
# The code sandbox prefers bubblewrap (bwrap). Install it when we can (root + apt), otherwise say so:
# without it the sandbox falls back to a weaker rlimit + uid sandbox, and training or evaluating a task that
# runs model-written code refuses to start unless the config sets `sandbox: {allow_unisolated: true}`
# (docs/sandbox.md).
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }) \
        && echo "installed bubblewrap for the code sandbox" \
        || echo "warning: could not install bubblewrap; code tasks need it (or sandbox.allow_unisolated: true, see docs/sandbox.md)" >&2
else
    echo "warning: bubblewrap (bwrap) not found; install it (apt-get install bubblewrap) for code tasks, or see docs/sandbox.md" >&2
fi
exit 0
