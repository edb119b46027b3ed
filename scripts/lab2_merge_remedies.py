"""Lab II's remedy cells beside the main lab's raw results, so `scripts/lab2.py tables` scores them:

    python scripts/lab2_merge_remedies.py docs/experiments/lab2/raw docs/experiments/lab2/remedy_raw OUT
    python scripts/lab2.py tables OUT --plan src/rolecast/configs/experiments/lab2_plan.yaml --out DIR

OUT is a copy of the main lab's raw results with the remedy sweep's finished training cells added (and listed in
its sweep.json); the main lab's registration stays, and scripts/lab2.py marks every remedy table post hoc."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(main_raw: Path, remedy_raw: Path, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(main_raw, out)
    sweep = json.loads((out / "sweep.json").read_text())
    for cell in json.loads((remedy_raw / "sweep.json").read_text())["cells"]:
        if cell["kind"] == "train" and (remedy_raw / cell["run_dir"]).is_dir():
            shutil.copytree(remedy_raw / cell["run_dir"], out / cell["run_dir"])
            sweep["cells"].append(cell)
    (out / "sweep.json").write_text(json.dumps(sweep, indent=1))


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:4]))
