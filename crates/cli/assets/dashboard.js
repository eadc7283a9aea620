// The dashboard's script: reads /dashboard/state once, then follows /dashboard/events (read with
// fetch, so that a token can go in the Authorization header), and draws each server: its facts,
// what a person must do, the last hour's timeline and its calls as small SVG plots. No library;
// nothing is loaded from anywhere but this origin.
"use strict";

const TOKEN_KEY = "mcp-supervisor-token";
const HOUR_MS = 3600 * 1000;
const MINUTE_MS = 60 * 1000;
const SVG = "http://www.w3.org/2000/svg";
const WORDS = {
  ready: "ready", lost: "lost", backoff: "backoff", gave_up: "gave up", down: "down",
  idle: "idle", needs_auth: "needs login", stopped: "stopped", hung: "hung, killed",
  session_recovered: "session recovered",
};

let clockOffset = 0; // server's clock minus ours
let retryDelay = 500;

function token() {
  const fromUrl = new URLSearchParams(location.search).get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    return fromUrl;
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function headers() {
  const t = token();
  return t ? { Authorization: "Bearer " + t } : {};
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function setLive(live, text) {
  document.body.dataset.live = live ? "1" : "0";
  document.getElementById("live-text").textContent = text;
}

function askToken(message) {
  setLive(false, "needs a token");
  const form = document.getElementById("token-form");
  form.hidden = false;
  const error = document.getElementById("token-error");
  error.hidden = !message;
  error.textContent = message || "";
  document.getElementById("token").focus();
}

function duration(ms) {
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m " + (s % 60) + "s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h " + (m % 60) + "m";
  return Math.floor(h / 24) + "d " + (h % 24) + "h";
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
}

function now() {
  return Date.now() + clockOffset;
}

// The section of one server, made once and updated in place.
function section(proxy, server) {
  const id = "s-" + proxy.id + "-" + server.name;
  let node = document.getElementById(id);
  if (node) return node;
  node = el("section", { class: "server", id, "data-proxy": proxy.id, "data-server": server.name });
  const fact = (label, field) =>
    el("div", {}, el("dt", {}, label), el("dd", { "data-field": field }, "—"));
  node.append(
    el("div", { class: "head" },
      el("h3", {}, server.name),
      el("span", { class: "badge", "data-field": "state" })),
    el("dl", { class: "facts" },
      fact("pid", "pid"), fact("generation", "generation"), fact("uptime", "uptime"),
      fact("restarts", "restarts"), fact("tools", "tools"), fact("calls (1 h)", "calls"),
      fact("sandbox", "sandbox")),
    el("p", { class: "error", "data-field": "error", hidden: "" }),
    el("div", { class: "action", "data-field": "action", hidden: "" }),
    el("h4", {}, "Last hour"),
    el("div", { class: "strip-box" }),
    el("div", { class: "plots" }),
    el("ol", { class: "timeline" }));
  return node;
}

function setText(node, field, text) {
  const target = node.querySelector('[data-field="' + field + '"]');
  if (target.textContent !== text) target.textContent = text;
}

function drawAction(node, server) {
  const box = node.querySelector('[data-field="action"]');
  const action = server.action;
  const key = action ? action.why + "\n" + action.command : "";
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren();
  box.hidden = !action;
  if (!action) return;
  const why = action.why === "needs_auth"
    ? "It needs a login. Run:"
    : server.withheldTools + " changed tool(s) withheld until approved. Review and accept with:";
  const copy = el("button", { type: "button" }, "Copy");
  copy.addEventListener("click", () => {
    if (navigator.clipboard) navigator.clipboard.writeText(action.command);
  });
  box.append(el("p", {}, why), el("code", {}, action.command), copy);
}

// A plot: an SVG stretched to its box (shapes only; its caption is HTML, so text keeps its size).
function plot(kind, w, h) {
  const svg = svgEl("svg", { class: "plot", "data-plot": kind, viewBox: "0 0 " + w + " " + h, preserveAspectRatio: "none", role: "img" });
  svg.append(svgEl("line", { class: "axis", x1: 0, y1: h - 0.5, x2: w, y2: h - 0.5 }));
  return svg;
}

function x(at, end, w) {
  return Math.min(w, Math.max(0, w - ((end - at) / HOUR_MS) * w));
}

function ms(value) {
  return value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toFixed(3);
}

// A bar per minute of the last hour: the calls, or the errors.
function bars(kind, minutes, value, end, caption) {
  const w = 120, h = 40;
  const svg = plot(kind, w, h);
  const max = Math.max(1, ...minutes.map(value));
  for (const m of minutes) {
    const v = value(m);
    if (!v) continue;
    const bh = Math.max(1.5, (v / max) * (h - 2));
    svg.append(svgEl("rect", { class: kind, x: (x(m.from_ms, end, w) - 1.8).toFixed(1), y: (h - bh).toFixed(1), width: 1.6, height: bh.toFixed(1) }));
  }
  return el("figure", {}, svg, el("figcaption", {}, caption + (max > 1 ? " (max " + max + "/min)" : "")));
}

// Median and p99 latency per minute, as two lines.
function latency(minutes, hour, end) {
  const w = 120, h = 40;
  const svg = plot("latency", w, h);
  const points = minutes.filter((m) => m.p99_ms !== null && m.p99_ms !== undefined);
  const max = Math.max(0.001, ...points.map((m) => m.p99_ms));
  for (const [cls, key] of [["p99", "p99_ms"], ["median", "median_ms"]]) {
    const d = points.map((m, i) =>
      (i ? "L" : "M") + x(m.from_ms, end, w).toFixed(1) + " " + (h - 1 - (m[key] / max) * (h - 3)).toFixed(1)).join(" ");
    if (points.length === 1) {
      svg.append(svgEl("rect", { class: cls + "-dot", x: (x(points[0].from_ms, end, w) - 1.5).toFixed(1), y: (h - 1 - (points[0][key] / max) * (h - 3) - 1).toFixed(1), width: 3, height: 2 }));
    } else if (d) {
      svg.append(svgEl("path", { class: cls, d }));
    }
  }
  const caption = hour.median_ms === null || hour.median_ms === undefined
    ? "latency: no calls"
    : "median ≤ " + ms(hour.median_ms) + " ms, p99 ≤ " + ms(hour.p99_ms) + " ms";
  return el("figure", {}, svg, el("figcaption", {}, caption));
}

// The lifecycle events of the last hour as ticks on a line.
function strip(events, end) {
  const w = 360, h = 16;
  const svg = svgEl("svg", { class: "strip", viewBox: "0 0 " + w + " " + h, preserveAspectRatio: "none", role: "img" });
  svg.append(svgEl("line", { class: "axis", x1: 0, y1: h / 2, x2: w, y2: h / 2 }));
  for (const e of events) {
    const mark = svgEl("rect", { class: "ev-" + e.kind, x: (Math.min(w - 2, x(e.at, end, w)) - 1).toFixed(1), y: 1, width: 2.5, height: h - 2 });
    const title = svgEl("title");
    title.textContent = clock(e.at) + " " + (WORDS[e.kind] || e.kind);
    mark.append(title);
    svg.append(mark);
  }
  return el("figure", { class: "strip" }, svg,
    el("figcaption", { class: "ends" }, el("span", {}, "1 h ago"), el("span", {}, "now")));
}

function drawHistory(node, server, end) {
  const key = JSON.stringify([server.events, server.calls, Math.floor(end / MINUTE_MS)]);
  if (node.dataset.history === key) return;
  node.dataset.history = key;
  const minutes = server.calls.minutes;
  const hour = server.calls.hour;
  node.querySelector(".strip-box").replaceChildren(strip(server.events, end));
  node.querySelector(".plots").replaceChildren(
    bars("calls", minutes, (m) => m.calls, end, hour.calls ? hour.calls + " calls" : "no calls"),
    bars("errors", minutes, (m) => m.errors, end, hour.errors ? hour.errors + " failed" : "no errors"),
    latency(minutes, hour, end));
  // A detail the event before already said (a loss, then its backoff) is not said again.
  let said = null;
  const items = server.events.map((e) => {
    const detail = e.pid ? "pid " + e.pid : e.detail && e.detail !== said ? e.detail : "";
    said = e.detail || null;
    return el("li", { "data-kind": e.kind, "data-generation": String(e.generation) },
      el("time", { datetime: new Date(e.at).toISOString() }, clock(e.at)),
      el("span", { class: "what" }, (WORDS[e.kind] || e.kind) +
        (e.kind === "backoff" && e.attempt ? " #" + e.attempt : "") +
        (e.generation ? " · g" + e.generation : "")),
      el("span", { class: "detail" }, detail));
  }).reverse();
  const list = node.querySelector("ol.timeline");
  list.replaceChildren(...items);
  if (!items.length) list.replaceChildren(el("li", { class: "quiet" }, "nothing happened in the last hour"));
}

function drawServer(node, server, end) {
  const badge = node.querySelector('[data-field="state"]');
  badge.className = "badge s-" + server.state;
  setText(node, "state", server.state);
  setText(node, "pid", server.pid ? String(server.pid) : "—");
  setText(node, "generation", String(server.generation));
  setText(node, "restarts", String(server.restarts));
  setText(node, "tools", String(server.tools) + (server.withheldTools ? " (+" + server.withheldTools + " withheld)" : ""));
  setText(node, "sandbox", sandboxText(server.sandbox));
  setText(node, "calls", server.calls.hour.calls + (server.calls.hour.errors ? " (" + server.calls.hour.errors + " failed)" : ""));
  node.dataset.readySince = server.readySince === null ? "" : String(server.readySince);
  tickUptime(node);
  const error = node.querySelector('[data-field="error"]');
  const showError = server.lastError && server.state !== "ready";
  error.hidden = !showError;
  setText(node, "error", showError ? server.lastError : "");
  drawAction(node, server);
  drawHistory(node, server, end);
}

// A server's sandbox in a few words: what the kernel gave it, and how much it lacks.
function sandboxText(sandbox) {
  if (!sandbox) return "none";
  const a = sandbox.applied;
  return (a.landlockAbi ? "Landlock " + a.landlockAbi : "no Landlock") + ", network " + a.network +
    (a.lacking.length ? " (lacking " + a.lacking.length + ")" : "");
}

function tickUptime(node) {
  const since = node.dataset.readySince;
  setText(node, "uptime", since ? duration(Math.max(0, now() - Number(since))) : "—");
}

function render(state) {
  clockOffset = state.now - Date.now();
  const main = document.getElementById("servers");
  document.getElementById("empty").hidden = state.proxies.length > 0;
  const keep = new Set();
  let previous = null;
  for (const proxy of state.proxies) {
    // One group per proxy: its heading, then its servers' grid.
    const groupId = "p-" + proxy.id;
    let group = document.getElementById(groupId);
    if (!group) {
      group = el("div", { class: "group", id: groupId },
        el("h2", { class: "proxy", "data-proxy": proxy.id }),
        el("div", { class: "grid" }));
    }
    const heading = group.firstChild;
    const grid = group.lastChild;
    const title = proxy.name + " (" + proxy.kind + ", pid " + proxy.pid + ")" + (proxy.unreachable ? ": not answering" : "");
    if (heading.textContent !== title) heading.textContent = title;
    heading.classList.toggle("unreachable", !!proxy.unreachable);
    group.classList.toggle("many", (proxy.servers || []).length > 1);
    if (previous ? previous.nextSibling !== group : main.firstChild !== group) {
      if (previous) previous.after(group); else main.prepend(group);
    }
    previous = group;
    keep.add(group);
    let last = null;
    for (const server of proxy.servers || []) {
      const node = section(proxy, server);
      if (last ? last.nextSibling !== node : grid.firstChild !== node) {
        if (last) last.after(node); else grid.prepend(node);
      }
      last = node;
      keep.add(node);
      drawServer(node, server, state.now);
    }
    for (const child of [...grid.children]) if (!keep.has(child)) child.remove();
  }
  for (const child of [...main.children]) if (!keep.has(child)) child.remove();
}

async function refused(response) {
  if (response.status === 401 || response.status === 403) {
    const hadToken = !!token();
    sessionStorage.removeItem(TOKEN_KEY);
    askToken(hadToken ? "That token was refused." : "");
    return true;
  }
  return false;
}

// Follow the event stream; each `state` event is drawn. Reconnects on its own.
async function follow() {
  let response;
  try {
    response = await fetch("dashboard/events", { headers: { ...headers(), Accept: "text/event-stream" }, cache: "no-store" });
  } catch (error) {
    return again("not connected");
  }
  if (await refused(response)) return;
  if (!response.ok || !response.body) return again("not connected (" + response.status + ")");
  document.getElementById("token-form").hidden = true;
  retryDelay = 500;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (error) {
      break;
    }
    if (chunk.done) break;
    buffer += chunk.value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      const isState = block.split("\n").some((l) => l === "event: state" || l === "event:state");
      if (isState && data) {
        try {
          render(JSON.parse(data));
          setLive(true, "live · " + clock(now()));
        } catch (error) {
          setLive(false, "a state could not be read");
        }
      }
    }
  }
  again("reconnecting…");
}

function again(text) {
  setLive(false, text);
  setTimeout(follow, retryDelay);
  retryDelay = Math.min(retryDelay * 2, 10000);
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = document.getElementById("token").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  // A token typed in wins over one in the address.
  const url = new URL(location.href);
  if (url.searchParams.has("token")) {
    url.searchParams.delete("token");
    history.replaceState(null, "", url);
  }
  document.getElementById("token-form").hidden = true;
  follow();
});

setInterval(() => {
  for (const node of document.querySelectorAll("section.server")) tickUptime(node);
}, 1000);

follow();
