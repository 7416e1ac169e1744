// Evident's web page: sign in with a token, upload PDFs, ask, and open cited pages.
"use strict";

const $ = (id) => document.getElementById(id);
let token = localStorage.getItem("evident-token") || "";

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + token }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return response;
}

function text(el, value) { el.textContent = value; return el; }
function make(tag, cls, value) { const el = document.createElement(tag); if (cls) el.className = cls; if (value !== undefined) el.textContent = value; return el; }

async function signIn(candidate) {
  token = candidate;
  try {
    await api("/v1/documents");
  } catch (e) {
    text($("signin-error"), e.status === 401 ? "That token is not valid here." : "Cannot reach the appliance: " + e.message);
    return false;
  }
  localStorage.setItem("evident-token", token);
  $("signin-panel").hidden = true;
  $("app").hidden = false;
  text($("whoami"), "signed in");
  await Promise.all([loadDocuments(), loadProfiles()]);
  return true;
}

function signOut() {
  localStorage.removeItem("evident-token");
  token = "";
  location.reload();
}

async function loadDocuments() {
  const { documents } = await (await api("/v1/documents")).json();
  const list = $("docs");
  list.replaceChildren();
  for (const d of documents) {
    const li = make("li");
    li.dataset.id = d.id;
    li.dataset.indexed = d.indexed;
    li.append(make("span", "title", d.title || d.file_name), make("span", "pages", d.pages + " pages" + (d.indexed ? "" : " (indexing)")));
    list.append(li);
  }
  if (!documents.length) list.append(make("li", "muted", "No documents yet: upload a PDF."));
}

async function loadProfiles() {
  const data = await (await api("/v1/profiles")).json();
  const select = $("profile");
  const compare = $("compare");
  select.replaceChildren();
  compare.replaceChildren(make("option", null, "nothing"));
  compare.firstChild.value = "";
  for (const p of data.profiles) {
    const option = make("option", null, p.name + (p.description ? " — " + p.description : ""));
    option.value = p.name;
    option.selected = p.name === data.default;
    select.append(option);
    const other = make("option", null, p.name);
    other.value = p.name;
    compare.append(other);
  }
}

function progressBar(label) {
  const box = make("div", "upload");
  const caption = make("div", "muted", label);
  const bar = make("div", "progress");
  const fill = make("div");
  bar.append(fill);
  box.append(caption, bar);
  $("uploads").append(box);
  return { box, set: (fraction, words) => { fill.style.width = Math.round(fraction * 100) + "%"; text(caption, label + ": " + words); } };
}

function uploadOne(file) {
  const progress = progressBar(file.name);
  return new Promise((resolve) => {
    const form = new FormData();
    form.append("file", file, file.name);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/documents");
    xhr.setRequestHeader("Authorization", "Bearer " + token);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) progress.set(e.loaded / e.total * 0.2, "uploading"); };
    xhr.onerror = () => { progress.set(0, "failed: the connection dropped"); progress.box.dataset.state = "failed"; resolve(); };
    xhr.onload = async () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
      if (xhr.status === 200 && body.already_present) {
        progress.set(1, "already in the library");
        progress.box.dataset.state = "done";
      } else if (xhr.status === 202) {
        await followJob(body.job, progress);
      } else {
        progress.set(0, "failed: " + ((body.error && body.error.message) || xhr.status));
        progress.box.dataset.state = "failed";
      }
      await loadDocuments();
      resolve();
    };
    xhr.send(form);
  });
}

async function followJob(job, progress) {
  for (;;) {
    const pages = Math.max(job.pages, 1);
    if (job.state === "reading") progress.set(0.2 + 0.3 * job.pages_read / pages, `reading page ${job.pages_read} of ${job.pages}` + (job.pages_ocr ? ` (${job.pages_ocr} by OCR)` : ""));
    if (job.state === "indexing") progress.set(0.5 + 0.5 * job.pages_indexed / pages, `indexing page ${job.pages_indexed} of ${job.pages}`);
    if (job.state === "enriching") progress.set(0.95, `enriching: ${job.pages_enriched} page calls made`);
    if (job.state === "done") {
      const notes = (job.notices || []).join(" ");
      progress.set(1, `ready (${job.pages} pages)` + (notes ? " — " + notes : ""));
      progress.box.dataset.state = "done";
      return;
    }
    if (job.state === "failed") { progress.set(0, "failed: " + job.error); progress.box.dataset.state = "failed"; return; }
    await new Promise((r) => setTimeout(r, 700));
    job = (await (await api("/v1/jobs/" + encodeURIComponent(job.id))).json()).job;
  }
}

// Reads server-sent events from a fetch response, calling onEvent(name, data).
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (data) onEvent(name, JSON.parse(data));
    }
  }
}

async function ask(question, profile, compareWith) {
  $("ask").disabled = true;
  $("result").hidden = true;
  $("result-2").hidden = true;
  text($("ask-error"), "");
  $("stages").replaceChildren();
  const running = {};
  try {
    const response = await api("/v1/query", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ question, profile, stream: true }),
    });
    await readEvents(response, (name, data) => {
      if (name === "stage") {
        if (data.status === "started") {
          running[data.stage] = $("stages").appendChild(make("li", null, `${data.stage} (${data.plugin}) …`));
        } else if (running[data.stage]) {
          text(running[data.stage], `${data.stage} (${data.plugin}) ${(data.ms / 1000).toFixed(1)} s`).className = "done";
        }
      } else if (name === "answer") {
        showAnswer(data, "");
      } else if (name === "error") {
        text($("ask-error"), data.error.message);
      }
    });
    // The same question through a second profile, after the first (the appliance may run one
    // question at a time), shown beside it.
    if (compareWith) {
      const li = $("stages").appendChild(make("li", null, `${compareWith} …`));
      const response = await api("/v1/query", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ question, profile: compareWith }),
      });
      const other = await response.json();
      text(li, `${compareWith} ${(other.ms / 1000).toFixed(1)} s`).className = "done";
      showAnswer(other, "-2");
    }
  } catch (e) {
    text($("ask-error"), e.message);
  } finally {
    $("ask").disabled = false;
  }
}

function showAnswer(r, suffix) {
  const $s = (id) => $(id + suffix);
  text($s("answer"), r.answerable ? r.answer : "Not answerable from the documents.");
  text($s("notice"), r.notice || "");
  $s("notice").hidden = !r.notice;
  const list = $s("citations");
  list.replaceChildren();
  r.evidence.forEach((e, i) => {
    const li = make("li");
    const link = make("a", "citation", `[${i + 1}] ${e.title}, page ${e.page}`);
    link.href = "#viewer";
    link.dataset.index = i + 1;
    link.addEventListener("click", (ev) => { ev.preventDefault(); openCitation(e, i + 1); });
    li.append(link, make("div", "snippet", e.snippet));
    list.append(li);
  });
  text($s("cost"), `${r.profile}: ${(r.ms / 1000).toFixed(1)} s, ${r.llm_calls} model calls, ${r.prompt_tokens + r.completion_tokens} tokens`);
  $s("result").hidden = false;
}

async function openCitation(e, n) {
  const img = $("page-image");
  img.removeAttribute("data-loaded");
  text($("viewer-title"), `[${n}] ${e.title}, page ${e.page}`);
  text($("viewer-snippet"), e.snippet);
  $("viewer").hidden = false;
  try {
    const blob = await (await api(e.image_url)).blob();
    if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
    img.onload = () => { img.dataset.loaded = "true"; };
    img.src = URL.createObjectURL(blob);
    $("viewer").scrollIntoView({ behavior: "smooth" });
  } catch (err) {
    text($("viewer-snippet"), "The page image could not be shown: " + err.message);
  }
}

$("signin-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value.trim()); });
$("signout").addEventListener("click", signOut);
$("upload-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const files = Array.from($("file").files);
  $("upload").disabled = true;
  for (const f of files) await uploadOne(f);
  $("upload").disabled = false;
  $("file").value = "";
});
$("ask-form").addEventListener("submit", (e) => { e.preventDefault(); ask($("question").value.trim(), $("profile").value, $("compare").value); });
if (token) signIn(token);
