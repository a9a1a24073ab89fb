// The live dashboard: renders the engine's live stream (the websocket /live next to this page).
//
// Messages update a model (objects by controller and key, controllers, readiness, events) and
// mark what changed; one requestAnimationFrame draws the changes. The object list is
// virtualized: fixed-height rows, and only the rows in view exist in the DOM.
(() => {
  "use strict";

  const ROW_HEIGHT = 30;
  const OVERSCAN = 6;
  const HISTORY = 12;
  const MAX_EVENTS = 200;
  const SHOWN_EVENTS = 100;
  const NOT_READY = new Set(["failed", "terminal_error", "deadline", "dependency_not_ready"]);
  const PROBLEMS = new Set(["failed", "terminal_error", "deadline"]);
  // step -> [glyph, short label, legend label]
  const STEPS = {
    succeeded: ["✓", "succeeded", "succeeded"],
    requeued: ["↺", "requeued", "succeeded, requeued"],
    failed: ["✗", "failed", "failed (retried)"],
    terminal_error: ["⊘", "terminal", "terminal error"],
    deadline: ["◷", "deadline", "deadline exceeded"],
    superseded: ["↷", "superseded", "superseded"],
    shutdown: ["■", "shutdown", "shutdown"],
    dependency_not_ready: ["⋯", "waiting", "waiting on dependencies"],
    leadership_lost: ["⚑", "lost", "leadership lost"],
    handover: ["⇄", "handover", "handed over to another replica"],
  };

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  // -- model -------------------------------------------------------------------------------

  const model = {
    manager: "",
    objects: new Map(),     // "controller\u0000object" -> object record
    order: [],              // keys, sorted by controller then object
    needSort: false,
    view: [],               // keys shown after filtering
    controllers: new Map(), // name -> stats
    ready: new Map(),       // object -> bool (reported ready, cleared by its own failing run)
    events: [],             // newest last
    skipped: 0,
    notices: [],            // one-line warnings from the engine (e.g. missing permissions)
    info: [],               // one-line routine facts (a ring share, webhook counts)
    messages: 0,
    clockOffset: 0,         // server wall clock minus ours, in seconds
    readyVersion: 0,        // bumped whenever a readiness changes
    reporting: new Set(),   // controllers whose events name a revision
  };
  const dirty = { objects: false, view: true, controllers: true, events: true, header: true };
  let frame = 0;

  const now = () => Date.now() / 1000 + model.clockOffset;

  // A controller that reports revisions in its events: its rows show only those from now on.
  function reports(controller) {
    if (model.reporting.has(controller)) return;
    model.reporting.add(controller);
    for (const o of model.objects.values()) if (o.controller === controller) o.version += 1;
    dirty.objects = true;
  }

  function record(controller, object, fields) {
    const key = controller + "\u0000" + object;
    let o = model.objects.get(key);
    if (!o) {
      o = {
        key, controller, object, kind: fields.kind || "", namespace: fields.namespace || "",
        name: fields.name || object, revision: null, reported: null, queued: false, running: null, last: null,
        deps: [], history: [], version: 0,
      };
      model.objects.set(key, o);
      model.order.push(key);
      model.needSort = true;
      dirty.view = true;
    }
    if (fields.kind && !o.kind) {
      o.kind = fields.kind;
      o.namespace = fields.namespace || "";
      o.name = fields.name || object;
    }
    o.version += 1;
    dirty.objects = true;
    return o;
  }

  function controllerStats(name) {
    let c = model.controllers.get(name);
    if (!c) {
      c = { name, queue_depth: 0, in_flight: 0, live_workers: 0, max_concurrent: 0, healthy: true,
            runs: 0, errors: 0, rate: null, sampledRuns: null, sampledAt: null };
      model.controllers.set(name, c);
    }
    dirty.controllers = true;
    return c;
  }

  function applyControllers(list, ts) {
    for (const s of list) {
      const c = controllerStats(s.name);
      if (c.sampledAt !== null && ts > c.sampledAt && typeof s.runs === "number") {
        c.rate = Math.max(0, s.runs - c.sampledRuns) / (ts - c.sampledAt);
      }
      if (typeof s.runs === "number") {
        c.sampledRuns = s.runs;
        c.sampledAt = ts;
      }
      Object.assign(c, {
        queue_depth: s.queue_depth, in_flight: s.in_flight, max_concurrent: s.max_concurrent,
        healthy: s.healthy, runs: s.runs ?? c.runs, errors: s.errors ?? c.errors,
        live_workers: s.live_workers ?? c.live_workers,
      });
    }
  }

  function reset() {
    model.objects.clear();
    model.order = [];
    model.view = [];
    model.controllers.clear();
    model.ready.clear();
    model.reporting.clear();
    model.events = [];
    Object.keys(dirty).forEach((k) => { dirty[k] = true; });
  }

  function apply(m) {
    model.messages += 1;
    switch (m.type) {
      case "hello": {
        reset();
        model.manager = m.manager || "";
        model.clockOffset = m.ts - Date.now() / 1000;
        applyControllers(m.controllers || [], m.ts);
        applyNotices(m.notices, m.info);
        for (const c of m.controllers || []) {
          for (const r of c.running || []) {
            const o = record(c.name, r.object, {});
            o.running = { run_id: r.run_id, attempt: r.attempt, trace_id: r.trace_id, ts: m.ts - r.running_for };
          }
        }
        dirty.header = true;
        break;
      }
      case "objects":
        for (const s of m.objects) {
          const o = record(s.controller, s.object, s);
          o.revision = s.revision;
          o.reported = s.reported_revision || null;
          if (o.reported) reports(s.controller);
          o.queued = s.queued;
          o.running = s.running || o.running;
          o.last = s.last;
          o.history = s.history || [];
          o.deps = (s.dependencies || []).map((d) => d.object);
          for (const d of s.dependencies || []) model.ready.set(d.object, d.ready);
          if (s.ready !== null && s.ready !== undefined) model.ready.set(s.object, s.ready);
        }
        model.readyVersion += 1;
        break;
      case "events":
        model.events = m.events.slice(-MAX_EVENTS);
        for (const e of model.events) if (e.revision) reports(e.controller);
        dirty.events = true;
        document.body.dataset.state = "live";
        break;
      case "controllers":
        applyControllers(m.controllers, m.ts);
        applyNotices(m.notices, m.info);
        break;
      case "run":
        applyRun(m);
        break;
      case "event":
        model.events.push(m);
        if (m.revision) {
          reports(m.controller);
          const o = model.objects.get(m.controller + "\u0000" + m.object);
          if (o && o.reported !== m.revision) {
            o.reported = m.revision;
            o.version += 1;
            dirty.objects = true;
          }
        }
        if (model.events.length > MAX_EVENTS) model.events.splice(0, model.events.length - MAX_EVENTS);
        dirty.events = true;
        break;
      case "ready":
        model.ready.set(m.object, true);
        model.readyVersion += 1;
        dirty.objects = true;
        break;
      case "skipped":
        model.skipped += m.count;
        dirty.header = true;
        resyncSoon();
        break;
      default:
        break;
    }
    schedule();
  }

  function applyRun(m) {
    const c = controllerStats(m.controller);
    c.queue_depth = m.queue_depth;
    c.in_flight = m.in_flight;
    const o = record(m.controller, m.object, m);
    if (m.revision !== undefined && m.revision !== null) o.revision = m.revision;
    if (m.step === "queued") {
      o.queued = true;
      return;
    }
    if (m.step === "started") {
      o.queued = false;
      o.running = { run_id: m.run_id, attempt: m.attempt, trace_id: m.trace_id, ts: m.ts };
      return;
    }
    o.running = null;
    o.last = {
      step: m.step, result: m.result, ts: m.ts, duration: m.duration, error: m.error,
      reason: m.reason, delay: m.delay, attempt: m.attempt, run_id: m.run_id, trace_id: m.trace_id,
    };
    o.history.push([m.step, m.ts - (m.duration || 0), m.duration || 0]);
    if (o.history.length > HISTORY) o.history.splice(0, o.history.length - HISTORY);
    if (m.step === "dependency_not_ready") o.deps = m.dependencies || [];
    if (NOT_READY.has(m.step) && model.ready.get(m.object)) {
      model.ready.set(m.object, false);
      model.readyVersion += 1;
    }
  }

  // -- connection --------------------------------------------------------------------------

  const token = new URLSearchParams(location.search).get("token");
  let socket = null;
  let retryDelay = 1000;
  let resyncTimer = 0;
  let lastResync = 0;

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}/live` + (token ? `?token=${encodeURIComponent(token)}` : "");
    setStatus("connecting", "connecting");
    const ws = new WebSocket(url);
    socket = ws;
    ws.onopen = () => {
      retryDelay = 1000;
      setStatus("live", "live");
    };
    ws.onmessage = (event) => apply(JSON.parse(event.data));
    ws.onclose = () => {
      if (socket !== ws) return;
      socket = null;
      document.body.dataset.state = "disconnected";
      setStatus("down", `disconnected; retrying in ${Math.round(retryDelay / 1000)} s`);
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 15000);
    };
  }

  // A client that fell behind missed messages: reconnect for a fresh snapshot (at most every 5 s).
  function resyncSoon() {
    if (resyncTimer) return;
    const wait = Math.max(0, lastResync + 5000 - Date.now());
    resyncTimer = setTimeout(() => {
      resyncTimer = 0;
      lastResync = Date.now();
      const old = socket;
      socket = null;
      if (old) old.close();
      connect();
    }, wait);
  }

  function setStatus(cls, text) {
    const s = $("status");
    s.className = "status " + cls;
    s.textContent = text;
  }

  // -- drawing -----------------------------------------------------------------------------

  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function draw() {
    frame = 0;
    if (dirty.header) drawHeader();
    if (dirty.controllers) drawControllers();
    if (dirty.view || dirty.objects) drawObjects();
    if (dirty.events) drawEvents();
  }

  function applyNotices(notices, info) {
    const next = notices || [];
    const facts = info || [];
    if (next.join("\n") === model.notices.join("\n") && facts.join("\n") === model.info.join("\n")) return;
    model.notices = next;
    model.info = facts;
    dirty.header = true;
  }

  function drawHeader() {
    dirty.header = false;
    $("manager").textContent = model.manager ? `· ${model.manager}` : "";
    $("info").textContent = model.info.join(" · ");
    const banner = $("banner");
    const lines = [...model.notices];
    if (model.skipped) {
      lines.push(`${model.skipped} messages were skipped because this page fell behind; it reconnects for a fresh snapshot.`);
    }
    banner.hidden = lines.length === 0;
    banner.replaceChildren(...lines.map((line) => {
      const div = document.createElement("div");
      div.textContent = line;
      return div;
    }));
  }

  function fmtDuration(seconds) {
    if (seconds === null || seconds === undefined) return "";
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 60) return `${seconds.toFixed(1)} s`;
    const m = Math.floor(seconds / 60);
    if (m < 60) return Math.floor(seconds % 60) ? `${m}m ${Math.floor(seconds % 60)}s` : `${m}m`;
    return `${Math.floor(m / 60)}h ${m % 60}m`;
  }

  function fmtTime(ts) {
    const d = new Date((ts - model.clockOffset) * 1000);
    return d.toLocaleTimeString([], { hour12: false });
  }

  function drawControllers() {
    dirty.controllers = false;
    const body = $("controllers").tBodies[0];
    const names = [...model.controllers.keys()].sort();
    while (body.rows.length > names.length) body.deleteRow(-1);
    names.forEach((name, i) => {
      const c = model.controllers.get(name);
      const tr = body.rows[i] || body.insertRow();
      if (tr.cells.length === 0) for (let k = 0; k < 7; k += 1) tr.insertCell();
      tr.dataset.controller = name;
      const cells = tr.cells;
      cells[0].textContent = name;
      cells[1].textContent = `${c.in_flight} / ${c.live_workers} / ${c.max_concurrent}`;
      const bar = el("span", "workers");
      for (let k = 0; k < Math.min(c.max_concurrent, 32); k += 1) {
        bar.appendChild(el("i", k < c.in_flight ? "busy" : k >= c.live_workers ? "dead" : ""));
      }
      cells[1].appendChild(bar);
      cells[2].textContent = String(c.queue_depth);
      cells[3].textContent = c.rate === null ? "…" : c.rate.toFixed(c.rate < 10 ? 1 : 0);
      cells[4].textContent = String(c.runs);
      cells[5].textContent = String(c.errors);
      cells[5].className = "num" + (c.errors ? " bad" : "");
      cells[6].textContent = c.healthy ? "healthy" : "worker died";
      cells[6].className = c.healthy ? "" : "bad";
      for (const k of [2, 3, 4]) cells[k].className = "num";
    });
  }

  // Filtering and sorting happen here, at most once per frame.
  let filterText = "";
  let show = "all";

  function stateOf(o) {
    if (o.running) return "running";
    return o.last ? o.last.step : o.queued ? "queued" : "";
  }

  function matches(o) {
    if (show === "running" && !o.running && !o.queued) return false;
    if (show === "problems" && !(o.last && PROBLEMS.has(o.last.step))) return false;
    if (show === "waiting" && !(o.last && o.last.step === "dependency_not_ready")) return false;
    if (!filterText) return true;
    return (`${o.controller} ${o.object} ${stateOf(o)}`).toLowerCase().includes(filterText);
  }

  function refreshView() {
    if (model.needSort) {
      const objects = model.objects;
      model.order.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      model.order = model.order.filter((k) => objects.has(k));
      model.needSort = false;
    }
    const filtering = filterText || show !== "all";
    if (!filtering) {
      model.view = model.order;
    } else if (dirty.view || dirty.objects) {
      model.view = model.order.filter((k) => matches(model.objects.get(k)));
    }
    dirty.view = false;
  }

  const pool = [];

  function makeRow() {
    const row = el("div", "row");
    row.cells = {};
    for (const name of ["controller", "object", "state", "revision", "duration", "running", "deps", "timeline"]) {
      row.cells[name] = row.appendChild(el("span", "c-" + name));
    }
    row.runs = [];
    for (let i = 0; i <= HISTORY; i += 1) row.runs.push(row.cells.timeline.appendChild(el("span", "run empty")));
    row.key = null;
    row.version = -1;
    row.second = -1;
    return row;
  }

  function drawObjects() {
    dirty.objects = false;
    refreshView();
    const viewport = $("viewport");
    const rows = $("rows");
    const total = model.view.length;
    $("spacer").style.height = `${total * ROW_HEIGHT}px`;
    $("object-count").textContent = total === model.objects.size
      ? `${total}` : `${total} of ${model.objects.size}`;
    const fits = Math.ceil(viewport.clientHeight / ROW_HEIGHT) + 2 * OVERSCAN;
    const top = Math.floor(viewport.scrollTop / ROW_HEIGHT) - OVERSCAN;
    const first = Math.max(0, Math.min(top, total - fits));
    const count = Math.max(0, Math.min(total - first, fits));
    rows.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    while (pool.length < count) pool.push(rows.appendChild(makeRow()));
    const second = Math.floor(Date.now() / 1000);
    for (let i = 0; i < pool.length; i += 1) {
      const row = pool[i];
      if (i >= count) {
        if (!row.hidden) { row.hidden = true; row.key = null; }
        continue;
      }
      row.hidden = false;
      const o = model.objects.get(model.view[first + i]);
      if (row.key === o.key && row.version === o.version && !(o.running && row.second !== second)
          && !(o.deps.length && row.readyVersion !== model.readyVersion)) {
        continue;
      }
      fillRow(row, o, second);
    }
  }

  function fillRow(row, o, second) {
    row.key = o.key;
    row.version = o.version;
    row.second = second;
    row.readyVersion = model.readyVersion;
    const c = row.cells;
    const state = stateOf(o);
    row.dataset.object = o.object;
    row.dataset.controller = o.controller;
    row.dataset.state = o.last ? o.last.step : state;
    row.dataset.running = o.running ? "true" : "false";
    c.controller.textContent = o.controller;
    c.controller.title = o.controller;
    c.object.textContent = "";
    c.object.appendChild(el("span", "kind", o.kind ? `${o.kind} ` : ""));
    c.object.appendChild(document.createTextNode(o.namespace ? `${o.namespace}/${o.name}` : o.name));
    c.object.title = o.object;
    c.state.textContent = "";
    if (o.last) {
      const [glyph, short, label] = STEPS[o.last.step] || ["?", o.last.step, o.last.step];
      c.state.appendChild(el("span", "badge s-" + o.last.step, `${glyph} ${short}`));
      const cause = o.last.error || o.last.reason || (o.last.delay ? `again in ${fmtDuration(o.last.delay)}` : "");
      c.state.appendChild(el("span", "cause" + (o.last.error ? " error" : ""), cause));
      c.state.title = `${label}${o.last.attempt ? ` (attempt ${o.last.attempt})` : ""} at ${fmtTime(o.last.ts)}` +
        (cause ? `\n${cause}` : "") + (o.last.trace_id ? `\ntrace ${o.last.trace_id}` : "");
    } else {
      c.state.title = "";
    }
    // What a user calls the revision is what the controller reports in its events (the bundles
    // plugin's r1); a controller that reports none gets its triggers' revisions shown instead.
    const shown = model.reporting.has(o.controller) ? o.reported : o.reported || o.revision;
    c.revision.textContent = shown || "";
    c.revision.title = (shown ? `revision ${shown}` : "") + (shown && o.revision ? "; " : "") +
      (o.revision ? `trigger revision ${o.revision} (for a Kubernetes object, its resourceVersion)` : "");
    c.duration.textContent = o.last ? fmtDuration(o.last.duration) : "";
    if (o.running) {
      c.running.textContent = `▶ ${fmtDuration(Math.max(0, now() - o.running.ts))}` +
        (o.running.attempt > 1 ? ` #${o.running.attempt}` : "");
      c.running.title = `running ${o.running.run_id}, attempt ${o.running.attempt}` +
        (o.running.trace_id ? `, trace ${o.running.trace_id}` : "");
    } else {
      c.running.textContent = o.queued ? "queued" : "";
      c.running.title = "";
    }
    c.deps.textContent = "";
    for (const dep of o.deps) {
      const ready = model.ready.get(dep) === true;
      const span = c.deps.appendChild(el("span", "dep" + (ready ? " ready" : ""), dep.split("/").pop()));
      span.title = `${dep}: ${ready ? "Ready" : "not Ready"}`;
      span.dataset.ready = ready ? "true" : "false";
    }
    const history = o.history;
    for (let i = 0; i <= HISTORY; i += 1) {
      const span = row.runs[i];
      const h = history[i];
      if (h) {
        const [glyph, , label] = STEPS[h[0]] || ["?", h[0], h[0]];
        span.className = "run s-" + h[0];
        span.textContent = glyph;
        span.title = `${label} at ${fmtTime(h[1])}, took ${fmtDuration(h[2])}`;
      } else if (i === history.length && (o.running || o.queued)) {
        span.className = o.running ? "run s-running" : "run s-queued";
        span.textContent = o.running ? "▶" : "…";
        span.title = o.running ? "running now" : "queued";
      } else {
        span.className = "run empty";
        span.textContent = "";
        span.title = "";
      }
    }
  }

  function drawEvents() {
    dirty.events = false;
    const list = $("events");
    const shown = model.events.slice(-SHOWN_EVENTS).reverse();
    $("event-count").textContent = model.events.length ? `latest ${shown.length}` : "";
    while (list.children.length > shown.length) list.lastChild.remove();
    shown.forEach((e, i) => {
      let li = list.children[i];
      if (!li) {
        li = list.appendChild(el("li"));
        const meta = li.appendChild(el("div", "meta"));
        meta.appendChild(el("span", "type"));
        meta.appendChild(el("span", "reason"));
        meta.appendChild(el("span", "when"));
        li.appendChild(el("div", "obj"));
        li.appendChild(el("div", "msg"));
      }
      const [meta, obj, msg] = li.children;
      meta.children[0].textContent = e.event_type;
      meta.children[0].className = "type " + e.event_type;
      meta.children[1].textContent = e.reason;
      meta.children[2].textContent = fmtTime(e.ts) + (e.count > 1 ? ` ×${e.count}` : "");
      obj.textContent = `${e.controller} · ${e.object}`;
      msg.textContent = e.message || "";
      li.dataset.type = e.event_type;
      li.dataset.reason = e.reason;
    });
  }

  function drawLegend() {
    const legend = $("legend");
    for (const [step, [glyph, , label]] of Object.entries(STEPS)) {
      const item = legend.appendChild(el("span"));
      item.appendChild(el("span", "run s-" + step, glyph));
      item.appendChild(document.createTextNode(label));
    }
    const running = legend.appendChild(el("span"));
    running.appendChild(el("span", "run s-running", "▶"));
    running.appendChild(document.createTextNode("running now"));
  }

  // -- start -------------------------------------------------------------------------------

  drawLegend();
  $("viewport").addEventListener("scroll", () => { dirty.objects = true; schedule(); }, { passive: true });
  window.addEventListener("resize", () => { dirty.objects = true; schedule(); });
  $("filter").addEventListener("input", (e) => {
    filterText = e.target.value.trim().toLowerCase();
    $("viewport").scrollTop = 0;
    dirty.view = true;
    schedule();
  });
  $("show").addEventListener("change", (e) => {
    show = e.target.value;
    $("viewport").scrollTop = 0;
    dirty.view = true;
    schedule();
  });
  // Running times tick once a second (only the rows in view are touched).
  setInterval(() => { dirty.objects = true; schedule(); }, 1000);
  connect();
})();
