"""The SARIF 2.1.0 subset report.sarif is written in (orch.report.sarif.render fills it): pydantic models, camelCase
on the wire, unknown keys refused."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny
from pydantic.alias_generators import to_camel

from orch.run.folder import RELATIVE

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION: Literal["2.1.0"] = "2.1.0"

Level = Literal["error", "warning", "note", "none"]


class Sarif(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Message(Sarif):
    text: str


class ArtifactContent(Sarif):
    text: str


class Region(Sarif):
    start_line: int
    snippet: ArtifactContent | None = None


class ArtifactLocation(Sarif):
    uri: str
    uri_base_id: str | None = None


class PhysicalLocation(Sarif):
    artifact_location: ArtifactLocation
    region: Region | None = None


class Location(Sarif):
    physical_location: PhysicalLocation


class PropertyBag(Sarif):
    """A result's or a run's properties: each section its own subclass."""

    tags: list[str] = Field(default_factory=list)


class Verifier(Sarif):
    job: str
    worker: int | None
    agent: str | None
    round: int
    stance: str
    verdict: str
    reason: str
    flags: list[str] = Field(default_factory=list)


class FindingProperties(PropertyBag):
    finding: str
    """The finding's id in this run (report.html#<finding>); not part of the fingerprint."""
    task: str
    severity: str
    status: str
    """CONFIRMED, REFUTED, UNVERIFIED or pending."""
    finder: int
    finder_agent: str | None
    verifiers: list[Verifier]
    reproduce: str | None = None
    report: str
    """Where the finding is in the run's report, relative to the run folder."""


class ChangeProperties(PropertyBag):
    task: str
    status: str
    """REJECTED, CONFLICT or FAILED (a change that landed, or a writer that changed nothing, is no result)."""
    reason: str | None
    """REJECTED: which gate refused it (checks, scope, review)."""
    detail: str
    writer: int | None
    writer_agent: str | None
    checks: list[str]
    """Each check on the patched tree: `command: exit N`."""
    reviews: list[str]
    """Each review: `job W<n> (agent): verdict: reason`."""
    report: str


class Suppression(Sarif):
    """Why a result is not an alert: a finding its verifiers REFUTED, a change the gate REJECTED. `external`:
    the reason lives outside the code (in the verifiers' verdicts), not in a comment in it."""

    kind: Literal["inSource", "external"] = "external"
    status: Literal["accepted", "underReview", "rejected"] = "accepted"
    justification: str


class Result(Sarif):
    rule_id: str
    rule_index: int = -1
    level: Level
    message: Message
    locations: list[Location] = Field(default_factory=list)
    partial_fingerprints: dict[str, str] = Field(default_factory=dict)
    suppressions: list[Suppression] | None = None
    """Present (with an entry) only on a suppressed result: code scanning shows it as closed, not an alert."""
    properties: SerializeAsAny[PropertyBag] | None = None


class ReportingConfiguration(Sarif):
    level: Level


class Rule(Sarif):
    id: str
    name: str | None = None
    short_description: Message
    full_description: Message | None = None
    default_configuration: ReportingConfiguration | None = None
    properties: PropertyBag | None = None


class Driver(Sarif):
    name: str
    version: str
    semantic_version: str
    information_uri: str
    rules: list[Rule]


class Tool(Sarif):
    driver: Driver


class Invocation(Sarif):
    execution_successful: bool
    exit_code: int | None = None
    exit_code_description: str | None = None
    start_time_utc: str | None = None
    end_time_utc: str | None = None


class AutomationDetails(Sarif):
    id: str


class RunProperties(PropertyBag):
    run: str
    status: str
    reason: str
    isolation: str
    offline: bool
    replay_of: str | None = None
    report: str = RELATIVE.report_html.as_posix()


class Run(Sarif):
    tool: Tool
    invocations: list[Invocation]
    automation_details: AutomationDetails
    original_uri_base_ids: dict[str, ArtifactLocation] | None = None
    results: list[Result]
    properties: RunProperties


class SarifLog(Sarif):
    schema_uri: str = Field(default=SCHEMA_URI, alias="$schema")
    version: Literal["2.1.0"] = SARIF_VERSION
    runs: list[Run]
