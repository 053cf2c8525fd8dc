// flower's web page: the tenant's runs, one run live over SSE, its questions, controls and diff.
// Plain DOM, no build step. Everything a run reports is untrusted: it is only ever set as textContent.
// Every word of the page's own comes from messages.js (T, stepName, verdictWord, guardSaid), in the browser's language.
"use strict";

const TOKEN_KEY = "flower.token";   // sessionStorage only: gone when the tab closes
const ASK_TOOL = "mcp__human__ask", INBOX_TOOL = "mcp__human__inbox";
const ACTIVE = ["starting", "running"], ENDED = ["succeeded", "failed", "aborted", "killed", "cancelled"];
const $ = (id) => document.getElementById(id);

const state = { token: sessionStorage.getItem(TOKEN_KEY) || "", runs: [], current: null, run: null,
                stream: null, label: "", tools: {}, reports: {}, denials: {}, diffCommit: null, streamedCost: 0,
                timers: [], steps: [], section: null, lastAt: 0, endSeen: 0, ticker: null };

// -- the API ------------------------------------------------------------------------------------
class ApiError extends Error { constructor(status, message) { super(message); this.status = status; } }

async function api(path, { method = "GET", body, text = false, blob = false } = {}) {
  const headers = { Authorization: "Bearer " + state.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch("/v1" + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) { signOut(T("auth.refused")); throw new ApiError(401, "signed out"); }
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { const j = await r.json(); if (j && typeof j.error === "string") msg = j.error; } catch (e) { /* not JSON */ }
    throw new ApiError(r.status, msg);
  }
  return blob ? r.blob() : text ? r.text() : r.json();
}

function notice(text, bad = false) {
  const n = $("notice");
  n.textContent = text; n.className = bad ? "bad" : ""; n.hidden = !text;
  clearTimeout(notice.t); if (text) notice.t = setTimeout(() => { n.hidden = true; }, 6000);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function linked(node, href) {  // an operator's link (http/https only), else the node as it is
  if (!href || !/^https?:\/\//.test(href)) return node;
  const a = el("a");
  a.href = href; a.target = "_blank"; a.rel = "noopener noreferrer";
  a.append(node);
  return a;
}

const oneLine = (s, n = 160) => { s = String(s || "").replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; };
const money = (x) => "$" + Number(x || 0).toFixed(4);

// -- sign in ------------------------------------------------------------------------------------
async function signIn(token) {
  state.token = token.trim();
  try {
    await api("/runs?limit=1");
  } catch (e) {
    state.token = "";
    $("signin-error").textContent = e.status === 401 ? T("auth.no_tenant") : T("auth.unreachable", { error: e.message });
    $("signin-error").hidden = false;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  showApp();
}

function signOut(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = "";
  stopRun();
  state.timers.forEach(clearInterval); state.timers = [];
  $("app").hidden = true; $("signout").hidden = true; $("who").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = why || ""; $("signin-error").hidden = !why;
}

function showApp() {
  $("signin").hidden = true; $("app").hidden = false; $("signout").hidden = false;
  $("who").textContent = T("auth.signed_in");
  api("/usage").then((u) => {  // who is signed in: the tenant the token belongs to
    if (typeof u.tenant === "string") $("who").textContent = T("auth.signed_in_as", { tenant: u.tenant });
  }, () => {});
  refreshRuns();
  state.timers.push(setInterval(refreshRuns, 2000), setInterval(refreshRun, 2000));
  const named = decodeURIComponent(location.hash.slice(1));  // a whole id, a short id or `last`: the API resolves it
  if (named) api("/runs/" + encodeURIComponent(named)).then((run) => selectRun(run.id), (e) => notice(e.message, true));
}

// -- the runs -----------------------------------------------------------------------------------
async function refreshRuns() {
  let runs;
  try { runs = (await api("/runs?limit=100")).runs || []; } catch (e) { return; }
  state.runs = runs;
  const ul = $("runs");
  ul.replaceChildren(...runs.map((r) => {
    const li = el("li", r.id === state.current ? "selected" : "");
    li.dataset.id = r.id;
    const top = el("div");
    top.append(el("code", "short", r.short || ""), " ", el("span", "badge " + r.status, r.status), " ", el("span", "meta", money(r.cost_usd) + (r.step ? " · " + stepName(r.step) : "")));
    li.append(top, el("span", "ask", oneLine(r.ask, 80)), el("span", "meta", (r.created || "").replace("T", " ").slice(0, 19)));
    li.addEventListener("click", () => selectRun(r.id));
    return li;
  }));
  if (!runs.length) ul.append(el("li", "meta", T("runs.none")));
}

async function submitRun(ev) {
  ev.preventDefault();
  const ask = $("new-ask").value.trim();
  let options = {};
  const raw = $("new-options").value.trim();
  if (raw) {
    try { options = JSON.parse(raw); } catch (e) { notice(T("runs.options_not_json"), true); return; }
  }
  try {
    const run = await api("/runs", { method: "POST", body: { ask, options } });
    $("new-ask").value = "";
    notice(T("runs.submitted", { run: run.id }));
    await refreshRuns();
    selectRun(run.id);
  } catch (e) { if (e.status !== 401) notice(e.message, true); }
}

// -- one run ------------------------------------------------------------------------------------
function stopRun() {
  if (state.stream) state.stream.abort();
  state.stream = null; state.current = null; state.run = null;
  ticking(false);
}

function selectRun(id) {
  stopRun();
  state.current = id; state.label = ""; state.tools = {}; state.reports = {}; state.streamedCost = 0; state.diffCommit = null;
  state.steps = []; state.section = null; state.lastAt = 0; state.endSeen = 0;
  history.replaceState(null, "", "#" + encodeURIComponent(id));
  document.querySelectorAll("#runs li").forEach((li) => li.classList.toggle("selected", li.dataset.id === id));
  $("run").hidden = false;
  $("run-id").textContent = id; $("run-short").textContent = "";
  $("events").replaceChildren(); $("questions").replaceChildren(); $("diff").replaceChildren(); $("diff-files").replaceChildren();
  ["run-where", "run-elapsed", "run-step", "diff-state"].forEach((e) => { $(e).textContent = ""; });
  $("run-why").hidden = true; $("patch-btn").hidden = true;
  const ctl = new AbortController();
  state.stream = ctl;
  refreshRun().then(() => { refreshQuestions(); loadDiff(); });
  follow(id, ctl.signal);
}

async function refreshRun() {
  const id = state.current;
  if (!id || (state.run && state.run.ended && ENDED.includes(state.run.status))) return;  // an ended run stays as it is
  let run;
  try { run = await api("/runs/" + encodeURIComponent(id)); } catch (e) { if (e.status === 404) notice(e.message, true); return; }
  if (id !== state.current) return;
  const was = state.run ? state.run.status : "", wasEnded = !!(state.run && state.run.ended);
  const wasAt = state.run ? rank(was, state.run.sandboxes) : -1;
  if (was && wasAt > rank(run.status, run.sandboxes)) run.status = was;  // a poll sent before the events it lags behind
  state.run = run;
  $("run-short").textContent = run.short || "";
  if (was && was !== run.status) refreshRuns();
  $("run-step").textContent = run.step ? T("run.step", { step: stepName(run.step) }) : "";
  $("run-cost").textContent = money(Math.max(run.cost_usd || 0, state.streamedCost));
  $("run-ask").textContent = run.ask;
  drawWhere();
  drawStatus();
  if (!ENDED.includes(run.status)) refreshQuestions();
  else if (was && !wasEnded && run.ended) { $("questions").replaceChildren(); loadDiff(); }  // its final diff, or none
}

// A run only moves forward: queued -> starting -> running -> ended. Its events say so before a poll does. A run that
// outlives its sandbox goes round again — parked or lost, back in line, starting, running in its next sandbox — so
// each sandbox it has had counts: running in its 2nd is past parked after its 1st.
const rank = (status, sandboxes = 0) => ENDED.includes(status) ? Infinity
  : status === "running" ? 10 * Math.max(1, sandboxes || 0)
  : 10 * (sandboxes || 0) + 5 + ["parked", "queued", "starting"].indexOf(status);
// A sandbox of it reads its mailbox now, or will: live, parked, or in line to be resumed.
const reachable = (run) => ACTIVE.includes(run.status) || run.status === "parked"
  || (run.status === "queued" && run.sandboxes > 0);

function drawStatus() {
  const run = state.run, status = run.status, ended = ENDED.includes(status);
  $("run-status").textContent = status; $("run-status").className = "badge " + status;
  ["message-btn", "interrupt-btn"].forEach((b) => { $(b).disabled = !reachable(run); });
  $("cancel-btn").disabled = ended;
  if (ended && !state.endSeen) state.endSeen = Date.now() / 1000;
  ticking(!ended && !!run.started);
  drawTimes();
  // why it ended, once the row says so: the service's sentence (it may quote the run's own: text only)
  const why = $("run-why"), known = ended && run.ended;
  if ((status === "queued" || status === "starting") && run.waiting) {  // why it has not started: the service's sentence, like GitHub's "Waiting for a runner"
    why.hidden = false; why.className = "ended";
    $("run-why-label").textContent = T("run.why_waiting"); $("run-error").textContent = run.waiting;
    return;
  }
  why.hidden = !(known && (run.error || status !== "succeeded"));
  if (why.hidden) return;
  why.className = status === "succeeded" ? "note" : status === "cancelled" ? "ended" : "bad";
  $("run-why-label").textContent = status === "succeeded" ? T("run.note") : status === "cancelled" ? T("run.why_ended")
    : T("run.why_failed", { status: T("status." + status) });
  $("run-error").textContent = run.error || T("run.no_reason");
}

// Where the run's work is: its branch, the commit it started from, the commit it handed back (or its last checkpoint).
function drawWhere() {
  const run = state.run, box = $("run-where"), short = (sha) => String(sha).slice(0, 12);
  const parts = [];
  if (run.fired_by) {  // a schedule's tick or its trigger started it: say which, and when it was due
    const f = run.fired_by;
    parts.push([T(f.by === "trigger" ? "run.fired_trigger" : "run.fired_schedule"),
                f.by === "trigger" ? f.schedule : f.schedule + " @ " + f.tick.replace("T", " ").replace(".000Z", "Z")]);
  }
  if (run.branch) parts.push([T("run.branch"), run.branch]);
  if (run.base) parts.push([T("run.base"), short(run.base)]);
  if (run.commit) parts.push([T("run.commit"), short(run.commit)]);
  else if (state.diffCommit && state.diffCommit !== run.base) {
    parts.push([T("run.checkpoint"), short(state.diffCommit)]);
  }
  if (run.sandboxes > 1) parts.push([T("run.resumed"), T("run.resumed_times", { n: run.sandboxes - 1 })]);
  if (run.trace_id) parts.push([T("run.trace"), run.trace_id, run.trace_url]);  // in the operator's tracing UI
  if (run.losses && run.losses.length) {
    parts.push([T("run.lost"), run.losses.map((x) => T("loss." + x.cause)).join(", ")]);
  }
  box.replaceChildren(...parts.flatMap(([k, v, href], i) => [i ? " · " : "", el("span", "k", k), " ", linked(el("code", "", v), href)]));
}

// -- times: the run's elapsed time and each step's, counting only while the run is live ----------------
// "Now" of an ended run is its end: a counter stops there, whatever the clock does next.
const seconds = (iso) => (iso ? Date.parse(iso) / 1000 : 0);
function runNow() {
  const run = state.run;
  if (run && ENDED.includes(run.status)) return run.ended ? seconds(run.ended) : state.lastAt || state.endSeen;
  return Date.now() / 1000;
}

function drawTimes() {
  const run = state.run;
  if (!run) return;
  $("run-elapsed").textContent = run.started ? T("run.elapsed", { time: took(runNow() - seconds(run.started)) }) : "";
  const last = state.steps[state.steps.length - 1];
  if (last) drawStepTime(last);
}

function drawStepTime(s) {
  const end = s.end || (s === state.steps[state.steps.length - 1] ? runNow() : 0);
  s.took.textContent = s.at && end ? " · " + took(end - s.at) : "";
}

function ticking(on) {
  if (on && !state.ticker) state.ticker = setInterval(drawTimes, 1000);
  if (!on && state.ticker) { clearInterval(state.ticker); state.ticker = null; }
}

function advanceStatus(status) {
  const run = state.run;
  if (!run || rank(status, run.sandboxes) <= rank(run.status, run.sandboxes)) return;
  state.run.status = status;
  drawStatus();
  refreshRuns();
}

// -- the event stream: fetch (so the Bearer header goes along), parsed as SSE, resumed after a drop --
async function follow(id, signal) {
  let last = 0, drops = 0;
  while (!signal.aborted) {
    setStream(T("stream.live"), true);
    try {
      const headers = { Authorization: "Bearer " + state.token, Accept: "text/event-stream" };
      if (last) headers["Last-Event-ID"] = String(last);
      const r = await fetch("/v1/runs/" + encodeURIComponent(id) + "/events", { headers, signal });
      if (r.status === 401) { signOut(T("auth.refused")); return; }
      if (r.status === 429) { setStream(T("stream.too_many")); await sleep(5000); continue; }
      if (!r.ok) { setStream(r.status === 410 ? T("stream.deleted") : T("stream.unavailable", { status: r.status })); return; }
      setStream(T("stream.live"), true);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "", msg = { event: "message", data: [], id: null };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.search(/\r?\n/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf[nl] === "\r" ? 2 : 1));
          if (line === "") {
            const data = msg.data.join("\n");
            if (msg.event === "end") {
              let end = null;
              try { end = JSON.parse(data); } catch (e) { end = null; }
              if (end && typeof end.status === "string" && ENDED.includes(end.status)) {
                advanceStatus(end.status); $("questions").replaceChildren();
              }
              setStream(T("stream.ended"), false); refreshRun(); return;  // the ended row brings the diff
            }
            let ev = null;
            try { ev = data.trim() ? JSON.parse(data) : null; } catch (e) { ev = null; }  // keep-alives carry an empty data line
            if (ev && typeof ev.seq === "number" && ev.seq > last) { last = ev.seq; drops = 0; advanceStatus("running"); show(ev); }
            msg = { event: "message", data: [], id: null };
          } else if (!line.startsWith(":")) {
            const i = line.indexOf(":");
            const key = i < 0 ? line : line.slice(0, i);
            let val = i < 0 ? "" : line.slice(i + 1);
            if (val.startsWith(" ")) val = val.slice(1);
            if (key === "data") msg.data.push(val); else if (key === "event") msg.event = val; else if (key === "id") msg.id = val;
          }
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    drops += 1;
    setStream(T("stream.reconnecting"));
    await sleep(Math.min(5000, 300 * drops));
  }
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
function setStream(text, live = false) {
  $("stream-state").textContent = text ? "(" + text + ")" : "";
  $("stream-state").classList.toggle("live", live);
}

// -- drawing events, as the terminal does -----------------------------------------------------------
function line(cls, text, sub) {
  const d = el("div", cls + (sub ? " sub" : ""), text);
  const log = $("events");
  const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
  (state.section ? state.section.body : log).append(d);
  if (stick) log.scrollTop = log.scrollHeight;
  return d;
}

// A step's events fold under its header, as on a CI run's page: the live step open, a finished one folded unless
// the reader opened or closed it. Its time: from its step event to the next one (the last one: to the run's end).
function endStep(at) {
  const prev = state.section;
  if (!prev) return;
  prev.end = at || 0;
  if (!prev.touched) prev.box.open = false;
  drawStepTime(prev);
  state.section = null;
}

function openStep(ev, p) {
  endStep(ev.at);
  const box = el("details", "step"), head = el("summary", "stephead"), body = el("div", "lines");
  const s = { box, body, took: el("span", "took"), at: Number(ev.at) || 0, end: 0, touched: false };
  box.open = true; head.title = T("ev.fold");
  const name = T("ev.step_head", { step: stepName(ev.text), i: (p.index || 0) + 1, n: p.total || "?" });
  head.append(el("span", "", name), s.took);
  head.addEventListener("click", () => { s.touched = true; });
  box.append(head, body);
  $("events").append(box);
  state.steps.push(s); state.section = s;
  drawStepTime(s);
}

function attempt(label) {
  if (label.includes("·判定#")) line("attempt", T("ev.judging", { label: stepName(label) }));
  else if (label.includes("#round")) line("attempt", T("ev.round", { label: stepName(label) }));
  else if (label.includes("#retry")) line("attempt", T("ev.retry", { label: stepName(label) }));
}

function gist(report) {
  const lines = String(report || "").split("\n").map((s) => s.trim()).filter(Boolean);
  for (let i = 0; i < lines.length - 1; i++) if (/^#+\s*结论/.test(lines[i])) return lines[i + 1];
  return lines.find((s) => !/^[#<\[]/.test(s)) || lines[0] || "";
}

function show(ev) {
  const p = ev.payload || {}, k = ev.kind, sub = !!p.subagent;
  if (Number(ev.at) > state.lastAt) state.lastAt = Number(ev.at);
  if (k === "step") state.label = ev.text;
  else if (ev.step && ev.step !== state.label) { state.label = ev.step; attempt(ev.step); }
  switch (k) {
    case "step": {
      if (p.skipped) { endStep(ev.at); line("muted", T("ev.skipped", { step: stepName(ev.text) })); break; }
      openStep(ev, p);
      if (p.resumed) line("muted", T("ev.resumed"));
      break;
    }
    case "text": {
      const verdict = state.label.includes("判定") && /##\s*结论\s*\n+\s*(\S[^\n]*)/.exec(ev.text || "");
      if (verdict) {
        const v = verdict[1].trim();
        line("verdict " + (/^(达成|achieved)/i.test(v) ? "achieved" : "missed"), T("ev.verdict", { verdict: verdictWord(v) }));
      }
      const lines = glossHeadings(String(ev.text || "").replace(/\n+$/, "")).split("\n");
      const shown = lines.slice(0, 40).map((s) => "  " + s).join("\n");
      line(sub ? "muted" : "", shown + (lines.length > 40 ? "\n  " + T("ev.more_lines", { n: lines.length - 40 }) : ""), sub);
      break;
    }
    case "thinking": line("muted", "~ " + oneLine(ev.text, 200), sub); break;
    case "tool_call": {
      const inp = p.input && typeof p.input === "object" ? p.input : {};
      if (p.id) state.tools[p.id] = ev.tool;
      if (ev.tool === ASK_TOOL) break;  // the ask event shows the question
      if (ev.tool === INBOX_TOOL) line("tool", T("ev.inbox"), sub);
      else if (ev.tool === "Agent" || ev.tool === "Task")
        line("dispatch", T("ev.dispatch", { who: inp.subagent_type || "subagent", what: oneLine(inp.description || ev.text, 200) }), sub);
      else line("tool", "* " + ev.tool + " " + oneLine(ev.text, 200), sub);
      break;
    }
    case "tool_result": {
      const tool = state.tools[p.tool_use_id || ""] || "";
      if (p.interrupted) { if (tool !== ASK_TOOL) line("muted", T("ev.call_interrupted", { tool: tool || T("ev.a_call") }), sub); break; }
      if (p.is_error && saidByGuard(ev.text)) break;  // the guard's line said it, in the reader's language
      if (p.is_error) line("bad", "x " + oneLine(ev.text, 300), sub);
      else if ((tool === "Agent" || tool === "Task") && !sub)  // the stream cuts results at 500 characters: the report comes whole with the task
        line("report", T("ev.report", { gist: oneLine(gist(state.reports[p.tool_use_id] || ev.text), 200) }));
      break;
    }
    case "ask": {
      if (p.kind === "mail") { line("answer", T("ev.mail")); break; }
      if (p.state === "asked") {
        line("ask", "? " + ev.text);
        (p.options || []).forEach((o, i) => line("ask", "   " + (i + 1) + ") " + o));
        refreshQuestions();
      } else if (p.state === "answered") { line("answer", "+ " + (p.answer || T("ev.empty_answer"))); refreshQuestions(); }
      else if (p.state === "timeout") { line("warn", T("ev.timeout")); refreshQuestions(); }
      else if (p.state === "over_budget") { line("warn", T("ev.over_budget")); refreshQuestions(); }
      else if (p.state === "declined") { line("warn", T("ev.declined", { why: p.answer ? " (" + p.answer + ")" : "" })); refreshQuestions(); }
      else if (p.state === "invalid") line("bad", T("ev.invalid"));
      break;
    }
    case "retry": {  // the runtime's own line is for the model's side; its numbers say the same
      const said = "attempt" in p && "delay" in p ? T("ev.retry_wait", { n: p.attempt, delay: Math.round(p.delay) }) : "~ " + ev.text;
      line("warn", said + (p.error ? ": " + oneLine(p.error, 100) : ""));
      break;
    }
    case "handoff": line("muted", handoffLine(ev, p)); break;
    case "error": line("bad", "x " + oneLine(ev.text, 300), sub); break;
    case "reset": line("muted", T("ev.reset")); break;
    case "task":
      if (typeof p.summary === "string" && p.tool_use_id) state.reports[p.tool_use_id] = p.summary;
      if (ev.text) line("warn", "! " + oneLine(ev.text, 400));
      break;
    case "prompt":  // only the person's words, from an interrupt: what the CLI says to the model stays in the stream
      if (p.interrupt && p.by === "person")
        line("answer", ev.text ? T("ev.interrupt_words", { words: oneLine(ev.text, 300) }) : T("ev.interrupt_plain"));
      break;
    case "result": {
      const c = Number(p.cost_usd || 0);
      state.streamedCost += c;
      if (p.interrupted) {
        line("muted", T("ev.result_interrupted", { step: stepName(ev.step || "-"), cost: money(c), total: money(state.streamedCost) }));
        $("run-cost").textContent = money(Math.max(state.run ? state.run.cost_usd || 0 : 0, state.streamedCost));
        break;
      }
      line(p.is_error ? "bad" : "cost", T("ev.result", { mark: p.is_error ? "x" : "+", step: stepName(ev.step || "-"), cost: money(c),
        n: Number(p.num_turns || 0), total: money(state.streamedCost) }));
      $("run-cost").textContent = money(Math.max(state.run ? state.run.cost_usd || 0 : 0, state.streamedCost));
      break;
    }
    case "audit":
      if (ev.text === "deny") {
        const why = guardSaid(p, ev.tool);
        if (p.reason) state.denials[String(p.reason)] = why;
        line("warn", T("ev.guard", { who: p.role || "agent", tool: ev.tool || T("ev.a_call"), why: oneLine(why, 200) }));
      }
      break;
    case "checkpoint": line("muted", T("ev.checkpoint", { commit: String(p.commit || "").slice(0, 12) })); loadDiff(); break;
    case "system":
      if (ev.text === "sandbox started") line("muted", T("ev.sandbox"));
      else if (p.subtype === "killed") line("bad", T("ev.killed"));
      else if (p.subtype === "resumed") line("warn", T("ev.resumed", { why: T("resumed." + p.cause) }));
      break;
    default: break;
  }
}

function saidByGuard(text) {
  const t = String(text || "");
  return t.trim() !== "" && Object.keys(state.denials).some((reason) => t.includes(reason) || reason.includes(t));
}

const kTokens = (n) => (Number(n || 0) / 1000).toFixed(1) + "K";

function handoffLine(ev, p) {
  if (p.phase === "done") return T("ev.handoff_done");
  if (p.phase === "near") return T("ev.handoff_near", { used: kTokens(p.used), at: kTokens(p.at) });
  if (p.phase === "writing") return T("ev.handoff_writing");
  return "# " + oneLine(ev.text || p.phase, 200);
}

// -- questions ----------------------------------------------------------------------------------
async function refreshQuestions() {
  const id = state.current;
  if (!id) return;
  let qs;
  try { qs = (await api("/runs/" + encodeURIComponent(id) + "/questions")).questions || []; } catch (e) { return; }
  if (id !== state.current) return;
  const box = $("questions");
  const open = new Set(qs.map((q) => q.id));
  box.querySelectorAll(".question").forEach((d) => { if (!open.has(d.dataset.id)) d.remove(); });
  for (const q of qs) {
    if (box.querySelector('.question[data-id="' + CSS.escape(q.id) + '"]')) continue;
    const d = el("div", "question"); d.dataset.id = q.id;
    d.append(el("div", "q", q.question));
    const row = el("div", "row");
    (q.options || []).forEach((o) => {
      const b = el("button", "option", o); b.type = "button";
      b.addEventListener("click", () => answer(q.id, o, d));
      row.append(b);
    });
    const input = el("input"); input.placeholder = T("q.placeholder");
    const send = el("button", "send", T("q.answer")); send.type = "button";
    send.addEventListener("click", () => { if (input.value.trim()) answer(q.id, input.value.trim(), d); });
    input.addEventListener("keydown", (e) => { if (e.key === "Enter" && input.value.trim()) answer(q.id, input.value.trim(), d); });
    const skip = el("button", "skip", T("q.skip")); skip.type = "button"; skip.title = T("q.skip_title");
    skip.addEventListener("click", () => answer(q.id, "", d));
    row.append(input, send, skip);
    d.append(row);
    box.append(d);
  }
}

async function answer(qid, text, box) {
  box.querySelectorAll("button, input").forEach((b) => { b.disabled = true; });
  try {
    await api("/runs/" + encodeURIComponent(state.current) + "/answers", { method: "POST", body: { question_id: qid, text } });
    box.remove();
    notice(text ? T("q.answered", { text: oneLine(text, 80) }) : T("q.skipped"));
  } catch (e) {
    box.querySelectorAll("button, input").forEach((b) => { b.disabled = false; });
    if (e.status !== 401) notice(e.message, true);
  }
}

// -- controls -----------------------------------------------------------------------------------
async function control(what) {
  const id = state.current, text = $("say").value.trim();
  try {
    if (what === "message") {
      if (!text) { notice(T("ctl.write_first"), true); return; }
      await api("/runs/" + encodeURIComponent(id) + "/messages", { method: "POST", body: { text } });
      notice(T("ctl.sent"));
    } else if (what === "interrupt") {
      await api("/runs/" + encodeURIComponent(id) + "/interrupt", { method: "POST", body: { text: text || "(interrupted from the web page: carry on)" } });
      notice(T("ctl.interrupted"));
    } else {
      const run = await api("/runs/" + encodeURIComponent(id) + "/cancel?wait=0", { method: "POST" });
      notice(ENDED.includes(run.status) ? T("ctl.ended", { status: run.status }) : T("ctl.cancelling"));
    }
    $("say").value = "";
    refreshRun();
  } catch (e) { if (e.status !== 401) notice(e.message, true); }
}

// -- the diff, coloured -------------------------------------------------------------------------
const KEYWORDS = new Set(("def class return if elif else for while in not and or import from as with try except finally raise " +
  "pass break continue lambda yield async await None True False self is global nonlocal function const let var new this " +
  "typeof instanceof switch case default throw catch export package func type struct interface go defer chan map range " +
  "fn impl pub use mod match mut null true false void public private static int long char bool string").split(" "));
const TOKEN = /("(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|`[^`]*`?)|(#.*|\/\/.*)|(\b\d[\d_.]*\b)|([A-Za-z_]\w*)|([^"'`#/\w]+|\/)/g;

function colourCode(target, code, hashComments) {
  let m;
  TOKEN.lastIndex = 0;
  while ((m = TOKEN.exec(code)) !== null) {
    if (m[0] === "") { TOKEN.lastIndex++; continue; }
    if (m[1]) target.append(el("span", "str", m[1]));
    else if (m[2] && (hashComments ? m[2][0] === "#" : m[2][0] === "/")) target.append(el("span", "com", m[2]));
    else if (m[2]) { target.append(m[2][0]); TOKEN.lastIndex = m.index + 1; }
    else if (m[3]) target.append(el("span", "num", m[3]));
    else if (m[4]) target.append(KEYWORDS.has(m[4]) ? el("span", "kw", m[4]) : m[4]);
    else target.append(m[0]);
  }
}

// A diff this small (changed lines) is fetched whole; past it the page fetches file by file, one at a time:
// files up to FILE_LINES while SHOWN_LINES last, the others (and binary ones) only when the user opens them.
const WHOLE_LINES = 2000, FILE_LINES = 500, SHOWN_LINES = 2000, MAX_SECTIONS = 500;
const runPath = (id) => "/runs/" + encodeURIComponent(id);
const counts = (f) => f.binary ? T("diff.binary") : "+" + f.insertions + " -" + f.deletions;

function diffRows(text) {
  const rows = [];
  let hash = true;
  for (const raw of text.replace(/\n$/, "").split("\n")) {
    if (raw.startsWith("flower-diff-error: ")) { rows.push(el("div", "bad", raw)); continue; }
    if (raw.startsWith("diff --git")) { hash = !/\.(js|ts|jsx|tsx|go|c|h|cc|cpp|java|rs|kt|swift|cs|css)$/.test(raw); rows.push(el("div", "file", raw)); continue; }
    if (/^(index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode|Binary)/.test(raw)) { rows.push(el("div", "file", raw)); continue; }
    if (raw.startsWith("@@")) { rows.push(el("div", "hunk", raw)); continue; }
    const cls = raw[0] === "+" ? "add" : raw[0] === "-" ? "del" : "ctx";
    const d = el("div", cls);
    d.append(el("span", "mark", raw[0] === "+" || raw[0] === "-" ? raw[0] : " "));
    colourCode(d, raw.slice(1), hash);
    rows.push(d);
  }
  return rows;
}

// At every checkpoint: the file list first (git counts, cheap); the diff itself only when the commit moved.
async function loadDiff() {
  const id = state.current, box = $("diff"), list = $("diff-files");
  const ended = !!state.run && ENDED.includes(state.run.status);
  if (!id || !state.run || !state.run.base || (ended && state.run.ended && !state.run.branch)) {  // no branch kept
    list.replaceChildren(); box.replaceChildren(el("div", "empty", T(ended ? "diff.none" : "diff.none_yet"))); return;
  }
  let stat;
  try { stat = await api(runPath(id) + "/diff/files"); }
  catch (e) { if (id === state.current) box.replaceChildren(el("div", "empty", e.message)); return; }
  if (id !== state.current) return;
  $("diff-state").textContent = ended ? "" : T("diff.checkpoint");
  $("patch-btn").hidden = !stat.files.length;
  if (!stat.files.length) {  // said again at the end: "(yet)" no longer
    state.diffCommit = stat.commit; drawWhere();
    list.replaceChildren(); box.replaceChildren(el("div", "empty", T(ended ? "diff.none" : "diff.empty"))); return;
  }
  if (stat.commit === state.diffCommit && box.childElementCount) return;  // unchanged: no redraw
  state.diffCommit = stat.commit;
  drawWhere();
  const current = () => id === state.current && stat.commit === state.diffCommit;
  list.replaceChildren(...stat.files.slice(0, MAX_SECTIONS).map((f) => {
    const li = el("li"); li.dataset.path = f.path;
    li.append(el("span", "path", f.path), " ", el("span", f.binary ? "n" : "n add", counts(f)));
    return li;
  }));
  const fetchBranch = T("diff.fetch", { branch: stat.branch });
  if (stat.truncated || stat.files.length > MAX_SECTIONS) list.append(el("li", "meta", T("diff.more", { fetch: fetchBranch })));
  if (stat.insertions + stat.deletions <= WHOLE_LINES) {
    try {
      const text = await api(runPath(id) + "/diff", { text: true });
      if (current()) box.replaceChildren(...diffRows(text));
      return;
    } catch (e) { if (e.status !== 422) { if (current()) box.replaceChildren(el("div", "empty", e.message)); return; } }
  }
  // large: a section per file, small ones fetched one after another, the rest on a click
  let budget = SHOWN_LINES;
  const queue = [];
  box.replaceChildren(el("div", "empty", T("diff.large", { n: FILE_LINES })),
    ...stat.files.slice(0, MAX_SECTIONS).map((f) => {
      const sec = el("div", "section"); sec.dataset.path = f.path;
      const body = el("div", "body");
      sec.append(el("div", "file", f.path + "  " + counts(f)), body);
      const lines = f.insertions + f.deletions;
      if (!f.binary && lines <= FILE_LINES && lines <= budget) { budget -= lines; queue.push([f, body]); return sec; }
      const open = el("button", "show", T("diff.show", { what: f.binary ? T("diff.binary") : T("diff.lines", { n: lines }) })); open.type = "button";
      open.addEventListener("click", () => { open.disabled = true; loadFile(id, f, body, current); });
      body.append(open);
      return sec;
    }));
  for (const [f, body] of queue) { if (!current()) return; await loadFile(id, f, body, current); }
}

// The whole diff as <run>.patch: fetched with the token (which never goes into a URL), saved from a Blob URL.
async function downloadPatch() {
  const id = state.current;
  let blob;
  try { blob = await api(runPath(id) + "/diff", { blob: true }); }
  catch (e) { if (e.status !== 401) notice(e.message, true); return; }
  const url = URL.createObjectURL(blob), a = el("a");
  a.href = url; a.download = id + ".patch"; a.hidden = true;
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function loadFile(id, f, body, current) {
  let text;
  try { text = await api(runPath(id) + "/diff?path=" + encodeURIComponent(f.path), { text: true }); }
  catch (e) { if (current()) body.replaceChildren(el("div", "empty", e.message)); return; }
  if (current()) body.replaceChildren(...diffRows(text));
}

// -- wiring -------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  translatePage();
  $("signin-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value); });
  $("signout").addEventListener("click", () => signOut(""));
  $("new-run").addEventListener("submit", submitRun);
  $("message-btn").addEventListener("click", () => control("message"));
  $("interrupt-btn").addEventListener("click", () => control("interrupt"));
  $("cancel-btn").addEventListener("click", () => control("cancel"));
  $("patch-btn").addEventListener("click", downloadPatch);
  if (state.token) showApp(); else signOut("");
});
