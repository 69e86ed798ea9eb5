"""The offline verifier's last step, `orch offline-verdict ...`: write the verdict from what the worker's own
shell call returned.

Offline, the scripted model cannot reason, so a verification job's steps are generated
(orch.lead.briefs.verification_check): in one shell call the worker greps the finding's quoted line and
runs its reproduce command, then this writes the verdict file and the result file from those exit codes
(reproduce exits 0: CONFIRMED; otherwise, or the quote not found: REFUTED; no reproduce command:
UNVERIFIABLE). It used to be a `python3 -c '...'` of 30 lines inside that call, a line of the brief some
agents cut (Gemini CLI's read_file stops at 2000 characters); as a command the call stays short.

It runs as the verifier worker, so it decides nothing the controller takes on trust: the controller checks
the verdict it writes like any other (its commands against the gateway's ledger, their exit codes against
the tool results, its quote against the tree).

Usage: orch offline-verdict FOUND CODE VERDICT_FILE RESULT_FILE JOB FINDING FILE LINE QUOTE [REPRODUCE]
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

COMMAND = "offline-verdict"
"""The `orch` subcommand (orch.cli.main's fast path)."""
OUTPUT_CHARS = 1500
"""The tail of the reproduce command's output kept in the verdict."""
USAGE = f"usage: orch {COMMAND} FOUND CODE VERDICT_FILE RESULT_FILE JOB FINDING FILE LINE QUOTE [REPRODUCE]"


def grep_command(file: str, quote_line: str) -> str:
    """The grep the offline verifier runs for a quoted line: the verdict cites it when it finds nothing."""
    return f"grep -nF -- {shlex.quote(quote_line)} {shlex.quote(file)}"


def output_file(verdict_file: str) -> str:
    """Where the verifier's shell call leaves the reproduce command's output for this step."""
    return verdict_file + ".out"


Evidence = list[dict[str, object]]


def verdict(found: str, code: str, file: str, line: int, quote: str, repro: str, out: str) -> tuple[str, str, Evidence]:
    """(verdict, reason, evidence) from the exit codes of the grep (`found`: "1" when it found the quote) and
    of the reproduce command."""
    if found != "1":
        grep = grep_command(file, quote)
        return (
            "REFUTED",
            f"the quoted code is not in {file} (grep found nothing)",
            [{"command": grep, "exit_code": 1, "output": ""}],
        )
    evidence: Evidence = [{"file": file, "line": line, "quote": quote}]
    if not repro:
        return "UNVERIFIABLE", "the cited code is there, but no reproduce command was given to run", evidence
    holds = code == "0"
    evidence.append({"command": repro, "exit_code": int(code), "output": out[-OUTPUT_CHARS:]})
    reason = f"the reproduce command exited {code}: the claim {'holds' if holds else 'does not hold'}"
    return ("CONFIRMED" if holds else "REFUTED"), reason, evidence


def main(args: list[str]) -> int:
    if len(args) not in (9, 10):
        print(f"orch: error: {USAGE}", file=sys.stderr)
        return 2
    found, code, verdict_file, result_file, job, finding, file, line, quote = args[:9]
    repro = args[9] if len(args) == 10 else ""
    if not line.isdigit() or (repro and found == "1" and not code.lstrip("-").isdigit()):
        print(f"orch: error: LINE and CODE must be integers (got {line!r}, {code!r}); {USAGE}", file=sys.stderr)
        return 2
    out_path = Path(output_file(verdict_file))
    out = ""
    if out_path.is_file() and not out_path.is_symlink():
        out = out_path.read_text(errors="replace")
        out_path.unlink()
    name, reason, evidence = verdict(found, code, file, int(line), quote, repro, out)
    report = {"job": job, "finding": finding, "verdict": name, "reason": reason, "evidence": evidence}
    Path(verdict_file).write_text(json.dumps(report) + "\n", encoding="utf-8")
    Path(result_file).write_text(f"# {finding}: {name}\n\n{reason}\n", encoding="utf-8")
    print(name, "-", reason)
    return 0
