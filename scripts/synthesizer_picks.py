"""What a code synthesizer that names a worker would score, read from the shipped code builds' own rollouts (post
hoc: decided 2026-12-07 after seeing that neither build's synthesizer beats worker 1; docs/testbed.md).

    python scripts/synthesizer_picks.py            # both code builds, `rolecast testbed rollouts`' protocol
    python scripts/synthesizer_picks.py --path DIR # a code build of your own (`rolecast testbed build --kind code`)

Orch-Workers runs on the 80 held-out code problems x 4 samples at T 0.7 (the rollouts' protocol and seed, so the
episodes are the ones `rolecast testbed rollouts --kind code` measured). For each episode: the synthesizer's own
program; the program of the worker its check rows said yes to (`checked`: its own where it said yes to none);
worker 1; any worker right; and (added 2026-12-07, evening) the ceiling of checking the shown examples: the first
worker whose program passes them when run in the sandbox (`rollouts.shown_check_picks`). Margins over worker 1 with
95% intervals clustered by hidden function (`rollouts.cluster_of`; by problem until 2026-12-08).
"""

from __future__ import annotations

import argparse

from rolecast.policies.shipped import default_path
from rolecast.testbed.rollouts import code_synthesizer_picks
from rolecast.testbed.stats import margin_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="small,large")
    ap.add_argument("--path", action="append", default=[], help="a built code testbed directory (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    print("| build | episodes | synthesizer's own | checked (copy the worker it said yes to) | worker 1 | any worker "
          "| own - worker 1 | checked - worker 1 | checked right, own wrong | shown checks run - worker 1 |")  # fmt: skip
    print("|---|---:|---|---|---:|---:|---|---|---:|---|")
    builds = [(p, p) for p in a.path] or [
        (default_path(s, "code"), f"testbed-code{'-large' if s == 'large' else ''}") for s in a.sizes.split(",")
    ]
    for path, name in builds:
        r = code_synthesizer_picks(path, a.threads)
        print(
            f"| {name} | {r['n_episodes']} | {r['own'][0]:.3f} ± {r['own'][1]:.3f} | "
            f"{r['checked'][0]:.3f} ± {r['checked'][1]:.3f} | {r['worker_1']:.3f} | {r['any_worker']:.3f} | "
            f"{margin_text(r['own_vs_first'], 3)} | {margin_text(r['checked_vs_first'], 3)} | "
            f"{r['checked_right_own_wrong']} | {margin_text(r['shown_checks_vs_first'], 3)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
