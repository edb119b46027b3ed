"""The `rolecast` command line. The arguments are parsed here; each subcommand's work is a function in commands.py,
imported only once they parsed, so `rolecast --help` and a mistyped flag answer without loading torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from importlib.metadata import version

from rolecast.core.errors import UserError
from rolecast.policies.shipped import KINDS, SIZES

DESCRIPTION = """Train multi-agent LLM workflows (Voting, Eval-Opt, Orch-Workers, or a single agent) with GRPO, and
see why training succeeds or collapses.

Start here:
  rolecast train                        train the embedded testbed model (single agent, CPU, a few minutes)
  rolecast analyze RUN_DIR              what the run learned: accuracy curve, failure signatures, plots
  rolecast env                          what this machine can run (GPU, vLLM, sandbox, datasets)

Every command has its own --help (rolecast train --help). Guides: README.md and docs/ in the repository."""


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
    p.add_argument(
        "--backend", help="rollout backend: hf (default) | vllm (a CUDA GPU and the vllm extra; docs/gpu.md)"
    )
    p.add_argument("--seed", type=int, help="sampling seed" if not training else None)
    p.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads, at least 1 (the embedded recipe: 1, which keeps its pace when other processes "
        "hold the cores; docs/benchmarks.md)",
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


class CommandLineParser(argparse.ArgumentParser):
    """The top-level parser. It keeps each subcommand's parser (`subcommands`) so that `parse_command_line` reports
    a flag the subcommand does not know with that subcommand's usage: `rolecast train --bogus` shows train's usage,
    where argparse alone shows the top-level one, which lists none of train's flags."""

    subcommands: dict[str, argparse.ArgumentParser]

    def parse_command_line(self, argv: list[str] | None) -> argparse.Namespace:
        args, unknown = self.parse_known_args(argv)
        if unknown:
            self.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
        return args


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="rolecast", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # the installed package's version (rolecast.__version__ is the same; the package root is the API, not imported here)
    parser.add_argument("--version", action="version", version=f"rolecast {version('rolecast')}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show libraries' loading bars, info messages and warnings"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of expected errors (bad config, data, missing package)",
    )
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

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
        help="stop after N >= 1 steps of this session (checkpointed; continue with --resume)",
    )
    p.set_defaults(command="train")

    p = sub.add_parser("eval", help="evaluate a workflow with the base model or a run's checkpoints")
    _add_run_flags(p, training=False)
    p.add_argument("--checkpoint", metavar="RUN_DIR", help="evaluate this run's latest checkpoint (or --every N)")
    p.add_argument(
        "--every", type=int, default=None, metavar="N", help="with --checkpoint: each checkpoint at a multiple of N"
    )
    p.add_argument("--n", type=int, default=None, help="samples per problem, at least 1 (pass@k for k <= n)")
    p.add_argument("--size", type=int, default=None, help="number of eval problems, at least 1")
    p.add_argument("--out", help="eval.jsonl to append to (default: the run dir or runs/eval.jsonl)")
    p.set_defaults(command="eval")

    p = sub.add_parser(
        "export",
        help="write a run's policies as PEFT adapters (LoRA) or Hugging Face models (full), with the tokenizer",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step (default: the latest intact one)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace what --out already holds")
    p.add_argument(
        "--base-model",
        dest="base_model",
        metavar="NAME_OR_PATH",
        help="the base model to record in each adapter's config (default: the run's model.path as its config "
        "names it: a hub id, a path, or 'testbed')",
    )
    p.set_defaults(command="export")

    p = sub.add_parser("analyze", help="accuracy curve, failure signatures, warnings and plots of a run directory")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--no-plots", action="store_true", dest="no_plots", help="numbers and summary.json only")
    p.set_defaults(command="analyze")

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
    p.set_defaults(command="sweep")

    p = sub.add_parser("report", help="the map of a sweep (or a directory of runs) as one self-contained HTML file")
    p.add_argument("runs_dir", metavar="RUNS_DIR", help="a sweep's out directory, a directory of runs, or one run")
    p.add_argument("--out", help="HTML file to write (default RUNS_DIR/report.html)")
    p.set_defaults(command="report")

    p = sub.add_parser("config", help="print the resolved, validated run config without running anything")
    p.add_argument("action", choices=["show"], help="show: the config as a run's config.yaml would hold it")
    _add_run_flags(p)
    p.set_defaults(command="config")

    p = sub.add_parser(
        "env", help="what this machine gives rolecast: versions, GPUs, vLLM, the sandbox, datasets, threads"
    )
    p.set_defaults(command="env")

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
    p.add_argument("--size", choices=list(SIZES), default="small", help="model size (default small)")
    p.add_argument(
        "--kind",
        choices=list(KINDS),
        default="math",
        help="math (default): the arithmetic models the map trains; code: the code task's models (testbed-code), "
        "built from the math build of the same size",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="warm-start optimizer steps (default 2000, batch 64, the first 500 the solver and worker traces only; "
        "--kind code: 900 of 32, the first 100)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="build: torch threads (default 2, as the shipped builds; the weights depend on the thread count)",
    )
    p.add_argument("--no-eval", action="store_true", dest="no_eval", help="build: skip the per-role evaluation")
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        dest="eval_every",
        help="build: the held-out solver's accuracy every N steps, kept as build_info.json's solver_curve "
        "(default 100, as the shipped math builds; 0: none; it does not change the weights)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="build: reuse this build's tokenizer (default: the shipped one, as the shipped builds do), or 'train' "
        "to train a new one on the build's transcripts",
    )
    p.set_defaults(command="testbed")

    p = sub.add_parser("model", help="make a random-weight model in a published shape (Qwen3 tokenizer)")
    p.add_argument("action", choices=["init"])
    p.add_argument("--shape", default="tiny-qwen3", help="tiny-qwen3 | qwen3-0.6b | qwen3-1.7b | qwen3-4b")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(command="model")
    parser.subcommands = dict(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_command_line(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        # the subcommand's code, imported once the arguments parsed (torch, transformers and the trainer load here)
        commands = importlib.import_module("rolecast.commands")
        status: int = getattr(commands, f"cmd_{args.command}")(args)
        sys.stdout.flush()  # a reader that went away shows here, not as an "Exception ignored" line at exit
        return status
    except BrokenPipeError:
        # `rolecast ... | head`: the reader closed the pipe. Stop quietly, as other command-line tools do; what is
        # still buffered goes to /dev/null so that Python's own flush at exit does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a process ended by SIGPIPE
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
