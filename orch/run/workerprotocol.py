"""The worker protocol: the words every worker is given about where to write and how to finish."""

from __future__ import annotations

from orch.run.folder import RunFolder


def pointer_text(run: RunFolder, n: int) -> str:
    """The one line that points a worker at its brief (the reference harness's wording)."""
    return f"Read and follow the instructions in {run.task(n)} then begin; work autonomously."


def protocol_footer(run: RunFolder, n: int, total: int) -> str:
    """The worker protocol appended to every brief: where to write, how to talk, how to finish."""
    return (
        "\n\n---\n## Worker protocol (added by orch)\n"
        f"- You are worker {n} of {total}. Work autonomously; never wait for confirmation.\n"
        f"- Post short progress and findings to the bus: `orch bus post {run.name} --as {n} 'text'` "
        f"(or read it: `cat {run.bus}`). One owner per shared file: ask on the bus for changes.\n"
        f"- When finished, write your result to {run.result(n)}, then, last, create {run.done(n)}.\n"
    )
