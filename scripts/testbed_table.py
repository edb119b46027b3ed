"""The role-competence table of docs/testbed.md from testbed build_info.json files (one column each).

python scripts/testbed_table.py src/rolecast/testbed/artifact/build_info.json src/rolecast/testbed/artifact_large/build_info.json
"""

import json
import sys

cols = [json.load(open(p))["roles"] for p in sys.argv[1:]]


def pct(x):
    return f"{x:.2f}"


def ci(v, k="accuracy"):
    return f"{v[k]:.2f} ± {v[k + '_ci']:.2f}"


def m(x):
    return f"{x['margin']:+.2f} ± {x['margin_ci']:.2f}"


rows = [
    ("solve: accuracy (400 problems; band 0.3-0.7)", lambda r: ci(r["testbed/solve"])),
    (
        "evaluate: balanced accuracy (> 0.5)",
        lambda r: (
            f"{r['testbed/evaluate']['balanced_accuracy']:.2f} ± {r['testbed/evaluate']['balanced_accuracy_ci']:.2f}"
        ),
    ),
    ("evaluate: accept rate (truly correct 0.51)", lambda r: f"{r['testbed/evaluate']['said_correct']:.2f}"),
    (
        "evaluate: accepts correct / rejects wrong",
        lambda r: f"{r['testbed/evaluate']['accepts_correct']:.2f} / {r['testbed/evaluate']['rejects_wrong']:.2f}",
    ),
    (
        "aggregate, a correct candidate exists (n=141): picks one",
        lambda r: ci(r["testbed/aggregate"], "accuracy_with_correct"),
    ),
    (
        "… always candidate 1 / random pick",
        lambda r: f"{r['testbed/aggregate']['baseline_first']:.2f} / {r['testbed/aggregate']['baseline_random']:.2f}",
    ),
    ("… margin over always-1 (paired)", lambda r: m(r["testbed/aggregate"]["vs_first"])),
    ("… margin over random (paired)", lambda r: m(r["testbed/aggregate"]["vs_random"])),
    (
        "aggregate: picks 1 / 2 / 3",
        lambda r: " / ".join(f"{r['testbed/aggregate']['pick_distribution'][k]:.2f}" for k in "123"),
    ),
    (
        "work: outputs / answers differ across strategies (100 problems)",
        lambda r: (
            f"{r['testbed/work']['strategies']['outputs_differ']:.2f} / {r['testbed/work']['strategies']['answers_differ']:.2f}"
        ),
    ),
    (
        "work: accuracy by strategy, worst-best",
        lambda r: (
            lambda a: f"{min(a.values()):.2f} ({min(a, key=a.get)}) – {max(a.values()):.2f} ({max(a, key=a.get)})"
        )(r["testbed/work"]["strategies"]["accuracy_by_strategy"]),
    ),
    (
        "orchestrate: format / plan as taught",
        lambda r: f"{r['testbed/orchestrate']['format']:.2f} / {r['testbed/orchestrate']['accuracy']:.2f}",
    ),
    ("synthesize: accuracy", lambda r: ci(r["testbed/synthesize"])),
    ("… margin over copying candidate 1 (0.47)", lambda r: m(r["testbed/synthesize"]["vs_first"])),
    ("refine: accuracy (after a rejection)", lambda r: ci(r["testbed/refine"])),
    (
        "code: solve / evaluate balanced / aggregate vs always-1",
        lambda r: (
            f"{r['testbed_code/solve']['accuracy']:.2f} / {r['testbed_code/evaluate']['balanced_accuracy']:.2f} / {m(r['testbed_code/aggregate']['vs_first'])}"
        ),
    ),
]
names = ["small (`testbed`)", "large (`testbed-large`)"][: len(cols)]
print("| arithmetic unless marked | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(cols))
for label, f in rows:
    print(f"| {label} | " + " | ".join(f(c) for c in cols) + " |")
