"""The role-competence tables of docs/testbed.md from testbed build_info.json files (one column each): the
noise-model candidates (greedy), then the model's own workflow rollouts.

python scripts/testbed_table.py src/rolecast/testbed/artifact/build_info.json src/rolecast/testbed/artifact_large/build_info.json
python scripts/testbed_table.py src/rolecast/testbed/artifact_code/build_info.json src/rolecast/testbed/artifact_code_large/build_info.json

A code build's (`"kind": "code"`) rows are its code roles, under the same labels.
"""

import json
import sys

infos = [json.load(open(p)) for p in sys.argv[1:]]
code = [i.get("kind") == "code" for i in infos]
# a code build's roles under the arithmetic keys, so one set of rows reads both
cols = [
    {k.replace("testbed_code/", "testbed/"): v for k, v in i["roles"].items()} if c else i["roles"]
    for i, c in zip(infos, code, strict=True)
]


def pct(x):
    return f"{x:.2f}"


def ci(v, k="accuracy"):
    return f"{v[k]:.2f} ± {v[k + '_ci']:.2f}"


def m(x):
    return f"{x['margin']:+.2f} ± {x['margin_ci']:.2f}"


rows = [
    ("solve: accuracy (n problems; band 0.3-0.7)", lambda r: f"{ci(r['testbed/solve'])} ({r['testbed/solve']['n']})"),
    (
        "evaluate: balanced accuracy (> 0.5)",
        lambda r: (
            f"{r['testbed/evaluate']['balanced_accuracy']:.2f} ± {r['testbed/evaluate']['balanced_accuracy_ci']:.2f}"
        ),
    ),
    (
        "evaluate: accept rate (truly correct)",
        lambda r: f"{r['testbed/evaluate']['said_correct']:.2f} ({r['testbed/evaluate']['truly_correct']:.2f})",
    ),
    (
        "evaluate: accepts correct / rejects wrong",
        lambda r: f"{r['testbed/evaluate']['accepts_correct']:.2f} / {r['testbed/evaluate']['rejects_wrong']:.2f}",
    ),
    (
        "aggregate, a correct candidate exists (n): picks one",
        lambda r: f"{ci(r['testbed/aggregate'], 'accuracy_with_correct')} ({r['testbed/aggregate']['n_with_correct']})",
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
        "work: outputs / answers differ across strategies",
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
    ("… candidate 1 is right", lambda r: f"{r['testbed/synthesize']['baseline_first']:.2f}"),
    ("… margin over copying candidate 1 (paired)", lambda r: m(r["testbed/synthesize"]["vs_first"])),
    ("refine: accuracy (after a rejection)", lambda r: ci(r["testbed/refine"])),
    (
        "code: solve / evaluate balanced / aggregate vs always-1",
        lambda r: (
            f"{r['testbed_code/solve']['accuracy']:.2f} / {r['testbed_code/evaluate']['balanced_accuracy']:.2f} / {m(r['testbed_code/aggregate']['vs_first'])}"
            if "testbed_code/solve" in r
            else "(the rows above)"
        ),
    ),
]
names = [
    f"{i.get('size', 'small')} (`testbed{'-code' if c else ''}{'-large' if i.get('size') == 'large' else ''}`)"
    for i, c in zip(infos, code, strict=True)
]
task_name = "code" if all(code) else "arithmetic unless marked"
print(f"| {task_name} | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(cols))
for label, f in rows:
    print(f"| {label} | " + " | ".join(f(c) for c in cols) + " |")

rollout_rows = [
    ("eval_opt: pass@1", lambda r: f"{r['eval_opt']['pass1']:.2f}"),
    (
        "evaluator: balanced accuracy (n verdicts)",
        lambda r: (
            f"{r['eval_opt']['balanced_accuracy']:.2f} ± {r['eval_opt']['balanced_accuracy_ci']:.2f} "
            f"({r['eval_opt']['n_verdicts']})"
        ),
    ),
    (
        "evaluator: says Correct (truly correct)",
        lambda r: f"{r['eval_opt']['accept_rate']:.2f} ({r['eval_opt']['truly_correct']:.2f})",
    ),
    ("voting: pass@1", lambda r: f"{r['voting']['pass1']:.2f}"),
    (
        "aggregator, a voter right: picks one (n)",
        lambda r: f"{ci(r['voting'], 'accuracy_with_correct')} ({r['voting']['n_with_correct']})",
    ),
    (
        "… voter 1 / random voter",
        lambda r: f"{r['voting']['baseline_first']:.2f} / {r['voting']['baseline_random']:.2f}",
    ),
    ("… margin over voter 1 (paired)", lambda r: m(r["voting"]["vs_first"])),
    ("orch_workers: pass@1 = synthesizer", lambda r: ci(r["orch_workers"])),
    ("… worker 1", lambda r: f"{r['orch_workers']['baseline_first']:.2f}"),
    ("… margin over worker 1 (paired)", lambda r: m(r["orch_workers"]["vs_first"])),
    ("… workers disagree", lambda r: pct(r["orch_workers"]["workers_disagree"])),
    (
        "… workers 1 / 2 / 3 right",
        lambda r: " / ".join(pct(a) for a in r["orch_workers"]["worker_accuracy"].values()),
    ),
    ("… a majority vote over the workers (ties: worker 1)", lambda r: pct(r["orch_workers"]["majority_vote"])),
]
rolls = [i.get("rollouts") for i in infos]
if all(rolls):
    p = rolls[0]["protocol"]
    print()
    print(f"Own rollouts: {p['problems']} held-out problems x {p['samples']} samples, temperature {p['temperature']}")
    print()
    print(f"| {'code' if all(code) else 'arithmetic'} | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(rolls))
    for label, f in rollout_rows:
        print(f"| {label} | " + " | ".join(f(c) for c in rolls) + " |")
