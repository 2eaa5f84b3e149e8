// The memory browser (memctl ui). Plain JavaScript, no framework, nothing from the network.
//
// Everything memoryd holds came from transcripts and is untrusted text: it reaches the page only
// through textContent (el() below, and the text of SVG nodes), never innerHTML; links are built
// from "#/..." plus an encoded id. The Content-Security-Policy forbids inline script and style.
"use strict";

const TOKEN = document.querySelector('meta[name="memoryd-token"]').content;
// The token stays out of the address bar (and of anything copied from it).
history.replaceState(null, "", location.pathname + location.hash);

const CATEGORIES = ["task_progress", "discovery", "file_change", "warning", "decision", "error",
  "pattern", "architecture", "spec", "preference"];
const STATUSES = ["candidate", "confirmed", "pinned"];
const FORMATS = ["claude", "codex", "gemini", "plain"];

// ------------------------------------------------------------------ helpers

function el(tag, props, ...kids) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "data") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "value") node.value = value;
    else if (key === "checked") node.checked = true;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, kids);
  return node;
}

function append(node, kids) {
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function entryLink(id, label) {
  return el("a", { href: "#/entry/" + encodeURIComponent(id), class: "id" }, label || short(id));
}

const short = (id) => String(id).slice(0, 8);
const code = (text) => el("code", {}, text);

function when(ts) {
  if (ts === null || ts === undefined) return "-";
  const d = new Date(ts * 1000);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

function ago(ts) {
  if (!ts) return "-";
  let s = Math.max(0, Date.now() / 1000 - ts);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) return Math.floor(s / size) + unit + " ago";
  }
  return Math.floor(s) + "s ago";
}

function bytes(n) {
  let value = n, unit = "B";
  for (unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (value < 1024 || unit === "TiB") break;
    value /= 1024;
  }
  return (unit === "B" || value >= 10 ? value.toFixed(0) : value.toFixed(1)) + " " + unit;
}

const num = (v) => (v === null || v === undefined ? "-" : v.toFixed(1));

class ApiFailure extends Error {}

async function api(path, options) {
  const init = Object.assign({ headers: {} }, options || {});
  init.headers["X-Memoryd-Token"] = TOKEN;
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiFailure("memctl ui is not answering (was it stopped?)");
  }
  const body = await response.json().catch(() => ({ message: response.statusText }));
  if (!response.ok) throw new ApiFailure(body.message || "failed (" + response.status + ")");
  return body;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

function badge(text, kind) {
  return el("span", { class: "badge" + (kind ? " " + kind : "") }, text);
}

function empty(...lines) {
  return el("div", { class: "empty" }, lines.map((l) => el("p", {}, l)));
}

function notice(text, kind) {
  const box = document.getElementById("notice");
  if (!box) return;
  box.textContent = text;
  box.className = "notice " + (kind || "");
}

function failure(e) {
  return el("div", { class: "empty error", role: "alert" }, el("p", {}, String(e.message || e)));
}

function field(label, control) {
  return el("label", { class: "field" }, el("span", {}, label), control);
}

function select(name, options, current, emptyLabel) {
  const s = el("select", { name });
  if (emptyLabel) s.append(el("option", { value: "" }, emptyLabel));
  for (const o of options) s.append(el("option", { value: o, selected: o === current }, o));
  return s;
}

// ------------------------------------------------------------------ frame

const main = document.getElementById("main");
let leave = null; // what the current view must stop (a live stream, a key handler)

async function refreshHeader() {
  try {
    const { status, project } = await api("/api/status");
    const info = status.project;
    const label = document.getElementById("project");
    label.textContent = info ? info.root : project + " (no project here)";
    const name = (info ? info.root : project).split("/").filter(Boolean).pop() || "/";
    document.getElementById("project-name").textContent = info ? name : name + " (no project)";
    document.getElementById("project-name").title = label.textContent;
    document.getElementById("conn").textContent = "";
    const count = document.getElementById("review-count");
    count.textContent = info && info.awaiting_review ? String(info.awaiting_review) : "";
    return status;
  } catch (e) {
    document.getElementById("conn").textContent = e.message;
    return null;
  }
}

const VIEWS = {};

function route() {
  if (leave) { leave(); leave = null; }
  const hash = location.hash.replace(/^#\/?/, "") || "memory";
  const [name, ...rest] = hash.split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
  const view = VIEWS[name] || VIEWS.memory;
  for (const a of document.querySelectorAll(".nav a")) {
    const current = a.dataset.view === (name === "entry" ? "memory" : name);
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  document.body.dataset.view = name;
  view(arg).catch((e) => main.replaceChildren(failure(e)));
}


// ------------------------------------------------------------------ Memory

const memoryState = { q: "", category: "", status: "", archived: false, tag: "", k: "20", offset: 0 };

VIEWS.memory = async function () {
  const st = memoryState;
  const q = el("input", { type: "search", name: "q", value: st.q, placeholder: "Search memory", "aria-label": "search", autocomplete: "off" });
  const form = el("form", { class: "filters", role: "search" },
    el("div", { class: "searchline" }, q, el("button", { type: "submit" }, "Search")),
    el("div", { class: "filterline" },
      field("Category", select("category", CATEGORIES, st.category, "any")),
      field("Status", select("status", STATUSES, st.status, "any")),
      field("Tag", el("input", { name: "tag", value: st.tag, size: 10 })),
      field("Results", select("k", ["10", "20", "50", "100"], st.k)),
      el("label", { class: "check" }, el("input", { type: "checkbox", name: "archived", checked: st.archived }), "Archived")));
  const results = el("div", { id: "results-box" });
  main.append(el("h1", {}, "Memory"), form, results);
  const load = async () => {
    results.replaceChildren(el("p", { class: "muted" }, "Loading…"));
    const params = new URLSearchParams({ q: st.q, category: st.category, status: st.status, tag: st.tag, k: st.k, archived: st.archived ? "1" : "0", offset: String(st.offset) });
    try {
      results.replaceChildren(renderEntries(await api("/api/entries?" + params), load));
    } catch (e) {
      results.replaceChildren(failure(e));
    }
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    Object.assign(st, { q: data.get("q").trim(), category: data.get("category"), status: data.get("status"), tag: data.get("tag").trim(), k: data.get("k"), archived: data.get("archived") !== null, offset: 0 });
    load();
  });
  form.addEventListener("change", (ev) => { if (ev.target.name !== "q") form.requestSubmit(); });
  await load();
  if (!st.q) q.focus();
};

function renderEntries(data, reload) {
  const st = memoryState;
  const box = el("div", {});
  const searching = data.mode === "search";
  if (!data.items.length) {
    if (searching) {
      box.append(empty(`Nothing matches “${st.q}”${data.searched ? " with these filters" : ""}.`, "Try fewer words, other filters, or tick Archived to search the archive."));
    } else if (st.category || st.status || st.tag || st.archived || st.offset) {
      box.append(empty("No entry with these filters.", "Set the filters back to “any” to see everything."));
    } else {
      box.append(empty("No memory in this project yet.", "Remember something with: memctl remember \"we use pnpm, not npm\"", "or install the hooks (memctl install-hooks) so that memoryd learns from your agents' sessions."));
    }
    return box;
  }
  const summary = searching
    ? `${data.items.length} results, best first (the order of memctl search)` + (data.items.length < data.searched ? `; ${data.searched - data.items.length} hidden by the filters` : "")
    : `${data.offset + 1}–${data.offset + data.items.length} of ${data.total} entries, newest first` + (st.tag ? ` (tag “${st.tag}” on this page)` : "");
  box.append(el("p", { class: "muted summary" }, summary));
  const list = el("ol", { id: "results", class: "cards" });
  for (const item of data.items) {
    const status = item.archived ? "archived" : item.status;
    list.append(el("li", { class: "card entry", data: { id: item.id } },
      el("a", { class: "cover", href: "#/entry/" + encodeURIComponent(item.id), "aria-label": "open entry " + short(item.id) }),
      el("div", { class: "content" }, item.content),
      el("div", { class: "meta" },
        el("span", { class: "id" }, short(item.id)),
        badge(item.category), badge(status, status),
        item.kind === "finding" ? badge("finding", "candidate") : null,
        searching ? el("span", { class: "score", title: "search score" }, item.score.toFixed(3)) : null,
        (item.tags || []).map((t) => badge("#" + t, "tag")))));
  }
  box.append(list);
  if (!searching && data.total > 100) {
    const pager = el("div", { class: "actions" });
    if (st.offset > 0) pager.append(el("button", { onclick: () => { st.offset = Math.max(0, st.offset - 100); reload(); } }, "Newer"));
    if (st.offset + 100 < data.total) pager.append(el("button", { onclick: () => { st.offset += 100; reload(); } }, "Older"));
    box.append(pager);
  }
  return box;
}

// ------------------------------------------------------------------ an entry

VIEWS.entry = async function (id) {
  if (!id) { location.hash = "#/memory"; return; }
  const data = await api("/api/entry?id=" + encodeURIComponent(id));
  const e = data.entry, src = e.source || {};
  const state = e.archived ? "archived" : e.status;
  const facts = el("dl", { class: "facts" });
  const fact = (k, v) => { if (v !== null && v !== undefined && v !== "") facts.append(el("dt", {}, k), el("dd", {}, v)); };
  fact("Id", code(e.id));
  fact("Category", e.category + " · section " + e.section);
  fact("Status", e.archived ? `archived (${e.archived_reason || "?"})` : e.status);
  if (e.superseded_by) fact("Superseded by", entryLink(e.superseded_by));
  fact("Importance", e.importance.toFixed(2) + " · confidence " + e.confidence.toFixed(2));
  fact("Created", when(e.created_at) + " · updated " + ago(e.updated_at));
  fact("Used", e.access_count + " times" + (e.last_accessed_at ? ", last " + ago(e.last_accessed_at) : ""));
  fact("Source", src.kind);
  fact("Agent", src.agent);
  fact("Session", src.session_id ? el("a", { href: "#/sessions/" + encodeURIComponent(src.session_id), class: "id" }, src.session_id) : null);
  fact("Transcript", src.transcript_path ? code(src.transcript_path) : null);
  if (src.kind === "transcript") fact("Line", data.line ? String(data.line) : (src.offset !== undefined && src.offset !== null ? `unknown (byte ${src.offset}; the transcript cannot be read now)` : null));
  fact("Rule", src.rule_id);
  if (e.tags.length) fact("Tags", e.tags.map((t) => badge("#" + t, "tag")));
  if (e.file_paths.length) fact("Files", e.file_paths.map((f) => el("div", {}, code(f))));

  const actions = el("div", { class: "actions" });
  const act = (label, action, extra) => el("button", { onclick: async () => {
    try {
      await post("/api/entry", Object.assign({ action, id: e.id }, extra ? extra() : {}));
      notice(label + ": done", "ok");
      route();
    } catch (err) { notice(err.message, "bad"); }
  } }, label);
  if (!e.archived) {
    actions.append(e.status === "pinned" ? act("Unpin", "unpin") : act("Pin", "pin"));
    actions.append(act("Archive", "archive"));
  } else {
    actions.append(act("Unarchive", "unarchive"));
  }
  actions.append(el("a", { class: "button", href: "#/graph/" + encodeURIComponent(e.id) }, "Graph"));
  // Edit is a supersede with the current text to start from: the new text is a new entry,
  // the user's, and this one is archived as superseded (its history stays). Said as it is.
  const text = el("textarea", { rows: 4, name: "content", "aria-label": "new text" });
  const supersede = el("form", { class: "edit", hidden: true, onsubmit: async (ev) => {
    ev.preventDefault();
    if (!text.value.trim()) { notice("Write the new text first", "bad"); return; }
    if (text.value === e.content) { notice("The text is unchanged: nothing saved", "bad"); return; }
    try {
      const r = await post("/api/entry", { action: "supersede", id: e.id, content: text.value });
      location.hash = "#/entry/" + encodeURIComponent(r.id);
    } catch (err) { notice(err.message, "bad"); }
  } },
    el("p", { class: "muted small hint" }, "Saving makes your text a new entry of yours (confirmed, or pinned if this one is) that supersedes this one: this one is archived as superseded and keeps its history."),
    text,
    el("div", { class: "actions" }, el("button", { type: "submit" }, "Save as a new version"),
      el("button", { type: "button", onclick: () => { supersede.hidden = true; } }, "Cancel")));
  if (!e.archived) {
    const open = (start) => () => { text.value = start; supersede.hidden = false; text.focus(); };
    actions.prepend(el("button", { onclick: open(e.content) }, "Edit"), el("button", { onclick: open("") }, "Supersede"));
  }

  const edges = el("ul", { class: "plain" });
  for (const edge of data.edges) {
    const out = edge.source === e.id;
    edges.append(el("li", {}, out ? "this " : entryLink(edge.source), " ", badge(edge.relation.replace("_", " "), "tag"), " ", out ? entryLink(edge.target) : "this"));
  }
  const history = el("ol", { class: "history" });
  for (const ev of data.history.slice().reverse()) history.append(auditRow(ev));

  main.append(
    el("p", {}, el("a", { href: "#/memory" }, "← Memory")),
    el("h1", {}, "Entry ", short(e.id), " ", badge(state, state)),
    el("div", { id: "notice", class: "notice", role: "status" }),
    el("pre", { class: "content-full" }, e.content),
    actions, supersede,
    el("h2", {}, "Provenance"), facts,
    el("h2", {}, "Edges"),
    data.edges.length ? edges : empty("No edges. Link entries with: memctl connect A B --relation depends_on"),
    el("h2", {}, "History (audit log)"),
    data.history.length ? history : empty("No audit event names this entry among the newest 20,000."));
};

// ------------------------------------------------------------------ Review

VIEWS.review = async function () {
  const data = await api("/api/review");
  const reason = el("input", { id: "reject-reason", placeholder: "reason for a rejection (optional)", "aria-label": "reason for a rejection" });
  main.append(el("h1", {}, "Review"),
    el("p", { class: "muted" }, `${data.total} waiting · preset ${data.preset} · keys: `, code("j"), "/", code("k"), " move, ", code("a"), " accept, ", code("r"), " reject, ", code("e"), " edit"),
    el("div", { class: "filterline" }, el("label", { class: "field wide" }, el("span", {}, "Reject reason"), reason)),
    el("div", { id: "notice", class: "notice", role: "status" }));
  const list = el("ol", { id: "review-list", class: "cards" });
  main.append(list);
  if (!data.items.length) {
    list.replaceWith(empty("Nothing waits for review.", "memoryd learns from your agents' sessions once the hooks are installed (memctl install-hooks); what it is not sure of appears here for you to accept or reject."));
    return;
  }
  let selected = 0;
  const cards = [];
  const select = (i) => {
    if (!cards.length) return;
    selected = Math.max(0, Math.min(cards.length - 1, i));
    cards.forEach((c, n) => c.classList.toggle("selected", n === selected));
    cards[selected].scrollIntoView({ block: "nearest" });
  };
  const decide = async (card, action, extra) => {
    const item = card.item;
    try {
      await post("/api/review", Object.assign({ action, id: item.id }, extra || {}));
    } catch (err) { notice(err.message, "bad"); return; }
    notice(`${action === "accept" ? "Accepted" : action === "reject" ? "Rejected" : "Saved"} ${short(item.id)}`, "ok");
    const i = cards.indexOf(card);
    cards.splice(i, 1);
    card.remove();
    if (!cards.length) list.replaceWith(empty("All reviewed: nothing else waits."));
    else select(i);
    refreshHeader();
  };
  const edit = (card) => {
    if (card.querySelector("form")) return;
    const text = el("textarea", { rows: 4, "aria-label": "reworded text" });
    text.value = card.item.content;
    const form = el("form", { class: "supersede", onsubmit: (ev) => { ev.preventDefault(); decide(card, "edit", { content: text.value }); } },
      text, el("div", { class: "actions" }, el("button", { type: "submit" }, "Save as confirmed"), el("button", { type: "button", onclick: () => form.remove() }, "Cancel")));
    card.append(form);
    text.focus();
  };
  for (const item of data.items) {
    const origin = item.agent ? `${item.agent} ${short(item.session_id || "")}${item.line ? ":" + item.line : ""}` : null;
    const card = el("li", { class: "card review", data: { id: item.id } },
      el("div", { class: "content" }, item.content),
      el("div", { class: "meta" }, el("span", { class: "id" }, short(item.id)), badge(item.kind, "candidate"), badge(item.category),
        el("span", { class: "score", title: "points against the preset's threshold" }, `${item.points}/${item.threshold} points`),
        item.signals.map((s) => badge(s, "tag"))),
      el("p", { class: "reason" }, item.reason),
      origin ? el("p", { class: "muted small", title: item.transcript_path || "" }, "from ", code(origin), item.transcript_path ? " · " : "", item.transcript_path ? code(item.transcript_path.split("/").pop()) : "") : null);
    card.item = item;
    card.append(el("div", { class: "actions" },
      el("button", { class: "primary", onclick: () => decide(card, "accept") }, "Accept"),
      el("button", { onclick: () => decide(card, "reject", { reason: reason.value }) }, "Reject"),
      el("button", { onclick: () => edit(card) }, "Edit")));
    card.addEventListener("click", (ev) => { if (!ev.target.closest("button, textarea")) select(cards.indexOf(card)); });
    cards.push(card);
    list.append(card);
  }
  select(0);
  const keys = (ev) => {
    if (ev.target.closest("input, textarea, select") || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const card = cards[selected];
    if (ev.key === "j") select(selected + 1);
    else if (ev.key === "k") select(selected - 1);
    else if (ev.key === "a" && card) decide(card, "accept");
    else if (ev.key === "r" && card) decide(card, "reject", { reason: reason.value });
    else if (ev.key === "e" && card) { ev.preventDefault(); edit(card); }
    else return;
    ev.preventDefault();
  };
  document.addEventListener("keydown", keys);
  leave = () => document.removeEventListener("keydown", keys);
};

// ------------------------------------------------------------------ What the agent sees

const injectState = { format: "claude", query: "" };

VIEWS.inject = async function () {
  const prompt = el("textarea", { name: "query", rows: 3, placeholder: "Type a prompt as the agent would receive it", "aria-label": "prompt" });
  prompt.value = injectState.query;
  const out = el("div", { id: "payload-box" });
  const form = el("form", { class: "filters" },
    el("div", { class: "filterline" }, field("Agent format", select("format", FORMATS, injectState.format))),
    prompt, el("div", { class: "actions" }, el("button", { type: "submit", class: "primary" }, "Show payload")));
  main.append(el("h1", {}, "What the agent sees"),
    el("p", { class: "muted" }, "The exact payload memctl inject returns for this agent format and prompt: what a prompt hook would add to the agent's context."),
    form, out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    injectState.format = form.elements.format.value;
    injectState.query = prompt.value;
    out.replaceChildren(el("p", { class: "muted" }, "Building…"));
    try {
      const params = new URLSearchParams({ format: injectState.format, query: injectState.query });
      out.replaceChildren(renderPayload(await api("/api/inject?" + params)));
    } catch (e) { out.replaceChildren(failure(e)); }
  });
  if (injectState.query) form.requestSubmit();
};

function renderPayload(r) {
  const box = el("div", {});
  const t = r.tokens;
  box.append(el("p", { class: "summary" }, `${t.total} of ${t.budget} tokens · ${r.entries.length} entries`));
  const tiers = el("div", { class: "tiers" });
  for (const [tier, used] of Object.entries(t.tiers)) {
    tiers.append(el("span", { class: "tier-name" }, tier),
      el("meter", { min: 0, max: Math.max(1, t.budget), value: used, "aria-label": tier + " tokens" }),
      el("span", { class: "tier-value" }, String(used)));
  }
  box.append(tiers);
  if (!r.text) {
    box.append(empty("The payload is empty: nothing in memory matches this prompt, and nothing is pinned.", "Pin what the agent must always know (open an entry, Pin)."));
  } else {
    box.append(el("pre", { id: "payload", class: "payload" }, r.text));
  }
  if (r.entries.length) box.append(el("p", { class: "muted small" }, "Entries: ", r.entries.map((id) => [entryLink(id), " "])));
  return box;
}

// ------------------------------------------------------------------ Audit

VIEWS.audit = async function () {
  const filter = select("op", [], "", "every operation");
  const live = el("span", { id: "live", class: "badge" }, "connecting");
  const chain = el("span", { id: "chain", class: "badge" }, "verifying the chain…");
  const rows = el("ol", { id: "audit-rows", class: "history" });
  main.append(el("h1", {}, "Audit"),
    el("div", { class: "filterline" }, field("Show", filter), live, chain),
    rows);
  const types = new Set();
  const add = (event, fresh) => {
    const row = auditRow(event);
    const type = row.dataset.type;
    if (!types.has(type)) {
      types.add(type);
      const sorted = [...types].sort();
      const keep = filter.value;
      filter.replaceChildren(el("option", { value: "" }, "every operation"), ...sorted.map((t) => el("option", { value: t, selected: t === keep }, t)));
    }
    row.hidden = !!filter.value && filter.value !== type;
    if (fresh) row.classList.add("fresh");
    rows.prepend(row);
  };
  filter.addEventListener("change", () => {
    for (const row of rows.children) row.hidden = !!filter.value && filter.value !== row.dataset.type;
  });
  const first = await api("/api/audit?n=200");
  for (const ev of first.events) add(ev, false);
  if (!first.events.length) rows.append(el("li", { class: "empty-row" }, "No events yet: every change memoryd makes is journaled here (try memctl remember \"…\")."));
  api("/api/check").then((c) => {
    chain.textContent = c.audit === "ok" ? "chain verified" : "chain: " + c.audit;
    chain.classList.add(c.audit === "ok" ? "ok" : "bad");
  }).catch((e) => { chain.textContent = e.message; });
  const stop = new AbortController();
  leave = () => stop.abort();
  follow(first.last_seq, stop.signal, (ev) => {
    const placeholder = rows.querySelector(".empty-row");
    if (placeholder) placeholder.remove();
    add(ev, true);
  }, (state) => { live.textContent = state; live.className = "badge " + (state === "live" ? "ok" : "bad"); });
};

async function follow(after, signal, onEvent, onState) {
  let last = after;
  while (!signal.aborted) {
    try {
      const response = await fetch("/api/audit/stream?after=" + last, { headers: { "X-Memoryd-Token": TOKEN }, signal });
      if (!response.ok) throw new Error("refused");
      onState("live");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (!data) continue;
          if (block.startsWith("event: failed")) throw new Error(JSON.parse(data));
          const event = JSON.parse(data);
          last = Math.max(last, event.seq);
          onEvent(event);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      onState("reconnecting");
    }
    if (signal.aborted) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function auditRow(ev) {
  let record = {};
  try { record = JSON.parse(ev.line); } catch (e) { record = { event: { type: "unreadable" } }; }
  const event = record.event || {};
  const type = event.type || "?";
  const details = Object.assign({}, event);
  delete details.type;
  const summary = summarise(details);
  return el("li", { class: "audit", data: { type, seq: String(ev.seq) } },
    el("div", { class: "meta" }, el("span", { class: "id" }, "#" + ev.seq), badge(type, "tag"), el("span", { class: "muted" }, when(record.ts))),
    summary ? el("div", { class: "content" }, summary) : null,
    el("details", {}, el("summary", {}, "event"), el("pre", {}, JSON.stringify(event, null, 2))));
}

function summarise(details) {
  for (const key of ["content", "reason", "query", "text"]) {
    if (typeof details[key] === "string" && details[key]) return details[key];
  }
  if (details.entry && typeof details.entry.content === "string") return details.entry.content;
  const ids = ["id", "entry_id", "ids", "entries"].map((k) => details[k]).find((v) => v);
  const said = ids ? [].concat(ids).map((x) => short(typeof x === "string" ? x : JSON.stringify(x))).join(" ") : "";
  const to = ["status", "relation"].map((k) => details[k]).find((v) => typeof v === "string");
  return said + (to ? " → " + to : "");
}

// ------------------------------------------------------------------ Sessions

VIEWS.sessions = async function (open) {
  const data = await api("/api/episodes");
  main.append(el("h1", {}, "Sessions"));
  if (!data.episodes.length) {
    main.append(empty("No sessions captured yet.", "Install the hooks with memctl install-hooks; each session your agent ends becomes an episode here."));
    return;
  }
  // A timeline per agent, newest session first; the agent whose last session is newest first.
  const at = (ep) => ep.ended_at || ep.started_at || 0;
  const byAgent = new Map();
  for (const ep of data.episodes.slice().sort((a, b) => at(b) - at(a))) {
    if (!byAgent.has(ep.agent)) byAgent.set(ep.agent, []);
    byAgent.get(ep.agent).push(ep);
  }
  main.append(el("p", { class: "muted" }, `${data.episodes.length} session${data.episodes.length === 1 ? "" : "s"} by ${byAgent.size} agent${byAgent.size === 1 ? "" : "s"}, newest first. Open a session to see its findings beside the transcript lines they came from.`));
  for (const [agent, episodes] of byAgent) {
    const list = el("ol", { class: "cards timeline", data: { agent } });
    for (const ep of episodes) list.append(sessionCard(ep, ep.session_id === open));
    main.append(el("section", { class: "agent" }, el("h2", {}, badge(agent, "tag"), ` ${episodes.length} session${episodes.length === 1 ? "" : "s"}`), list));
  }
};

function sessionCard(ep, open) {
  const lines = el("div", { class: "session-lines" });
  const details = el("details", { class: "findings" }, el("summary", {}, "Findings beside their transcript lines"), lines);
  let loaded = false;
  const load = async () => {
    if (loaded) return;
    loaded = true;
    lines.replaceChildren(el("p", { class: "muted" }, "Reading the transcript…"));
    try {
      lines.replaceChildren(renderSession(await api("/api/session?id=" + encodeURIComponent(ep.session_id))));
    } catch (e) { loaded = false; lines.replaceChildren(failure(e)); }
  };
  details.addEventListener("toggle", () => { if (details.open) load(); });
  if (open) { details.open = true; load(); }
  return el("li", { class: "card session", data: { session: ep.session_id } },
    el("h3", {}, ep.title || "(untitled session)"),
    el("div", { class: "meta" }, el("span", { class: "id", title: ep.session_id }, short(ep.session_id)),
      el("span", { class: "muted" }, `${when(ep.started_at)} → ${when(ep.ended_at)}`),
      el("span", {}, `${ep.turns} turns · ${ep.tool_calls} tool calls · ${ep.errors} errors`)),
    ep.goal ? el("p", {}, el("strong", {}, "Goal: "), ep.goal) : null,
    ep.decisions.length ? el("ul", {}, ep.decisions.map((d) => el("li", {}, d))) : null,
    ep.outcome ? el("p", {}, el("strong", {}, "Outcome: "), ep.outcome) : null,
    ep.files.length ? el("p", { class: "muted small" }, ep.files.slice(0, 12).map((f) => [code(f), " "])) : null,
    details);
}

function renderSession(s) {
  const box = el("div", {});
  box.append(el("p", { class: "muted small" }, "Transcript ", code(s.transcript_path), s.finalized_at ? ` · closed ${ago(s.finalized_at)}` : " · still open"));
  if (s.unreadable) box.append(el("p", { class: "muted" }, "Lines not shown: " + s.unreadable));
  if (!s.findings.length) {
    box.append(empty("This session produced no findings."));
    return box;
  }
  const list = el("ol", { class: "finding-lines" });
  for (const f of s.findings) {
    list.append(el("li", { data: { finding: f.id, line: f.line === null ? "" : String(f.line) } },
      el("div", { class: "finding" },
        el("div", { class: "meta" }, badge(f.category), f.promoted ? badge("promoted", "confirmed") : badge("not promoted", "candidate"), f.rule_id ? el("span", { class: "muted small" }, f.rule_id) : null),
        el("div", { class: "content" }, f.content)),
      el("div", { class: "source" },
        el("div", { class: "muted small" }, f.line ? `line ${f.line}` : "line ?", f.role ? " · " + f.role : ""),
        f.text === null || f.text === undefined ? null : el("pre", { class: "line-text" }, f.text + (f.cut ? " …" : "")))));
  }
  box.append(list);
  if (s.total > s.findings.length) box.append(el("p", { class: "muted small" }, `… and ${s.total - s.findings.length} more findings.`));
  return box;
}

// ------------------------------------------------------------------ Projects

VIEWS.projects = async function () {
  const data = await api("/api/projects");
  main.append(el("h1", {}, "Projects"), el("div", { id: "notice", class: "notice", role: "status" }));
  if (!data.projects.length) {
    main.append(empty("The daemon knows no project yet.", "Work in a repository with the hooks installed (memctl install-hooks), or run memctl remember there."));
    return;
  }
  // The page's project: the deepest project holding the folder memctl ui works in.
  const holds = (path) => data.current === path || data.current.startsWith(path.replace(/\/$/, "") + "/");
  const here = data.projects.filter((pr) => holds(pr.path)).map((pr) => pr.path).sort((a, b) => b.length - a.length)[0];
  const list = el("ol", { class: "cards", id: "project-list" });
  for (const pr of data.projects) {
    const current = pr.path === here;
    const counts = pr.entries;
    const facts = el("dl", { class: "facts compact" });
    const fact = (k, v) => facts.append(el("dt", {}, k), el("dd", { data: { fact: k.toLowerCase() } }, v));
    if (counts) {
      fact("Entries", el("span", { class: "meta" }, badge(`${counts.confirmed} confirmed`), badge(`${counts.pinned} pinned`, "pinned"), badge(`${counts.candidate} candidates`, "candidate"), badge(`${counts.archived} archived`)));
      fact("Review", badge(`${pr.awaiting_review} waiting`, pr.awaiting_review ? "candidate" : ""));
      fact("Sessions", String(pr.sessions));
      fact("Last capture", pr.last_capture_at ? el("span", { title: when(pr.last_capture_at) }, ago(pr.last_capture_at)) : "none yet");
    }
    fact("Memory bank", pr.bank ? "present (memory-bank/)" : "none");
    fact("On disk", pr.size_bytes === null || pr.size_bytes === undefined ? "no memory held" : bytes(pr.size_bytes));
    list.append(el("li", { class: "card" + (current ? " selected" : ""), data: { path: pr.path } },
      el("h2", {}, pr.name, " ", current ? badge("open here", "ok") : null, pr.held && !pr.open ? badge("closed", "tag") : null),
      el("p", { class: "path" }, code(pr.path)),
      pr.held || pr.bank ? facts : el("p", { class: "muted" }, "No memory held yet."),
      pr.held && !counts ? el("p", { class: "muted" }, "Its database could not be read without opening it: open it to see its entries.") : null,
      current ? null : el("div", { class: "actions" }, el("button", { onclick: async () => {
        try { await post("/api/project", { path: pr.path }); await refreshHeader(); location.hash = "#/memory"; } catch (e) { notice(e.message, "bad"); }
      } }, "Open"))));
  }
  main.append(list);
};

// ------------------------------------------------------------------ Health

VIEWS.health = async function () {
  const h = await api("/api/health");
  main.append(el("h1", {}, "Health"));
  const table = el("table", { class: "grid" }, el("caption", { class: "muted small" }, "latency in milliseconds"),
    el("thead", {}, el("tr", {}, ["Operation", "Window", "Calls", "p50", "p95"].map((t) => el("th", {}, t)), el("th", { class: "slo-col" }, "SLO"))));
  const body = el("tbody", {});
  for (const w of h.windows) {
    const over = w.p95_ms !== null && w.p95_ms > h.slo_ms;
    body.append(el("tr", {}, el("td", {}, w.op), el("td", {}, w.window), el("td", {}, String(w.count)),
      el("td", {}, num(w.p50_ms)), el("td", { class: over ? "over" : null }, num(w.p95_ms)),
      el("td", { class: "slo-col" }, w.count ? badge(over ? "over" : "within", over ? "bad" : "ok") : "-")));
  }
  table.append(body);
  main.append(el("p", { class: "muted" }, `SLO: retrieval degrades when p95 passes ${h.slo_ms} ms; it is ${h.slo.degraded ? "degraded now" : "normal now"}.`),
    el("div", { class: "scroll" }, table));
  main.append(el("h2", {}, "Latest calls"));
  main.append(h.samples.length ? chart(h.samples, h.slo_ms) : empty("No hook, inject or search call yet.", "Install the hooks with memctl install-hooks, then use your agent; each call is timed here."));
  const facts = el("dl", { class: "facts" });
  const fact = (k, v) => facts.append(el("dt", {}, k), el("dd", {}, v));
  const hours = Math.max(h.uptime_s / 3600, 1 / 60);
  fact("Up", `${(h.uptime_s / 3600).toFixed(1)} h`);
  fact("Capture", h.capture.enabled ? `${h.capture.files} transcript files, ${h.capture.messages} messages (${Math.round(h.capture.messages / hours)} an hour), ${h.capture.live_sessions} live sessions, ${h.capture.malformed} malformed lines` : "off");
  fact("Resident memory", h.rss_bytes === null ? "unknown" : `${(h.rss_bytes / 1048576).toFixed(1)} MiB`);
  fact("Index", h.index_documents === null ? "no project here" : `${h.index_documents} documents`);
  fact("Samples kept", `${h.ring_size} of ${h.ring_capacity}`);
  main.append(el("h2", {}, "Daemon"), facts, el("h2", {}, "Degrade events"));
  main.append(h.degrade_events.length
    ? el("ul", { class: "plain" }, h.degrade_events.slice().reverse().map((d) => el("li", {}, when(d.at), " ", badge(d.degraded ? "degraded" : "recovered", d.degraded ? "bad" : "ok"), ` p95 ${d.p95_ms.toFixed(1)} ms`)))
    : empty("None: retrieval has stayed within its SLO since the daemon started."));
};

function chart(samples, slo) {
  const width = 600, height = 120;
  const top = Math.max(slo * 1.2, ...samples.map((s) => s.ms));
  const box = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": "latency of the latest calls, ms" });
  const step = width / Math.max(samples.length, 1);
  samples.forEach((s, i) => {
    const h = Math.max(1, (s.ms / top) * (height - 12));
    const bar = svg("rect", { x: (i * step).toFixed(2), y: (height - h).toFixed(2), width: Math.max(1, step - 1).toFixed(2), height: h.toFixed(2), class: "bar " + s.op });
    bar.append(svg("title", {}, `${s.op} ${s.ms.toFixed(1)} ms`));
    box.append(bar);
  });
  const y = height - (slo / top) * (height - 12);
  box.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, class: "slo" }), svg("text", { x: width - 4, y: Math.max(10, y - 3), class: "slo-label" }, `SLO ${slo} ms`));
  const legend = el("p", { class: "muted small legend" }, ["hook", "inject", "search"].map((op) => [el("span", { class: "swatch " + op }), op, " "]), `· the newest ${samples.length} calls, up to ${top.toFixed(0)} ms`);
  return el("div", {}, box, legend);
}

// ------------------------------------------------------------------ Graph

VIEWS.graph = async function (id) {
  main.append(el("h1", {}, "Graph"));
  const form = el("form", { class: "filters" }, el("div", { class: "searchline" },
    el("input", { name: "target", value: id || "", placeholder: "an entry id or keyword", "aria-label": "entry" }),
    el("button", { type: "submit" }, "Show")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = "#/graph/" + encodeURIComponent(form.elements.target.value.trim()); });
  main.append(form);
  if (!id) {
    main.append(empty("Name an entry to see its neighbourhood: the entries within two edges of it.", "Open an entry in Memory and choose Graph, or link entries with memctl connect A B --relation depends_on."));
    return;
  }
  const g = await api("/api/graph?depth=2&id=" + encodeURIComponent(id));
  if (g.edges.length === 0) {
    main.append(empty("This entry has no edges yet.", "Link it with: memctl connect " + short(g.nodes[0] ? g.nodes[0].id : id) + " OTHER --relation depends_on"));
  } else {
    main.append(drawGraph(g));
  }
  main.append(el("ul", { class: "plain" }, g.nodes.map((n) => el("li", {}, badge("depth " + n.depth), " ", entryLink(n.id), " ", n.content))));
}

function drawGraph(g) {
  const size = 480, centre = size / 2;
  const where = {};
  const rings = {};
  for (const n of g.nodes) (rings[n.depth] = rings[n.depth] || []).push(n);
  const deepest = Math.max(1, ...g.nodes.map((n) => n.depth));
  for (const [depth, nodes] of Object.entries(rings)) {
    const r = (Number(depth) * (centre - 50)) / deepest;
    nodes.forEach((n, i) => {
      const a = (2 * Math.PI * i) / nodes.length + Number(depth) * 0.5;
      where[n.id] = [centre + r * Math.cos(a), centre + r * Math.sin(a)];
    });
  }
  const box = svg("svg", { viewBox: `0 0 ${size} ${size}`, class: "graph", role: "img", "aria-label": "the entry's neighbourhood" });
  for (const e of g.edges) {
    const [a, b] = [where[e.source], where[e.target]];
    if (!a || !b) continue;
    box.append(svg("line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1], class: "edge" }));
    box.append(svg("text", { x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2 - 6, class: "edge-label" }, e.relation.replace("_", " ")));
  }
  for (const n of g.nodes) {
    const [x, y] = where[n.id];
    const link = svg("a", { href: "#/entry/" + encodeURIComponent(n.id) });
    const dot = svg("circle", { cx: x, cy: y, r: n.depth === 0 ? 12 : 9, class: "node " + (n.archived ? "archived" : n.status) });
    dot.append(svg("title", {}, n.content));
    link.append(dot, svg("text", { x, y: y + 24, class: "node-label" }, short(n.id)));
    box.append(link);
  }
  return el("div", { class: "graph-box" }, box);
}

// ------------------------------------------------------------------ start

window.addEventListener("hashchange", route);
refreshHeader();
route();
