// The samples browser: filters over the columnar index, rows inflated from gzipped chunks for the page shown.
(() => {
  "use strict";
  const PER_PAGE = 50;
  const root = document.querySelector("#samples .fm-samples");
  const index = JSON.parse(document.getElementById("fm-samples-index").textContent);
  const n = index.t.length;
  const taskNames = [...new Set(index.tasks.map((t) => t[1]))];
  const taskName = index.tasks.map((t) => taskNames.indexOf(t[1]));
  const taskRun = index.tasks.map((t) => t[0]);
  const judged = index.j.some((v) => v !== null);
  const judgeValues = [...new Set(index.j.filter((v) => v !== null))].sort((a, b) => a - b);
  const chunks = new Map();
  const state = { run: -1, task: -1, status: -1, rule: -1, judge: "", doc: "", page: 0 };
  let shown = [];
  let token = 0;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function show(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function select(label, options, key) {
    const wrap = el("label", "fm-filter", label + " ");
    const s = el("select");
    s.dataset.filter = key;
    s.append(new Option("all", key === "judge" ? "" : "-1"));
    options.forEach(([value, text]) => s.append(new Option(text, String(value))));
    s.addEventListener("change", () => {
      state[key] = key === "judge" ? s.value : Number(s.value);
      state.page = 0;
      update();
    });
    wrap.append(s);
    return wrap;
  }

  const filters = el("div", "fm-filters");
  if (index.runs.length > 1) filters.append(select("run", index.runs.map((r, i) => [i, r]), "run"));
  filters.append(select("task", taskNames.map((t, i) => [i, t]), "task"));
  filters.append(select("extraction rule", index.rules.map((r, i) => [i, r || "(none)"]), "rule"));
  if (judged) {
    filters.append(select("judge score", [...judgeValues.map((v) => [v, String(v)]), ["none", "not scored"]], "judge"));
  }
  const search = el("input", "fm-search");
  search.type = "search";
  search.placeholder = "doc id contains";
  search.addEventListener("input", () => {
    state.doc = search.value;
    state.page = 0;
    update();
  });
  filters.append(search);
  const statusBar = el("div", "fm-statuses");
  const statusButtons = [];
  [["all", -1], ...index.statuses.map((s, i) => [s, i])].forEach(([name, id]) => {
    const b = el("button", "fm-status-button", name);
    b.type = "button";
    b.dataset.status = name;
    b.addEventListener("click", () => {
      state.status = id;
      state.page = 0;
      update();
    });
    statusButtons.push([b, id, name]);
    statusBar.append(b);
  });
  const notices = el("div", "fm-notices");
  index.notices.forEach((line) => notices.append(el("p", "fm-notice", line)));
  const count = el("p", "fm-count");
  const pager = el("div", "fm-pager");
  const prev = el("button", "fm-prev", "previous");
  const next = el("button", "fm-next", "next");
  const pageLabel = el("span", "fm-page");
  prev.type = next.type = "button";
  prev.addEventListener("click", () => { state.page -= 1; render(); });
  next.addEventListener("click", () => { state.page += 1; render(); });
  pager.append(prev, pageLabel, next);
  const list = el("div", "fm-rows");
  root.append(filters, statusBar, notices, count, pager, list);

  function keep(i, statusToo) {
    const t = index.t[i];
    if (state.run >= 0 && taskRun[t] !== state.run) return false;
    if (state.task >= 0 && taskName[t] !== state.task) return false;
    if (statusToo && state.status >= 0 && index.s[i] !== state.status) return false;
    if (state.rule >= 0 && index.r[i] !== state.rule) return false;
    if (state.judge === "none" && index.j[i] !== null) return false;
    if (state.judge !== "" && state.judge !== "none" && index.j[i] !== Number(state.judge)) return false;
    return !state.doc || index.d[i].includes(state.doc);
  }

  function update() {
    shown = [];
    const byStatus = new Array(index.statuses.length).fill(0);
    let all = 0;
    for (let i = 0; i < n; i++) {
      if (!keep(i, false)) continue;
      all++;
      byStatus[index.s[i]]++;
      if (state.status < 0 || index.s[i] === state.status) shown.push(i);
    }
    statusButtons.forEach(([b, id, name]) => {
      b.textContent = `${name} (${id < 0 ? all : byStatus[id]})`;
      b.classList.toggle("fm-active", id === state.status);
    });
    count.textContent = `${shown.length} of ${n} samples`;
    render();
  }

  async function inflate(k) {
    if (!chunks.has(k)) {
      const text = document.getElementById("fm-samples-chunk-" + k).textContent;
      const bin = atob(text);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      chunks.set(k, new Response(stream).text().then(JSON.parse));
    }
    return chunks.get(k);
  }

  async function render() {
    const pages = Math.max(1, Math.ceil(shown.length / PER_PAGE));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    const ids = shown.slice(state.page * PER_PAGE, (state.page + 1) * PER_PAGE);
    const mine = ++token;
    const need = [...new Set(ids.map((i) => Math.floor(i / index.chunk)))];
    const loaded = new Map(await Promise.all(need.map(async (k) => [k, await inflate(k)])));
    if (mine !== token) return;
    pageLabel.textContent = `page ${state.page + 1} of ${pages}`;
    prev.disabled = state.page === 0;
    next.disabled = state.page >= pages - 1;
    list.replaceChildren(...ids.map((i) => row(i, loaded.get(Math.floor(i / index.chunk))[i % index.chunk])));
    root.dataset.ready = "1";
  }

  function field(parent, label, value, cls) {
    if (value === undefined || value === null || value === "") return;
    const f = el("div", "fm-field " + (cls || ""));
    f.append(el("span", "fm-label", label), el("pre", "fm-value", show(value)));
    parent.append(f);
  }

  function row(i, r) {
    const [run, task] = index.tasks[index.t[i]];
    const status = index.statuses[index.s[i]];
    const box = el("article", "fm-row fm-" + status);
    const head = el("div", "fm-head");
    head.append(el("span", "fm-badge", status), el("span", "fm-doc", r.doc_id));
    head.append(el("span", "fm-where", (index.runs.length > 1 ? index.runs[run] + " / " : "") + task));
    if (r.extract_rule) head.append(el("span", "fm-rule", "rule: " + r.extract_rule));
    box.append(head);
    const body = el("div", "fm-body");
    const pics = el("div", "fm-images");
    if (r.thumbs) {
      r.thumbs.forEach((uri, k) => {
        const img = el("img", "fm-thumb");
        img.src = uri;
        img.alt = (r.images || [])[k] || "image";
        pics.append(img);
      });
    } else {
      (r.images || []).forEach((ref) => pics.append(el("span", "fm-ref", ref)));
    }
    if (pics.childElementCount) body.append(pics);
    const text = el("div", "fm-text");
    const prompt = el("div", "fm-prompt");
    (r.prompt || []).forEach((m) => {
      const turn = el("div", "fm-turn");
      turn.append(el("span", "fm-role", m.role), el("pre", "fm-content", show(m.content)));
      prompt.append(turn);
    });
    if (prompt.childElementCount) text.append(prompt);
    field(text, "response", r.response, "fm-response");
    if (r.continuations) {
      const scored = r.continuations.map((c, k) => `${c}: ${r.logprobs ? r.logprobs[k] : ""}`).join("\n");
      field(text, "options (log-likelihood)", scored);
    }
    field(text, "extracted", r.extracted);
    field(text, "target", r.target);
    if (r.metrics) {
      field(text, "metrics", Object.entries(r.metrics).map(([k, v]) => `${k} = ${show(v)}`).join("\n"));
    }
    (r.judgments || []).forEach((j) => {
      const verdict = j.error ? `error: ${j.error}` : `${show(j.value)}`;
      field(text, `judge ${j.judge} (${j.use}): ${verdict}`, j.raw === null ? "" : j.raw, "fm-judge");
    });
    if (r.failed) field(text, "failed" + (r.failure_kind ? ` (${r.failure_kind})` : ""), r.failed, "fm-failure");
    body.append(text);
    box.append(body);
    return box;
  }

  if (!n) root.append(el("p", "fm-empty", "No samples."));
  update();
})();
