// One state line as orch/run/hookwriter.py writes it (slim + append_event), written by orch's opencode plugin
// itself: a hook writer's Python start per event (15-70 ms, during which opencode's own event loop waits on
// spawnSync) came between each opencode event and its line, the prompt's acknowledgement included.
// The contract, tested line for line against hookwriter.py in the real opencode runtime
// (tests/agents/test_opencode.py): the line is `json.dumps(slim(payload))` for the payload opencode's plugin
// would have piped to hookwriter.py, so `ts` first, `tool_input`/`details` as JSON cut to MAX_FIELD, other
// strings cut to MAX_FIELD code points, DROPPED keys left out, Python's separators and ensure_ascii escapes,
// and one O_APPEND write of the whole line (hookwriter's tool_denied is not here: the plugin sends no
// tool_response). Change both or neither.
import { appendFileSync } from "node:fs"

const MAX_FIELD = 4000
const DROPPED = new Set(["tool_response", "transcript_path", "last_assistant_message", "prompt_response"])

// Python's json.dumps of a string (ensure_ascii): JSON.stringify's escapes, and every character outside
// ' '..'~' as \uXXXX (UTF-16 units, as Python writes a surrogate pair).
function pyString(text) {
  return JSON.stringify(text).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"))
}

// Python's repr of the number json.loads made of JSON.stringify's text (an exponent has at least two digits).
function pyNumber(value) {
  return JSON.stringify(value).replace(/e([+-])(\d)$/, "e$10$2")
}

// json.dumps of a value json.loads gave (`value` has been through JSON already: no undefined, no functions).
function pyDumps(value) {
  if (value === null || typeof value === "boolean") return String(value)
  if (typeof value === "number") return pyNumber(value)
  if (typeof value === "string") return pyString(value)
  if (Array.isArray(value)) return "[" + value.map(pyDumps).join(", ") + "]"
  return "{" + Object.entries(value).map(([k, v]) => pyString(k) + ": " + pyDumps(v)).join(", ") + "}"
}

function cut(text) {
  return text.length > MAX_FIELD ? Array.from(text).slice(0, MAX_FIELD).join("") : text
}

// hookwriter.slim's line for `payload` at `now` (seconds), newline included.
export function stateLine(payload, now) {
  const plain = JSON.parse(JSON.stringify(payload)) // what the hook writer read from its stdin
  const items = [["ts", Number.isInteger(now) ? now.toFixed(1) : String(now)]]
  for (const [key, value] of Object.entries(plain)) {
    if (DROPPED.has(key)) continue
    if (key === "tool_input" || key === "details") items.push([key, pyString(cut(pyDumps(value)))])
    else items.push([key, typeof value === "string" ? pyString(cut(value)) : pyDumps(value)])
  }
  if (!("hook_event_name" in plain)) items.push(["hook_event_name", pyString("unknown")])
  return "{" + items.map(([k, v]) => pyString(k) + ": " + v).join(", ") + "}\n"
}

// hookwriter.append_event: the line in one write to the worker's state file, opened O_APPEND (flag "a").
export function appendState(stateFile, payload) {
  appendFileSync(stateFile, stateLine(payload, Date.now() / 1000), { mode: 0o644 })
}
