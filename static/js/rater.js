// Rater page: instructions, practice questions with feedback (never sent), then triplet and rating
// questions. Each answer goes into an outbox (localStorage) before it is sent and is retried with the
// same token until the server has it: the server stores a token's answer once, and a 409
// already_answered means an earlier try got through. No inline scripts: configuration comes from data-*.
(function () {
  "use strict";
  const root = document.getElementById("study");
  const questionEl = document.getElementById("question");
  if (!root || !questionEl) return;
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
  const buttons = [$("left"), $("right")];
  const ratingEl = $("rating");
  const scaleButtons = $("scale-buttons");
  const sliderBox = $("scale-slider");
  const slider = $("slider");
  const sliderSubmit = $("slider-submit");
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
    container.dataset.index = item.index;
    let el;
    if (item.kind === "color") {
      el = document.createElement("span");
      el.className = "swatch big";
      el.style.backgroundColor = item.color;
      el.setAttribute("role", "img");
      el.setAttribute("aria-label", "colour " + item.id);
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
      el.alt = item.alt || item.id;
    } else {
      el = document.createElement(item.kind === "audio" ? "audio" : "video");
      el.src = item.url;
      el.controls = true;
      el.preload = "auto";
      el.setAttribute("aria-label", item.id);
    }
    container.appendChild(el);
  }

  function prefetch(question) {  // warm the cache so the next screen appears at once
    if (!question) return;
    const items = question.kind === "rating" ? question.items : [question.head].concat(question.candidates);
    items.forEach((item) => { if (item.kind === "image") { const img = new Image(); img.src = item.url; } });
  }

  function stepsOf(scale) {
    const values = [];
    for (let v = scale.min; v <= scale.max + 1e-9; v += scale.step) values.push(Math.round(v * 1e6) / 1e6);
    return values;
  }

  function showRating(question) {
    const scale = question.scale;
    $("rating-prompt").textContent = question.prompt;
    renderItem($("rating-a"), question.items[0]);
    renderItem($("rating-b"), question.items[1]);
    const useButtons = scale.widget === "buttons";
    scaleButtons.hidden = !useButtons;
    sliderBox.hidden = useButtons;
    if (useButtons) {
      scaleButtons.replaceChildren();
      const values = stepsOf(scale);
      values.forEach((v, n) => {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "scale-button";
        b.dataset.value = String(v);
        b.textContent = String(v);
        const label = n === 0 ? scale.low_label : n === values.length - 1 ? scale.high_label : "";
        if (label) b.title = label;
        b.setAttribute("aria-label", v + (label ? " (" + label + ")" : ""));
        b.addEventListener("click", () => rate(v));
        scaleButtons.appendChild(b);
      });
      $("rating-hint").textContent = scale.min + " = " + scale.low_label + ", " + scale.max + " = " +
        scale.high_label + ". Click or tap a number, or press its key.";
    } else {
      slider.min = scale.min;
      slider.max = scale.max;
      slider.step = scale.step === null ? "any" : scale.step;
      slider.value = (scale.min + scale.max) / 2;
      $("slider-low").textContent = scale.low_label;
      $("slider-high").textContent = scale.high_label;
      $("rating-hint").textContent = "Move the slider (or use the arrow keys), then press Enter or Submit.";
    }
    ratingEl.hidden = false;
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
    questionEl.hidden = true;
    ratingEl.hidden = true;
    feedbackEl.hidden = true;
    if (skipRow) skipRow.hidden = !question || practiceIndex >= 0;
    if (!question) {
      statusEl.textContent = "There are no more questions right now. Thank you!";
      return;
    }
    if (question.progress) setProgress(question.progress.answered);
    if (question.kind === "rating") {
      showRating(question);
    } else {
      $("prompt").textContent = question.prompt;
      renderItem($("head"), question.head);
      question.candidates.forEach((item, side) => renderItem(buttons[side], item));
      questionEl.hidden = false;
    }
    statusEl.textContent = "";
    setDisabled(true);
    busy = true;
    // a short lock-out: a double click on the previous screen must not answer this one
    setTimeout(() => { shownAt = performance.now(); busy = false; setDisabled(false); }, LOCKOUT_MS);
  }

  function setDisabled(disabled) {
    buttons.forEach((b) => (b.disabled = disabled));
    scaleButtons.querySelectorAll("button").forEach((b) => (b.disabled = disabled));
    slider.disabled = disabled;
    sliderSubmit.disabled = disabled;
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
    questionEl.hidden = true;
    ratingEl.hidden = true;
    if (skipRow) skipRow.hidden = true;
    statusEl.textContent = error ? error.message : "The server did not answer; please reload.";
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
    let right;
    if (q.kind === "rating") right = answer.value >= q.answer[0] && answer.value <= q.answer[1];
    else right = answer.choice === q.answer;
    questionEl.hidden = true;
    ratingEl.hidden = true;
    if (skipRow) skipRow.hidden = true;
    $("feedback-text").textContent = (right ? "Well done — that is what we expected. " :
      "Most people would answer differently here. ") + (q.explanation || "");
    feedbackEl.className = "feedback " + (right ? "right" : "wrong");
    feedbackEl.hidden = false;
    $("feedback-next").focus();
  }

  function startQuestions() {
    $("intro").hidden = true;
    $("progress-box").hidden = false;
    setProgress(answered);
    statusEl.textContent = "Loading the next question…";
    flushOutbox().then((sent) => { if (!sent) loadNext(); });
  }

  // ---- answers ----
  function choose(side) {
    if (!current || current.kind !== "triplet") return;
    submit({ choice: current.candidates[side].index });
  }

  function rate(value) {
    if (!current || current.kind !== "rating") return;
    submit({ value: Number(value) });
  }

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
        statusEl.textContent = "Connection problem — your answer is kept and will be sent again…";
        if (attempt >= 1) offlineEl.hidden = false;
        await new Promise((res) => setTimeout(res, Math.min(5000, 500 * (attempt + 1))));
        continue;
      }
      offlineEl.hidden = true;
      if (r.status === 429) {  // too many answers at once: the answer stays in the outbox, sent again shortly
        statusEl.textContent = "Sending your answer…";
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

  buttons.forEach((b, side) => b.addEventListener("click", () => choose(side)));
  sliderSubmit.addEventListener("click", () => rate(slider.value));
  if (skipRow) $("skip").addEventListener("click", skip);
  $("feedback-next").addEventListener("click", () => { practiceIndex += 1; showPractice(); });
  $("start").addEventListener("click", () => (practice.length ? startPractice() : startQuestions()));
  document.addEventListener("keydown", (event) => {
    if (event.target && event.target.tagName === "TEXTAREA") return;
    if (!current || busy) return;
    if (skipRow && (event.key === "s" || event.key === "S") && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault();
      skip();
      return;
    }
    if (current.kind === "rating") {
      if (current.scale.widget === "buttons") {
        const b = Array.from(scaleButtons.querySelectorAll("button")).find((x) => x.dataset.value === event.key);
        if (b) { event.preventDefault(); rate(b.dataset.value); }
      } else if (event.key === "Enter") {
        event.preventDefault();
        rate(slider.value);
      }
      return;
    }
    if (event.key === "ArrowLeft") { event.preventDefault(); choose(0); }
    if (event.key === "ArrowRight") { event.preventDefault(); choose(1); }
  });
  window.addEventListener("online", () => { offlineEl.hidden = true; });
  if (answered > 0) startQuestions();  // reload mid-study: straight back to the questions
  else $("start").focus();
})();
