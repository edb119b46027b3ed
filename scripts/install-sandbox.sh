#!/usr/bin/env bash
# The code sandbox prefers bubblewrap (bwrap), with a seccomp filter that the Python package pyseccomp (a
# project dependency) builds through the system's libseccomp. Install both system pieces when we can (root +
# apt), otherwise say so: without bubblewrap the sandbox falls back to a weaker rlimit + uid sandbox, and
# training or evaluating a task that runs model-written code refuses to start unless the config sets
# `sandbox: {allow_unisolated: true}`; without libseccomp it runs without the system-call filter, with a
# warning (docs/sandbox.md).
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
if ! { ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; }; then need+=(libseccomp2); fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${need[@]}" >/dev/null 2>&1; }) \
        && echo "installed ${need[*]} for the code sandbox" \
        || echo "warning: could not install ${need[*]}; code tasks need bubblewrap (or sandbox.allow_unisolated: true) and libseccomp for the filter, see docs/sandbox.md" >&2
else
    echo "warning: ${need[*]} not found; install them (apt-get install ${need[*]}) for code tasks, or see docs/sandbox.md" >&2
fi
exit 0
