"""The automated lead: `orch run`, `orch demo`, `orch report`, `orch apply`, `orch skill install` (`orch spec`:
orch.cli.spec)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from orch import exitcodes
from orch.backends import registry as backends
from orch.backends.base import Backend, Placement
from orch.cli import many
from orch.cli.common import (
    BackendOpt,
    BaseOpt,
    ConstraintOpt,
    CopyOpt,
    LocalOpt,
    NameArg,
    OfflineOpt,
    PerNodeOpt,
    PrepareOpt,
    ReplaceOpt,
    ReplayOpt,
    RunNameOpt,
    SnapshotOpt,
    placement,
    run_folder,
)
from orch.cli.notify import NotifyOpt, effective, hosted
from orch.entry import demo as demo_mod
from orch.entry import runner, skill
from orch.entry.preflight import STARTING_NOTES, preflight
from orch.errors import OrchError, UsageError
from orch.exitcodes import Exit, epilog
from orch.jobs.state import load_state
from orch.lead.changes import apply as changes_apply
from orch.lead.controller import read_spec
from orch.report.changes import changes_text
from orch.report.commentary import Commentary
from orch.report.model import RunReport
from orch.report.render import cost_line, matrix_text, outcome_line, write_reports
from orch.report.summary import summary
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from orch.spec.model import FailOn, FleetSpec
from orch.view.statusbar import RunBar

DEMO_EXITS = (
    "0 the demo came out as designed (its run passed: one finding CONFIRMED, the false positive REFUTED); "
    "1 its run passed but the verdicts were not the demo's; otherwise its run's code: "
)

# Joined into the `orch` app by orch.cli.commands: `app`'s commands at the top, `skill_app` as `orch skill`.
app = typer.Typer()
skill_app = typer.Typer(no_args_is_help=True)


def also(run: RunFolder) -> str:
    """The other reports beside report.html."""
    others = (run.report_md, run.report_json, run.report_sarif, run.report_junit)
    return "also " + ", ".join(p.name for p in others)


def _print_result(result: runner.RunResult) -> None:
    report = result.report
    if result.stopped is not None:
        typer.echo(
            f"run {result.run.name}: stopped before the end ({result.stopped}); nothing is lost: "
            f"`orch run --resume {result.run.name}` continues it",
            err=True,
        )
        return
    if report is None:
        typer.echo(f"run {result.run.name}: exit {result.exit_code} (no report was written)")
        return
    typer.echo("")
    typer.echo(matrix_text(report))
    typer.echo("")
    typer.echo(outcome_line(report))
    typer.echo(cost_line(report))
    typer.echo(f"report: {result.run.report_html}  ({also(result.run)} in {result.run.root})")


def _drive(run: RunFolder, commentary: bool = True, notify: list[str] | None = None) -> runner.RunResult:
    """Drive the run to its end; meanwhile, unless `commentary` is off, print the controller's actions as
    they happen (stderr: stdout is the result), read from events.jsonl here (or its copy, pulled as the run
    goes), or for a run folder on another machine, streamed back from the controller there. A person is told
    when the run needs them, and of its end (orch.cli.notify.hosted: `notify` adds to the config file's and the
    spec's channels)."""
    info = run.info()
    shown = commentary and (backends.folder_is_here(info) or backends.backend_of(info).comes_home)
    # On a terminal, a status bar stays under the commentary (jobs, findings, cost, time left, workers).
    bar = RunBar(run, sys.stderr) if shown and sys.stderr.isatty() else None
    echo = bar.echo if bar is not None else lambda line: typer.echo(line, err=True)
    terminal = (bar.bar.raw if bar is not None else _write_stderr) if sys.stderr.isatty() else None
    try:
        with hosted(run, notify, terminal), Commentary(run, echo) if shown else contextlib.nullcontext():
            return runner.drive(run, commentary)
    except KeyboardInterrupt:
        typer.echo(
            f"\norch: controller stopped; the fleet keeps running. `orch run --resume {run.name}` continues, "
            f"`orch kill {run.name}` stops it.",
            err=True,
        )
        raise typer.Exit(130) from None
    finally:
        if bar is not None:
            bar.close()


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def notices(flags: list[str] | None) -> Callable[[FleetSpec], object]:
    """The notifications check `orch run` makes before anything (orch.cli.notify.effective): the user's file,
    the spec's `notify:` and the `--notify` flags; none in a run's container (the host's `orch run` notifies)."""
    return lambda spec: None if backends.here().container else effective(spec.notify, flags)


def _start(
    spec_path: Path,
    name: str | None,
    backend: Backend,
    replace: bool,
    copy: bool = False,
    replay: str | None = None,
    say: Callable[[str], None] = typer.echo,
    base: str | None = None,
    snapshot: bool = False,
    prepare: bool = False,
    notify: list[str] | None = None,
    fail_on: FailOn | None = None,
    placed: Placement | None = None,
) -> RunFolder:
    """`prepare` (compose's lead, run by the container's init): make the run, start no worker. `notify`: the
    `--notify` flags, checked with the spec's `notify:` and the user's file before anything is made. `fail_on`
    (`--fail-on`) wins over the spec's. `placed`: where on a swarm's nodes."""
    checks = notices(notify)
    found = preflight(spec_path, name, backend, replace, copy, replay, base, snapshot, prepare, checks, fail_on, placed)
    try:
        for warning in found.warnings:
            typer.echo(f"orch: warning: {warning}", err=True)
        source = f", replaying {found.cassette.root}" if found.cassette else ""
        spec = found.spec
        say(
            f"run {found.name}: starting {spec.worker_count()} worker(s) for {len(spec.tasks)} task(s) "
            f"({backend.name}{source}); isolation {found.isolation.value}: {STARTING_NOTES[found.isolation]}"
        )
        if found.isolation is Isolation.SHARED:
            typer.echo(f"run {found.name}: isolation shared: the workers share one uid (see the report)", err=True)
        if prepare:
            return runner.create(spec, found.name, found.prepared)
        return runner.start(spec, found.name, backend, replace, copy, found.cassette, found.prepared, placed)
    except UsageError:
        raise
    except OrchError as exc:
        typer.echo(f"orch: error: the fleet did not start: {exc.one_line()}", err=True)
        raise typer.Exit(Exit.FAILED) from None
    finally:
        found.discard()  # installed: nothing left to remove; else the staging folder goes


@skill_app.command()
def install(
    target: Annotated[
        Path | None, typer.Option("--dir", help="Folder for SKILL.md (default: ~/.claude/skills/orch).")
    ] = None,
) -> None:
    """Install the orch lead playbook as a Claude Code skill."""
    path = skill.install(target)
    typer.echo(f"installed the orch skill: {path}")


@app.command("run", epilog=epilog(exitcodes.RUN))
def run_(
    spec: Annotated[
        list[str] | None,
        typer.Argument(
            help="The fleet spec (YAML), or several (a run each); with --resume, the run's name.",
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    repo: Annotated[
        list[Path] | None,
        typer.Option(
            "--repo",
            help="Run the spec(s) on this repository instead of the spec's workdir (repeatable): a run per spec and "
            "repository, named SPEC-REPO (--name: NAME-REPO). Side by side on a swarm, else one after another.",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    name: RunNameOpt = None,
    local: LocalOpt = False,
    backend: BackendOpt = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue the named run from its folder (after the controller died)."),
    ] = False,
    replace: ReplaceOpt = False,
    copy: CopyOpt = False,
    replay: ReplayOpt = None,
    base: BaseOpt = None,
    snapshot: SnapshotOpt = False,
    fail_on: Annotated[
        FailOn | None,
        typer.Option(
            "--fail-on",
            help="Which CONFIRMED findings fail the run (exit 6): never, or those of this severity or above. "
            "Default: the spec's fail_on, else never (a run that went as designed exits 0).",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing but errors (and the --json line): the exit code says.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the result as one JSON line on stdout (exit code, counts, report paths); the rest on stderr.",
        ),
    ] = False,
    no_result: Annotated[
        bool, typer.Option("--no-result", hidden=True, help="Print no result (the host does).")
    ] = False,
    no_commentary: Annotated[
        bool, typer.Option("--no-commentary", hidden=True, help="Print no commentary (the host does).")
    ] = False,
    prepare: PrepareOpt = False,
    notify: NotifyOpt = None,
    constraint: ConstraintOpt = None,
    per_node: PerNodeOpt = None,
) -> None:
    """Run a fleet spec to completion: spawn, brief, monitor, verify findings, report, tear down."""
    if not spec:
        raise UsageError(
            "give a fleet spec, or --resume and a run's name", hint="orch run fleet.yaml, or orch run --resume NAME"
        )
    if resume and (len(spec) > 1 or repo):
        raise UsageError("--resume continues one run", hint=f"orch run --resume {spec[0]}")
    if not resume and (len(spec) > 1 or repo):
        if replay is not None or prepare:
            raise UsageError("--replay and --prepare are for one run", hint="give one spec and no --repo")
        opts = many.Options(replace, copy, base, snapshot, fail_on, placement(constraint, per_node))
        _run_many(spec, repo or [], name, backends.chosen(backend, local), opts, notify, quiet, as_json)
    if resume:
        if replay is not None:
            raise UsageError(
                "--replay starts a new run; a resumed replay keeps replaying", hint=f"orch run --resume {spec}"
            )
        if fail_on is not None:
            raise UsageError(
                "--fail-on is for a new run; a resumed run keeps its own", hint=f"orch run --resume {spec}"
            )
        run = run_folder(spec[0])
    else:
        where = backends.chosen(backend, local)
        if prepare and (not backends.here().container or replay is not None or replace):
            raise UsageError("--prepare is the container init's step (compose's lead)", hint="drop it")
        say = _say(quiet, as_json)
        path = Path(spec[0])
        run = _start(
            path, name, where, replace, copy, replay, say=say, base=base, snapshot=snapshot, prepare=prepare,
            notify=notify, fail_on=fail_on, placed=placement(constraint, per_node),
        )  # fmt: skip
        if prepare:
            raise typer.Exit(0)
    result = _drive(run, commentary=not (no_commentary or quiet), notify=notify)
    if as_json:
        typer.echo(summary(result.run, result.exit_code, result.report, result.stopped).model_dump_json())
    elif not (quiet or no_result):
        _print_result(result)
    raise typer.Exit(result.exit_code)


def _run_many(
    specs: list[str], repos: list[Path], name: str | None, where: Backend, opts: many.Options,
    notify: list[str] | None, quiet: bool, as_json: bool,
) -> NoReturn:  # fmt: skip
    """Several runs (orch.cli.many): all checked, then each started and driven; exit with the worst's code."""
    found = many.check_all([Path(s) for s in specs], repos, name, where, opts, notices(notify))
    for warning in (w for each in found for w in each.warnings):
        typer.echo(f"orch: warning: {warning}", err=True)
    say = _say(quiet, as_json)
    how = "side by side, each placed by Swarm" if where.places else "one after another"
    say(f"{len(found)} runs on {where.title}, {how}: {', '.join(each.name for each in found)}")
    try:
        result = many.Runs(where, opts, notify, say).run(found)
    except KeyboardInterrupt:
        typer.echo("\norch: stopped following; the runs keep running (orch ls, orch kill NAME)", err=True)
        raise typer.Exit(Exit.INTERRUPTED) from None
    if as_json:
        typer.echo(result.model_dump_json())
    elif not quiet:
        typer.echo(many.last_line(result))
    raise typer.Exit(result.exit_code)


def _say(quiet: bool, as_json: bool) -> Callable[[str], None]:
    """Where `orch run`'s progress lines go: nowhere (--quiet), stderr (--json: stdout is the JSON line)."""
    if quiet:
        return lambda _line: None
    return (lambda line: typer.echo(line, err=True)) if as_json else typer.echo


@app.command(epilog=epilog(exitcodes.RUN, lead=DEMO_EXITS))
def demo(
    offline: OfflineOpt = True,
    local: LocalOpt = False,
    backend: BackendOpt = None,
    name: Annotated[str, typer.Option("--name", help="Run name.")] = demo_mod.DEMO_NAME,
    mixed: Annotated[
        bool, typer.Option("--mixed", help=f"Workers {' + '.join(demo_mod.MIXED)}: findings verified across kinds.")
    ] = False,
    changes: Annotated[
        bool,
        typer.Option(
            "--changes",
            help="Three writers (Claude Code, Codex) change a tiny git repository: a fix lands, a test-editing "
            "'fix' is REJECTED, two changes to one line land one after the other (a rebase).",
        ),
    ] = False,
    constraint: ConstraintOpt = None,
    per_node: PerNodeOpt = None,
) -> None:
    """A 3-worker find-and-verify fleet over a small bundled library: one finding CONFIRMED, one REFUTED.

    Offline by default: real Claude Code workers driven by orch's scripted model, no credentials.
    """
    live = not offline
    if changes and mixed:
        raise UsageError("--changes and --mixed are two different demos", hint="pick one")
    where = backends.chosen(backend, local) if local or backend else None  # None: the default, if it can run here
    placed = placement(constraint, per_node)
    if changes:
        _demo_changes(where, live, demo_mod.CHANGES_NAME if name == demo_mod.DEMO_NAME else name, placed)
        return
    who = " + ".join(demo_mod.MIXED) if mixed else "3 Claude Code"
    _run_demo(
        demo_mod.plan(where, live, name, mixed),
        name,
        live,
        f"{who} workers on",
        demo_mod.shows_verification,
        "the verification did not come out as designed",
        "as designed: the real defect was CONFIRMED by both other workers, and the plausible false positive "
        "REFUTED by both (verification caught it: a result, not a failure).",
        placed,
    )


def _demo_changes(where: Backend | None, live: bool, name: str, placed: Placement) -> None:
    """`orch demo --changes`: the run, then the matrix of changes and the `orch apply` command."""
    _run_demo(
        demo_mod.plan(where, live, name, changes=True),
        name,
        live,
        "Claude Code + Codex writers on the git repository",
        demo_mod.shows_changes,
        "the changes did not come out as designed",
        "as designed: the honest fix LANDED, the test-editing 'fix' was REJECTED (scope: the gate caught it), and "
        "of the two changes to one line one landed and the other was rebased, reviewed again and landed after it.",
        placed,
    )


def _run_demo(
    plan: demo_mod.DemoPlan,
    name: str,
    live: bool,
    who: str,
    shows: Callable[[RunReport], bool],
    missed: str,
    shown: str,
    placed: Placement,
) -> None:
    """Run a demo's plan, print its matrix (and its changes, with the `orch apply` command), and say whether
    it showed what it is for (offline). It exits with its run's code; 1 when that passed with other verdicts.
    `placed`: where on a swarm's nodes."""
    if plan.notice:
        typer.echo(f"orch demo: {plan.notice}")
    mode = "the real model" if live else "the scripted model (offline, no credentials)"
    typer.echo(f"orch demo: {who} {plan.spec.workdir}, driven by {mode}")
    # Where a backend gives one, the workers get a disposable copy of the sample (a container's: its user's).
    run = _start(plan.spec_path, name, plan.backend, replace=True, copy=True, placed=placed)
    result = _drive(run)
    _print_result(result)
    if result.report is not None and result.report.changes:
        typer.echo("\n" + changes_text(result.report.changes))
        typer.echo(
            f"\nthe landed changes, as a branch of {plan.spec.workdir}: orch apply {run.name} --branch orch-demo"
        )
    if live or result.report is None:
        raise typer.Exit(result.exit_code)
    if not shows(result.report):
        typer.echo(f"orch demo: {missed}; see the report", err=True)
        raise typer.Exit(result.exit_code or Exit.ERROR)
    typer.echo(f"orch demo: {shown}")
    raise typer.Exit(result.exit_code)


@app.command(epilog=epilog(exitcodes.REPORT))
def report(
    name: NameArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report's model as JSON (docs/outputs.md) instead of the matrix.")
    ] = False,
) -> None:
    """Rewrite and print a run's report (verification matrix, where the files are); exit with the run's code."""
    run = run_folder(name)
    written = write_reports(run, read_spec(run), load_state(run))
    if as_json:
        typer.echo(written.model_dump_json(indent=2))
    else:
        typer.echo(matrix_text(written))
        if written.changes:
            typer.echo("\n" + changes_text(written.changes))
        typer.echo("")
        typer.echo(outcome_line(written))
        typer.echo(cost_line(written))
        typer.echo(f"report: {run.report_html}  ({also(run)})")
    raise typer.Exit(written.exit_code if written.exit_code is not None else Exit.NOT_FINISHED)


@app.command("apply")
def apply_(
    name: NameArg,
    branch: Annotated[
        str | None, typer.Option("--branch", help="The new branch's name (default orch/<run>).", show_default=False)
    ] = None,
) -> None:
    """Fetch a run's landed changes into this repository as a new branch (the working tree, the index and the
    current branch are left alone; an existing branch is never overwritten)."""
    made = changes_apply.apply_run(run_folder(name), Path.cwd(), branch)
    typer.echo(f"fetched run {name}'s landed changes as branch {made}; `git log {made}` shows them")
