"""`rolecast` command line: parses, loads the config, calls one function per subcommand."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

import transformers
from rich.console import Console

from rolecast import testbed
from rolecast.config.load import load_config, parse_override
from rolecast.core.errors import ConfigError, UserError
from rolecast.core.rundir import CONFIG
from rolecast.evaluate_cli import run_eval_command
from rolecast.export import export_run
from rolecast.policies.shapes import init_random_model
from rolecast.policies.shipped import ARTIFACT_DIRS
from rolecast.report.analyze import analyze, format_summary
from rolecast.report.html import text_map, write_report
from rolecast.sweep import load_matrix, make_executor, run_sweep, summary_table
from rolecast.sweep.matrix import describe
from rolecast.testbed.rollouts import rollout_competence
from rolecast.train.checkpoint import DiskFullError, latest_step
from rolecast.train.grpo import train
from rolecast.train.interrupt import StopRequest, TrainingInterrupted

# Common flags map onto config fields; `--set section.field=value` reaches every other field.
FLAG_FIELDS = {
    "steps": "train.steps",
    "workflow": "workflow.name",
    "sharing": "routing.sharing",
    "task": "task.name",
    "model": "model.path",
    "seed": "seed",
    "run_dir": "run_dir",
    "trainable": "model.trainable",
    "threads": "threads",
}


def _add_run_flags(p: argparse.ArgumentParser, *, training: bool = True) -> None:
    """The flags that set config fields; `training=False` (eval) leaves out those only training reads."""
    p.add_argument(
        "--config",
        "-c",
        help="YAML run config (default: the embedded testbed recipe"
        + ("" if training else "; with --checkpoint, the run's own config.yaml")
        + ")",
    )
    if training:
        p.add_argument("--steps", type=int, help="training steps")
    p.add_argument("--workflow", help="single | voting | eval_opt | orch_workers | package.module:function")
    p.add_argument("--sharing", help="shared | isolated | map")
    p.add_argument("--task", help="task name, e.g. testbed, gsm8k, math500, mbpp")
    p.add_argument("--model", help="'testbed', 'testbed-large', a local model directory, or a hub id")
    if training:
        p.add_argument("--trainable", help="lora | full")
    p.add_argument("--seed", type=int, help="sampling seed" if not training else None)
    p.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (the embedded recipe: 1, which keeps its pace when other processes hold the "
        "cores; docs/benchmarks.md)",
    )
    if training:
        p.add_argument("--run-dir", dest="run_dir", help="where to write the run (default runs/<task>-<workflow>-...)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any config field, e.g. "
        + ("--set train.lr=1e-4" if training else "--set eval.temperature=0.7")
        + " (repeatable)",
    )


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(dotted field -> value, dotted field -> the flag that set it, for error messages)."""
    out: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for flag, field in FLAG_FIELDS.items():
        value = getattr(args, flag, None)
        if value is not None:
            out[field] = value
            origins[field] = f"--{flag.replace('_', '-')} {value}"
    for item in args.set:
        key, value = parse_override(item)
        out[key] = value
        origins[key] = f"--set {item}"
    return out, origins


def cmd_train(args: argparse.Namespace) -> int:
    config = args.config
    if args.resume and args.overwrite:
        raise ConfigError("--resume continues a run and --overwrite replaces one: pass only one of them")
    if args.resume and not config:
        # the run's own config plus the overrides; train() refuses changes to fields that define the run
        config = str(Path(args.resume) / CONFIG)
        if not Path(config).is_file():
            raise ConfigError(f"cannot resume {args.resume}: no {config}, so it is not a rolecast run directory")
    cfg = load_config(config, *_overrides(args))
    _quiet_libraries(args)
    # Ctrl-C finishes the step in progress and checkpoints it; not under torchrun, whose processes must stop together
    stop = StopRequest() if int(os.environ.get("WORLD_SIZE", "1")) == 1 else None
    try:
        with stop.installed() if stop is not None else contextlib.nullcontext():
            summary = train(cfg, resume=args.resume, stop_after=args.stop_after, overwrite=args.overwrite, stop=stop)
    except TrainingInterrupted as e:
        print(f"rolecast: {e.message(_resume_command(e.run_dir))}", file=sys.stderr)
        return 130
    except DiskFullError as e:
        run_dir = e.root.parent
        fallback = "" if latest_step(run_dir) is not None else " (from step 0)"
        print(
            f"rolecast: error: {e}; free space, then resume{fallback} with: {_resume_command(run_dir)}",
            file=sys.stderr,
        )
        return 2
    if "base_accuracy" in summary and "final_accuracy" in summary:
        print(
            f"accuracy: base {summary['base_accuracy']:.3f} -> final {summary['final_accuracy']:.3f} "
            f"({summary['eval_protocol']}; run dir: {summary['run_dir']})"
        )
    return 0


def _resume_command(run_dir: str | Path) -> str:
    """The command that continues `run_dir`, spelled as this one was invoked (e.g. `.venv/bin/rolecast`)."""
    prog = sys.argv[0] if Path(sys.argv[0]).name == "rolecast" else "rolecast"
    return f"{shlex.quote(prog)} train --resume {shlex.quote(str(run_dir))}"


def _quiet_libraries(args: argparse.Namespace) -> None:
    """Keep third-party loading bars (transformers' "Loading weights") and library deprecation warnings out of
    the output, unless --verbose or --debug asks for everything."""
    if args.verbose or args.debug:
        return
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def cmd_eval(args: argparse.Namespace) -> int:
    config = args.config
    if args.checkpoint and not config:  # the run's own workflow, routing and policies, so its weights fit
        config = str(Path(args.checkpoint) / CONFIG)
        if not Path(config).is_file():
            raise ConfigError(f"--checkpoint {args.checkpoint}: no {config}, so it is not a rolecast run directory")
    cfg = load_config(config, *_overrides(args))
    _quiet_libraries(args)
    return run_eval_command(
        cfg, checkpoint=args.checkpoint, every=args.every, n_samples=args.n, size=args.size, out=args.out
    )


def cmd_export(args: argparse.Namespace) -> int:
    result = export_run(args.run_dir, args.out, step=args.step, overwrite=args.overwrite)
    for p in result.policies:
        kind = "PEFT LoRA adapter" if p.kind == "peft_lora_adapter" else "Hugging Face model"
        print(f"{p.policy_id}: {kind} in {p.path} (roles: {', '.join(p.roles)})")
    print(f"exported step {result.step} of {args.run_dir} to {result.out} (README.md there says how to load each)")
    return 0


def cmd_testbed(args: argparse.Namespace) -> int:
    if args.action == "build":
        options: dict[str, Any] = {}  # what the command line leaves out keeps build()'s default
        if args.steps:
            options["steps"] = args.steps
        if args.threads:
            options["threads"] = args.threads
        if args.tokenizer is not None:
            options["tokenizer_dir"] = None if args.tokenizer == "train" else args.tokenizer
        path = testbed.build(args.out, seed=args.seed, size=args.size, evaluate=not args.no_eval, **options)
        print(f"testbed built in {path}")
    else:
        path = Path(args.dir) if args.dir else testbed.default_path(args.size)
        print(f"testbed: {path}")
        if args.action == "rollouts":
            print(testbed.format_rollouts(rollout_competence(path, seed=args.seed)))
            return 0
    print(testbed.format_info(testbed.info(path)))
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    path = init_random_model(args.shape, args.out, seed=args.seed)
    print(f"random-weight {args.shape} with the Qwen3 tokenizer saved to {path}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    if not Path(args.run_dir).is_dir():
        print(f"rolecast: analyze: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    summary = analyze(args.run_dir, plots=not args.no_plots)
    print(format_summary(summary))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.runs_dir).is_dir():
        print(f"rolecast: report: {args.runs_dir} is not a directory", file=sys.stderr)
        return 2
    _print_report(args.runs_dir, args.out)
    return 0


def _print_report(runs_dir: str | Path, out: str | None) -> None:
    path, smap = write_report(runs_dir, out)
    print(text_map(smap))
    print(f"report: {path}")


def cmd_sweep(args: argparse.Namespace) -> int:
    extra = dict(parse_override(item) for item in args.set)
    # every cell checked before anything runs; the device, model path and packages where each cell runs
    matrix = load_matrix(args.matrix, out=args.out, extra_set=extra)
    if args.dry_run:
        print("\n".join(describe(matrix)))
        print(f"{len(matrix.cells)} cells -> {matrix.out}")
        return 0
    res = matrix.settings.resources
    executor = make_executor(
        args.executor, workers=args.workers, num_cpus=res.num_cpus, num_gpus=res.num_gpus, ray_address=args.ray_address
    )
    try:
        outcome = run_sweep(matrix, executor, progress=not args.no_progress)
    except ImportError as e:  # an executor's optional package (ray) is missing
        print(f"rolecast: {e}", file=sys.stderr)
        return 2
    if args.report:
        _print_report(matrix.out, None)
    else:
        Console().print(summary_table(matrix))
    if outcome.failed:
        print(
            f"{len(outcome.failed)} cell(s) failed (errors in {matrix.out / 'sweep.json'} and each cell's "
            f"ERROR.txt); rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rolecast", description=__doc__)
    # the installed package's version (rolecast.__version__ is the same; the package root is the API, not imported here)
    parser.add_argument("--version", action="version", version=f"rolecast {version('rolecast')}")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of expected errors (bad config, data, missing package)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a workflow with GRPO")
    _add_run_flags(p)
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest intact checkpoint; --set may change only steps, lr, "
        "eval, logging and checkpoint settings (docs/training.md)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --run-dir (its metrics, evals, episodes and checkpoints)",
    )
    p.add_argument(
        "--stop-after",
        type=int,
        dest="stop_after",
        metavar="N",
        help="stop after N steps of this session (checkpointed; continue with --resume)",
    )
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="evaluate a workflow with the base model or a run's checkpoints")
    _add_run_flags(p, training=False)
    p.add_argument("--checkpoint", metavar="RUN_DIR", help="evaluate this run's latest checkpoint (or --every N)")
    p.add_argument("--every", type=int, default=0, help="with --checkpoint: every Nth checkpoint step")
    p.add_argument("--n", type=int, default=None, help="samples per problem (pass@k for k <= n)")
    p.add_argument("--size", type=int, default=None, help="number of eval problems")
    p.add_argument("--out", help="eval.jsonl to append to (default: the run dir or runs/eval.jsonl)")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser(
        "export",
        help="write a run's policies as PEFT adapters (LoRA) or Hugging Face models (full), with the tokenizer",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step (default: the latest intact one)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace what --out already holds")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("analyze", help="accuracy curve, failure signatures, warnings and plots of a run directory")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--no-plots", action="store_true", dest="no_plots", help="numbers and summary.json only")
    p.set_defaults(fn=cmd_analyze)

    p = sub.add_parser(
        "sweep", help="run a matrix of cells (workflow x task x model x sharing x seed); rerun to resume"
    )
    p.add_argument("matrix", help="matrix YAML (see docs/sweep.md), e.g. configs/testbed_matrix.yaml")
    p.add_argument("--out", help="directory of the cells (default: the matrix's `out`, else runs/<matrix name>)")
    p.add_argument(
        "--executor",
        choices=["local", "pool", "ray"],
        default="local",
        help="local: one cell at a time in this process; pool: cells in parallel processes sized to "
        "this machine; ray: one Ray task per cell",
    )
    p.add_argument("--workers", type=int, help="pool: cells at once (default: cores // resources.num_cpus)")
    p.add_argument("--ray-address", dest="ray_address", help="ray: cluster address (default: start a local Ray)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field in every cell (after the matrix's `set`)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of a live progress display")
    p.add_argument(
        "--report", action="store_true", help="at the end, write <out>/report.html and print the map as text"
    )
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser("report", help="the map of a sweep (or a directory of runs) as one self-contained HTML file")
    p.add_argument("runs_dir", metavar="RUNS_DIR", help="a sweep's out directory, a directory of runs, or one run")
    p.add_argument("--out", help="HTML file to write (default RUNS_DIR/report.html)")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("testbed", help="build or inspect the embedded testbed model")
    p.add_argument(
        "action",
        choices=["build", "info", "rollouts"],
        help="info: the recorded competences; rollouts: re-measure the judging roles on the model's own workflow rollouts",
    )
    p.add_argument(
        "dir", nargs="?", default=None, help="info/rollouts: a testbed build directory (default: the shipped one)"
    )
    p.add_argument("--out", default="testbed-build", help="output directory for build")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", choices=list(ARTIFACT_DIRS), default="small", help="model size (default small)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="warm-start optimizer steps (default 2000, batch 64; the first 500 train the solver and worker traces only)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="build: torch threads (default 2, as the shipped builds; the weights depend on the thread count)",
    )
    p.add_argument("--no-eval", action="store_true", dest="no_eval", help="build: skip the per-role evaluation")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="build: reuse this build's tokenizer (default: the shipped one, as the shipped builds do), or 'train' "
        "to train a new one on the build's transcripts",
    )
    p.set_defaults(fn=cmd_testbed)

    p = sub.add_parser("model", help="make a random-weight model in a published shape (Qwen3 tokenizer)")
    p.add_argument("action", choices=["init"])
    p.add_argument("--shape", default="tiny-qwen3", help="tiny-qwen3 | qwen3-0.6b | qwen3-1.7b | qwen3-4b")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.fn(args)
    except KeyboardInterrupt:  # Ctrl-C outside training (train has its own line): no traceback
        print("rolecast: interrupted", file=sys.stderr)
        return 130
    except UserError as e:
        # an expected failure (config, data file, missing package, unreachable model): its message says what to
        # fix; a traceback would only bury it. Anything else is a bug and keeps its traceback.
        if args.debug:
            raise
        print(f"rolecast: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
