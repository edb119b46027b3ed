#!/usr/bin/env bash
# Every workflow x sharing mode for 3 steps on the embedded testbed; prints wall time and the
# workflow-specific metrics of the last step. Usage: scripts/workflow_matrix.sh [extra rolecast flags]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/matrix}
mkdir -p "$out"
for wf in single voting eval_opt orch_workers; do
  for sharing in shared isolated; do
    start=$(date +%s.%N)
    .venv/bin/rolecast train --workflow "$wf" --sharing "$sharing" --steps 3 --run-dir "$out/$wf-$sharing" \
      --set eval.at_start=false --set eval.at_end=false --set logging.progress=false "$@" >/dev/null 2>&1
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    .venv/bin/python - "$out/$wf-$sharing/metrics.jsonl" "$wf" "$sharing" "$secs" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = rows[-1]
wf = {k[3:]: round(v, 3) for k, v in last.items() if k.startswith("wf/") and v is not None}
print(f"{sys.argv[2]:>12} {sys.argv[3]:>8}  {len(rows)} steps  {float(sys.argv[4]):6.1f} s  reward {last['reward']:.3f}  {wf}")
PY
  done
done
