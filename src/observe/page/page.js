// The shardq live page: polls /api/server, /api/status and /api/timeline
// every second and redraws in place (no reload). With window.SHARDQ_REPORT
// set (a `shardq report` file) it draws that data once instead.
"use strict";
(function () {
  const REPORT = window.SHARDQ_REPORT;
  const TOKEN = new URLSearchParams(location.search).get("token");
  const MAX_ROWS = 60;        // timeline rows drawn: the slowest 20 and a sample
  const SLOWEST_ROWS = 20;
  const MAX_TABLE_ROWS = 100; // workers table rows, stragglers and slowest first
  const KEEP_SECONDS = 1800;  // events and samples kept in the page
  const RATE_SECONDS = 60;    // the ETA's recent rate
  const COLORS = {complete: "#3a9a6a", release: "#9aa", expire: "#e08a1e", fail: "#c62828",
                  open: "#4a78c2", split: "#8e24aa"};
  const state = {queues: {}, server: null, lastCommits: null, updates: 0};

  function esc(s) {
    return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                '"': "&quot;", "'": "&#39;"}[c]));
  }
  function withToken(url) {
    return TOKEN ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN) : url;
  }
  function duration(s) {
    if (!isFinite(s)) return "\u2014";
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
    return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
  }
  function clock(t) { return new Date(t * 1000).toLocaleTimeString(); }
  function qstate(name) {
    if (!state.queues[name]) {
      state.queues[name] = {events: [], lastT: 0, keysAtLastT: new Set(), open: [], samples: [],
                            bound: 0, dropped: 0, truncated: false};
    }
    return state.queues[name];
  }
  function eventKey(e) { return e.kind + ":" + e.lease + ":" + e.t; }

  // Merges a /api/timeline answer into the queue's events (deduplicated).
  function mergeTimeline(q, tl, now) {
    for (const e of tl.events) {
      if (e.t < q.lastT || (e.t === q.lastT && q.keysAtLastT.has(eventKey(e)))) continue;
      if (e.t > q.lastT) { q.lastT = e.t; q.keysAtLastT = new Set(); }
      q.keysAtLastT.add(eventKey(e));
      q.events.push(e);
    }
    q.open = tl.open;
    q.bound = tl.bound; q.dropped = tl.dropped; q.truncated = q.truncated || tl.truncated;
    const cut = now - KEEP_SECONDS;
    let i = 0;
    while (i < q.events.length && q.events[i].t < cut) i++;
    if (i) q.events.splice(0, i);
  }

  // How long each worker's last item took (or has been held): one pass,
  // no bars, so that choosing rows stays cheap with 10,000 workers.
  function lastBars(q, now) {
    const last = new Map();
    for (const e of q.events) {
      if (e.kind === "take" || e.kind === "split") { if (!last.has(e.worker)) last.set(e.worker, 0); continue; }
      if (e.taken != null) last.set(e.worker, e.t - e.taken);
    }
    for (const e of q.open) last.set(e.worker, now - e.taken);
    return last;
  }

  // Bars of the `shown` workers: worker -> [{from, to, kind, relet, item,
  // open}], and their split marks.
  function bars(q, now, shown) {
    const seen = new Map();  // item (epoch, index) as one number -> times taken
    const reletLease = new Set();
    const out = new Map(), marks = new Map();
    for (const w of shown) { out.set(w, []); marks.set(w, []); }
    for (const e of q.events) {
      if (e.kind !== "take") continue;
      const k = e.epoch * 4294967296 + e.index, n = (seen.get(k) || 0) + 1;
      seen.set(k, n);
      if (n > 1) reletLease.add(e.lease);
    }
    for (const e of q.events) {
      const list = out.get(e.worker);
      if (!list || e.kind === "take") continue;
      if (e.kind === "split") { marks.get(e.worker).push(e.t); continue; }
      if (e.taken == null) continue;
      list.push({from: e.taken, to: e.t, kind: e.kind, relet: reletLease.has(e.lease),
                 item: e.epoch + "/" + e.index, open: false});
    }
    for (const e of q.open) {
      const list = out.get(e.worker);
      if (list) list.push({from: e.taken, to: now, kind: "open", relet: reletLease.has(e.lease),
                           item: e.epoch + "/" + e.index, open: true});
    }
    // The last bar is the one that ended last (an open one: now).
    for (const list of out.values()) list.sort((a, b) => a.to - b.to || a.from - b.from);
    return {rows: out, marks};
  }

  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }

  // Which workers get a timeline row: all when few; else the slowest (the
  // longest last bar) and a fixed sample of the rest.
  function chooseRows(last) {
    const all = [...last.keys()].filter(w => w);
    if (all.length <= MAX_ROWS) return {shown: all.sort(), note: ""};
    const bySlow = all.slice().sort((a, b) => last.get(b) - last.get(a));
    const slow = bySlow.slice(0, SLOWEST_ROWS);
    const rest = bySlow.slice(SLOWEST_ROWS).sort((a, b) => hash(a) - hash(b)).slice(0, MAX_ROWS - SLOWEST_ROWS);
    return {shown: slow.concat(rest.sort()),
            note: `showing ${MAX_ROWS} of ${all.length} workers: the ${SLOWEST_ROWS} with the longest ` +
                  `last item first, then ${MAX_ROWS - SLOWEST_ROWS} sampled`};
  }

  function timelineSvg(q, now, windowS) {
    const {shown, note} = chooseRows(lastBars(q, now));
    const {rows, marks} = bars(q, now, shown);
    const left = 130, rowH = 16, top = 18;
    const width = Math.max(700, Math.min(1600, (document.getElementById("queues").clientWidth || 1100) - 40));
    const t0 = now - windowS, x = t => left + Math.max(0, (t - t0) / windowS) * (width - left - 10);
    let svg = `<svg class="timeline" width="${width}" height="${top + rowH * shown.length + 6}" ` +
              `xmlns="http://www.w3.org/2000/svg">`;
    for (let i = 0; i <= 5; i++) {
      const t = t0 + windowS * i / 5;
      svg += `<line x1="${x(t)}" x2="${x(t)}" y1="12" y2="${top + rowH * shown.length}" stroke="#eee"/>` +
             `<text x="${x(t)}" y="10" text-anchor="${i === 0 ? "start" : i === 5 ? "end" : "middle"}">${esc(clock(t))}</text>`;
    }
    shown.forEach((w, i) => {
      const list = rows.get(w) || [];
      const lastBar = list.length ? list[list.length - 1] : null;
      const y = top + i * rowH;
      svg += `<g class="tl-row" data-worker="${esc(w)}" data-bars="${list.length}" data-last-bar-seconds="${
          lastBar ? (lastBar.to - lastBar.from).toFixed(3) : 0}" data-last-bar-open="${lastBar && lastBar.open ? 1 : 0}">` +
             `<text x="2" y="${y + 11}">${esc(w.length > 20 ? w.slice(0, 19) + "\u2026" : w)}</text>`;
      let mergedTo = -Infinity, mergedFrom = 0;
      const flush = () => { if (mergedTo > mergedFrom) svg += `<rect x="${x(mergedFrom)}" y="${y + 2}" width="${Math.max(1, x(mergedTo) - x(mergedFrom))}" height="${rowH - 4}" fill="${COLORS.complete}"/>`; };
      for (const b of list) {
        if (b.to < t0) continue;
        const plain = b.kind === "complete" && !b.relet && b !== lastBar;
        const wpx = x(b.to) - x(b.from);
        if (plain && wpx < 2) {  // many short items: one merged rect
          if (x(b.from) - x(mergedTo) > 1) { flush(); mergedFrom = b.from; }
          mergedTo = Math.max(mergedTo, b.to);
          continue;
        }
        svg += `<rect class="bar ${b.kind}${b.relet ? " relet" : ""}${b === lastBar ? " last" : ""}" x="${x(b.from)}" ` +
               `y="${y + 2}" width="${Math.max(1, wpx)}" height="${rowH - 4}" fill="${COLORS[b.kind]}"` +
               `${b.relet ? ' stroke="#000" stroke-dasharray="2,1"' : ""}><title>${esc(w)} item ${b.item}: ` +
               `${b.kind}, ${(b.to - b.from).toFixed(2)} s${b.relet ? " (re-leased)" : ""}</title></rect>`;
      }
      flush();
      for (const t of marks.get(w) || []) {
        if (t >= t0) svg += `<path class="split-mark" d="M${x(t)},${y} l4,-0 l-4,6 l-4,-6 z" fill="${COLORS.split}"><title>split at ${esc(clock(t))}</title></path>`;
      }
      svg += "</g>";
    });
    svg += "</svg>";
    const legend = `<div class="legend">` + [["complete", "completed"], ["open", "held now"],
      ["release", "released"], ["expire", "lease expired"], ["fail", "failed"], ["split", "split (mark)"]]
      .map(([k, label]) => `<span><i class="sw" style="background:${COLORS[k]}"></i>${label}</span>`).join("") +
      `<span><i class="sw" style="border:1px dashed #000"></i>re-leased item</span></div>`;
    return {html: legend + (note ? `<p class="muted scale-note">${esc(note)}</p>` : "") + svg, rows};
  }

  function rateSeries(q, now, windowS, bucketS) {
    const n = Math.max(1, Math.round(windowS / bucketS)), t0 = now - n * bucketS;
    const done = new Array(n).fill(0), taken = new Array(n).fill(0);
    for (const e of q.events) {
      if (e.t < t0) continue;
      const i = Math.min(n - 1, Math.floor((e.t - t0) / bucketS));
      if (e.kind === "complete") done[i]++;
      else if (e.kind === "take") taken[i]++;
    }
    return {t0, n, bucketS, done: done.map(c => c / bucketS), taken: taken.map(c => c / bucketS)};
  }

  function lineChart(series, t0, t1, title, cls) {
    const w = 420, h = 130, l = 40, b = 18;
    let max = 0;
    for (const s of series) for (const p of s.points) max = Math.max(max, p[1]);
    max = max > 0 ? max * 1.1 : 1;
    const x = t => l + (t - t0) / Math.max(1e-9, t1 - t0) * (w - l - 6);
    const y = v => h - b - v / max * (h - b - 14);
    let svg = `<svg class="${cls}" width="${w}" height="${h}" xmlns="http://www.w3.org/2000/svg">` +
              `<text x="${l}" y="10">${esc(title)}</text>` +
              `<line x1="${l}" x2="${w}" y1="${h - b}" y2="${h - b}" stroke="#ccc"/>` +
              `<text x="2" y="${y(max / 1.1) + 4}">${(max / 1.1).toPrecision(3)}</text><text x="2" y="${h - b}">0</text>` +
              `<text x="${l}" y="${h - 4}">${esc(clock(t0))}</text><text x="${w - 60}" y="${h - 4}">${esc(clock(t1))}</text>`;
    let lx = l + 120;
    for (const s of series) {
      if (s.points.length) {
        svg += `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${
            s.points.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ")}"/>`;
      }
      svg += `<text x="${lx}" y="10" style="fill:${s.color}">${esc(s.name)}</text>`;
      lx += 8 * s.name.length + 14;
    }
    return svg + "</svg>";
  }

  function median(xs) {
    if (!xs.length) return 0;
    const s = xs.slice().sort((a, b) => a - b);
    return s[Math.floor(s.length / 2)];
  }

  function workersTable(qs, q, now) {
    const rates = qs.workers.map(w => w.items_per_second);
    const med = median(rates);
    const lastSeen = new Map(), durations = [];
    for (const e of q.events) lastSeen.set(e.worker, e.t);
    // The median item time of the latest 5000 completions.
    for (let i = q.events.length - 1; i >= 0 && durations.length < 5000; i--) {
      const e = q.events[i];
      if (e.kind === "complete" && e.taken != null) durations.push(e.t - e.taken);
    }
    const medItem = median(durations);
    const oldest = new Map();
    for (const e of q.open) if (e.taken != null && !oldest.has(e.worker)) oldest.set(e.worker, now - e.taken);
    const rows = qs.workers.map(w => {
      const age = oldest.has(w.worker) ? oldest.get(w.worker) : null;
      const reasons = [];
      if (med > 0 && w.items_per_second < 0.5 * med) {
        reasons.push(`${w.items_per_second.toFixed(2)} items/s, under half the median ${med.toFixed(2)}`);
      }
      if (age != null && medItem > 0 && age > 3 * medItem && age > 1) {
        reasons.push(`holds an item for ${duration(age)}, over 3\u00d7 the median item time ${medItem.toFixed(2)} s`);
      }
      return {w, age, reasons, seen: lastSeen.get(w.worker)};
    });
    rows.sort((a, b) => (b.reasons.length - a.reasons.length) || (a.w.items_per_second - b.w.items_per_second) ||
                        (a.w.worker < b.w.worker ? -1 : 1));
    const shown = rows.slice(0, MAX_TABLE_ROWS);
    let html = `<table class="workers"><tr><th>worker</th><th>items/s</th><th>completed</th><th>records</th><th>held</th>` +
               `<th>oldest lease</th><th>last seen</th><th>straggler</th></tr>`;
    for (const r of shown) {
      html += `<tr class="${r.reasons.length ? "straggler" : ""}" data-worker="${esc(r.w.worker)}"><td>${esc(r.w.worker)}</td>` +
              `<td>${r.w.items_per_second.toFixed(2)}</td><td>${r.w.completed}</td>` +
              `<td>${r.w.records == null ? "\u2014" : r.w.records}</td><td>${r.w.held}</td>` +
              `<td>${r.age == null ? "\u2014" : duration(r.age)}</td>` +
              `<td>${r.seen == null ? "\u2014" : duration(now - r.seen) + " ago"}</td>` +
              `<td>${r.reasons.length ? "straggler: " + esc(r.reasons.join("; ")) : ""}</td></tr>`;
    }
    html += "</table>";
    if (rows.length > shown.length) {
      html += `<p class="muted scale-note">showing ${shown.length} of ${rows.length} workers (stragglers, then the slowest)</p>`;
    }
    return html;
  }

  function eta(qs, q, now) {
    const since = now - RATE_SECONDS;
    let done = 0, first = now;
    for (const e of q.events) {
      if (e.kind === "complete" && e.t >= since) { done++; first = Math.min(first, e.t); }
    }
    const span = Math.max(1, Math.min(RATE_SECONDS, now - Math.min(first, q.events.length ? q.events[0].t : now)));
    const rate = done / span;
    const total = qs.items * qs.epochs;
    const jobLeft = Math.max(0, total - qs.completed - qs.failed);
    const current = qs.per_epoch.find(e => e.completed + e.failed < qs.items) ||
                    {epoch: qs.epochs_done, completed: 0, failed: 0};
    const epochLeft = current ? qs.items - current.completed - current.failed : 0;
    return {rate, jobLeft, epochLeft, epoch: current ? current.epoch : null,
            job: jobLeft === 0 ? 0 : rate > 0 ? jobLeft / rate : Infinity,
            epochS: epochLeft === 0 ? 0 : rate > 0 ? epochLeft / rate : Infinity};
  }

  function renderQueue(qs, now, selectedS) {
    const q = qstate(qs.name);
    // Zoomed to the events there are when they span less than the window.
    // A finished queue's charts end at its last event, not at the clock.
    const end = qs.finished && q.events.length && !q.open.length ? q.events[q.events.length - 1].t : now;
    const first = q.events.length ? q.events[0].t : end;
    const windowS = Math.max(2, Math.min(selectedS, (end - first) * 1.05));
    const total = qs.items * qs.epochs;
    const pct = total ? 100 * (qs.completed + qs.failed) / total : 0;
    const e = eta(qs, q, now);
    const etaText = qs.finished ? "finished" + (qs.failed ? ` with ${qs.failed} failed item(s)` : "")
        : `ETA epoch ${e.epoch}: ${duration(e.epochS)}` + (isFinite(e.epochS) ? ` (${clock(now + e.epochS)})` : "") +
          ` \u00b7 job: ${duration(e.job)}` + (isFinite(e.job) ? ` (${clock(now + e.job)})` : "") +
          ` \u2014 at ${e.rate.toFixed(2)} items/s over the last ${RATE_SECONDS} s`;
    let epochs = "<table class=\"epochs\"><tr><th>epoch</th><th>progress</th><th>pending</th><th>leased</th><th>completed</th><th>failed</th></tr>";
    for (const ep of qs.per_epoch) {
      const p = qs.items ? 100 * ep.completed / qs.items : 0;
      epochs += `<tr><td>${ep.epoch}</td><td><div class="bar"><div class="fill" style="width:${p.toFixed(1)}%"></div></div></td>` +
                `<td>${ep.pending}</td><td>${ep.leased}</td><td>${ep.completed}</td><td>${ep.failed}</td></tr>`;
    }
    epochs += "</table>";
    const rs = rateSeries(q, end, windowS, Math.max(0.1, windowS / 60));
    const pts = arr => arr.map((v, i) => [rs.t0 + (i + 0.5) * rs.bucketS, v]);
    const rateChart = lineChart([{name: "completed/s", color: COLORS.complete, points: pts(rs.done)},
                                 {name: "taken/s", color: COLORS.open, points: pts(rs.taken)}],
                                rs.t0, end, "items/s", "rates");
    const smp = q.samples.filter(s => s.t >= end - windowS && s.t <= end + 1);
    const levels = lineChart(["pending", "leased", "completed", "failed"].map((k, i) => ({
      name: k, color: ["#777", COLORS.open, COLORS.complete, COLORS.fail][i],
      points: smp.map(s => [s.t, s[k]])})), smp.length ? Math.min(end - 1, smp[0].t) : end - windowS, end,
      "items by state", "levels");
    // Records/s between polled samples (the workers' readers report each
    // item's records with its completion; history before the page opened,
    // and reports, have none).
    const recPts = [];
    for (let i = 1; i < smp.length; i++) {
      const a = smp[i - 1], c = smp[i], dt = c.t - a.t;
      if (dt > 0 && a.records != null && c.records != null) recPts.push([c.t, (c.records - a.records) / dt]);
    }
    const recentRecords = recPts.slice(-5);
    const recordsRate = recentRecords.length ? recentRecords.reduce((s, p) => s + p[1], 0) / recentRecords.length : 0;
    const recordsChart = lineChart([{name: "records/s", color: COLORS.split, points: recPts}],
                                   recPts.length ? Math.min(end - 1, recPts[0][0]) : end - windowS, end,
                                   "records/s", "records-rate");
    const tl = timelineSvg(q, end, windowS);
    const boundNote = `${q.bound} events kept per queue by the coordinator` +
                      (q.dropped ? `, ${q.dropped} older ones dropped` : "");
    return `<section class="queue" data-queue="${esc(qs.name)}"><h2>queue ${esc(qs.name)}</h2>` +
      `<div class="eta" id="eta-${esc(qs.name)}" data-eta-job-seconds="${isFinite(e.job) ? e.job.toFixed(1) : ""}" ` +
      `data-eta-epoch-seconds="${isFinite(e.epochS) ? e.epochS.toFixed(1) : ""}">${esc(etaText)}</div>` +
      `<div class="bar overall" title="${pct.toFixed(1)}%"><div class="fill" style="width:${pct.toFixed(1)}%"></div></div>` +
      `<p class="counters"><span>${qs.items} items \u00d7 ${qs.epochs} epochs</span><span>seed ${qs.seed}</span>` +
      `<span>pending ${qs.pending}</span><span>leased ${qs.leased}</span><span>completed ${qs.completed}</span>` +
      `<span>failed ${qs.failed}</span><span>expired ${qs.expired}</span><span>released ${qs.released}</span>` +
      `<span>splits ${qs.splits} (${qs.split_items_open} open)</span><span>duplicates ${qs.duplicates}</span>` +
      `<span class="records" data-records="${qs.records}" data-records-per-second="${recordsRate.toFixed(1)}">` +
      `records ${qs.records} (${recordsRate.toFixed(1)}/s)</span></p>` +
      `<div class="grid"><div>${epochs}</div><div>${rateChart}${recordsChart}${levels}</div></div>` +
      `<h3>worker timeline</h3>${tl.html}<p class="muted">${esc(boundNote)}</p>` +
      `<h3>workers</h3>${workersTable(qs, q, now)}</section>`;
  }

  function render(status, server) {
    const now = server.now;
    const windowS = 60 * Number(document.getElementById("window").value);
    const info = [`version ${server.version}`];
    if (server.uptime_seconds != null) info.push(`up ${duration(server.uptime_seconds)}`);
    const ha = server.leadership;
    if (ha) {
      info.push(ha.leading ? `leader of job ${ha.job} (term ${ha.term}), state in etcd`
                           : `standby of job ${ha.job}; ${ha.leader ? `leader ${ha.leader} (term ${ha.term})`
                                                                    : "no leader known"}`);
    } else {
      info.push(server.state_dir ? `state dir ${server.state_dir}` : "in memory");
    }
    if (server.journal) {
      let cps = "\u2026";
      if (state.lastCommits && now > state.lastCommits.t) {
        cps = ((server.journal.commits - state.lastCommits.c) / (now - state.lastCommits.t)).toFixed(1);
      }
      state.lastCommits = {t: now, c: server.journal.commits};
      info.push(`journal ${cps} commits/s`);
    }
    document.getElementById("server-info").textContent = info.join(" \u00b7 ");
    const started = performance.now();
    const main = document.getElementById("queues");
    main.innerHTML = status.queues.length ? status.queues.map(qs => renderQueue(qs, now, windowS)).join("")
                                          : "<p class=\"muted\">No queues yet.</p>";
    document.body.dataset.renderMs = (performance.now() - started).toFixed(1);
    state.updates++;
    document.body.dataset.updates = String(state.updates);
    document.getElementById("updated").textContent =
        (REPORT ? "report of " : "updated ") + new Date(now * 1000).toLocaleString();
    document.getElementById("bounds").textContent =
        `Timeline rows: at most ${MAX_ROWS} (above that, the ${SLOWEST_ROWS} slowest and a sample); ` +
        `workers table: at most ${MAX_TABLE_ROWS} rows; the page keeps the last ${KEEP_SECONDS / 60} minutes.`;
  }

  async function getJson(url) {
    const r = await fetch(withToken(url), {cache: "no-store"});
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    // Seeds are 64-bit: kept as text, not rounded to a double.
    return JSON.parse((await r.text()).replace(/"seed":(\d+)/g, '"seed":"$1"'));
  }

  let last = null;
  async function poll() {
    try {
      const [server, status] = await Promise.all([getJson("/api/server"), getJson("/api/status")]);
      for (const qs of status.queues) {
        const q = qstate(qs.name);
        const since = q.lastT || server.now - KEEP_SECONDS;
        const tl = await getJson(`/api/timeline?queue=${encodeURIComponent(qs.name)}&since=${since}`);
        server.now = Math.max(server.now, tl.now);  // open leases end "now", after their take
        mergeTimeline(q, tl, server.now);
        // History before the page opened, from the timeline.
        if (!q.samples.length) q.samples = deriveSamples(q, qs, server.now);
        q.samples.push({t: server.now, pending: qs.pending, leased: qs.leased, completed: qs.completed,
                        failed: qs.failed, records: qs.records});
        while (q.samples.length && q.samples[0].t < server.now - KEEP_SECONDS) q.samples.shift();
      }
      last = {status, server};
      render(status, server);
      document.getElementById("error").hidden = true;
    } catch (err) {
      const box = document.getElementById("error");
      box.hidden = false;
      box.textContent = "cannot reach the coordinator: " + err.message + " (retrying every second)";
    }
    setTimeout(poll, 1000);
  }

  const nav = performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
  document.body.dataset.navigation = nav ? nav.type : "navigate";
  // A report has no polled samples: completed and leased over time come
  // from its events (pending is what neither completed nor holds).
  function deriveSamples(q, qs, now) {
    const ev = q.events;
    if (!ev.length) return [];
    const ends = new Set(["complete", "release", "expire", "fail"]);
    let done = qs.completed - ev.filter(e => e.kind === "complete").length;
    let held = q.open.length - ev.reduce((d, e) => d + (e.kind === "take" ? 1 : ends.has(e.kind) ? -1 : 0), 0);
    const total = qs.items * qs.epochs, out = [], n = 100, t0 = ev[0].t, step = Math.max(1e-3, (now - t0) / n);
    let i = 0;
    for (let k = 0; k <= n; k++) {
      const t = t0 + k * step;
      for (; i < ev.length && ev[i].t <= t; i++) {
        if (ev[i].kind === "take") held++;
        else if (ends.has(ev[i].kind)) held--;
        if (ev[i].kind === "complete") done++;
      }
      out.push({t, completed: done, leased: held, failed: qs.failed,
                pending: Math.max(0, total - done - held - qs.failed)});
    }
    return out;
  }

  document.getElementById("window").addEventListener("change", () => { if (last) render(last.status, last.server); });
  if (REPORT) {
    for (const [name, tl] of Object.entries(REPORT.timeline)) {
      mergeTimeline(qstate(name), tl, REPORT.server.now);
      const qs = REPORT.status.queues.find(x => x.name === name);
      if (qs) qstate(name).samples = deriveSamples(qstate(name), qs, REPORT.server.now);
    }
    // A report shows its whole timeline by default.
    const span = Math.max(60, ...Object.values(REPORT.timeline).map(t => t.events.length ? REPORT.server.now - t.events[0].t : 0));
    const sel = document.getElementById("window");
    const opt = document.createElement("option");
    opt.value = String(Math.ceil(span / 60)); opt.textContent = opt.value + " (all)"; opt.selected = true;
    sel.appendChild(opt);
    last = {status: REPORT.status, server: REPORT.server};
    document.querySelector("footer").querySelectorAll("a").forEach(a => a.removeAttribute("href"));
    render(REPORT.status, REPORT.server);
  } else {
    for (const id of ["metrics-link", "status-link", "static-link"]) {
      const a = document.getElementById(id);
      a.href = withToken(a.getAttribute("href"));
    }
    poll();
  }
})();
