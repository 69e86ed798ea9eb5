// orch's opencode plugin: reports opencode's own events as orch hook events, one JSON line each in the
// worker's state file, and answers a permission request from the run's policy file. It writes a plain event's
// line itself (../orch-stateline.js: hookwriter.py's format, no process per event); a permission request goes
// through orch/run/hookwriter.py (the same writer Claude Code's hooks run), which reads the policy and logs
// the answer with it. orch/agents/opencode.py writes this file into the worker's config dir with ORCH (below)
// filled in; nothing here reads the environment.
//
// opencode signal                      -> orch hook event (orch/fleet/workerstate.py maps it to a state)
//   plugin loaded (the server is up)   -> SessionStart
//   chat.message (a prompt arrived)    -> UserPromptSubmit  (the acknowledgement `orch send` waits for)
//   tool.execute.before / .after       -> PreToolUse / PostToolUse
//   permission.asked                   -> PermissionRequest (answered from the policy file when it says so)
//   permission.replied                 -> PermissionReplied (busy again)
//   session.status idle                -> Stop
//   session.status retry               -> ApiRetry (busy: opencode retries by itself)
//   session.error                      -> StopFailure (error: rate_limit, authentication_failed, ...)
import { spawnSync } from "node:child_process"
import { appendState } from "../orch-stateline.js"

const ORCH = __ORCH__

// Synchronous, both: state lines keep the order of the events (a prompt before its tool calls).
function emit(payload) {
  try {
    appendState(ORCH.state, payload)
  } catch (e) {
    if (!(e && e.code)) throw e // a system error (the run folder went away) never blocks the agent, as hookwriter.py
  }
}

// A permission request: the hook writer answers it from the run's policy file (its stdout) and logs both.
function ask(payload) {
  const args = ["-S", ORCH.hookwriter, "event", ORCH.state, ORCH.policy]
  const done = spawnSync(ORCH.python, args, { input: JSON.stringify(payload), encoding: "utf8", timeout: 10000 })
  return done.stdout || ""
}

function errorKind(error) {
  const data = (error && error.data) || {}
  const status = Number(data.statusCode || 0)
  const text = String(data.message || (error && error.name) || "")
  if (status === 429 || /rate.?limit/i.test(text)) return "rate_limit"
  if (status === 503 || status === 529 || /overload/i.test(text)) return "overloaded"
  if (status === 401 || status === 403 || (error && error.name === "ProviderAuthError")) return "authentication_failed"
  if (status === 400) return "invalid_request"
  if (error && error.name === "MessageAbortedError") return "aborted"
  return "unknown"
}

async function reply(client, sessionID, requestID, behavior, message) {
  const response = behavior === "allow" ? "once" : "reject"
  await client.postSessionIdPermissionsPermissionId({
    path: { id: sessionID, permissionID: requestID },
    body: { response, message },
  })
}

export const OrchState = async ({ client }) => {
  // A resumed session is known from the start; a new one is named by opencode with the first prompt.
  emit({ hook_event_name: "SessionStart", source: ORCH.session ? "resume" : "startup", session_id: ORCH.session || undefined })
  return {
    "chat.message": async (input, output) => {
      const parts = (output && output.parts) || []
      const prompt = parts.filter((p) => p.type === "text" && !p.synthetic).map((p) => p.text).join("\n")
      emit({ hook_event_name: "UserPromptSubmit", session_id: input.sessionID, prompt })
    },
    "tool.execute.before": async (input, output) => {
      emit({ hook_event_name: "PreToolUse", session_id: input.sessionID, tool_name: input.tool, tool_input: output.args })
    },
    "tool.execute.after": async (input) => {
      emit({ hook_event_name: "PostToolUse", session_id: input.sessionID, tool_name: input.tool })
    },
    event: async ({ event }) => {
      const p = event.properties || {}
      if (event.type === "session.status" && p.status && p.status.type === "idle") {
        emit({ hook_event_name: "Stop", session_id: p.sessionID })
      } else if (event.type === "session.status" && p.status && p.status.type === "retry") {
        // opencode retries API errors itself (a 429 too, whatever x-should-retry says): still busy.
        emit({ hook_event_name: "ApiRetry", session_id: p.sessionID, reason: String(p.status.message || "") })
      } else if (event.type === "session.error") {
        emit({ hook_event_name: "StopFailure", session_id: p.sessionID, error: errorKind(p.error) })
      } else if (event.type === "permission.asked") {
        const payload = {
          hook_event_name: "PermissionRequest",
          session_id: p.sessionID,
          tool_name: p.permission,
          tool_input: { patterns: p.patterns || [] },
        }
        const out = ask(payload)
        let decision = null
        try {
          decision = JSON.parse(out).hookSpecificOutput.decision
        } catch (e) {
          decision = null // no policy, or "ask": the dialog stays for a human
        }
        if (decision) await reply(client, p.sessionID, p.id, decision.behavior, decision.message)
      } else if (event.type === "permission.replied") {
        emit({ hook_event_name: "PermissionReplied", session_id: p.sessionID, reason: p.reply })
      }
    },
  }
}
