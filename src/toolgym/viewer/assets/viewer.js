// toolgym rollout viewer. Plain DOM code, no framework.
// Rule: text from the rollout file reaches the document through textContent (and the `title` property) only;
// nothing here parses markup from data, builds URLs from it, or evaluates it.
(function () {
  "use strict";
  var NONCE = document.currentScript.nonce;
  var boot = JSON.parse(document.getElementById("tg-boot").textContent);
  var ix = boot.index;
  var N = boot.total;
  var CACHE_MAX = 1000;
  var cache = new Map();   // episode number -> its view (bounded: a long session does not hold the file)
  var pieces = new Map();  // token id -> text
  var renderSeq = 0;
  var page = 0;
  var $ = function (id) { return document.getElementById(id); };

  // -- elements and text -------------------------------------------------------------------------------------

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) showText(e, String(text));
    return e;
  }

  // Invisible and direction-changing characters (bidi overrides, zero-width, tag characters, controls) are
  // shown as visible marks, so text cannot hide or reorder what it says.
  var HIDDEN = /(?![\n\r\t])[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}]/u;
  var HIDDEN_ALL = new RegExp(HIDDEN.source, "gu");

  function showText(parent, s) {
    if (!HIDDEN.test(s)) { parent.appendChild(document.createTextNode(s)); return; }
    var last = 0;
    s.replace(HIDDEN_ALL, function (ch, at) {
      if (at > last) parent.appendChild(document.createTextNode(s.slice(last, at)));
      var cp = ch.codePointAt(0).toString(16).toUpperCase();
      var mark = el("span", "ctl");
      mark.textContent = "\u27e8U+" + ("0000" + cp).slice(-Math.max(4, cp.length)) + "\u27e9";
      parent.appendChild(mark);
      last = at + ch.length;
      return ch;
    });
    if (last < s.length) parent.appendChild(document.createTextNode(s.slice(last)));
  }

  function fmt(x, digits) {
    if (x === null || x === undefined) return "nan";
    return Number(x).toFixed(digits === undefined ? 3 : digits).replace(/\.?0+$/, "") || "0";
  }

  // -- the file's header and the filters --------------------------------------------------------------------

  function header() {
    document.title = boot.file + " \u00b7 toolgym rollouts";
    $("file-name").textContent = "";
    showText($("file-name"), boot.file);
    var m = boot.meta || {};
    var bits = [];
    ["env_id", "model", "sampler", "algorithm", "step"].forEach(function (k) {
      if (m[k] !== undefined && m[k] !== null) bits.push(k.replace("_id", "") + " " + m[k]);
    });
    bits.push(N + " episodes in " + ix.groups.length + " groups");
    showText($("file-meta"), bits.join(" \u00b7 "));
    var notes = (boot.warnings || []).slice();
    if (boot.note) notes.push(boot.note);
    if (!boot.tokens) notes.push("no token pieces beside this file (" + boot.file + ".tokens.json, written by " +
      "training steps): turns only, no per-token colours");
    showText($("file-note"), notes.join(" \u00b7 "));
    if (!boot.tokens) $("f-color-box").hidden = true;
    ix.finishes.forEach(function (name, k) {
      var count = 0;
      for (var i = 0; i < N; i++) if (ix.f[i] === k) count++;
      var lab = el("label", "check");
      var box = document.createElement("input");
      box.type = "checkbox";
      box.checked = true;
      box.value = String(k);
      box.className = "f-finish-box";
      lab.appendChild(box);
      showText(lab, " " + (name || "(none)") + " (" + count + ")");
      $("f-finish").appendChild(lab);
    });
  }

  function number(id) {
    var v = $(id).value.trim();
    if (v === "") return null;
    var x = Number(v);
    return isFinite(x) ? x : null;
  }

  function filtered() {
    var rmin = number("f-rmin"), rmax = number("f-rmax");
    var task = $("f-task").value.trim().toLowerCase();
    var finish = new Set();
    document.querySelectorAll(".f-finish-box").forEach(function (b) { if (b.checked) finish.add(Number(b.value)); });
    var taskOk = ix.tasks.map(function (t) { return !task || t.toLowerCase().indexOf(task) >= 0; });
    var out = [];
    for (var i = 0; i < N; i++) {
      var r = ix.r[i];
      if ((rmin !== null || rmax !== null) && r === null) continue;
      if (rmin !== null && r < rmin) continue;
      if (rmax !== null && r > rmax) continue;
      if (!finish.has(ix.f[i]) || !taskOk[ix.t[i]]) continue;
      out.push(i);
    }
    return out;
  }

  // -- loading episodes ---------------------------------------------------------------------------------------

  function remember(data) {
    Object.keys(data.pieces || {}).forEach(function (k) { pieces.set(Number(k), data.pieces[k]); });
    data.episodes.forEach(function (e) { cache.delete(e.i); cache.set(e.i, e); });
    while (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value);
  }

  function chunkOf(i) {
    var lo = 0, hi = boot.chunks.length - 1;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (boot.chunks[mid] <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  var waiting = new Map();
  window.tgChunk = function (c, data) {
    var w = waiting.get(c);
    if (w) { waiting.delete(c); w(data); }
  };

  function loadChunk(c) {
    if (boot.mode === "inline") {
      var node = document.getElementById("tg-chunk-" + c);
      return node ? Promise.resolve(JSON.parse(node.textContent)) : Promise.reject(new Error("chunk " + c + " is missing"));
    }
    return new Promise(function (resolve, reject) {
      waiting.set(c, resolve);
      var s = document.createElement("script");
      s.nonce = NONCE;
      s.src = boot.chunkBase + "chunk-" + ("0000" + c).slice(-5) + ".js";
      s.onerror = function () {
        waiting.delete(c);
        reject(new Error("cannot load " + s.src + ": keep the folder " + boot.chunkBase + " beside this page"));
      };
      s.onload = function () { s.remove(); };
      document.head.appendChild(s);
    });
  }

  // The episodes `ids`, from the cache or loaded; each answer is picked from as it arrives, so the cache's bound
  // cannot drop an episode of this page while the other chunks of the page load.
  function load(ids) {
    var got = new Map();
    var missing = ids.filter(function (i) {
      if (cache.has(i)) { got.set(i, cache.get(i)); return false; }
      return true;
    });
    var wanted = new Set(missing);
    var jobs = [];
    if (boot.mode === "server") {
      for (var k = 0; k < missing.length; k += 50) {
        jobs.push(fetch("api/episodes?ids=" + missing.slice(k, k + 50).join(","), { credentials: "same-origin" })
          .then(function (r) {
            if (!r.ok) return r.json().then(function (d) { throw new Error(d.error || r.statusText); });
            return r.json();
          }));
      }
    } else {
      Array.from(new Set(missing.map(chunkOf))).forEach(function (c) { jobs.push(loadChunk(c)); });
    }
    return Promise.all(jobs.map(function (job) {
      return job.then(function (data) {
        remember(data);
        data.episodes.forEach(function (e) { if (wanted.has(e.i)) got.set(e.i, e); });
      });
    })).then(function () { return got; });
  }

  // -- drawing an episode ---------------------------------------------------------------------------------

  function badge(text, cls) { return el("span", "badge " + (cls || ""), text); }

  function rewardClass(r) {
    if (r === null || r === undefined) return "r-nan";
    return r > 0 ? "r-pos" : r < 0 ? "r-neg" : "r-zero";
  }

  function drawCall(call) {
    var box = el("div", "call");
    var head = el("div", "call-head");
    head.appendChild(el("span", "arrow", "\u21e2 tool call "));
    head.appendChild(el("code", "fn", call.name));
    if (call.id) head.appendChild(el("span", "dim", "  id " + call.id));
    if (call.parsed) head.appendChild(el("span", "dim", " \u00b7 read from the text above"));
    box.appendChild(head);
    if (call.code !== null && call.code !== undefined) box.appendChild(el("pre", "code", call.code));
    if (call.args !== null && call.args !== undefined) box.appendChild(el("pre", "args", call.args));
    return box;
  }

  function drawTurn(t) {
    var role = t.role;
    var box = el(role === "system" ? "details" : "div", "turn role-" + (/^[a-z_]+$/.test(role) ? role : "other"));
    var head = el(role === "system" ? "summary" : "div", "turn-head");
    head.appendChild(el("span", "role", role === "tool" ? "\u21e0 tool result" : role));
    if (t.name) head.appendChild(el("code", "fn", t.name));
    if (t.call_id) head.appendChild(el("span", "dim", " for " + t.call_id));
    if (t.cut) head.appendChild(badge("cut at max tokens", "warn"));
    box.appendChild(head);
    if (t.content !== "" || !t.calls.length) {
      var body = el("pre", "text" + (role === "tool" && /^error:/.test(t.content) ? " tool-error" : ""), t.content);
      box.appendChild(body);
    }
    t.calls.forEach(function (c) { box.appendChild(drawCall(c)); });
    if (t.extra) {
      var more = el("details", "extra");
      more.appendChild(el("summary", null, "other fields"));
      more.appendChild(el("pre", "args", t.extra));
      box.appendChild(more);
    }
    return box;
  }

  function tokenColor(mode, masked, logp, adv, scale) {
    if (mode === "none" || !masked) return "";
    if (mode === "logp") {
      if (logp === null) return "rgba(128,128,128,0.35)";
      var surprise = 1 - Math.exp(logp); // 0 for a sure token, towards 1 for an unlikely one
      return "rgba(37,99,235," + (0.08 + 0.72 * surprise).toFixed(3) + ")";
    }
    if (adv === null || adv === undefined || !scale) return "";
    var a = Math.min(1, Math.abs(adv) / scale);
    return adv > 0 ? "rgba(22,163,74," + (0.12 + 0.6 * a).toFixed(3) + ")" : adv < 0 ? "rgba(220,38,38," + (0.12 + 0.6 * a).toFixed(3) + ")" : "";
  }

  var groupStats = ix.groups.map(function () { return { sum: 0, n: 0, all: 0 }; });
  for (var gi = 0; gi < N; gi++) {
    var gs = groupStats[ix.g[gi]];
    gs.all++;
    if (ix.r[gi] !== null) { gs.sum += ix.r[gi]; gs.n++; }
  }

  var advScale = 0;
  (ix.a || []).forEach(function (a) { if (a !== null && Math.abs(a) > advScale) advScale = Math.abs(a); });

  function drawTokens(e, mode) {
    var tk = e.tokens;
    var box = el("details", "tokens");
    box.open = true;
    var train = e.train;
    var sum = el("summary", null, "response tokens: " + tk.ids.length + " (" + tk.mask.filter(Boolean).length +
      " sampled)" + (train ? " \u00b7 advantage " + (Array.isArray(train.advantage) ? "per token" : fmt(train.advantage)) +
      (train.passes ? " \u00b7 " + train.passes + " update pass" + (train.passes > 1 ? "es" : "") : "") : ""));
    box.appendChild(sum);
    var legend = {
      advantage: "colour: the advantage the update gave each sampled token (green > 0, red < 0, stronger = larger |A| in this file)",
      logp: "colour: how unlikely the sampler found each token (darker blue = lower behaviour probability)",
      none: "no colour"
    }[mode] || "";
    box.appendChild(el("p", "legend", legend + " \u00b7 grey italic: tool and template tokens (not trained)" +
      (train ? " \u00b7 boxed: cut by the clip in an update pass (orange: ratio above the window, A > 0; " +
        "purple: below it, A < 0; crimson: dual clip)" : "") + " \u00b7 hover a token for its numbers"));
    var clipKind = new Map();
    if (train) ["high", "low", "dual"].forEach(function (k) { train.clip[k].forEach(function (p) { clipKind.set(p, k); }); });
    var flow = el("div", "tok-flow");
    for (var p = 0; p < tk.ids.length; p++) {
      var id = tk.ids[p];
      var text = pieces.has(id) ? pieces.get(id) : "\u27e8" + id + "\u27e9";
      var masked = tk.mask[p] === 1;
      var adv = train ? (Array.isArray(train.advantage) ? train.advantage[p] : train.advantage) : null;
      var span = el("span", "tok" + (masked ? " sampled" : " context"), text === "" ? "\u2205" : text.replace(/\n/g, "\u21b5\n"));
      var ck = clipKind.get(p);
      if (ck) span.className += " clip clip-" + ck;
      var bg = tokenColor(mode, masked, tk.logp[p], adv, advScale);
      if (bg) span.style.backgroundColor = bg;
      span.title = "#" + p + " id " + id + (masked ? " \u00b7 log-prob " + fmt(tk.logp[p], 4) +
        (tk.logp[p] === null ? "" : " (p " + fmt(Math.exp(tk.logp[p]), 3) + ")") : " \u00b7 not sampled (tool or template)") +
        (masked && adv !== null && adv !== undefined ? " \u00b7 advantage " + fmt(adv, 4) : "") +
        (ck ? " \u00b7 clipped (" + ck + ")" : "");
      flow.appendChild(span);
    }
    box.appendChild(flow);
    return box;
  }

  function drawBody(e) {
    var body = document.createDocumentFragment();
    if (e.error) body.appendChild(el("pre", "error", "error: " + e.error));
    var facts = [];
    if (e.env) facts.push("env " + e.env);
    if (e.breakdown.length) facts.push("reward " + e.breakdown.map(function (kv) { return kv[0] + " " + fmt(kv[1]); }).join(", "));
    if (e.tools.length) facts.push("tools offered: " + e.tools.join(", "));
    facts.push("tokens " + e.prompt_tokens + " prompt + " + (e.tokens ? e.tokens.ids.length : "?") + " response");
    body.appendChild(el("p", "facts", facts.join(" \u00b7 ")));
    var chat = el("div", "chat");
    e.turns.forEach(function (t) { chat.appendChild(drawTurn(t)); });
    body.appendChild(chat);
    if (e.tokens && boot.tokens) body.appendChild(drawTokens(e, $("f-color").value));
    var more = el("details", "meta");
    more.appendChild(el("summary", null, "metadata and timings"));
    more.appendChild(el("pre", "args", e.meta));
    if (e.timings.length) more.appendChild(el("pre", "args", e.timings.map(function (kv) { return kv[0] + " " + fmt(kv[1], 4); }).join("\n")));
    body.appendChild(more);
    return body;
  }

  function summaryLine(i) {
    var s = el("summary", "ep-head");
    s.appendChild(el("span", "num", "#" + i));
    s.appendChild(badge("reward " + fmt(ix.r[i]), rewardClass(ix.r[i])));
    s.appendChild(badge(ix.finishes[ix.f[i]] || "(none)", "finish"));
    s.appendChild(el("span", "task", ix.tasks[ix.t[i]]));
    s.appendChild(el("span", "dim", ix.n[i] + " turn" + (ix.n[i] === 1 ? "" : "s") + " \u00b7 " + ix.c[i] + " tool result" +
      (ix.c[i] === 1 ? "" : "s") + " \u00b7 " + ix.m[i] + "/" + ix.k[i] + " tokens sampled"));
    if (ix.a && ix.a[i] !== null) s.appendChild(badge("adv " + fmt(ix.a[i]), rewardClass(ix.a[i])));
    if (ix.x && ix.x[i]) s.appendChild(badge(ix.x[i] + " clipped", "clipped"));
    if (ix.e[i]) s.appendChild(badge("error", "r-neg"));
    return s;
  }

  // -- the list -------------------------------------------------------------------------------------------

  function render() {
    var seq = ++renderSeq;
    var list = $("list");
    list.dataset.state = "loading";
    list.dataset.renders = String(seq);
    var ids = filtered();
    var size = boot.pageSize;
    var pages = Math.max(1, Math.ceil(ids.length / size));
    if (page >= pages) page = pages - 1;
    var shown = ids.slice(page * size, page * size + size);
    var groupsShown = new Set(ids.map(function (i) { return ix.g[i]; })).size;
    $("count").textContent = ids.length + " of " + N + " episodes (" + groupsShown + " groups) \u00b7 page " + (page + 1) + " of " + pages;
    $("prev").disabled = page === 0;
    $("next").disabled = page >= pages - 1;
    list.textContent = "";
    if (!shown.length) {
      list.appendChild(el("p", "empty", N ? "no episode matches the filters" : "this file holds no episodes"));
      list.dataset.state = "ready";
      list.dataset.shown = "0";
      return;
    }
    var bodies = new Map();
    var section = null, lastGroup = -1;
    shown.forEach(function (i) {
      if (ix.g[i] !== lastGroup) {
        lastGroup = ix.g[i];
        section = el("section", "group");
        var st = groupStats[lastGroup];
        var h = el("h2", null);
        h.appendChild(el("span", "dim", "group "));
        showText(h, ix.groups[lastGroup]);
        h.appendChild(el("span", "dim", " \u00b7 mean reward " + fmt(st.n ? st.sum / st.n : null) + " over " + st.n +
          " episode" + (st.n === 1 ? "" : "s") + (st.all > st.n ? " (" + (st.all - st.n) + " without a reward)" : "")));
        section.appendChild(h);
        list.appendChild(section);
      }
      var card = el("details", "ep");
      card.open = true;
      card.dataset.i = String(i);
      card.dataset.reward = ix.r[i] === null ? "nan" : String(ix.r[i]);
      card.appendChild(summaryLine(i));
      var body = el("div", "ep-body", "loading\u2026");
      card.appendChild(body);
      bodies.set(i, body);
      section.appendChild(card);
    });
    list.dataset.shown = String(shown.length);
    load(shown).then(function (got) {
      if (seq !== renderSeq) return;
      bodies.forEach(function (body, i) {
        body.textContent = "";
        var e = got.get(i);
        if (e) body.appendChild(drawBody(e)); else body.appendChild(el("p", "error", "episode not loaded"));
      });
      list.dataset.state = "ready";
    }, function (err) {
      if (seq !== renderSeq) return;
      bodies.forEach(function (body) { body.textContent = ""; body.appendChild(el("p", "error", String(err.message || err))); });
      list.dataset.state = "error";
    });
  }

  function refilter() { page = 0; render(); }

  header();
  ["f-rmin", "f-rmax", "f-task"].forEach(function (id) { $(id).addEventListener("input", refilter); });
  $("f-finish").addEventListener("change", refilter);
  $("f-color").addEventListener("change", render);
  $("filters").addEventListener("submit", function (ev) { ev.preventDefault(); });
  $("f-reset").addEventListener("click", function () {
    $("filters").reset();
    document.querySelectorAll(".f-finish-box").forEach(function (b) { b.checked = true; });
    refilter();
  });
  $("prev").addEventListener("click", function () { page = Math.max(0, page - 1); render(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", function () { page += 1; render(); window.scrollTo(0, 0); });
  render();
})();
