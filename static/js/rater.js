// Rater page: show a triplet or a rating question, send the answer with its token, show the
// next question that comes back in the same response. No inline scripts: configuration comes
// from data-*.
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
  const ratingEl = document.getElementById("rating");
  const scaleButtons = document.getElementById("scale-buttons");
  const sliderBox = document.getElementById("scale-slider");
  const slider = document.getElementById("slider");
  const sliderSubmit = document.getElementById("slider-submit");
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

  function stepsOf(scale) {
    const values = [];
    for (let v = scale.min; v <= scale.max + 1e-9; v += scale.step) values.push(Math.round(v * 1e6) / 1e6);
    return values;
  }

  function showRating(question) {
    const scale = question.scale;
    document.getElementById("rating-prompt").textContent = question.prompt;
    renderItem(document.getElementById("rating-a"), question.items[0]);
    renderItem(document.getElementById("rating-b"), question.items[1]);
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
        if (n === 0) b.title = scale.low_label;
        if (n === values.length - 1) b.title = scale.high_label;
        b.setAttribute("aria-label", v + (n === 0 ? " (" + scale.low_label + ")" : n === values.length - 1 ? " (" + scale.high_label + ")" : ""));
        b.addEventListener("click", () => rate(v));
        scaleButtons.appendChild(b);
      });
      document.getElementById("rating-hint").textContent =
        scale.min + " = " + scale.low_label + ", " + scale.max + " = " + scale.high_label +
        ". Click a number or press its key.";
    } else {
      slider.min = scale.min;
      slider.max = scale.max;
      slider.step = scale.step === null ? "any" : scale.step;
      slider.value = (scale.min + scale.max) / 2;
      document.getElementById("slider-low").textContent = scale.low_label;
      document.getElementById("slider-high").textContent = scale.high_label;
      document.getElementById("rating-hint").textContent = "Move the slider (or use the arrow keys), then press Enter or Submit.";
    }
    ratingEl.hidden = false;
  }

  function show(question) {
    current = question;
    questionEl.hidden = true;
    ratingEl.hidden = true;
    if (!question) {
      statusEl.textContent = "There are no more questions right now. Thank you!";
      return;
    }
    if (question.kind === "rating") {
      showRating(question);
    } else {
      document.getElementById("prompt").textContent = question.prompt;
      renderItem(document.getElementById("head"), question.head);
      question.candidates.forEach((item, side) => renderItem(buttons[side], item));
      questionEl.hidden = false;
    }
    statusEl.textContent = "";
    shownAt = performance.now();
    busy = false;
    setDisabled(false);
  }

  function setDisabled(disabled) {
    buttons.forEach((b) => (b.disabled = disabled));
    scaleButtons.querySelectorAll("button").forEach((b) => (b.disabled = disabled));
    slider.disabled = disabled;
    sliderSubmit.disabled = disabled;
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
    ratingEl.hidden = true;
    statusEl.textContent = (r.body && r.body.error) ? r.body.error.message : "The server did not answer; please reload.";
  }

  function choose(side) {
    if (!current || current.kind !== "triplet") return;
    send({ choice: current.candidates[side].index });
  }

  function rate(value) {
    if (!current || current.kind !== "rating") return;
    send({ value: Number(value) });
  }

  async function send(answer) {
    if (busy || !current) return;
    busy = true;  // lock-out until the next question is on screen: no double answers
    setDisabled(true);
    const body = Object.assign({ token: current.token, response_ms: Math.round(performance.now() - shownAt) }, answer);
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
      setDisabled(false);
      return;
    }
    statusEl.textContent = "Your answer could not be sent. Please check your connection and reload.";
  }

  buttons.forEach((b, side) => b.addEventListener("click", () => choose(side)));
  sliderSubmit.addEventListener("click", () => rate(slider.value));
  document.addEventListener("keydown", (event) => {
    if (!current) return;
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
  loadNext();
})();
