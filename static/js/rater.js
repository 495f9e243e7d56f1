// Rater page: instructions, practice questions with feedback (never sent), then the study's questions,
// each drawn by the widget its kind names (engine/kinds.py; static/js/widgets/*.js register themselves
// in window.ProximaWidgets before this file runs). Each answer goes into an outbox (localStorage) before it is sent and is retried with the
// same token until the server has it: the server stores a token's answer once, and a 409
// already_answered means an earlier try got through. No inline scripts: configuration comes from data-*.
(function () {
  "use strict";
  const root = document.getElementById("study");
  const WIDGETS = window.ProximaWidgets || {};
  if (!root) return;
  // the page's texts in its study's language (webapp/i18n.py renders the catalogue into data-texts):
  // t(key, {name: value}) fills a text's {name}s; tn() picks a plural text (key.one, key.other ...) for n
  const catalogue = JSON.parse(root.dataset.texts);
  const fill = (text, values) => text.replace(/\{(\w+)\}/g, (m, name) => (values && name in values ? String(values[name]) : m));
  const t = (key, values) => fill(catalogue.texts[key], values);
  function tn(key, n, values, type) {
    const category = new Intl.PluralRules(catalogue.language, { type: type || "cardinal" }).select(n);
    const chosen = key + "." + category in catalogue.texts ? key + "." + category : key + ".other";
    return t(chosen, Object.assign({ n: n }, values));
  }
  // a refusal in the page's language, by its code (the API's own messages are English, for programs)
  const ERROR_TEXTS = { session_replaced: "error_session_replaced", rater_forgotten: "error_rater_forgotten",
    study_closed: "error_study_closed", study_not_running: "error_study_closed",
    storage_unavailable: "error_storage_unavailable" };
  const errorText = (error) => (!error ? t("no_answer") : ERROR_TEXTS[error.code] ? t(ERROR_TEXTS[error.code])
    : t("error_other", { code: error.code }));
  const nextUrl = root.dataset.nextUrl;
  const answerUrl = root.dataset.answerUrl;
  const finishUrl = root.dataset.finishUrl;
  const total = root.dataset.total ? Number(root.dataset.total) : null;
  const practice = JSON.parse(root.dataset.practice || "[]");
  const outboxKey = "proxima-outbox:" + root.dataset.study;
  const LOCKOUT_MS = 250;
  const $ = (id) => document.getElementById(id);
  const statusEl = $("status");
  const offlineEl = $("offline");
  const feedbackEl = $("feedback");
  const skipRow = $("skip-row");  // present only in studies that allow "can't decide"
  let current = null;      // the question on screen
  let practiceIndex = -1;  // >= 0 while practising
  let shownAt = 0;
  let busy = true;
  let answered = Number(root.dataset.answered || 0);

  // The tags and attributes an HTML item may use (the server's allow-list, workers/studies.py).
  const HTML_TAGS = new Set(("p br hr div span b strong i em u s small mark sub sup code pre kbd q blockquote cite " +
    "abbr h1 h2 h3 h4 h5 h6 ul ol li dl dt dd table thead tbody tfoot tr th td caption ruby rt rp bdi bdo wbr del " +
    "ins figure figcaption section article header footer").split(" "));
  const HTML_ATTRIBUTES = ["class", "title", "lang", "dir", "colspan", "rowspan"];
  const HTML_DROPPED = new Set(["script", "style", "template", "noscript", "iframe", "object", "svg", "math", "title"]);

  function copyAllowed(from, to) {
    from.childNodes.forEach((node) => {
      if (node.nodeType === Node.TEXT_NODE) {
        to.appendChild(document.createTextNode(node.textContent));
      } else if (node.nodeType === Node.ELEMENT_NODE) {
        const tag = node.tagName.toLowerCase();
        if (HTML_DROPPED.has(tag)) return;  // neither the element nor its content
        if (!HTML_TAGS.has(tag)) { copyAllowed(node, to); return; }  // keep the text, drop the tag
        const copy = document.createElement(tag);
        HTML_ATTRIBUTES.forEach((name) => { if (node.hasAttribute(name)) copy.setAttribute(name, node.getAttribute(name)); });
        copyAllowed(node, copy);
        to.appendChild(copy);
      }
    });
  }

  function renderItem(container, item) {
    container.replaceChildren();
    container.dataset.handle = item.handle;  // a name for this question only: no index or id reaches the page
    let el;
    if (item.kind === "color") {
      el = document.createElement("span");
      el.className = "swatch big";
      el.style.backgroundColor = item.color;
      el.setAttribute("role", "img");
      el.setAttribute("aria-label", t("colour_label", { color: item.color }));
    } else if (item.kind === "text") {
      el = document.createElement("span");
      el.className = "text-item";
      el.textContent = item.text;
    } else if (item.kind === "html") {
      // sanitised on the server (nh3); rebuilt here from an inert parse, tag by allowed tag, so nothing
      // but formatting reaches the page (and the page's CSP runs no inline script anyway)
      el = document.createElement("div");
      el.className = "html-item";
      const parsed = new DOMParser().parseFromString(item.html, "text/html");
      copyAllowed(parsed.body, el);
    } else if (item.kind === "image") {
      el = document.createElement("img");
      el.src = item.url;
      el.alt = item.alt || (item.id ? item.id : t("image_label"));  // an id in the researcher's preview only
    } else {
      el = document.createElement(item.kind === "audio" ? "audio" : "video");
      el.src = item.url;
      el.controls = true;
      el.preload = "auto";
      el.setAttribute("aria-label", item.id || t(item.kind === "audio" ? "sound_label" : "video_label"));
    }
    container.appendChild(el);
  }

  const widgets = () => Object.values(WIDGETS).filter((w) => w.el);
  const widgetOf = (question) => WIDGETS[question.widget];
  function hideWidgets() { widgets().forEach((w) => w.hide()); }

  function prefetch(question) {  // warm the cache so the next screen appears at once
    if (!question || !widgetOf(question)) return;
    widgetOf(question).items(question).forEach((item) => {
      if (item.kind === "image") { const img = new Image(); img.src = item.url; }
    });
  }

  function setProgress(n) {
    answered = n;
    $("answered").textContent = String(n);
    const bar = $("progress");
    bar.setAttribute("aria-valuenow", String(n));
    $("progress-fill").style.width = total ? Math.min(100, (100 * n) / total) + "%" : "0";
  }

  function show(question) {
    current = question;
    hideWidgets();
    feedbackEl.hidden = true;
    if (skipRow) skipRow.hidden = !question || practiceIndex >= 0;
    if (!question) {
      statusEl.textContent = t("no_more_questions");
      return;
    }
    if (question.progress) setProgress(question.progress.answered);
    const widget = widgetOf(question);
    if (!widget) {
      current = null;
      statusEl.textContent = t("unknown_widget");
      return;
    }
    widget.show(question);
    statusEl.textContent = "";
    setDisabled(true);
    busy = true;
    // a short lock-out: a double click on the previous screen must not answer this one
    setTimeout(() => { shownAt = performance.now(); busy = false; setDisabled(false); }, LOCKOUT_MS);
  }

  function setDisabled(disabled) {
    widgets().forEach((w) => w.setDisabled(disabled));
    if (skipRow) $("skip").disabled = disabled;
  }

  async function call(url, options) {
    const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    const retryAfter = Number(response.headers.get("Retry-After")) || 1;
    return { ok: response.ok, status: response.status, body: body, retryAfter: retryAfter };
  }

  function handleError(r) {
    const error = r.body && r.body.error;
    if (error && error.finish_url) { window.location.assign(error.finish_url); return; }
    if (error && error.code === "consent_required") { window.location.reload(); return; }
    current = null;
    hideWidgets();
    if (skipRow) skipRow.hidden = true;
    statusEl.textContent = errorText(error);
  }

  async function loadNext() {
    let r;
    try {
      r = await call(nextUrl, { headers: { Accept: "application/json" } });
    } catch (e) {
      offlineEl.hidden = false;
      setTimeout(loadNext, 2000);
      return;
    }
    offlineEl.hidden = true;
    if (r.ok) return show(r.body.question);
    if (r.status === 429) { setTimeout(loadNext, 1000 * r.retryAfter); return; }  // too fast: ask again soon
    handleError(r);
  }

  // ---- practice: checked here, never sent ----
  function startPractice() {
    $("start").closest(".start").hidden = true;  // started: the instructions stay above, the button goes
    practiceIndex = 0;
    showPractice();
  }

  function showPractice() {
    if (practiceIndex >= practice.length) {
      practiceIndex = -1;
      $("practice-banner").hidden = true;
      startQuestions();
      return;
    }
    $("practice-banner").hidden = false;
    $("practice-n").textContent = String(practiceIndex + 1);
    show(practice[practiceIndex]);
    // the instructions stay above: on a phone the question would open below the screen
    $("practice-banner").scrollIntoView({ block: "start" });
  }

  function practiceFeedback(answer) {
    const q = practice[practiceIndex];
    const right = widgetOf(q).isRight(q, answer);
    hideWidgets();
    if (skipRow) skipRow.hidden = true;
    $("feedback-text").textContent = (t(right ? "practice_right" : "practice_wrong") + " " + (q.explanation || "")).trim();
    feedbackEl.className = "feedback " + (right ? "right" : "wrong");
    feedbackEl.hidden = false;
    $("feedback-next").focus();
  }

  function startQuestions() {
    $("intro").hidden = true;
    $("progress-box").hidden = false;
    setProgress(answered);
    statusEl.textContent = t("loading");
    flushOutbox().then((sent) => { if (!sent) loadNext(); });
  }

  // ---- answers ----
  function skip() {
    if (!current || !skipRow || practiceIndex >= 0) return;
    submit({ skip: true });
  }

  function submit(answer) {
    if (busy || !current) return;
    busy = true;
    setDisabled(true);
    if (practiceIndex >= 0) { practiceFeedback(answer); return; }
    const body = Object.assign({ token: current.token, response_ms: Math.round(performance.now() - shownAt) }, answer);
    try { localStorage.setItem(outboxKey, JSON.stringify(body)); } catch (e) { /* private mode: memory only */ }
    send(body);
  }

  function clearOutbox() { try { localStorage.removeItem(outboxKey); } catch (e) { /* ignore */ } }

  async function flushOutbox() {  // an answer left over from before a reload: send it first
    let body = null;
    try { body = JSON.parse(localStorage.getItem(outboxKey) || "null"); } catch (e) { body = null; }
    if (!body) return false;
    send(body);
    return true;
  }

  async function send(body) {
    for (let attempt = 0; ; attempt++) {
      let r;
      try {
        r = await call(answerUrl, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      } catch (e) {
        statusEl.textContent = t("connection_problem");
        if (attempt >= 1) offlineEl.hidden = false;
        await new Promise((res) => setTimeout(res, Math.min(5000, 500 * (attempt + 1))));
        continue;
      }
      offlineEl.hidden = true;
      if (r.status === 429) {  // too many answers at once: the answer stays in the outbox, sent again shortly
        statusEl.textContent = t("sending");
        await new Promise((res) => setTimeout(res, 1000 * r.retryAfter));
        continue;
      }
      const error = r.body && r.body.error;
      if (r.ok || (error && error.code === "already_answered")) {
        clearOutbox();
        if (!r.ok) { setProgress(answered + 1); return loadNext(); }
        setProgress(answered + 1);
        if (r.body.done) { window.location.assign(r.body.done.finish_url); return; }
        prefetch(r.body.next);
        return show(r.body.next);
      }
      clearOutbox();
      if (r.status === 410) return loadNext();  // expired question: take a fresh one
      return handleError(r);
    }
  }

  // A widget whose answer is one of the items it shows (pick, odd) calls ctx.oneChoice(this, {el, buttons,
  // offered, keys}) from its init: ``buttons[n]`` shows ``offered(q)[n]``, and a click on it or the key
  // ``keys[n]`` answers with that item (``keys`` may be a function: asked at each key press). It gets its ctx, el and buttons and the parts such widgets share
  // (hide, setDisabled, choose, keydown, isRight), and keeps its own items and show.
  function oneChoice(widget, { el, buttons, offered, keys }) {
    Object.assign(widget, {
      ctx: ctx, el: el, buttons: buttons,
      hide() { this.el.hidden = true; },
      setDisabled(disabled) { this.buttons.forEach((b) => (b.disabled = disabled)); },
      choose(n) { if (this.q) this.ctx.submit({ choice: offered(this.q)[n].handle }); },
      keydown(event) {
        const n = (typeof keys === "function" ? keys() : keys).indexOf(event.key);
        if (n < 0) return false;
        event.preventDefault();
        this.choose(n);
        return true;
      },
      isRight(q, answer) { return answer.choice === q.answer; },
    });
    buttons.forEach((b, n) => b.addEventListener("click", () => widget.choose(n)));
  }

  // each widget whose markup the page has: it draws its screens and hands its answers to submit()
  const ctx = { renderItem: renderItem, submit: submit, oneChoice: oneChoice, t: t, tn: tn };
  Object.values(WIDGETS).forEach((w) => w.init(ctx));
  if (skipRow) $("skip").addEventListener("click", skip);
  $("feedback-next").addEventListener("click", () => { practiceIndex += 1; showPractice(); });
  $("start").addEventListener("click", () => (practice.length ? startPractice() : startQuestions()));
  $("start").disabled = false;  // served disabled: a click before this script has run would do nothing
  // A key as the page's hints name it, whatever the rater's keyboard layout: Arabic-Indic and Persian
  // digits are the digits 0-9, and on a layout without Latin letters the key where S is is S.
  const DIGITS = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹"];
  function hintedKey(event) {
    for (const digits of DIGITS) {
      if (event.key.length === 1 && digits.includes(event.key)) return String(digits.indexOf(event.key));
    }
    if (event.code === "KeyS" && event.key.length === 1 && !/[a-z]/i.test(event.key)) return "s";
    return event.key;
  }
  document.addEventListener("keydown", (event) => {
    if (event.target && event.target.tagName === "TEXTAREA") return;
    if (!current || busy) return;
    const key = hintedKey(event);
    if (skipRow && (key === "s" || key === "S") && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault();
      skip();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    widgetOf(current).keydown(key === event.key ? event : { key: key, preventDefault: () => event.preventDefault() });
  });
  window.addEventListener("online", () => { offlineEl.hidden = true; });
  if (answered > 0) startQuestions();  // reload mid-study: straight back to the questions
  else $("start").focus();
})();
