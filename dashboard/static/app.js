// The Synapse dashboard: reads /api/state once, then follows /api/events
// (server-sent events) and re-renders what changed. No framework, no build
// step; every element is built with the DOM API (never innerHTML), so no
// agent-supplied text is ever parsed as HTML. docs/dashboard.md says what
// each panel shows; docs/api.md what the API returns.
"use strict";

(() => {
  const PAGE = { agents: 100, claims: 200, refusals: 50, mail: 50, column: 100 };
  const LIVENESS_WINDOW = 90; // seconds: a reaction this recent proves an agent live (hub/queries.go)

  // The model: what the hub last told us.
  const S = {
    loaded: false,
    hubID: "",
    secured: false,
    skew: 0, // hub clock − local clock, seconds
    eventID: 0,
    agents: new Map(), // name → agent
    claims: new Map(), // task_id → claim
    tasks: new Map(), // task_id → board task
    refusals: [],
    refusalMax: 200,
    dead: new Map(), // target → dead letter
    mailbox: null, // identity → pending, or null (no journal)
    health: {},
    federation: null,
  };
  const pages = {}; // list key → page index
  const openTrees = new Set(); // worktrees the user opened
  const closedTrees = new Set(); // worktrees the user closed
  let filter = "";
  let pending = []; // events that came before the state they follow

  const $ = (id) => document.getElementById(id);
  const now = () => Date.now() / 1000 + S.skew;

  // h builds an element: h("td", {class: "x"}, "text", child, ...).
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }

  function duration(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  const left = (at) => h("time", { "data-expires": at }, duration(at - now()) + " left");
  const ago = (at) => (at ? h("time", { "data-ago": at }, duration(now() - at) + " ago") : "—");
  const clock = (at) => new Date((at - S.skew) * 1000).toLocaleTimeString();

  function matches(...fields) {
    if (!filter) return true;
    return fields.some((f) => f && String(f).toLowerCase().includes(filter));
  }

  // pager renders one page of items and the controls to move between pages.
  function pager(key, items, size, render) {
    const pageCount = Math.max(1, Math.ceil(items.length / size));
    let p = Math.min(pages[key] || 0, pageCount - 1);
    pages[key] = p;
    const rows = items.slice(p * size, (p + 1) * size).map(render);
    if (pageCount === 1) return { rows, nav: null };
    const go = (d) => () => {
      pages[key] = p + d;
      render_();
    };
    const nav = h("div", { class: "pager", role: "navigation", "aria-label": key + " pages" },
      h("button", { type: "button", onclick: go(-1), disabled: p === 0, "data-key": key + ":prev" }, "‹ Previous"),
      h("span", {}, `${p * size + 1}–${Math.min((p + 1) * size, items.length)} of ${items.length}`),
      h("button", { type: "button", onclick: go(1), disabled: p === pageCount - 1, "data-key": key + ":next" }, "Next ›"));
    return { rows, nav };
  }

  function table(caption, head, rows, nav, emptyText) {
    if (rows.length === 0) return h("p", { class: "empty" }, emptyText);
    return h("div", { class: "scroll" },
      h("table", {}, h("caption", { class: "sr" }, caption),
        h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows)),
      nav);
  }

  // --- Panels -------------------------------------------------------------

  // liveness is who_snapshot's rule, recomputed as time passes: a reaction
  // within the window, or a waiting -rx sidecar.
  function liveness(a) {
    if (!a.online) return ["offline", "off"];
    if (a.has_live_waiter || now() - (a.last_reaction || 0) <= LIVENESS_WINDOW) return ["live", "live"];
    return ["idle", "idle"];
  }

  function renderAgents() {
    const owned = new Map();
    for (const c of S.claims.values()) owned.set(c.owner, (owned.get(c.owner) || 0) + 1);
    const all = [...S.agents.values()];
    const online = all.filter((a) => a.online).length;
    $("agents-count").textContent = `${online} online · ${all.length} seen`;
    const list = all.filter((a) => matches(a.name, ...(a.roles || [])))
      .sort((a, b) => (b.online - a.online) || a.name.localeCompare(b.name));
    const roles = list.some((a) => (a.roles || []).length > 0);
    const { rows, nav } = pager("agents", list, PAGE.agents, (a) => {
      const [label, cls] = liveness(a);
      const backlog = S.mailbox ? S.mailbox[a.name] || 0 : null;
      return h("tr", { "data-agent": a.name, "data-online": a.online },
        h("th", { scope: "row", class: "name" }, h("span", { class: "dot " + cls, "aria-hidden": "true" }), " ", a.name),
        h("td", { class: "liveness " + cls }, label, h("span", { class: "meta" }, " · ", a.online ? ago(a.last_reaction || a.last_seen) : ago(a.last_seen))),
        h("td", { class: "num" }, owned.get(a.name) || 0),
        h("td", { class: "num" }, backlog === null ? "—" : backlog),
        roles ? h("td", {}, (a.roles || []).join(", ")) : "");
    });
    const head = ["Agent", "Liveness · last active", "Claims", "Backlog"].concat(roles ? ["Roles"] : []);
    $("agents-body").replaceChildren(table("Agents", head, rows, nav,
      filter ? "No agent matches the filter." : "No agent has connected yet."));
  }

  // A claim tree: worktree → folders → files, each leaf listing the claims
  // that cover it. A claim with no path covers its whole worktree.
  function renderClaims() {
    const claims = [...S.claims.values()].filter((c) => matches(c.task_id, c.owner, c.worktree, c.status, ...c.paths));
    $("claims-count").textContent = S.claims.size === claims.length ? `${claims.length}` : `${claims.length} of ${S.claims.size}`;
    const byTree = new Map();
    for (const c of claims) {
      const wt = c.worktree || "(default worktree)";
      if (!byTree.has(wt)) byTree.set(wt, []);
      byTree.get(wt).push(c);
    }
    const trees = [...byTree.keys()].sort();
    if (trees.length === 0) {
      $("claims-body").replaceChildren(h("p", { class: "empty" }, filter ? "No claim matches the filter." : "No live claim."));
      return;
    }
    const out = trees.map((wt, i) => {
      const list = byTree.get(wt).sort((a, b) => (a.paths[0] || "").localeCompare(b.paths[0] || "") || a.task_id.localeCompare(b.task_id));
      const open = openTrees.has(wt) || (!closedTrees.has(wt) && (filter !== "" || i < 3));
      const det = h("details", { class: "tree", "data-worktree": wt, open },
        h("summary", { "data-key": "wt:" + wt }, h("span", { class: "wt" }, wt), " ", h("span", { class: "count" }, list.length + (list.length === 1 ? " claim" : " claims"))));
      det.addEventListener("toggle", () => {
        if (det.open) { openTrees.add(wt); closedTrees.delete(wt); } else { closedTrees.add(wt); openTrees.delete(wt); }
        if (det.open && det.childElementCount === 1) render_();
      });
      if (open) {
        const { rows, nav } = pager("wt:" + wt, list, PAGE.claims, (c) => c);
        det.append(folderTree(rows), nav || "");
      }
      return det;
    });
    $("claims-body").replaceChildren(...out);
  }

  function folderTree(claims) {
    const root = { dirs: new Map(), files: new Map(), whole: [] };
    for (const c of claims) {
      const globs = c.globs || [], files = c.files || [];
      if (c.paths.length === 0 && globs.length === 0 && files.length === 0) { root.whole.push(c); continue; }
      // A glob or a file sits in the tree like a path; a file is marked, for it covers itself alone.
      const entries = [...c.paths.map((p) => [p, false]), ...globs.map((g) => [g, false]), ...files.map((f) => [f, true])];
      for (const [p, file] of entries) {
        const parts = p.split("/").filter(Boolean);
        let node = root;
        for (const part of parts.slice(0, -1)) {
          if (!node.dirs.has(part)) node.dirs.set(part, { dirs: new Map(), files: new Map(), whole: [] });
          node = node.dirs.get(part);
        }
        const leaf = parts[parts.length - 1] || p;
        if (!node.files.has(leaf)) node.files.set(leaf, []);
        node.files.get(leaf).push({ c, file });
      }
    }
    return h("ul", { class: "tree-root" }, nodeItems(root, "")); // plain nested lists: no ARIA tree, whose arrow keys we do not implement
  }

  function nodeItems(node, prefix) {
    const items = [];
    for (const c of node.whole) items.push(h("li", {}, h("span", { class: "path" }, "(whole worktree)"), " ", claimLine(c)));
    for (const name of [...node.dirs.keys()].sort()) {
      const sub = node.dirs.get(name);
      items.push(h("li", {}, h("span", { class: "dir" }, name + "/"), h("ul", {}, nodeItems(sub, prefix + name + "/"))));
    }
    for (const name of [...node.files.keys()].sort()) {
      for (const { c, file } of node.files.get(name)) {
        items.push(h("li", {}, h("span", { class: "path", title: prefix + name }, name),
          file ? h("span", { class: "meta", title: "claimed as a file: this file alone" }, " (file)") : "", " ", claimLine(c)));
      }
    }
    return items;
  }

  function claimLine(c) {
    return h("span", { class: "claim", "data-claim": c.task_id, "data-owner": c.owner },
      h("b", {}, c.task_id), " ", h("span", { class: "owner" }, c.owner),
      h("span", { class: "meta" }, ` · epoch ${c.epoch} · `), h("span", { class: "status s-" + c.status }, c.status),
      h("span", { class: "meta" }, " · "), left(c.lease_expires_at),
      c.has_checkpoint ? h("span", { class: "meta" }, " · checkpoint") : "",
      c.mode === "shared" ? h("span", { class: "meta" }, " · shared (read)") : "");
  }

  const COLUMNS = [
    ["ready", "Ready"], ["open", "Waiting on dependencies"], ["in_progress", "In progress"],
    ["blocked", "Blocked"], ["done", "Done"], ["cancelled", "Cancelled"],
  ];

  function readySet() {
    const met = (id) => {
      const t = S.tasks.get(id);
      return t && (t.status === "done" || t.status === "cancelled");
    };
    const ready = new Set();
    for (const t of S.tasks.values()) if (t.status === "open" && t.depends_on.every(met)) ready.add(t.task_id);
    return ready;
  }

  function renderBoard() {
    const ready = readySet();
    const cols = new Map(COLUMNS.map(([k]) => [k, []]));
    for (const t of S.tasks.values()) {
      if (!matches(t.task_id, t.title, t.suggested_owner, t.project)) continue;
      const k = ready.has(t.task_id) ? "ready" : t.status;
      (cols.get(k) || cols.get("open")).push(t);
    }
    $("board-count").textContent = `${S.tasks.size} tasks · ${ready.size} ready`;
    if (S.tasks.size === 0) {
      $("board-body").replaceChildren(h("p", { class: "empty" }, "The board is empty."));
      return;
    }
    const out = COLUMNS.map(([k, title]) => {
      const list = cols.get(k).sort((a, b) => a.task_id.localeCompare(b.task_id));
      const { rows, nav } = pager("col:" + k, list, PAGE.column, (t) => taskCard(t, ready));
      return h("section", { class: "column col-" + k, "aria-label": title, "data-column": k },
        h("h3", {}, title, " ", h("span", { class: "count" }, list.length)),
        h("ol", {}, rows), nav || "");
    });
    $("board-body").replaceChildren(h("div", { class: "columns" }, out));
  }

  function taskCard(t, ready) {
    const claim = S.claims.get(t.task_id);
    const holder = t.owner || (claim && claim.owner); // t.owner: taken by a task-bound claim
    const deps = t.depends_on.map((d) => {
      const dt = S.tasks.get(d);
      const met = dt && (dt.status === "done" || dt.status === "cancelled");
      return h("a", { href: "#task-" + cssId(d), class: met ? "dep met" : "dep unmet", title: met ? "done" : "not done yet" }, d);
    });
    return h("li", { class: "card" + (ready.has(t.task_id) ? " ready" : ""), id: "task-" + cssId(t.task_id), "data-task": t.task_id, "data-key": "task:" + t.task_id, tabindex: "0" },
      h("div", {}, h("b", {}, t.task_id), " ", t.title),
      deps.length ? h("div", { class: "deps" }, "after ", deps.flatMap((d, i) => (i ? [", ", d] : [d]))) : "",
      h("div", { class: "meta" }, [
        holder ? ["held by ", h("span", { class: "owner" }, holder)] : (t.suggested_owner ? "for " + t.suggested_owner : null),
        t.project || null, "v" + t.version,
      ].filter(Boolean).flatMap((x, i) => (i ? [" · ", x] : [x]))));
  }
  const cssId = (s) => s.replace(/[^A-Za-z0-9_-]/g, (c) => "_" + c.charCodeAt(0).toString(16));

  function renderRefusals() {
    const list = S.refusals.filter((r) => matches(r.agent, r.holder, r.task_id, r.code, r.conflict_task));
    $("refusals-count").textContent = String(S.refusals.length);
    const { rows, nav } = pager("refusals", list, PAGE.refusals, (r) =>
      h("tr", { "data-refusal": r.code },
        h("td", {}, clock(r.at)),
        h("td", {}, h("code", {}, r.code)),
        h("td", {}, r.agent, r.holder ? [" → ", h("span", { class: "owner" }, r.holder)] : ""),
        h("td", {}, r.task_id || "", r.conflict_task ? " (vs " + r.conflict_task + ")" : ""),
        h("td", { class: "msg" }, r.message)));
    $("refusals-body").replaceChildren(table("Recent refusals, newest first", ["When", "Code", "Agent → held by", "Task", "Why"], rows, nav, "Nothing refused lately."));
  }

  function renderMail() {
    const dead = [...S.dead.values()].filter((d) => matches(d.target, d.last_sender)).sort((a, b) => b.count - a.count || a.target.localeCompare(b.target));
    const dl = pager("dead", dead, PAGE.mail, (d) =>
      h("tr", { "data-dead": d.target }, h("th", { scope: "row" }, d.target), h("td", { class: "num" }, d.count), h("td", {}, d.last_sender), h("td", {}, ago(d.last_ts))));
    const parts = [h("h3", {}, "Dead letters"),
      table("Dead letters", ["Target", "Chats", "Last sender", "Last"], dl.rows, dl.nav, "No directed chat went undelivered.")];
    parts.push(h("h3", {}, "Mailbox backlog"));
    if (S.mailbox === null) {
      parts.push(h("p", { class: "empty" }, "This hub does not count mailbox backlogs (it has no SQLite journal)."));
    } else {
      const backlog = Object.entries(S.mailbox).filter(([id, n]) => n > 0 && matches(id)).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
      const bl = pager("backlog", backlog, PAGE.mail, ([id, n]) =>
        h("tr", { "data-backlog": id }, h("th", { scope: "row" }, id), h("td", { class: "num" }, n)));
      parts.push(table("Mailbox backlog", ["Identity", "Unacknowledged"], bl.rows, bl.nav, "Every mailbox is read."));
    }
    $("mail-body").replaceChildren(...parts);
  }

  function renderHealth() {
    const x = S.health;
    const badge = $("health-badge");
    badge.textContent = x.status || "?";
    badge.className = "badge health-" + (x.status || "unknown");
    const rows = [
      ["Status", (x.status || "?") + (x.reason ? " — " + x.reason : "")],
      ["Journal", x.journal], ["Up for", duration(x.uptime_seconds || 0)],
      ["Agents online", x.online_agents], ["Sockets", x.connected_clients],
      ["Live claims", S.claims.size], ["Board tasks", S.tasks.size], ["Highest epoch", x.epoch],
      ["Requests answered", x.commands], ["Journal appends", x.journal_appends],
      ["Snapshots", (x.snapshots || 0) + (x.snapshot_errors ? ` (${x.snapshot_errors} failed)` : "")],
      ["Dashboard streams", x.event_streams], ["Version", S.version],
    ];
    $("health-body").replaceChildren(h("dl", { class: "facts" }, rows.map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v === undefined ? "—" : v)))));
  }

  function renderNamespaces() {
    const f = S.federation;
    const show = !!(f && (f.governed || (f.peers || []).length));
    $("namespaces").hidden = !show;
    $("nav-namespaces").hidden = !show;
    if (!show) return;
    const ns = (f.namespaces || []).filter((n) => matches(n.namespace, n.owner_hub_id));
    const parts = [];
    if (f.warning) parts.push(h("p", { class: "warn" }, f.warning));
    parts.push(table("Namespaces", ["Namespace", "Owner hub", "Outcome", "Reachable", "Move phase", "Epoch"],
      ns.map((n) => h("tr", { "data-namespace": n.namespace },
        h("th", { scope: "row" }, n.namespace), h("td", {}, n.owner_hub_id || "—"), h("td", {}, String(n.outcome)),
        h("td", {}, n.reachable ? "yes" : "no"), h("td", {}, n.phase || "—"), h("td", {}, n.epoch || "—"))),
      null, "No namespace resolved yet."));
    if ((f.members || []).length) parts.push(h("p", {}, "Fleet members: " + f.members.join(", ")));
    if ((f.peers || []).length) parts.push(h("p", {}, "Peers: " + f.peers.map((p) => p.peer + (p.mode ? " (" + p.mode + ")" : "")).join(", ")));
    $("namespaces-body").replaceChildren(...parts);
  }

  // --- Rendering, throttled: a burst of events costs one render ----------

  const RENDER_EVERY = 200; // ms between two renders at most: well within a second of any change
  let scheduled = false;
  let lastRender = 0;
  function render_() {
    if (scheduled) return;
    scheduled = true;
    setTimeout(() => requestAnimationFrame(draw), Math.max(0, RENDER_EVERY - (performance.now() - lastRender)));
  }
  function draw() {
    scheduled = false;
    lastRender = performance.now();
    if (!S.loaded) return;
    $("hub-id").textContent = S.hubID;
    $("logout").hidden = !S.secured;
    // Panels are rebuilt: keep the keyboard focus on the element of the same key.
    const key = document.activeElement && document.activeElement.dataset && document.activeElement.dataset.key;
    const t0 = performance.now();
    renderAgents(); renderClaims(); renderBoard(); renderRefusals(); renderMail(); renderHealth(); renderNamespaces();
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(1); // read by the browser test's scale check
    if (key) {
      const el = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (el && el !== document.activeElement) el.focus();
    }
    document.body.dataset.rendered = String(S.eventID);
  }

  // Liveness ages with no event: redraw the agents now and then.
  setInterval(() => { if (S.loaded) render_(); }, 10000);

  // Countdowns tick locally; the hub's events say when a claim ends.
  setInterval(() => {
    const t = now();
    for (const el of document.querySelectorAll("time[data-expires]")) el.textContent = duration(+el.dataset.expires - t) + " left";
    for (const el of document.querySelectorAll("time[data-ago]")) el.textContent = duration(t - +el.dataset.ago) + " ago";
  }, 1000);

  // --- State and events ---------------------------------------------------

  function load(st) {
    S.hubID = st.hub_id;
    S.version = st.version;
    S.secured = st.secured;
    S.skew = st.generated_at - Date.now() / 1000;
    S.eventID = st.event_id;
    S.agents = new Map(st.agents.map((a) => [a.name, a]));
    S.claims = new Map(st.claims.map((c) => [c.task_id, c]));
    S.tasks = new Map(st.board.tasks.map((t) => [t.task_id, t]));
    S.refusals = st.refusals;
    S.refusalMax = Math.max(st.refusals.length, 200);
    S.dead = new Map(st.dead_letters.map((d) => [d.target, d]));
    S.mailbox = st.mailbox_pending;
    S.health = st.health;
    S.federation = st.federation || null;
    S.loaded = true;
    const queued = pending;
    pending = [];
    for (const ev of queued) {
      if (ev.id > S.eventID) {
        S.eventID = ev.id;
        apply(ev);
      }
    }
    render_();
  }

  let loading = null;
  function reload() {
    S.loaded = false;
    pending = [];
    loading = fetch("/api/state", { credentials: "same-origin", cache: "no-store" })
      .then((r) => {
        if (r.status === 401) { location.reload(); throw new Error("signed out"); }
        if (!r.ok) throw new Error("state: HTTP " + r.status);
        return r.json();
      })
      .then(load)
      .catch((e) => setConn("error", "cannot read the state: " + e.message))
      .finally(() => { loading = null; });
  }

  let mailTimer = null;
  function refreshMail() { // backlog counts are recounted by the hub: ask at most once a second
    if (mailTimer) return;
    mailTimer = setTimeout(() => {
      mailTimer = null;
      fetch("/api/mailbox", { credentials: "same-origin", cache: "no-store" }).then((r) => (r.ok ? r.json() : null)).then((m) => {
        if (!m) return;
        S.mailbox = m.mailbox_pending;
        S.dead = new Map(m.dead_letters.map((d) => [d.target, d]));
        render_();
      }).catch(() => {});
    }, 1000);
  }

  function touch(name, at) {
    const a = S.agents.get(name);
    if (a) { a.last_reaction = at; a.last_seen = at; }
  }

  function apply(ev) {
    const d = ev.data;
    switch (ev.type) {
      case "claim":
        S.claims.set(d.claim.task_id, d.claim);
        touch(d.claim.owner, now());
        break;
      case "release": {
        const c = S.claims.get(d.task_id);
        if (c && c.epoch <= d.epoch) S.claims.delete(d.task_id);
        if (d.owner) touch(d.owner, now());
        break;
      }
      case "task":
        S.tasks.set(d.task.task_id, d.task);
        break;
      case "presence": {
        const a = S.agents.get(d.agent) || { name: d.agent, roles: [] };
        a.online = d.online;
        a.last_seen = d.at;
        if (d.online) a.last_reaction = d.at;
        S.agents.set(d.agent, a);
        S.health.online_agents = [...S.agents.values()].filter((x) => x.online).length;
        break;
      }
      case "activity":
        touch(d.agent, d.at);
        break;
      case "refusal":
        S.refusals.unshift(d);
        if (S.refusals.length > S.refusalMax) S.refusals.length = S.refusalMax;
        break;
      case "dead_letter":
        if (d.count > 0) S.dead.set(d.target, d); else S.dead.delete(d.target);
        break;
      case "mailbox":
        refreshMail();
        break;
    }
  }

  function setConn(cls, text) {
    const c = $("conn");
    c.className = "badge conn-" + cls;
    c.textContent = text;
  }

  function connect() {
    const es = new EventSource("/api/events");
    es.addEventListener("hello", () => {
      setConn("live", "live");
      reload(); // after subscribing: events from now on are not missed
    });
    for (const type of ["claim", "release", "task", "presence", "activity", "refusal", "dead_letter", "mailbox"]) {
      es.addEventListener(type, (m) => {
        const ev = { id: +m.lastEventId, type, data: JSON.parse(m.data) };
        if (!S.loaded) { pending.push(ev); return; }
        if (ev.id <= S.eventID) return;
        S.eventID = ev.id;
        apply(ev);
        render_();
      });
    }
    es.onerror = () => {
      setConn("down", "reconnecting…"); // EventSource retries by itself; "hello" reloads the state
      if (es.readyState === EventSource.CLOSED) { // refused (503, 401): try afresh a little later
        es.close();
        setTimeout(connect, 5000);
      }
    };
  }

  // --- Keyboard: "/" focuses the filter, Escape clears it -------------------

  let filterTimer = null;
  $("filter").addEventListener("input", (e) => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      filter = e.target.value.trim().toLowerCase();
      for (const k of Object.keys(pages)) pages[k] = 0;
      render_();
    }, 120);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "/" && document.activeElement !== $("filter") && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      $("filter").focus();
    } else if (e.key === "Escape" && document.activeElement === $("filter")) {
      $("filter").value = "";
      filter = "";
      render_();
    }
  });

  connect();
})();
