// Rater page: show a triplet, send the choice with its token, show the next question
// that comes back in the same response. No inline scripts: configuration comes from data-*.
(function () {
  "use strict";
  const root = document.getElementById("study");
  const questionEl = document.getElementById("question");
  if (!root || !questionEl) return;
  const nextUrl = root.dataset.nextUrl;
  const answerUrl = root.dataset.answerUrl;
  const statusEl = document.getElementById("status");
  const answeredEl = document.getElementById("answered");
  const buttons = [document.getElementById("left"), document.getElementById("right")];
  let current = null;
  let shownAt = 0;
  let busy = false;
  let answered = 0;

  function renderItem(container, item) {
    container.replaceChildren();
    container.dataset.index = item.index;
    let el;
    if (item.kind === "color") {
      el = document.createElement("span");
      el.className = "swatch big";
      el.style.backgroundColor = item.color;
      el.setAttribute("aria-label", item.id);
    } else if (item.kind === "text") {
      el = document.createElement("span");
      el.className = "text-item";
      el.textContent = item.text;
    } else if (item.kind === "image") {
      el = document.createElement("img");
      el.src = item.url;
      el.alt = item.id;
    } else {
      el = document.createElement(item.kind === "audio" ? "audio" : "video");
      el.src = item.url;
      el.controls = true;
    }
    container.appendChild(el);
  }

  function show(question) {
    current = question;
    if (!question) {
      questionEl.hidden = true;
      statusEl.textContent = "There are no more questions right now. Thank you!";
      return;
    }
    document.getElementById("prompt").textContent = question.prompt;
    renderItem(document.getElementById("head"), question.head);
    question.candidates.forEach((item, side) => renderItem(buttons[side], item));
    questionEl.hidden = false;
    statusEl.textContent = "";
    shownAt = performance.now();
    busy = false;
    buttons.forEach((b) => (b.disabled = false));
  }

  async function call(url, options) {
    const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    return { ok: response.ok, status: response.status, body: body };
  }

  async function loadNext() {
    const r = await call(nextUrl, { headers: { Accept: "application/json" } });
    if (r.ok) return show(r.body.question);
    current = null;
    questionEl.hidden = true;
    statusEl.textContent = (r.body && r.body.error) ? r.body.error.message : "The server did not answer; please reload.";
  }

  async function choose(side) {
    if (busy || !current) return;
    busy = true;  // lock-out until the next question is on screen: no double answers
    buttons.forEach((b) => (b.disabled = true));
    const choice = current.candidates[side].index;
    const body = { token: current.token, choice: choice, response_ms: Math.round(performance.now() - shownAt) };
    for (let attempt = 0; attempt < 4; attempt++) {
      let r;
      try {
        r = await call(answerUrl, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      } catch (e) {
        statusEl.textContent = "Connection problem, retrying…";
        await new Promise((res) => setTimeout(res, 500 * (attempt + 1)));
        continue;
      }
      if (r.ok || (r.body && r.body.error && r.body.error.code === "already_answered")) {
        answered += 1;
        answeredEl.textContent = String(answered);
        return r.ok ? show(r.body.next) : loadNext();
      }
      if (r.status === 410) return loadNext();  // expired question: take a fresh one
      statusEl.textContent = (r.body && r.body.error) ? r.body.error.message : "The answer could not be saved.";
      busy = false;
      buttons.forEach((b) => (b.disabled = false));
      return;
    }
    statusEl.textContent = "Your answer could not be sent. Please check your connection and reload.";
  }

  buttons.forEach((b, side) => b.addEventListener("click", () => choose(side)));
  document.addEventListener("keydown", (event) => {
    if (event.key === "ArrowLeft") { event.preventDefault(); choose(0); }
    if (event.key === "ArrowRight") { event.preventDefault(); choose(1); }
  });
  loadNext();
})();
