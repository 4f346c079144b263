// The memory browser: reads the documented /v1 API with the key the person gives it, so the
// API's authorization decides what is shown (ADR 0028). Every text from the API goes into the
// page as text (textContent), never as markup: messages are what users typed.
"use strict";

const KEY = "tiermem-memory-key";
const $ = id => document.getElementById(id);
const state = { user: null, role: null, tenantId: null, sessions: [] };

// -- the key, and the user named in the URL fragment ------------------------------------------

const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("key")) sessionStorage.setItem(KEY, fragment.get("key"));
fragment.delete("key");  // a URL without the key can be shared
history.replaceState(null, "", location.pathname + (fragment.toString() ? "#" + fragment : ""));

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const headers = { "Authorization": "Bearer " + sessionStorage.getItem(KEY) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (r.status === 401) { $("login").hidden = false; }
  if (!r.ok) {
    let message = `HTTP ${r.status}`;
    try { message = (await r.json()).error.message || message; } catch (_) { /* not JSON */ }
    throw new ApiError(r.status, message);
  }
  return r.status === 204 ? null : r.json();
}
const users = path => `/v1/users/${encodeURIComponent(state.user)}${path}`;

function say(text, bad = false) {
  $("status").textContent = text; $("status").className = bad ? "bad" : "";
}

// -- building the page from data, as text -------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
const nothing = (text = "nothing yet") => h("p", { class: "muted" }, text);
const failed = err => h("p", { class: "error", role: "alert" }, err.message);
const badge = (word, cls = word) => h("span", { class: `badge state-${cls}` }, word);

const DAY = { day: "numeric", month: "long", year: "numeric", timeZone: "UTC" };
const day = iso => iso ? new Date(iso).toLocaleDateString("en-GB", DAY) : "–";
const dayTime = iso => iso ? `${day(iso)}, ${new Date(iso).toISOString().slice(11, 16)} UTC` : "–";
const num = (x, digits = 2) => x === null || x === undefined ? "–" : Number(x).toFixed(digits);
const quote = text => h("q", {}, text.length > 240 ? text.slice(0, 240) + "…" : text);

function table(label, head, rows, rowClass = () => "") {
  if (!rows.length) return nothing();
  return h("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": label },
    h("table", {}, h("thead", {}, h("tr", {}, head.map(t => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows.map(r => h("tr", { class: rowClass(r.data) }, r.cells.map(c => h("td", {}, c)))))));
}

function show(id, ...content) { $(id).replaceChildren(...content.flat()); }

// -- the user picker ----------------------------------------------------------------------------

async function findUsers(q = "") {
  try {
    const list = await api(`/v1/users?limit=50${q ? "&q=" + encodeURIComponent(q) : ""}`);
    show("users", ...list.data.map(u => h("li", {},
      h("button", { type: "button", "data-user": u.user_id, "aria-current": String(u.user_id === state.user),
                    onclick: () => openUser(u.user_id, null, true) },
        u.user_id, h("small", {}, `${u.memories_active} facts · ${u.sessions} sessions · ${day(u.last_message_at)}`)))));
    $("users-count").textContent = list.count ? `${list.data.length} of ${list.count} users` : "no user matches";
  } catch (err) { show("users", h("li", {}, failed(err))); }
}

// -- one user -------------------------------------------------------------------------------------

async function openUser(userId, query, moveFocus = false) {
  state.user = userId;
  history.replaceState(null, "", `${location.pathname}#user=${encodeURIComponent(userId)}`);
  document.querySelectorAll("#users button").forEach(b => b.setAttribute("aria-current", String(b.dataset.user === userId)));
  $("empty").hidden = true; $("user").hidden = false;
  $("user-title").textContent = userId;
  delete document.body.dataset.loaded;
  say(`reading ${userId}…`);
  const sessions = api(users("/sessions?limit=100")).then(list => { state.sessions = list.data; return list; });
  const parts = [loadSummary(), loadTimeline(), loadFacts(), loadSessions(sessions), loadRuns()];
  if (query) { $("search-q").value = query; parts.push(sessions.then(() => runSearch()).catch(() => {})); }
  const results = await Promise.allSettled(parts);
  const bad = results.find(r => r.status === "rejected");
  if (bad && bad.reason.status === 404) { say(`user ${userId} not found with this key`, true); $("user").hidden = true; $("empty").hidden = false; return; }
  say(bad ? bad.reason.message : `${userId}: read at ${dayTime(new Date().toISOString())}`, Boolean(bad));
  document.body.dataset.loaded = "true";
  if (moveFocus) $("main").focus();  // a keyboard user who picked a user goes on to read them
}

async function loadSummary() {
  const list = await api(`/v1/users?limit=500&q=${encodeURIComponent(state.user)}`);
  const u = list.data.find(x => x.user_id === state.user);
  $("user-summary").textContent = u
    ? `${u.memories_active} facts believed now · ${u.sessions} sessions · ${u.messages} messages · last message ${dayTime(u.last_message_at)} · first seen ${day(u.created_at)}`
    : "";
}

// The slot's attribute in words: identity/employer → employer, fact/pet:rex → pet: rex.
const slotName = slot => slot.split("/").pop().replace("about:", "").replace(":", ": ");

function beliefValue(v) {
  const change = v.ended_by;
  return h("li", { class: `value`, "data-state": v.state, "data-memory": v.memory_id },
    badge(v.state), h("span", { class: "value-name" }, v.value), " ",
    h("span", { class: "when" }, `${day(v.began_at)} – ${v.ended_at ? day(v.ended_at) : "now"}`),
    v.said_in && h("p", { class: "said" }, "said ", dayTime(v.said_in.created_at), ": ", quote(v.said_in.content),
      ` (session ${v.said_in.session_id})`),
    change && h("p", { class: "ended-by", "data-ended-by": v.memory_id },
      change.is_ending ? "ended" : "changed", " on ", h("strong", {}, day(change.message ? change.message.created_at : v.ended_at)),
      " by ", change.message ? quote(change.message.content) : quote(change.content),
      change.message ? ` (session ${change.message.session_id})` : " (its message was deleted)"),
    v.quarantine_reason && h("p", { class: "said error" }, "held back by the injection guard: ", v.quarantine_reason),
    h("p", { class: "meta" }, `confidence ${num(v.confidence)} · ${v.mention_count} mention${v.mention_count === 1 ? "" : "s"} · ${v.extractor}${v.model ? " (" + v.model + ")" : ""} · “${v.content}”`));
}

async function loadTimeline() {
  const timeline = await api(users("/beliefs"));
  if (!timeline.count) { show("timeline", nothing("no slot holds a value yet")); return; }
  show("timeline", h("div", { class: "slots" }, timeline.data.map(s => {
    const last = s.values[s.values.length - 1];
    const now = s.current !== null
      ? h("p", { class: "now" }, "Now: ", h("strong", { "data-current": s.slot }, s.current), ` since ${day(last.began_at)}`)
      : h("p", { class: "now" }, "Now: ", h("strong", { "data-current": s.slot }, last.state === "ending" ? "ended" : "nothing believed"),
          last.state === "ending" ? ` on ${day(last.began_at)}` : "");
    const path = s.values.filter(v => v.state !== "ending").map(v => v.value);
    return h("article", { class: "slot", "data-slot": s.slot, "aria-label": slotName(s.slot) },
      h("h4", {}, slotName(s.slot), " ", h("code", {}, s.slot)), now,
      path.length > 1 || last.state === "ending"
        ? h("p", { class: "path" }, path.join(" → ") + (last.state === "ending" ? " → ended" : "")) : null,
      h("ol", { class: "values" }, s.values.map(beliefValue)));
  })));
}

async function loadFacts() {
  const all = $("facts-all").checked;
  const list = await api(users(`/memories?limit=500${all ? "&include_superseded=true" : ""}`));
  if (!list.count) { show("fact-groups", nothing("no facts yet")); return; }
  const groups = {};
  for (const m of list.data) (groups[m.type] ||= []).push(m);
  show("fact-groups", ...Object.keys(groups).sort().map(type => h("div", { "data-type": type },
    h("h4", {}, `${type} (${groups[type].length})`),
    groups[type].map(m => h("div", { class: "fact", "data-memory": m.id },
      !m.active && badge(m.superseded_by ? "superseded" : "ended", "superseded"),
      m.active && m.details.ended && badge("ending"), m.quarantine_reason && badge("quarantined"), m.content,
      h("p", { class: "meta" }, `since ${day(m.valid_from || m.first_seen_at)} · last said ${day(m.last_seen_at)} · confidence ${num(m.confidence)} · ${m.mention_count} mention${m.mention_count === 1 ? "" : "s"} · ${m.extractor} ${m.extractor_version}${m.model ? " · " + m.model : ""}`),
      h("details", {}, h("summary", {}, `Sources (${m.sources.length})`),
        m.sources.length ? h("ul", { class: "sources" }, m.sources.map(s => h("li", {},
          `${dayTime(s.created_at)} · ${s.role}${s.speaker ? " " + s.speaker : ""} · session ${s.session_id}: `, quote(s.content))))
          : nothing("its messages were deleted"))))))) ;
}

// -- search as the model sees it ------------------------------------------------------------

async function runSearch() {
  const q = $("search-q").value.trim();
  if (!q) return;
  const session = $("search-session").value, budget = $("search-budget").value;
  show("memory-hits", nothing("searching…")); show("history-hits", nothing("searching…")); show("context", nothing("building…"));
  const memory = api(users("/memories/search"), { method: "POST", body: { query: q, k: 10 } }).then(r => {
    show("memory-hits", r.data.length ? h("ol", {}, r.data.map(m => h("li", { class: "hit", "data-memory": m.id },
      m.content, h("div", { class: "why" }, `score ${num(m.score, 3)} (cosine to the query) · ${m.type} · since ${day(m.valid_from || m.first_seen_at)}`)))) : nothing("no memory found"));
  }).catch(err => show("memory-hits", failed(err)));
  const history = api(users(`/history/search?k=10&q=${encodeURIComponent(q)}`)).then(r => {
    show("history-hits", r.data.length ? h("ol", {}, r.data.map(m => h("li", { class: "hit" },
      `${m.role}${m.speaker ? " " + m.speaker : ""}, ${dayTime(m.created_at)}, session ${m.session_id}: `, quote(m.content),
      h("div", { class: "why" }, `score ${num(m.score, 3)} · words: rank ${m.keyword_rank ?? "–"}, score ${num(m.keyword_score, 3)} · meaning: rank ${m.vector_rank ?? "–"}, score ${num(m.vector_score, 3)}${m.speaker_named ? " · the query names the speaker" : ""}`)))) : nothing("no message found"));
  }).catch(err => show("history-hits", failed(err)));
  const context = session ? api(`/v1/sessions/${encodeURIComponent(session)}/context?query=${encodeURIComponent(q)}${budget ? "&budget_tokens=" + budget : ""}`).then(c => {
    show("context", h("p", {}, `${c.token_count} of ${c.budget_tokens} tokens · ` +
        Object.entries(c.section_tokens).map(([k, v]) => `${k} ${v}`).join(" · ") +
        (c.contradictions_dropped ? ` · ${c.contradictions_dropped} contradicted memories left out` : "") +
        (c.quarantined ? ` · ${c.quarantined} held back by the injection guard` : "")),
      h("pre", { tabindex: "0", "aria-label": "the system prompt" }, c.system_prompt));
  }).catch(err => show("context", failed(err))) : Promise.resolve(show("context", nothing("the user has no session")));
  await Promise.all([memory, history, context]);
}

// -- sessions: tiers and compression runs --------------------------------------------------

async function loadSessions(sessions) {
  const list = await sessions;
  const options = list.data.map(s => h("option", { value: s.session_id }, `${s.session_id} (${s.messages} messages, ${day(s.updated_at)})`));
  $("session-pick").replaceChildren(...options);
  $("search-session").replaceChildren(...options.map(o => o.cloneNode(true)));
  if (!list.count) { show("tiers", nothing("no session yet")); show("compressions", nothing()); return; }
  await loadTiers();
}

const span = s => `${s.session_id} #${s.first_seq}–#${s.last_seq}`;

async function loadTiers() {
  const sid = encodeURIComponent($("session-pick").value);
  const [tiers, runs] = await Promise.all([api(`/v1/sessions/${sid}/tiers`), api(`/v1/sessions/${sid}/compression/runs?limit=20`)]);
  show("tiers", h("p", {}, `${tiers.total_tokens} tokens of history · compression starts at ${tiers.trigger_tokens}, aims at ${tiers.target_tokens} (context ${tiers.context_limit_tokens}) · ` +
      (tiers.partition_ok ? "every message covered once" : "problems: " + tiers.problems.join("; "))),
    tiers.tiers.map(t => h("div", { class: "tier", "data-tier": t.name },
      h("h5", {}, `${t.name}: ${t.entries.length} entries, ${t.tokens} tokens` + (t.budget_tokens === null ? " (pinned)" : ` of ${t.budget_tokens}`), " ",
        t.fits ? badge("fits", "done") : badge("over budget", "failed")),
      t.entries.length ? t.entries.map(e => h("div", { class: "entry" },
        h("strong", {}, e.kind === "summary" ? `summary, level ${e.level}` : `${e.role}${e.speaker ? " " + e.speaker : ""}`),
        ` · covers ${e.spans.map(span).join(", ") || "–"} (${e.message_count} messages) · ${e.tokens} tokens${e.summarizer ? " · " + e.summarizer : ""}: `,
        quote(e.text))) : nothing("empty"))));
  show("compressions", table("compression runs", ["started", "trigger", "status", "tokens before → after", "iterations", "summarizer", "error"],
    runs.data.map(r => ({ data: r, cells: [dayTime(r.created_at), r.trigger, badge(r.status, r.status === "failed" ? "failed" : "done"),
      `${r.tokens_before} → ${r.tokens_after}`, r.iterations, r.summarizer || "–", r.error || ""] })), r => r.status === "failed" ? "bad" : ""));
}

// -- extraction runs, retry, replay ---------------------------------------------------------

const RETRYABLE = new Set(["failed", "dropped"]);

async function loadRuns() {
  const only = $("runs-bad").checked ? "&status=failed&status=dropped" : "";
  const runs = await api(users(`/runs?limit=100${only}`));
  show("run-table", table("extraction runs", ["when", "session", "turn", "status", "facts", "extractor", "why", ""],
    runs.data.map(r => ({ data: r, cells: [dayTime(r.created_at), r.session_id, quote(r.message), badge(r.status),
      `${r.facts_extracted} extracted: ${r.facts_added} added, ${r.facts_merged} merged, ${r.facts_superseded} superseded` + (r.facts_invalid ? `, ${r.facts_invalid} dropped` : ""),
      `${r.extractor}${r.model ? " · " + r.model : ""}`,
      r.error || (r.dropped_reasons || []).join("; ") || r.skipped_reason || "",
      RETRYABLE.has(r.status) ? h("button", { type: "button", "data-retry": r.id, disabled: state.role !== "admin",
        title: state.role === "admin" ? null : "needs a tenant admin key", onclick: e => retry(r.id, e.target) }, "Retry") : ""] })),
    r => RETRYABLE.has(r.status) ? "bad" : ""));
}

async function retry(runId, button) {
  button.disabled = true;
  try { const out = await api("/v1/ops/runs/retry", { method: "POST", body: { run_ids: [runId] } });
        say(out.retried.length ? "sent back to the extract queue" : "not retried: " + JSON.stringify(out.skipped)); await loadRuns(); }
  catch (err) { say(err.message, true); button.disabled = false; }
}

async function replay() {
  const out = $("replay-result"); $("replay").disabled = true;
  try {
    let job = await api("/v1/replay", { method: "POST", body: { mode: "dry_run", tenant_id: state.tenantId, user_ids: [state.user] } });
    out.replaceChildren(nothing(`replay ${job.id}: ${job.total} turns…`));
    for (let i = 0; i < 300 && job.status === "running"; i++) {
      await new Promise(r => setTimeout(r, 1000));
      job = await api(`/v1/replay/${job.id}`);
      out.replaceChildren(nothing(`replay ${job.id}: ${job.done} of ${job.total} turns`));
    }
    const diff = job.report[state.user] || {};
    const part = (title, items) => h("div", {}, h("h5", {}, `${title} (${(items || []).length})`),
      (items || []).length ? h("ul", {}, items.map(i => h("li", {}, typeof i === "string" ? i : `${i.type ? i.type + ": " : ""}${i.content || JSON.stringify(i)}`))) : nothing("none"));
    out.replaceChildren(h("p", {}, `replay ${job.id} ${job.status}: ${job.done} of ${job.total} turns, ${job.failed} failed`),
      part("would be added", diff.added), part("would merge into a fact held now", diff.merged),
      part("would supersede", diff.superseded), part("held now, not extracted again", diff.missing));
  } catch (err) { out.replaceChildren(failed(err)); }
  $("replay").disabled = state.role !== "admin";
}

// -- export and delete ------------------------------------------------------------------------

async function exportUser() {
  try {
    const data = await api(users("/export"));
    const link = h("a", { href: URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" })),
                          download: `tiermem-${state.user}.json` }, "download");
    link.click();
    show("manage-result", h("p", {}, `exported ${data.messages.length} messages and ${data.memories.length} memories`));
  } catch (err) { show("manage-result", failed(err)); }
}

function askDelete() {
  $("confirm-user").textContent = state.user; $("confirm-id").value = "";
  $("confirm-delete").showModal();
}

async function deleteUser() {
  if ($("confirm-delete").returnValue !== "delete" || $("confirm-id").value !== state.user) return;
  try {
    const out = await api(users(""), { method: "DELETE" });
    show("manage-result", h("p", {}, `deleted: ${Object.entries(out.deleted).map(([t, n]) => `${n} ${t}`).join(", ")}. ${out.disk_reclaimed}`));
    say(`${state.user} deleted`); findUsers($("find-q").value.trim());
  } catch (err) { show("manage-result", failed(err)); }
}

// -- wiring -------------------------------------------------------------------------------------

async function whoAmI() {
  // An admin key may retry runs and replay; an app key reads the same user data.
  try { const [own] = await api("/v1/admin/tenants"); state.role = "admin"; state.tenantId = own ? own.id : null; }
  catch (err) { state.role = err.status === 403 ? "app" : null; }
  $("replay").disabled = state.role !== "admin";
  if (state.role !== "admin") $("replay").title = "needs a tenant admin key";
}

async function start() {
  $("login").hidden = true; $("forget-key").hidden = false;
  await whoAmI();
  await findUsers();
  if (fragment.get("user")) await openUser(fragment.get("user"), fragment.get("q"));
  else say(state.role ? `signed in with ${state.role === "admin" ? "a tenant admin" : "an app"} key` : "");
}

$("login").addEventListener("submit", e => { e.preventDefault(); sessionStorage.setItem(KEY, $("key").value); $("key").value = ""; start(); });
$("forget-key").addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
$("find").addEventListener("submit", e => { e.preventDefault(); findUsers($("find-q").value.trim()); });
$("facts-all").addEventListener("change", () => loadFacts().catch(err => show("fact-groups", failed(err))));
$("search-form").addEventListener("submit", e => { e.preventDefault(); runSearch(); });
$("session-pick").addEventListener("change", () => loadTiers().catch(err => show("tiers", failed(err))));
$("runs-bad").addEventListener("change", () => loadRuns().catch(err => show("run-table", failed(err))));
$("replay").addEventListener("click", replay);
$("export").addEventListener("click", exportUser);
$("delete").addEventListener("click", askDelete);
$("confirm-delete").addEventListener("close", deleteUser);
if (sessionStorage.getItem(KEY)) start(); else { $("login").hidden = false; say("give a key to start"); }
