"""Loading and checking a fleet spec: `load_spec` reports every problem with its location
(`tasks[2].role: ...`, with the YAML line when there is one), pydantic's own and the cross-field rules
pydantic cannot see (`check_spec`). The models are orch.spec.model."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orch.agents.registry import ADAPTERS
from orch.errors import UsageError
from orch.run.files import read_text_input
from orch.run.folder import MAX_WORKERS
from orch.spec.model import STEP_EXTRAS, STEP_KINDS, WRITER_ROLES, Dispatch, FleetSpec, Role, ScriptStep
from orch.spec.placeholders import PLACEHOLDERS, placeholders
from orch.text import strings_in

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Issue:
    loc: Loc
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = format_loc(self.loc) or "spec"
        at = f" (line {self.line})" if self.line else ""
        return f"{where}: {self.message}{at}"


class SpecError(UsageError):
    """A fleet spec with problems; `issues` lists each with its location."""

    def __init__(self, source: str, issues: Sequence[Issue]) -> None:
        self.issues = list(issues)
        listing = "; ".join(str(i) for i in self.issues[:5])
        more = f" (and {len(self.issues) - 5} more)" if len(self.issues) > 5 else ""
        super().__init__(f"{source}: {listing}{more}", hint=f"`orch spec check {source}` lists every problem")


def format_loc(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def pydantic_issues(exc: ValidationError) -> list[Issue]:
    issues = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's internal loc parts (e.g. "function-after[...]") that are not keys.
        loc = tuple(p for p in err["loc"] if isinstance(p, int) or "[" not in str(p))
        message = err["msg"]
        if err["type"] == "value_error":  # a validator's own words, without pydantic's "Value error, "
            message = str(err.get("ctx", {}).get("error", message))
        if err["type"] == "extra_forbidden":
            message = "unknown key (not allowed here)" + did_you_mean(str(loc[-1]), known_keys(FleetSpec, loc[:-1]))
        issues.append(Issue(loc, message[:1].lower() + message[1:]))
    return issues


def known_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys a spec may have at `loc` (a mapping's location: `()`, `("tasks", 0)`, `("limits",)`)."""
    kind: Any = model
    for part in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            kind = field.annotation if field is not None else None
        elif typing.get_origin(kind) in (list, dict):
            kind = typing.get_args(kind)[-1]  # a list's items, a mapping's values
        else:
            return []
    kind = _unwrap(kind)
    return list(kind.model_fields) if isinstance(kind, type) and issubclass(kind, BaseModel) else []


def _unwrap(kind: Any) -> Any:
    """`X | None` as X."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1 else kind


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """`; did you mean 'tasks'?` for a misspelt key, or nothing when none is close."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _line_of(root: yaml.Node | None, loc: Loc) -> int | None:
    """The 1-based YAML line of the node at `loc` (or of its deepest existing parent)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    # An unknown key: point at the key itself.
                    child = value
                    line = key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
        if child is None:
            return line
        node = child
        line = node.start_mark.line + 1
    return line


Rules = Callable[[FleetSpec], Iterable[Issue]]
"""A caller's own rules of a spec (what its run's backend cannot take), located like the spec's own problems."""


def parse_spec(
    text: str, source: str, base: Path, rules: Rules | None = None, workdir: Path | None = None
) -> FleetSpec:
    """Validate spec text; relative paths are taken from `base` (the spec's folder). `rules`: the caller's own.
    `workdir`: the spec's `workdir:` replaced by this folder (absolute, or from the current one)."""
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(source, [Issue((), f"not valid YAML: {problem}", line)]) from None
    if not isinstance(data, dict):
        raise SpecError(source, [Issue((), "a fleet spec is a YAML mapping (workdir:, tasks:, ...)", 1)])
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as exc:
        issues = [Issue(i.loc, i.message, _line_of(root, i.loc)) for i in pydantic_issues(exc)]
        raise SpecError(source, issues) from None
    if workdir is not None:
        spec = spec.model_copy(update={"workdir": workdir.resolve()})
    spec = resolve_paths(spec, base)
    found = [*check_spec(spec), *(rules(spec) if rules is not None else [])]
    issues = [Issue(i.loc, i.message, _line_of(root, i.loc)) for i in found]
    if issues:
        raise SpecError(source, issues)
    return spec


def load_spec(path: Path, rules: Rules | None = None, workdir: Path | None = None) -> FleetSpec:
    """`workdir` (`orch run --repo`): the folder the run works on instead of the spec's `workdir:`."""
    text = read_text_input(path)
    return parse_spec(text, str(path), path.resolve().parent, rules, workdir)


def resolve_paths(spec: FleetSpec, base: Path) -> FleetSpec:
    """Make the workdir absolute and read template files into the spec (so a run needs no other file)."""
    workdir = spec.workdir.expanduser()
    spec = spec.model_copy(update={"workdir": (workdir if workdir.is_absolute() else base / workdir).resolve()})
    roles = {}
    for role, custom in spec.roles.items():
        if custom.template_file is not None and custom.template is None:
            path = custom.template_file.expanduser()
            path = path if path.is_absolute() else base / path
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SpecError(
                    "spec", [Issue(("roles", role.value, "template_file"), f"cannot read {path}: {exc}")]
                ) from None
            custom = custom.model_copy(update={"template": text, "template_file": None})
        roles[role] = custom
    return spec.model_copy(update={"roles": roles})


def check_spec(spec: FleetSpec) -> list[Issue]:
    """Cross-field rules pydantic cannot see; each issue carries its location."""
    issues: list[Issue] = []
    add = issues.append
    if not spec.workdir.is_dir():
        add(Issue(("workdir",), f"folder does not exist: {spec.workdir}"))
    if spec.agents is not None and ({"agent", "model", "workers"} & spec.model_fields_set):
        add(Issue(("agents",), "give either agents: [...] or agent/model/workers, not both"))
    if spec.agents is not None and not spec.agents:
        add(Issue(("agents",), "list at least one agent group"))
    for i, group in enumerate(spec.groups()):
        if group.agent not in ADAPTERS:
            loc: Loc = ("agents", i, "agent") if spec.agents else ("agent",)
            add(Issue(loc, f"unknown agent {group.agent!r} (available: {', '.join(sorted(ADAPTERS))})"))
    total = spec.worker_count()
    if total > MAX_WORKERS:
        add(Issue(("agents",), f"{total} workers is more than {MAX_WORKERS}"))
    ids = spec.task_ids()
    for i, task_id in enumerate(ids):
        if ids.index(task_id) != i:
            add(Issue(("tasks", i, "id"), f"duplicate task id {task_id!r}"))
    for i, task in enumerate(spec.tasks):
        if task.role in (Role.VERIFIER, Role.REVIEWER):
            made = (
                "verification jobs are made from findings" if task.role is Role.VERIFIER else "review jobs from changes"
            )
            add(Issue(("tasks", i, "role"), f"{made}; use finder, writer, fixer or scribe"))
        if task.worker is not None and task.worker > total:
            add(Issue(("tasks", i, "worker"), f"worker {task.worker} does not exist (the fleet has {total})"))
        if task.allow and task.role not in WRITER_ROLES:
            add(Issue(("tasks", i, "allow"), "allow: is for writer, fixer and scribe tasks (they change the tree)"))
        if task.change is not None and task.role not in WRITER_ROLES:
            add(Issue(("tasks", i, "change"), "change: is for writer, fixer and scribe tasks (they change the tree)"))
        if task.offline_script is not None:
            issues += _check_steps(task.offline_script, ("tasks", i, "offline_script"), PLACEHOLDERS[task.role])
    if spec.dispatch is Dispatch.PER_WORKER and len(spec.tasks) > total:
        add(
            Issue(("tasks",), f"dispatch per-worker needs a worker per task ({len(spec.tasks)} tasks, {total} workers)")
        )
    policy = spec.verification
    if policy.quorum is not None and policy.quorum > policy.verifiers_per_finding:
        add(Issue(("verification", "quorum"), f"quorum {policy.quorum} is more than verifiers_per_finding"))
    if any(t.role is Role.FINDER for t in spec.tasks) and total < policy.verifiers_per_finding + 1:
        add(
            Issue(
                ("verification", "verifiers_per_finding"),
                f"{policy.verifiers_per_finding} verifier(s) per finding need at least "
                f"{policy.verifiers_per_finding + 1} workers: a finder never verifies its own finding "
                f"(the fleet has {total})",
            )
        )
    reviewers = spec.changes.reviewers_per_change
    if spec.writer_tasks() and total < reviewers + 1:
        add(
            Issue(
                ("changes", "reviewers_per_change"),
                f"{reviewers} reviewer(s) per change need at least {reviewers + 1} workers: a writer never reviews its "
                f"own change, so every change would be rejected (the fleet has {total}; 0 lands changes unreviewed)",
            )
        )
    for role, custom in spec.roles.items():
        where: Loc = ("roles", role.value)
        if custom.template is not None and custom.template_file is not None:
            add(Issue(where, "give template or template_file, not both"))
        if custom.template is not None:
            if not custom.template.strip():
                add(Issue((*where, "template"), "empty template"))
            for name in placeholders(custom.template):
                if name not in PLACEHOLDERS[role]:
                    add(Issue((*where, "template"), _unknown_placeholder(name, PLACEHOLDERS[role])))
        if custom.offline_script is not None:
            issues += _check_steps(custom.offline_script, (*where, "offline_script"), PLACEHOLDERS[role])
    return issues


def _unknown_placeholder(name: str, allowed: Sequence[str]) -> str:
    return f"unknown placeholder {{{{{name}}}}} (available: {', '.join(sorted(allowed))})"


def _check_steps(steps: Sequence[ScriptStep], where: Loc, allowed: Sequence[str]) -> list[Issue]:
    issues = []
    for i, step in enumerate(steps):
        kinds = [k for k in STEP_KINDS if k in step]
        extras = {STEP_EXTRAS[k] for k in kinds if k in STEP_EXTRAS}
        if len(kinds) != 1 or set(step) - {*kinds, *extras}:
            issues.append(
                Issue(
                    (*where, i),
                    f"a step has exactly one of {', '.join(STEP_KINDS)} "
                    "(write may add content, tool input, fail retry_after); "
                    f"got {sorted(step)}",
                )
            )
        for key, value in step.items():
            if key == "retry_after":
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    issues.append(Issue((*where, i, key), "must be a number of seconds (0 or more)"))
                continue
            if key == "input":
                if not isinstance(value, dict):
                    issues.append(Issue((*where, i, key), "must be a mapping (the tool's input)"))
                    continue
                texts = list(strings_in(value))
            elif isinstance(value, str):
                texts = [value]
            else:
                issues.append(Issue((*where, i, key), "must be a string"))
                continue
            for name in (n for text in texts for n in placeholders(text)):
                if name not in allowed:
                    issues.append(Issue((*where, i, key), _unknown_placeholder(name, allowed)))
    return issues
