"use strict";
// orch watch --web: draws the snapshots the server pushes over SSE. Every text from the run goes in with
// textContent (never as HTML); the two charts are SVG the server made and escaped.
(() => {
  const params = new URLSearchParams(location.search);
  const token = params.get("t") || "";
  const run = params.get("run");
  const $ = (id) => document.getElementById(id);
  const q = (path) => `${path}?t=${encodeURIComponent(token)}${run ? `&run=${encodeURIComponent(run)}` : ""}`;
  let latest = null, shownHash = false;

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const clock = (ts) => ts == null ? "--:--:--" : new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
  const money = (usd) => usd == null ? "-" : `$${usd.toFixed(4)}`;
  function span(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
    return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
  }

  async function act(action, worker, text) {
    const res = await fetch(q("/api/action"), {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Orch-Token": token },
      body: JSON.stringify({ action, worker, text: text || "" }),
    });
    $("said").textContent = res.headers.get("content-type")?.includes("json") ? (await res.json()).said : await res.text();
  }

  function progress(snap) {
    const p = snap.progress, box = $("progress");
    box.replaceChildren();
    const item = (label, value) => { const s = el("span"); s.append(`${label} `, el("b", "", value)); box.append(s); return s; };
    if (snap.lead) {
      item("jobs", `${p.jobs_done}/${p.jobs_total}${p.jobs_failed ? ` (${p.jobs_failed} failed)` : ""}`);
      item("findings", `${p.findings}: ${p.confirmed} confirmed, ${p.refuted} refuted`);
    }
    const cost = item("cost", money(p.cost_usd) + (p.budget_usd != null ? ` of $${p.budget_usd.toFixed(2)}` : "")
      + (p.unbilled ? " (nothing billed)" : ""));
    if (p.budget_usd) {
      const meter = el("span", "meter"), fill = el("span");
      fill.style.width = `${Math.min(100, 100 * (p.cost_usd || 0) / p.budget_usd)}%`;
      meter.append(fill); cost.append(" ", meter);
    }
    if (p.outcome) item("outcome", p.outcome);
    else if (p.deadline) item("left", span(p.deadline - snap.taken));
  }

  function tile(w, snap, control) {
    const card = el("article", `tile s-${w.state}`);
    card.dataset.worker = w.n;
    card.id = `w${w.n}`;
    const who = el("div", "who", `W${w.n} `);
    who.append(el("span", "model", w.model || w.agent));
    card.append(who);
    const state = el("div");
    state.append(el("span", "state", w.state + (w.detail ? ` (${w.detail})` : "")));
    if (w.since != null) state.append(` ${span(snap.taken - w.since)}`);
    card.append(state);
    card.append(el("div", "job", w.job ? `${w.job} (${w.role})` : (w.out ? `out: ${w.out}` : "no job")));
    card.append(el("div", "cost", money(w.cost_usd) + (w.done ? "  done" : "")));
    card.append(el("div", "bus", w.last_bus ? w.last_bus.replace(/^.*?\] /, "") : "-"));
    if (control) {
      const button = (label, fn) => { const b = el("button", "", label); b.addEventListener("click", fn); card.append(b); };
      button("send", () => { const text = prompt(`Message to worker ${w.n}`); if (text) act("send", w.n, text); });
      button("nudge", () => act("nudge", w.n));
      button("restart", () => { if (confirm(`Restart worker ${w.n}?`)) act("restart", w.n); });
    }
    return card;
  }

  function matrix(snap) {
    const table = $("matrix");
    table.replaceChildren();
    if (!snap.matrix.length) {
      const tr = el("tr"); tr.append(el("td", "pending", "no findings yet")); table.append(tr); return;
    }
    for (const row of snap.matrix) {
      const tr = el("tr");
      const claim = el("td"); claim.append(el("b", "", row.finding), ` W${row.finder} ${row.claim}`);
      tr.append(claim);
      for (const c of row.cells) tr.append(el("td", c.verdict, `W${c.verifier}: ${c.verdict}`));
      tr.append(el("td", row.status, row.status));
      table.append(tr);
    }
  }

  // Each change where it is (the controller's words: orch.lead.changes.status.live_lines), the queue in order.
  // A line carries worker-made text (a reason, the files it names): textContent only; its colour comes from
  // the stage word right after the change's name, looked up in a fixed set.
  const STAGES = new Set(["review", "writing", "LANDED", "REJECTED", "CONFLICT", "FAILED", "UNCHANGED", "REBASING"]);
  function changes(snap) {
    const list = $("changes");
    if (!snap.changes.length) { list.replaceChildren(el("li", "pending", "no changes")); return; }
    list.replaceChildren(...snap.changes.map((line) => {
      const stage = /^change \S+ \([^)]*\): (\w+)/.exec(line)?.[1];
      return el("li", stage && STAGES.has(stage) ? `c-${stage}` : "", line);
    }));
  }

  // What needs a person (orch.notify's notices still open), newest first, each with its reason class
  // (docs/notify.md); a click shows that worker's tile (the page's own #wN: a notification's URL ends so).
  function needs(snap) {
    const list = $("needs");
    $("needs-box").hidden = !snap.needs.length;
    document.title = snap.needs.length ? `(${snap.needs.length}) orch watch` : "orch watch";
    list.replaceChildren(...snap.needs.map((need) => {
      const item = el("li", "need");
      const who = need.worker != null ? `W${need.worker} ` : "";
      const head = el("a", "", `${clock(need.ts)} ${who}${need.reason}`);
      head.href = need.worker != null ? `#w${need.worker}` : "#tiles";
      head.addEventListener("click", () => show(need.worker));
      item.append(head, need.text ? `: ${need.text}` : "", el("div", "action", need.action));
      return item;
    }));
  }

  function show(worker) {
    const card = worker != null ? document.getElementById(`w${worker}`) : null;
    if (!card) return;
    card.scrollIntoView({ block: "center" });
    document.body.dataset.shown = String(worker);
    card.classList.add("flash");
    setTimeout(() => card.classList.remove("flash"), 2000);
  }

  function bus(snap) {
    const needle = $("filter").value.toLowerCase(), list = $("bus");
    list.replaceChildren(...snap.bus
      .map((b) => `${clock(b.ts)} [${b.sender}] ${b.text}`)
      .filter((line) => line.toLowerCase().includes(needle))
      .map((line) => el("li", "", line)));
  }

  function render(data) {
    latest = data;
    const snap = data.snapshot;
    $("run-name").textContent = snap.run;
    $("run-status").textContent = snap.status;
    $("banner").hidden = !snap.gone;
    $("banner").textContent = snap.gone ? "The run folder vanished: showing the last that was seen." : "";
    progress(snap);
    $("tiles").replaceChildren(...snap.workers.map((w) => tile(w, snap, data.control)));
    needs(snap);
    if (!shownHash && location.hash.startsWith("#w")) { shownHash = true; show(location.hash.slice(2)); }
    matrix(snap);
    changes(snap);
    $("commentary").replaceChildren(...snap.commentary.map((c) => el("li", "", c.text)));
    bus(snap);
    $("timeline").innerHTML = data.timeline || "<p>no jobs yet</p>";
    $("costs").innerHTML = data.costs || "<p>no cost yet</p>";
    $("controls").hidden = !data.control;
    document.body.dataset.taken = String(snap.taken);
  }

  async function picker() {
    const res = await fetch(q("/api/runs"));
    const data = await res.json();
    $("picker").hidden = false;
    $("run-name").textContent = "";
    const body = $("runs").querySelector("tbody");
    for (const r of data.runs) {
      const tr = el("tr"), link = el("a", "", r.name);
      link.href = `?t=${encodeURIComponent(token)}&run=${encodeURIComponent(r.name)}`;
      const name = el("td"); name.append(link); tr.append(name);
      for (const v of [r.backend, r.agent, r.workers, r.status]) tr.append(el("td", "", String(v)));
      body.append(tr);
    }
    if (!data.runs.length) { const tr = el("tr"); tr.append(el("td", "", "no runs")); body.append(tr); }
  }

  $("filter").addEventListener("input", () => latest && bus(latest.snapshot));
  $("kill").addEventListener("click", () => { if (confirm("Kill the run? Its folder stays.")) act("kill", null); });
  if (!run) { picker(); return; }
  $("view").hidden = false;
  const stream = new EventSource(q("/api/events"));
  stream.onmessage = (event) => render(JSON.parse(event.data));
  stream.onerror = () => { document.body.dataset.stream = "error"; };
})();
