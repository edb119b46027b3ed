"""What each `rolecast` subcommand does: `cmd_<name>(args)`, called by cli.main once the arguments parsed. Kept apart
from the parser (cli.py) so `rolecast --help` and a mistyped flag answer without importing torch and the trainer."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from rolecast import testbed
from rolecast.config.load import load_config, parse_override, profile_lines
from rolecast.config.schema import dump_config
from rolecast.core.errors import ConfigError
from rolecast.core.quiet import quiet_libraries
from rolecast.core.rundir import CONFIG, EVAL, REPORT, RunPaths, read_jsonl
from rolecast.core.writable import check_writable_dir, check_writable_file
from rolecast.envinfo import collect_env, format_env
from rolecast.evaluate_cli import evaluate_steps
from rolecast.export import export_run
from rolecast.policies.shapes import init_random_model
from rolecast.report.analyze import analyze, format_summary
from rolecast.report.html import text_map, write_report
from rolecast.sweep import load_matrix, make_executor, run_sweep, summary_table
from rolecast.sweep.matrix import describe
from rolecast.testbed.rollouts import rollout_competence
from rolecast.training.checkpoint import DiskFullError, latest_step
from rolecast.training.grpo import train
from rolecast.training.interrupt import StopRequest, TrainingInterrupted

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
    "backend": "rollout.backend",
    "threads": "threads",
}


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


def _at_least(value: int | None, minimum: int, flag: str, what: str) -> None:
    """A count flag below its minimum is refused in one line (0 used to be taken silently, and meant something
    else: `--size 0` evaluated the whole default set)."""
    if value is not None and value < minimum:
        raise ConfigError(f"{flag} {value}: {what} must be at least {minimum}")


def _quiet(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """Libraries' loading bars and warnings kept out of the output, unless --verbose or --debug asks for them."""
    return quiet_libraries(not (args.verbose or args.debug))


def cmd_train(args: argparse.Namespace) -> int:
    config = args.config
    if args.resume and args.overwrite:
        raise ConfigError("--resume continues a run and --overwrite replaces one: pass only one of them")
    _at_least(args.stop_after, 1, "--stop-after", "the number of steps to run before stopping")
    if args.resume and not config:
        # the run's own config plus the overrides; train() refuses changes to fields that define the run
        config = str(Path(args.resume) / CONFIG)
        if not Path(config).is_file():
            raise ConfigError(f"cannot resume {args.resume}: no {config}, so it is not a rolecast run directory")
    cfg = load_config(config, *_overrides(args))
    # Ctrl-C finishes the step in progress and checkpoints it; not under torchrun, whose processes must stop together
    stop = StopRequest() if int(os.environ.get("WORLD_SIZE", "1")) == 1 else None
    try:
        with _quiet(args), stop.installed() if stop is not None else contextlib.nullcontext():
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
    if "final_accuracy" in summary:
        # a resumed session made no base evaluation: the run's own, from its eval.jsonl
        base = summary.get("base_accuracy", _base_accuracy(Path(summary["run_dir"])))
        start = f"base {base:.3f} -> " if base is not None else "no base evaluation (eval.at_start off) -> "
        print(
            f"accuracy: {start}final {summary['final_accuracy']:.3f} "
            f"({summary['eval_protocol']}; run dir: {summary['run_dir']})"
        )
    return 0


def _base_accuracy(run_dir: Path) -> float | None:
    """The pass@1 of the run's base evaluation (step 0, tag base) in its eval.jsonl, or None."""
    rows = read_jsonl(run_dir / EVAL) if (run_dir / EVAL).is_file() else []
    base = [r for r in rows if r.get("tag") == "base"]
    return float(base[-1]["pass@1"]) if base else None


def _resume_command(run_dir: str | Path) -> str:
    """The command that continues `run_dir`, spelled as this one was invoked (e.g. `.venv/bin/rolecast`)."""
    prog = sys.argv[0] if Path(sys.argv[0]).name == "rolecast" else "rolecast"
    return f"{shlex.quote(prog)} train --resume {shlex.quote(str(run_dir))}"


def cmd_eval(args: argparse.Namespace) -> int:
    config = args.config
    if args.every is not None and not args.checkpoint:
        raise ConfigError(f"--every {args.every} picks checkpoints of a run: give the run with --checkpoint RUN_DIR")
    _at_least(args.every, 1, "--every", "the checkpoint step interval")
    _at_least(args.size, 1, "--size", "the number of eval problems")
    _at_least(args.n, 1, "--n", "the number of samples per problem")
    if args.checkpoint and not config:  # the run's own workflow, routing and policies, so its weights fit
        config = str(Path(args.checkpoint) / CONFIG)
        if not Path(config).is_file():
            raise ConfigError(f"--checkpoint {args.checkpoint}: no {config}, so it is not a rolecast run directory")
    cfg = load_config(config, *_overrides(args))
    with _quiet(args):
        evaluate_steps(
            cfg, checkpoint=args.checkpoint, every=args.every or 0, n_samples=args.n, size=args.size, out=args.out
        )
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """`rolecast config show`: the recipe with the flags and --set applied, validated as `train` validates it, printed
    as the run's config.yaml would hold it, then (as YAML comments) what its profile set. Nothing is loaded or
    written."""
    cfg = load_config(args.config, *_overrides(args))
    print(dump_config(cfg), end="")
    for line in profile_lines(cfg):
        print(line)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    print(format_env(collect_env()))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _quiet(args):
        result = export_run(
            args.run_dir, args.out, step=args.step, overwrite=args.overwrite, base_model=args.base_model
        )
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
        if args.eval_every is not None:
            options["eval_every"] = args.eval_every
        if args.tokenizer is not None:
            options["tokenizer_dir"] = None if args.tokenizer == "train" else args.tokenizer
        path = testbed.build(
            args.out, seed=args.seed, size=args.size, kind=args.kind, evaluate=not args.no_eval, **options
        )
        print(f"testbed built in {path}")
        build_info = testbed.info(path)
    else:
        path = Path(args.dir) if args.dir else testbed.default_path(args.size, args.kind)
        build_info = testbed.info(path)  # a directory that is not a build is refused before anything loads
        print(f"testbed: {path}")
        if args.action == "rollouts":
            task = "testbed_code" if build_info.get("kind") == "code" else "testbed"
            # on the build's own held-out split (rollouts.build_split)
            print(testbed.format_rollouts(rollout_competence(path, task=task, seed=args.seed)))
            return 0
    print(testbed.format_info(build_info))
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    path = init_random_model(args.shape, args.out, seed=args.seed)
    print(f"random-weight {args.shape} with the Qwen3 tokenizer saved to {path}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    if not Path(args.run_dir).is_dir():
        print(f"rolecast: analyze: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    check_writable_dir(RunPaths(Path(args.run_dir)).analysis, f"analyze {args.run_dir}")  # where it writes
    summary = analyze(args.run_dir, plots=not args.no_plots)
    print(format_summary(summary))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.runs_dir).is_dir():
        print(f"rolecast: report: {args.runs_dir} is not a directory", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        check_writable_file(out, f"--out {out}", "the HTML file to write", REPORT)
    else:
        check_writable_dir(args.runs_dir, f"report {args.runs_dir}")  # the default: RUNS_DIR/report.html
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
    if outcome.stopped:  # data, not a failure: the map shows them; a rerun skips them
        print(
            f"{len(outcome.stopped)} cell(s) stopped themselves (training diverged; the reason in each cell's "
            f"STOPPED.json): final, a rerun skips them (delete STOPPED.json to retry one)",
            file=sys.stderr,
        )
    if outcome.failed:
        print(
            f"{len(outcome.failed)} cell(s) failed (errors in {matrix.out / 'sweep.json'} and each cell's "
            f"ERROR.txt); rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
