"""Every name a line of `events.jsonl` can have (`ControllerEvent.event`), grouped by who logs it.

One enum in the run layer, because the fleet and container layers log events too and may not import
the lead. The values are the strings on disk: renaming one breaks older run folders and the readers
of the file (the commentary, the tests, bench/). Grep a member to go from a reader to its writer.
"""

from __future__ import annotations

from enum import StrEnum


class Event(StrEnum):
    # orch.fleet: workers started, prompted, restarted, stopped
    SPAWNED = "spawned"
    DIALOG_ANSWERED = "dialog-answered"
    START_SCREEN_ANSWERED = "start-screen-answered"
    """A screen the agent shows at every start as designed, which no seeding prevents (Codex's "Folder access" in a
    folder orch keeps untrusted), answered at boot (orch.contracts.Dialog.every_start)."""
    SENT = "sent"
    SEND_FAILED = "send-failed"
    BRIEFED = "briefed"
    RESTARTED = "restarted"
    KILLED = "killed"
    GATEWAY_STARTED = "gateway-started"
    RELAY_STARTED = "relay-started"
    """The relay of the workers' sockets (orch.backends.local.relay) was found dead and started again (a worker
    restart, the controller's look): its workers' sockets are served again in the same folders."""
    CREDENTIAL_FALLBACK = "credential-fallback"

    # orch.container: the run's container
    RESUMED = "resumed"
    CONTAINER_REMOVED = "container-removed"
    REAPED = "reaped"
    EGRESS = "egress"

    # strict isolation: what a worker tried beyond its own outbox (SECURITY.md, "Workers that lie on purpose")
    BUS_POST_REFUSED = "bus-post-refused"
    """A post to bus.sock that named another worker (`--as`), or came from no worker of the run."""
    CONNECTIONS_CAPPED = "connections-capped"
    """A worker held more connections open at once than its cap on one of its sockets (the bus, and locally
    the relay's gateway and pane sockets): the excess refused, flagged once per burst (the relay's: at most
    once a minute per socket, `refused` counting the refusals it stands for)."""
    PEER_REFUSED = "peer-refused"
    """A connection to a worker's own pane socket (orch.backends.local.relay, a container's strict run) from a uid that
    is neither that worker's nor the run's: a worker probing another's pane. `worker`: the prober's, when a
    worker's uid; logged at most once a minute per socket, `refused` counting the refusals it stands for."""
    EGRESS_REFUSED = "egress-refused"
    """A local strict worker's CONNECT refused by its proxy (orch.backends.local.egressproxy): data reason (not-listed,
    ip-literal, private-address, not-connect, ...) and target; at most once a minute per worker and reason."""
    WRITE_DENIED = "write-denied"
    """The worker's tool results (the gateway's ledger) show writes the system refused it."""
    TREE_NOT_NOTED = "tree-not-noted"
    """Shared isolation: the tree under audit has too many files to check after each job whether it changed."""
    LEFTOVER_PROCESSES = "leftover-processes"
    """Processes of the worker still running outside its agent when a job of its ended."""
    LEFTOVERS_STOPPED = "leftovers-stopped"
    """Those processes stopped (SIGTERM, then SIGKILL past a deadline): data `killed` and `survived`."""
    OVER_CAP = "over-cap"
    """A worker passed one of its caps (processes, memory, disk, the run folder): its processes were
    killed, its job failed (data: cap, used, limit, killed)."""

    # orch.entry.runner
    RUN_CREATED = "run-created"

    # orch.lead controller: the loop and the fleet
    CONTROLLER_STARTED = "controller-started"
    RESUME_FINISHED_RUN = "resume-finished-run"
    FLEET_RELAUNCHING = "fleet-relaunching"
    FLEET_RELAUNCHED = "fleet-relaunched"
    WORKER_CAPPED = "worker-capped"
    """Older runs: a worker past its cost cap (now BUDGET_EXCEEDED)."""
    BUDGET_WARNING = "budget-warning"
    """80 % of a budget cap spent (a worker's, or with no worker the fleet's): data cap, used, limit, reason.
    Logged once per cap and worker."""
    BUDGET_EXCEEDED = "budget-exceeded"
    """A worker (or, with no worker, the fleet) is past a budget cap: the model gateway refused it, or
    (a run without a gateway) its status-line cost passed the cap. Logged once each."""
    GATEWAY_UNANSWERED = "gateway-unanswered"
    """A control call (budget, a worker's job) found no gateway answering; logged once per controller."""
    ABORTED = "aborted"
    FINISHED = "finished"

    # controller: handing out jobs
    ASSIGNED = "assigned"
    STALE_CLEARED = "stale-cleared"
    BRIEF_SENDING = "brief-sending"
    BRIEF_SENT = "brief-sent"
    BRIEF_FAILED = "brief-failed"
    BRIEF_NOT_DELIVERED = "brief-not-delivered"

    # controller: prompts to a worker on its job (orch.lead.base.Prompt): sending, sent, failed
    REPOINT_SENDING = "repoint-sending"
    REPOINT_SENT = "repoint-sent"
    REPOINT_FAILED = "repoint-failed"
    NUDGE_SENDING = "nudge-sending"
    NUDGE_SENT = "nudge-sent"
    NUDGE_FAILED = "nudge-failed"
    CONTINUE_SENDING = "continue-sending"
    CONTINUE_SENT = "continue-sent"
    CONTINUE_FAILED = "continue-failed"
    CORRECTION_SENDING = "correction-sending"
    CORRECTION_SENT = "correction-sent"
    CORRECTION_FAILED = "correction-failed"

    # controller: outputs and verification
    JOB_ACCEPTED = "job-accepted"
    FINDING_ACCEPTED = "finding-accepted"
    VERDICT_ACCEPTED = "verdict-accepted"
    VERDICT_FORGED = "verdict-forged"
    """A verdict in a worker's outbox that none of its own tool calls on the job wrote (orch.jobs.authorship):
    something else of its uid (a command it ran for another worker) wrote it. Rejected."""
    REPRODUCE_STARTED = "reproduce-started"
    """orch runs a finding's reproduce command in the checks' sandbox (orch.lead.reproduce)."""
    REPRODUCED = "reproduced"
    """It ended (exit code, timed out, or why it could not run): the finding's verifiers may start."""
    CONFIRM_ROUND = "confirm-round"
    OUTPUT_REJECTED = "output-rejected"
    JOB_FAILED = "job-failed"
    VERIFIER_REPLACED = "verifier-replaced"

    # controller: recovery
    RATE_LIMITED = "rate-limited"
    API_ERROR = "api-error"
    PERMISSION_ALLOWED = "permission-allowed"
    PERMISSION_DENIED = "permission-denied"
    PERMISSION_WAIT = "permission-wait"
    CRASH_SEEN = "crash-seen"
    RESTARTED_WORKER = "restarted-worker"
    WORKER_OUT = "worker-out"

    # controller: changes (orch.lead.changes.writing): worktrees, the gate, reviews, the integration queue
    WORKTREE_MADE = "worktree-made"
    """data: job, base, path: a writer job's fresh worktree at the integration head."""
    WORKER_MOVED = "worker-moved"
    """data: job, workdir: the worker's agent restarted (new session) in the job's workdir."""
    CHANGE_TAKEN = "change-taken"
    """data: job, task, diffstat, files, checking (its checks to run off the loop), scope, kept_reviews."""
    REVIEW_OPENED = "review-opened"
    REVIEW_ACCEPTED = "review-accepted"
    CHANGE_INTEGRATED = "change-integrated"
    """data: change, result (LANDED, CONFLICT, CHECKS_FAILED), detail."""
    CHANGE_ENDED = "change-ended"
    """data: change, task, status (LANDED, REJECTED, CONFLICT, FAILED, UNCHANGED, REBASING), reason."""
    REBASE_OPENED = "rebase-opened"
    CHECKS_STARTED = "checks-started"
    """data: change, work (gate, integration): the checks started off the controller's loop."""
    CHECKS_ENDED = "checks-ended"
    """data: change, work, regressions (gate) or result (integration), error: picked up by the loop."""
    CHECKS_LEFTOVER_STOPPED = "checks-leftover-stopped"
    """data: pids: a killed controller's checks still running as the checks' uid (a container), killed at the start."""
    CHANGE_QUEUED = "change-queued"
    """data: change, ahead: approved, in the integration queue behind `ahead` changes."""

    # orch.view: what a lead did from `orch watch` (the TUI or the page with --control)
    WATCH_ACTION = "watch-action"
    """data: action (send, nudge, restart, kill), by (tui or web), ok, and the command's last line."""

    # orch.notify: a person told that the run needs them (docs/notify.md)
    NOTIFIED = "notified"
    """data: reason, channels (each delivered), late (seconds from the moment to the last channel's delivery)."""
    NOTIFY_FAILED = "notify-failed"
    """data: reason, channel (its kind and host, never its URL), error, attempts: given up after its retries."""
