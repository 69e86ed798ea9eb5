// orch's opencode TUI plugin: writes the worker's ready marker once the TUI has drawn and takes input
// (the server plugin's SessionStart comes seconds earlier, and text typed then is lost).
// On a fresh start (no --session, no --prompt) it first opens a new session, as the first prompt would: opencode
// creates a session on its first prompt, which took 0.1-0.5 s between that prompt's Enter and its `chat.message`
// (its acknowledgement), more under load; done here, before the marker, the brief finds the session open. The
// marker waits until the TUI has the session (its prompt takes a paste only then).
// orch/agents/opencode.py writes this file into the worker's config dir with ORCH filled in.
import { writeFileSync } from "node:fs"

const ORCH = __ORCH__

export default {
  id: "orch-ready",
  tui: async (api) => {
    let step = ORCH.fresh ? "open" : "done" // open -> opening -> opened (or done: no session of ours)
    let opened = null
    let looks = 0
    const timer = setInterval(async () => {
      if (!api.state.ready) return
      if (step === "open" && api.route.current.name === "session") step = "done" // it has one already
      if (step === "open") {
        step = "opening"
        try {
          opened = (await api.client.session.create({})).data.id
          api.route.navigate("session", { sessionID: opened })
          step = "opened"
        } catch (e) {
          step = "done" // the first prompt creates its session, as without this plugin
        }
        return
      }
      if (step === "opening") return
      // The TUI has the session, and one more look later its prompt is drawn (a paste before that was lost).
      if (step === "opened" && (!api.state.session.get(opened) || ++looks < 2)) return
      clearInterval(timer)
      writeFileSync(ORCH.ready, String(Date.now() / 1000))
    }, 50)
  },
}
