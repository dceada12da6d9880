// The Magnetar web console (docs/console.md): one page, three views (the broker, a namespace's
// topics, a topic), kept live by polling the admin API's JSON. The token typed at the login form is
// kept in this tab's sessionStorage and sent as "Authorization: Bearer"; every action goes through
// the admin API's own paths, which check it as they check any admin client's.
"use strict";

const TOKEN_KEY = "magnetar.console.token";
const POLL_MS = 2000;
const CHART_WINDOW_MS = 5 * 60 * 1000;
const { lineChart, History } = window.MagnetarChart;

// -- DOM helpers: text always goes in as text (topic names and payloads are not ours) ----------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replaces el's children, leaving out the null, undefined and false of optional parts.
function put(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function fmtNumber(value, digits = 1) {
  if (value === undefined || value === null) return "–";
  if (Number.isInteger(value)) return value.toLocaleString("en");
  return value.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

function fmtBytes(value) {
  if (value === undefined || value === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

function fmtDuration(seconds) {
  seconds = Math.floor(seconds);
  const d = Math.floor(seconds / 86400), hh = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  if (d) return `${d}d ${hh}h ${m}m`;
  if (hh) return `${hh}h ${m}m ${s}s`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

function setStatus(text, kind) {
  const el = document.getElementById("status");
  el.textContent = text || "";
  el.className = kind || "";
}

// -- the admin API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, reason) {
    super(`HTTP ${status}: ${reason}`);
    this.status = status;
    this.reason = reason;
  }
}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let reason = response.statusText;
    try { reason = (await response.json()).reason || reason; } catch (e) { /* not JSON */ }
    if (response.status === 401) showLogin(token ? reason : null);
    throw new ApiError(response.status, reason);
  }
  return response;
}

async function getJson(path) {
  return (await api("GET", path)).json();
}

const enc = encodeURIComponent;

function topicPath(domain, tenant, namespace, local) {
  return `/admin/v2/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(local)}`;
}

// -- session: who the token proves, and what it may administer ----------------------------------------

let session = null;

function canAdmin(tenant) {
  return !!session && (session.superuser || session.adminTenants.includes(tenant));
}

async function loadSession() {
  session = await getJson("/admin/v2/console/session");
  const who = document.getElementById("who");
  who.textContent = "";
  if (session.authentication) {
    who.append(h("span", { class: "role" }, session.role),
      h("span", { class: session.superuser ? "badge ok" : "badge" }, session.superuser ? "superuser" : (session.adminTenants.length ? `admin of ${session.adminTenants.join(", ")}` : "read-only")));
  } else {
    who.append(h("span", { class: "badge" }, "authentication off"));
  }
  document.getElementById("logout").hidden = !session.authentication;
  return session;
}

function showLogin(reason) {
  stopView();
  session = null;
  document.getElementById("who").textContent = "";
  document.getElementById("logout").hidden = true;
  const main = document.getElementById("main");
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true, placeholder: "eyJ…", size: 60 });
  const form = h("form", { id: "login", class: "card login" },
    h("h1", {}, "Log in"),
    h("p", {}, "The broker asks for a token, as its admin API does. It is kept in this tab only (sessionStorage)."),
    h("label", { for: "token" }, "Token"), input,
    reason ? h("p", { class: "error", id: "login-error" }, `Refused: ${reason}`) : null,
    h("button", { type: "submit" }, "Log in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await loadSession();
      route();
    } catch (e) { /* showLogin ran again with the reason */ }
  });
  put(main, form);
  input.focus();
}

// -- confirmation of actions ---------------------------------------------------------------------------

// Resolves to the dialog's form fields (an object) when confirmed, to null when cancelled.
function confirmAction(title, text, fields) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  put(document.getElementById("confirm-fields"), fields || []);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "ok") return resolve(null);
      const values = {};
      for (const input of dialog.querySelectorAll("#confirm-fields [name]")) {
        values[input.name] = input.type === "checkbox" ? input.checked : input.value;
      }
      resolve(values);
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function act(title, text, fields, run) {
  const values = await confirmAction(title, text, fields);
  if (values === null) return false;
  try {
    await run(values);
    setStatus(`${title}: done`, "ok");
    return true;
  } catch (e) {
    setStatus(`${title}: ${e.message}`, "error");
    return false;
  }
}

function field(label, name, attrs) {
  return h("label", { class: "field" }, label, h("input", { name, ...attrs }));
}

// -- views and polling -----------------------------------------------------------------------------------

let current = null; // { stop() } of the view shown

function stopView() {
  if (current) current.stop();
  current = null;
}

// Calls refresh() now and every POLL_MS until the view changes; failures are shown, not thrown.
function poller(refresh) {
  let timer = null, stopped = false;
  async function tick() {
    try {
      await refresh();
      document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      if (document.getElementById("status").className === "error stale") setStatus("");
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) { stopped = true; return; }
      setStatus(`not updated: ${e.message}`, "error stale");
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return { stop() { stopped = true; clearTimeout(timer); } };
}

// Rates worked out between two polls from the broker's counters (msgInCounter ...).
class Rates {
  constructor() { this.last = null; }
  update(counters) {
    const now = performance.now();
    let rates = null;
    if (this.last) {
      const seconds = (now - this.last.at) / 1000;
      rates = {};
      for (const [key, value] of Object.entries(counters)) {
        const before = this.last.counters[key];
        rates[key] = seconds > 0 && before !== undefined ? Math.max(0, (value - before) / seconds) : 0;
      }
    }
    this.last = { at: now, counters };
    return rates;
  }
}

function parseHash() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query || "") };
}

function route() {
  stopView();
  setStatus("");
  if (!session) return;
  const { parts, query } = parseHash();
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.nav === (parts[0] === "topic" ? "topics" : parts[0] || "overview"));
  }
  const main = document.getElementById("main");
  if (parts[0] === "topics") current = topicsView(main, query);
  else if (parts[0] === "topic" && parts.length >= 5) current = topicView(main, parts[1], parts[2], parts[3], parts.slice(4).join("/"));
  else current = overviewView(main);
}

// -- the broker at a glance ----------------------------------------------------------------------------

function figure(label, value, id) {
  return h("div", { class: "figure" }, h("div", { class: "label" }, label), h("div", { class: "value", id }, value));
}

function overviewView(main) {
  const history = new History(CHART_WINDOW_MS);
  const rates = new Rates();
  const figures = h("section", { class: "figures", id: "overview-figures" });
  const charts = h("section", { class: "charts" });
  const storage = h("section", { class: "card", id: "storage" });
  const workers = h("section", { class: "card", id: "workers" });
  const replication = h("section", { class: "card", id: "replication" });
  put(main, h("h1", {}, "Broker"), figures, charts, storage, workers, replication);
  return poller(async () => {
    const o = await getJson("/admin/v2/console/overview");
    const r = rates.update({ in: o.msgInCounter, out: o.msgOutCounter, bytesIn: o.bytesInCounter, bytesOut: o.bytesOutCounter });
    const now = Date.now();
    const rateIn = r ? r.in : o.msgRateIn, rateOut = r ? r.out : o.msgRateOut;
    history.add("in", now, rateIn);
    history.add("out", now, rateOut);
    history.add("backlog", now, o.backlog);
    const disk = o.storage;
    put(figures, 
      figure("Cluster", o.cluster),
      figure("Uptime", fmtDuration(o.uptimeSeconds), "uptime"),
      figure("Workers", `${o.workers.length}${o.missingWorkers.length ? ` (${o.missingWorkers.length} not answering)` : ""}`, "workers-count"),
      figure("Connections", fmtNumber(o.connections), "connections"),
      figure("Topics loaded", fmtNumber(o.topicsLoaded), "topics-loaded"),
      figure("Producers / consumers", `${fmtNumber(o.producers)} / ${fmtNumber(o.consumers)}`),
      figure("In, msg/s", fmtNumber(rateIn), "rate-in"),
      figure("Out, msg/s", fmtNumber(rateOut), "rate-out"),
      figure("In / out, bytes/s", r ? `${fmtBytes(r.bytesIn)} / ${fmtBytes(r.bytesOut)}` : "–"),
      figure("Backlog, messages", fmtNumber(o.backlog), "backlog"),
      figure("Disk", disk.writable ? "writable" : "refusing writes", "disk-health"),
    );
    figures.querySelector("#disk-health").className = `value ${disk.writable ? "ok" : "bad"}`;
    put(charts, 
      lineChart("Messages per second", [
        { name: "in", className: "series-in", points: history.points("in") },
        { name: "out", className: "series-out", points: history.points("out") }], CHART_WINDOW_MS, "msg/s"),
      lineChart("Backlog", [{ name: "backlog", className: "series-backlog", points: history.points("backlog") }], CHART_WINDOW_MS, "messages"));
    const usedShare = disk.totalBytes ? (disk.totalBytes - disk.freeBytes) / disk.totalBytes : 0;
    const fill = h("div", { class: usedShare > 0.9 ? "fill bad" : "fill" });
    fill.style.width = `${(usedShare * 100).toFixed(1)}%`; // CSSOM: the page's policy allows no style attribute
    put(storage, 
      h("h2", {}, "Storage"),
      h("p", {}, `Data directory ${disk.dataDir}: the broker's files take `, h("strong", { id: "storage-used" }, fmtBytes(disk.usedBytes)),
        `; ${fmtBytes(disk.freeBytes)} free of ${fmtBytes(disk.totalBytes)}`,
        disk.minFreeBytes ? ` (sends are refused below ${fmtBytes(disk.minFreeBytes)} free)` : "", "."),
      h("div", { class: "bar" }, fill),
      disk.refusingCount ? h("p", { class: "error" }, `${disk.refusingCount} topics refuse writes: ${disk.refusingTopics.join(", ")}`) : null,
      disk.belowMinFree ? h("p", { class: "error" }, "Free space is below min_free_disk_bytes: sends are refused.") : null);
    put(workers, h("h2", {}, "Processes"), table(
      ["worker", "pid", "uptime", "connections", "topics loaded", "producers", "consumers"],
      o.workers.map((w) => [w.worker || "broker", w.pid, fmtDuration(w.uptimeSeconds), fmtNumber(w.connections), fmtNumber(w.topicsLoaded), fmtNumber(w.producers), fmtNumber(w.consumers)])),
      o.missingWorkers.length ? h("p", { class: "error" }, `Not answering: ${o.missingWorkers.join(", ")}`) : null);
    const remotes = Object.entries(o.replication);
    put(replication, h("h2", {}, "Geo-replication"), remotes.length
      ? table(["remote cluster", "topics", "connected", "backlog", "largest delay", "msg/s out"],
        remotes.map(([name, f]) => [name, fmtNumber(f.topics), `${f.connected} of ${f.topics}`, fmtNumber(f.backlog), `${fmtNumber(f.delaySeconds)} s`, fmtNumber(f.rateOut)]))
      : h("p", { class: "muted" }, "No loaded topic replicates to another cluster."));
  });
}

function table(headings, rows, attrs) {
  return h("table", attrs || {}, h("thead", {}, h("tr", {}, headings.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell))))));
}

// -- a namespace's topics -----------------------------------------------------------------------------

function topicsView(main, query) {
  let namespace = query.get("ns") || "";
  let search = query.get("q") || "";
  let offset = parseInt(query.get("offset") || "0", 10) || 0;
  const limit = parseInt(query.get("limit") || "50", 10) || 50;
  const select = h("select", { id: "namespace" });
  const searchBox = h("input", { id: "search", type: "search", placeholder: "search topic names", value: search });
  const summary = h("p", { id: "topics-summary", class: "muted" });
  const rowsTable = h("div", { id: "topics-table" });
  const pager = h("div", { class: "pager" });
  const actions = h("div", { class: "actions", id: "topics-actions" });
  put(main, h("h1", {}, "Topics"), h("div", { class: "toolbar" }, select, searchBox, actions), summary, rowsTable, pager);

  function remember() {
    const q = new URLSearchParams({ ns: namespace, q: search, offset: String(offset), limit: String(limit) });
    history.replaceState(null, "", `#/topics?${q}`);
  }
  let typing = null;
  searchBox.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { search = searchBox.value; offset = 0; remember(); refresh().catch(showError); }, 250);
  });
  select.addEventListener("change", () => { namespace = select.value; offset = 0; remember(); refresh().catch(showError); });

  function showError(e) { setStatus(e.message, "error"); }
  let loaded = false;
  async function refresh() {
    if (!loaded) {
      const tenants = await getJson("/admin/v2/console/namespaces");
      const all = tenants.flatMap((t) => t.namespaces);
      put(select, ...all.map((ns) => h("option", { value: ns }, ns)));
      if (!all.includes(namespace)) namespace = all.includes("public/default") ? "public/default" : (all[0] || "");
      select.value = namespace;
      loaded = true;
    }
    if (!namespace) { summary.textContent = "No namespace this role may list."; return; }
    const [tenant, ns] = namespace.split("/");
    put(actions, canAdmin(tenant) ? h("button", { id: "create-topic", type: "button", onclick: () => createTopic(tenant, ns) }, "Create topic…") : h("span", { class: "badge" }, "read-only"));
    const q = new URLSearchParams({ search, offset: String(offset), limit: String(limit) });
    const page = await getJson(`/admin/v2/console/topics/${enc(tenant)}/${enc(ns)}?${q}`);
    const first = page.total ? page.offset + 1 : 0;
    summary.textContent = `${fmtNumber(page.total)} topics${search ? ` matching “${search}”` : ""}; ${first}–${page.offset + page.topics.length} shown`;
    put(rowsTable, table(
      ["topic", "partitions", "producers", "subscriptions", "consumers", "in msg/s", "out msg/s", "backlog", "storage"],
      page.topics.map((t) => [
        h("a", { href: `#/topic/${t.domain}/${enc(tenant)}/${enc(ns)}/${enc(t.localName)}`, class: "topic-link" }, t.localName),
        t.partitions || "",
        ...(t.loaded
          ? [fmtNumber(t.producers), fmtNumber(t.subscriptions), fmtNumber(t.consumers), fmtNumber(t.msgRateIn), fmtNumber(t.msgRateOut), fmtNumber(t.backlog), fmtBytes(t.storageSize)]
          : [h("span", { class: "muted" }, "not loaded"), "", "", "", "", "", ""]),
      ]), { id: "topics" }));
    put(pager, 
      h("button", { type: "button", id: "prev-page", disabled: page.offset === 0, onclick: () => { offset = Math.max(0, offset - limit); remember(); refresh().catch(showError); } }, "‹ Previous"),
      h("span", { id: "page-number" }, `page ${Math.floor(page.offset / page.limit) + 1} of ${Math.max(1, Math.ceil(page.total / page.limit))}`),
      h("button", { type: "button", id: "next-page", disabled: !page.next, onclick: () => { offset += limit; remember(); refresh().catch(showError); } }, "Next ›"));
  }

  async function createTopic(tenant, ns) {
    const fields = [
      field("Name", "name", { required: true, pattern: "[A-Za-z0-9_.=:-]+", id: "new-topic-name" }),
      field("Partitions (0: not partitioned)", "partitions", { type: "number", min: 0, value: 0, id: "new-topic-partitions" }),
      h("label", { class: "field" }, "Domain", h("select", { name: "domain" }, h("option", { value: "persistent" }, "persistent"), h("option", { value: "non-persistent" }, "non-persistent"))),
    ];
    await act("Create topic", `Create a topic in ${tenant}/${ns}.`, fields, async (v) => {
      const count = parseInt(v.partitions || "0", 10);
      const path = topicPath(v.domain, tenant, ns, v.name);
      if (count > 0) await api("PUT", `${path}/partitions`, count);
      else await api("PUT", path);
    });
    await refresh();
  }
  return poller(refresh);
}

// -- one topic -----------------------------------------------------------------------------------------

function topicView(main, domain, tenant, namespace, local) {
  const base = topicPath(domain, tenant, namespace, local);
  const persistent = domain === "persistent";
  const admin = canAdmin(tenant);
  const history = new History(CHART_WINDOW_MS);
  const rates = new Rates();
  const head = h("div", { class: "topic-head" });
  const figures = h("section", { class: "figures", id: "topic-figures" });
  const charts = h("section", { class: "charts", id: "topic-charts" });
  const producers = h("section", { class: "card", id: "producers" });
  const subscriptions = h("section", { class: "card", id: "subscriptions" });
  const consumers = h("section", { class: "card", id: "consumers", hidden: true });
  const peek = h("section", { class: "card", id: "peek" });
  const internals = h("section", { class: "card", id: "internal" });
  const partitionsCard = h("section", { class: "card", id: "partitions", hidden: true });
  put(main, head, figures, charts, producers, subscriptions, consumers, partitionsCard, peek, internals);
  let partitions = null;
  let latest = null;
  let consumerPage = { subscription: null, offset: 0 };

  head.append(h("h1", {}, h("a", { href: `#/topics?ns=${enc(`${tenant}/${namespace}`)}` }, `${tenant}/${namespace}`), " / ", h("span", { id: "topic-name" }, local)),
    h("p", { class: "muted" }, `${domain}://${tenant}/${namespace}/${local}`));
  const topicActions = h("div", { class: "actions", id: "topic-actions" });
  head.append(topicActions);

  async function refresh() {
    if (partitions === null) {
      partitions = (await getJson(`${base}/partitions`)).partitions;
      renderStatic();
    }
    const stats = await getJson(partitions ? `${base}/partitioned-stats?perPartition=false` : `${base}/stats`);
    latest = stats;
    const subs = Object.entries(stats.subscriptions);
    const backlog = subs.reduce((sum, [, s]) => sum + (s.msgBacklog || 0), 0);
    const r = rates.update({ in: stats.msgInCounter, out: stats.msgOutCounter });
    const now = Date.now();
    const rateIn = r ? r.in : stats.msgRateIn, rateOut = r ? r.out : stats.msgRateOut;
    history.add("in", now, rateIn);
    history.add("out", now, rateOut);
    history.add("backlog", now, backlog);
    put(figures, 
      figure("In, msg/s", fmtNumber(rateIn), "topic-rate-in"),
      figure("Out, msg/s", fmtNumber(rateOut), "topic-rate-out"),
      figure("Messages in", fmtNumber(stats.msgInCounter), "topic-msg-in"),
      figure("Messages out", fmtNumber(stats.msgOutCounter), "topic-msg-out"),
      figure("Backlog", fmtNumber(backlog), "topic-backlog"),
      figure("Storage", fmtBytes(stats.storageSize), "topic-storage"),
      figure("Broker's rate in/out (last interval)", `${fmtNumber(stats.msgRateIn)} / ${fmtNumber(stats.msgRateOut)}`));
    put(charts, 
      lineChart("Messages per second", [
        { name: "in", className: "series-in", points: history.points("in") },
        { name: "out", className: "series-out", points: history.points("out") }], CHART_WINDOW_MS, "msg/s"),
      lineChart("Backlog", [{ name: "backlog", className: "series-backlog", points: history.points("backlog") }], CHART_WINDOW_MS, "messages"));
    put(producers, h("h2", {}, `Producers (${stats.publishers.length})`), stats.publishers.length
      ? table(["name", "msg/s in", "bytes/s in", "messages", "average size"],
        stats.publishers.map((p) => [p.producerName, fmtNumber(p.msgRateIn), fmtBytes(p.msgThroughputIn), fmtNumber(p.msgInCounter), fmtBytes(p.averageMsgSize)]))
      : h("p", { class: "muted" }, "No producer connected."));
    renderSubscriptions(subs);
    renderPeekChoices(subs.map(([name]) => name));
    if (consumerPage.subscription) await loadConsumers();
  }

  function renderStatic() {
    const partitioned = partitions > 0;
    if (partitioned) {
      partitionsCard.hidden = false;
      const links = [];
      for (let i = 0; i < partitions; i++) {
        links.push(h("a", { href: `#/topic/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(`${local}-partition-${i}`)}` }, `partition ${i}`), " ");
      }
      put(partitionsCard, h("h2", {}, `Partitions (${partitions})`), h("p", {}, links));
    }
    put(topicActions);
    if (!admin) {
      topicActions.append(h("span", { class: "badge", id: "read-only" }, "read-only"));
    } else {
      topicActions.append(h("button", { type: "button", id: "unload", onclick: unloadBundle }, "Unload bundle…"));
      if (persistent) {
        topicActions.append(h("button", { type: "button", id: "compact", onclick: compact }, "Compact…"));
        if (!partitioned) topicActions.append(h("button", { type: "button", id: "offload", onclick: offload }, "Offload…"));
      }
    }
    if (persistent && !partitioned) {
      put(internals, h("h2", {}, "Internal stats"),
        h("button", { type: "button", id: "show-internal", onclick: showInternal }, "Show"), h("pre", { id: "internal-stats" }));
    } else {
      internals.hidden = true;
    }
  }

  function renderSubscriptions(subs) {
    const rows = subs.map(([name, s]) => {
      const count = s.consumersCount !== undefined ? s.consumersCount : s.consumers.length;
      const cells = [name, s.type, fmtNumber(s.msgBacklog), fmtNumber(s.msgRateOut), fmtNumber(s.msgOutCounter),
        partitions ? fmtNumber(count) : h("a", { href: "#", class: "show-consumers", dataset: { sub: name }, onclick: (e) => { e.preventDefault(); consumerPage = { subscription: name, offset: 0 }; loadConsumers(); } }, fmtNumber(count)),
        s.markDeletePosition || ""];
      if (admin && persistent) {
        cells.push(h("span", { class: "row-actions" },
          h("button", { type: "button", class: "reset-cursor", dataset: { sub: name }, onclick: () => resetCursor(name) }, "Reset cursor…"),
          h("button", { type: "button", class: "skip", dataset: { sub: name }, onclick: () => skip(name) }, "Skip…"),
          h("button", { type: "button", class: "clear-backlog", dataset: { sub: name }, onclick: () => clearBacklog(name) }, "Clear backlog…"),
          h("button", { type: "button", class: "unsubscribe danger", dataset: { sub: name }, onclick: () => unsubscribe(name) }, "Unsubscribe…")));
      }
      return cells;
    });
    const headings = ["subscription", "type", "backlog", "out msg/s", "delivered", "consumers", "mark-delete"];
    if (admin && persistent) headings.push("actions");
    put(subscriptions, h("h2", {}, `Subscriptions (${subs.length})`),
      subs.length ? table(headings, rows, { id: "subscriptions-table" }) : h("p", { class: "muted" }, "No subscription."));
  }

  async function loadConsumers() {
    const { subscription, offset } = consumerPage;
    const page = await getJson(`${base}/subscription/${enc(subscription)}/consumers?offset=${offset}&limit=100`);
    consumers.hidden = false;
    put(consumers, h("h2", {}, `Consumers of ${subscription}`),
      h("p", { class: "muted", id: "consumers-summary" }, `${fmtNumber(page.total)} consumers; ${page.total ? page.offset + 1 : 0}–${page.offset + page.consumers.length} shown`),
      table(["name", "address", "msg/s out", "delivered", "permits", "unacked", "backlog", "state"],
        page.consumers.map((c) => [c.consumerName, c.address || "", fmtNumber(c.msgRateOut), fmtNumber(c.msgOutCounter), fmtNumber(c.availablePermits), fmtNumber(c.unackedMessages), c.msgBacklog === undefined ? "" : fmtNumber(c.msgBacklog), c.detached ? "detached" : "connected"]),
        { id: "consumers-table" }),
      h("div", { class: "pager" },
        h("button", { type: "button", disabled: page.offset === 0, onclick: () => { consumerPage.offset = Math.max(0, page.offset - page.limit); loadConsumers(); } }, "‹ Previous"),
        h("button", { type: "button", id: "consumers-next", disabled: !page.next, onclick: () => { consumerPage.offset = page.offset + page.limit; loadConsumers(); } }, "Next ›"),
        h("button", { type: "button", onclick: () => { consumerPage.subscription = null; consumers.hidden = true; } }, "Close")));
  }

  // -- peek -------------------------------------------------------------------------------------------
  const peekSub = h("select", { id: "peek-subscription" });
  const peekCount = h("input", { id: "peek-count", type: "number", min: 1, max: 100, value: 5 });
  const peekFormat = h("select", { id: "peek-format" }, h("option", { value: "text" }, "text"), h("option", { value: "hex" }, "hex"));
  const peekOut = h("div", { id: "peek-messages" });
  let peeked = [];
  if (persistent) {
    put(peek, h("h2", {}, "Last messages (peek)"),
      h("p", { class: "muted" }, "The next messages a subscription would get, read without consuming them."),
      h("div", { class: "toolbar" }, peekSub, peekCount, peekFormat, h("button", { type: "button", id: "peek-button", onclick: runPeek }, "Peek")), peekOut);
  } else {
    peek.hidden = true;
  }
  peekFormat.addEventListener("change", renderPeeked);
  function renderPeekChoices(names) {
    const chosen = peekSub.value;
    const same = names.length === peekSub.options.length && names.every((n, i) => peekSub.options[i].value === n);
    if (!same) put(peekSub, ...names.map((n) => h("option", { value: n }, n)));
    if (names.includes(chosen)) peekSub.value = chosen;
  }
  async function runPeek() {
    const sub = peekSub.value;
    if (!sub) { setStatus("peek needs a subscription", "error"); return; }
    const count = Math.max(1, Math.min(100, parseInt(peekCount.value, 10) || 1));
    peeked = [];
    const path = partitions ? null : base;
    if (!path) { setStatus("peek one partition at a time (open a partition)", "error"); return; }
    for (let i = 1; i <= count; i++) {
      let response;
      try {
        response = await api("GET", `${path}/subscription/${enc(sub)}/position/${i}`);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) break;
        setStatus(`peek: ${e.message}`, "error");
        return;
      }
      peeked.push({ id: response.headers.get("X-Pulsar-Message-ID"), time: response.headers.get("X-Pulsar-publish-time"),
        batch: response.headers.get("X-Pulsar-num-batch-message"), key: response.headers.get("X-Pulsar-partition-key"),
        bytes: new Uint8Array(await response.arrayBuffer()) });
    }
    renderPeeked();
  }
  function hexDump(bytes) {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const chunk = Array.from(bytes.slice(i, i + 16));
      lines.push(`${i.toString(16).padStart(6, "0")}  ${chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ").padEnd(48)}  ${chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("")}`);
    }
    return lines.join("\n");
  }
  function renderPeeked() {
    const hex = peekFormat.value === "hex";
    const decoder = new TextDecoder("utf-8", { fatal: false });
    put(peekOut, peeked.length ? table(["message id", "published", "key", "payload"],
      peeked.map((m) => [m.id, m.time || "", m.key || "", h("pre", { class: "payload" }, hex ? hexDump(m.bytes) : decoder.decode(m.bytes), m.batch ? `\n(a batch of ${m.batch} messages)` : "")]),
      { id: "peek-table" }) : h("p", { class: "muted", id: "peek-empty" }, "No message to peek."));
  }

  async function showInternal() {
    const stats = await getJson(`${base}/internalStats`);
    document.getElementById("internal-stats").textContent = JSON.stringify(stats, null, 2);
  }

  // -- actions ----------------------------------------------------------------------------------------
  const subPath = (name) => `${base}/subscription/${enc(name)}`;
  async function resetCursor(name) {
    const minutes = field("Minutes back (0: the earliest message)", "minutes", { type: "number", min: 0, value: 0, id: "reset-minutes" });
    await act("Reset cursor", `Move subscription ${name}'s cursor back: its consumers get the messages since then again.`, [minutes], async (v) => {
      const back = parseFloat(v.minutes || "0");
      const timestamp = back > 0 ? Math.floor(Date.now() - back * 60000) : 0;
      await api("POST", `${subPath(name)}/resetcursor/${timestamp}`);
    });
  }
  async function skip(name) {
    const count = field("Messages to skip", "count", { type: "number", min: 1, value: 1, id: "skip-count" });
    await act("Skip messages", `Skip messages of subscription ${name}: they are acknowledged without being delivered.`, [count], async (v) => {
      await api("POST", `${subPath(name)}/skip/${parseInt(v.count, 10) || 0}`);
    });
  }
  async function clearBacklog(name) {
    await act("Clear backlog", `Acknowledge every message subscription ${name} has not consumed yet.`, [], async () => {
      await api("POST", `${subPath(name)}/skip_all`);
    });
  }
  async function unsubscribe(name) {
    const force = h("label", { class: "field" }, h("input", { type: "checkbox", name: "force" }), " even with consumers connected (they are disconnected)");
    await act("Unsubscribe", `Delete subscription ${name} and its cursor.`, [force], async (v) => {
      await api("DELETE", `${subPath(name)}${v.force ? "?force=true" : ""}`);
    });
  }
  async function unloadBundle() {
    const names = partitions ? Array.from({ length: partitions }, (_, i) => `${local}-partition-${i}`) : [local];
    await act("Unload bundle", "Unload the bundle holding this topic: its topics close and are loaded again at their next use (clients reconnect).", [], async () => {
      const ranges = new Set();
      for (const name of names) ranges.add(await (await api("GET", `${topicPath(domain, tenant, namespace, name)}/bundle`)).text());
      for (const range of ranges) await api("PUT", `/admin/v2/namespaces/${enc(tenant)}/${enc(namespace)}/${range}/unload`);
    });
  }
  async function compact() {
    await act("Compact", "Compact the topic: keep each key's latest message in its compacted view.", [], async () => {
      await api("PUT", `${base}/compaction`);
    });
  }
  async function offload() {
    const last = latest && latest.lastConfirmedEntry;
    await act("Offload", "Offload the topic's closed ledgers to tiered storage (the broker's offload driver).", [], async () => {
      const [ledgerId, entryId] = (last || "-1:-1").split(":").map((x) => parseInt(x, 10));
      await api("PUT", `${base}/offload`, { ledgerId, entryId, partitionIndex: -1 });
    });
  }

  return poller(refresh);
}

// -- start -----------------------------------------------------------------------------------------------

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin();
});
window.addEventListener("hashchange", route);
loadSession().then(route).catch((e) => {
  if (!(e instanceof ApiError && e.status === 401)) setStatus(`cannot reach the broker: ${e.message}`, "error");
});
