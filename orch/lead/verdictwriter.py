"""The offline verifier's and reviewer's last step, `orch offline-verdict ...`: write the verdict from the grep the
worker's own shell call ran and what orch recorded of the worker-supplied command.

Offline, the scripted model cannot reason, so a verification or review job's steps are generated
(orch.lead.briefs.verification_check): in one shell call the worker greps the quoted line, then this writes the
verdict file and the result file. The command whose outcome decides (a finding's `reproduce`; for a review, the
spec's checks, which run the writer's code) is never run by the worker: orch ran it in the checks' sandbox and
RECORD is its record (orch.lead.reproduce's, or the change's checks.json from the gate), read here. Reproduce
exits 0: CONFIRMED; otherwise, or the quote not found: REFUTED; no command, or none that ended: UNVERIFIABLE.

It runs as the worker, so it decides nothing the controller takes on trust: the controller works the same verdict
out from the same inputs (`expected`: its own look for the quote, its own record) and accepts the file only when it
is that one (orch.jobs.authorship), then checks it like any other (its command against orch's record, its quote
against the tree). Standard library only: `orch offline-verdict` is a fast path (orch.cli.main).

Usage: orch offline-verdict FOUND RECORD VERDICT_FILE RESULT_FILE JOB FINDING FILE LINE QUOTE
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

COMMAND = "offline-verdict"
"""The `orch` subcommand (orch.cli.main's fast path)."""
OUTPUT_CHARS = 1500
"""The tail of the command's output kept in the verdict."""
NO_RECORD = "-"
"""RECORD when the finding gives no command."""
USAGE = f"usage: orch {COMMAND} FOUND RECORD VERDICT_FILE RESULT_FILE JOB FINDING FILE LINE QUOTE"

Evidence = list[dict[str, object]]


def grep_command(file: str, quote_line: str) -> str:
    """The grep the offline worker runs for a quoted line: the verdict cites it when it finds nothing."""
    return f"grep -nF -- {shlex.quote(quote_line)} {shlex.quote(file)}"


def found_in(path: Path, quote_line: str) -> bool:
    """What that grep finds: a line of the file holding `quote_line` (the controller's own look)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    needle = quote_line.encode()
    return any(needle in line for line in data.split(b"\n"))


def outcome(record: dict[str, Any] | None) -> tuple[str, int | None, str, str]:
    """(command, exit code, output, why no exit code) of orch's record: a reproduction (orch.jobs.findings.
    Reproduction), or a change's checks (checks.json: its commands joined with `&&`, the first that did not pass
    deciding, as `sh -c 'a && b'` would)."""
    if record is None:
        return "", None, "", ""
    if isinstance(record.get("results"), list):
        results = [r for r in record["results"] if isinstance(r, dict)]
        command = " && ".join(str(r.get("command", "")) for r in results)
        failed = next((r for r in results if r.get("exit_code") != 0 or r.get("timed_out")), None)
        if failed is None:
            return command, 0, str(results[-1].get("output_tail", "")) if results else "", ""
        code = failed.get("exit_code")
        return command, code if isinstance(code, int) else None, str(failed.get("output_tail", "")), "timed out"
    code = record.get("exit_code")
    why = str(record.get("error") or ("timed out" if record.get("timed_out") else "did not end"))
    return str(record.get("command", "")), code if isinstance(code, int) else None, str(record.get("output", "")), why


def verdict(found: bool, record: dict[str, Any] | None, file: str, line: int, quote: str) -> tuple[str, str, Evidence]:
    """(verdict, reason, evidence) from the grep (`found`) and orch's record of the command."""
    if not found:
        grep = grep_command(file, quote)
        reason = f"the quoted code is not in {file} (grep found nothing)"
        return "REFUTED", reason, [{"command": grep, "exit_code": 1, "output": ""}]
    evidence: Evidence = [
        {"file": file, "line": line, "quote": quote},
        {"command": grep_command(file, quote), "exit_code": 0},
    ]
    command, code, out, why = outcome(record)
    if not command:
        return "UNVERIFIABLE", "the cited code is there, but no reproduce command was given to run", evidence
    if code is None:
        return (
            "UNVERIFIABLE",
            f"the cited code is there, but orch's run of the command gave no exit code ({why})",
            evidence,
        )
    evidence.append({"command": command, "exit_code": code, "output": out[-OUTPUT_CHARS:]})
    holds = code == 0
    reason = f"the reproduce command exited {code} (run by orch): the claim {'holds' if holds else 'does not hold'}"
    return ("CONFIRMED" if holds else "REFUTED"), reason, evidence


def report(
    job: str, finding: str, found: bool, record: dict[str, Any] | None, file: str, line: int, quote: str
) -> dict[str, Any]:
    """The verdict file's content."""
    name, reason, evidence = verdict(found, record, file, line, quote)
    return {"job": job, "finding": finding, "verdict": name, "reason": reason, "evidence": evidence}


def read_record(path: str) -> dict[str, Any] | None:
    """orch's record at `path` (NO_RECORD: none); one that cannot be read is an empty one (no exit code)."""
    if path == NO_RECORD:
        return None
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"error": f"orch's record {path} could not be read"}
    return loaded if isinstance(loaded, dict) else {"error": f"orch's record {path} is not an object"}


def main(args: list[str]) -> int:
    if len(args) != 9:
        print(f"orch: error: {USAGE}", file=sys.stderr)
        return 2
    found, record, verdict_file, result_file, job, finding, file, line, quote = args
    if not line.isdigit():
        print(f"orch: error: LINE must be an integer (got {line!r}); {USAGE}", file=sys.stderr)
        return 2
    content = report(job, finding, found == "1", read_record(record), file, int(line), quote)
    Path(verdict_file).write_text(json.dumps(content) + "\n", encoding="utf-8")
    Path(result_file).write_text(f"# {finding}: {content['verdict']}\n\n{content['reason']}\n", encoding="utf-8")
    print(content["verdict"], "-", content["reason"])
    return 0
