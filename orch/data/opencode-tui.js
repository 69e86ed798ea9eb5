// orch's opencode TUI plugin: writes the worker's ready marker once the TUI has drawn and takes input
// (the server plugin's SessionStart comes seconds earlier, and text typed then is lost).
// orch/agents/opencode.py writes this file into the worker's config dir with ORCH filled in.
import { writeFileSync } from "node:fs"

const ORCH = __ORCH__

export default {
  id: "orch-ready",
  tui: async (api) => {
    const timer = setInterval(() => {
      if (!api.state.ready) return
      clearInterval(timer)
      writeFileSync(ORCH.ready, String(Date.now() / 1000))
    }, 50)
  },
}
