// Widget "rating" (engine/kinds.py: rating): two items and the study's scale, as buttons (click, tap or
// press the value's key) or a slider (arrow keys, then Enter or Submit).
(function (W) {
  "use strict";
  function stepsOf(scale) {
    const values = [];
    for (let v = scale.min; v <= scale.max + 1e-9; v += scale.step) values.push(Math.round(v * 1e6) / 1e6);
    return values;
  }
  const $ = (id) => document.getElementById(id);
  W.rating = {
    init(ctx) {
      this.ctx = ctx;
      this.el = $("rating");
      this.scaleButtons = $("scale-buttons");
      this.slider = $("slider");
      this.sliderSubmit = $("slider-submit");
      this.sliderSubmit.addEventListener("click", () => this.rate(this.slider.value));
    },
    items(q) { return q.items; },
    show(q) {
      this.q = q;
      const scale = q.scale;
      $("rating-prompt").textContent = q.prompt;
      this.ctx.renderItem($("rating-a"), q.items[0]);
      this.ctx.renderItem($("rating-b"), q.items[1]);
      const useButtons = scale.widget === "buttons";
      this.scaleButtons.hidden = !useButtons;
      $("scale-slider").hidden = useButtons;
      if (useButtons) {
        this.scaleButtons.replaceChildren();
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
          b.addEventListener("click", () => this.rate(v));
          this.scaleButtons.appendChild(b);
        });
        $("rating-hint").textContent = this.ctx.t("rating_hint_buttons",
          { min: scale.min, low: scale.low_label, max: scale.max, high: scale.high_label });
      } else {
        this.slider.min = scale.min;
        this.slider.max = scale.max;
        this.slider.step = scale.step === null ? "any" : scale.step;
        this.slider.value = (scale.min + scale.max) / 2;
        $("slider-low").textContent = scale.low_label;
        $("slider-high").textContent = scale.high_label;
        $("rating-hint").textContent = this.ctx.t("rating_hint_slider");
      }
      this.el.hidden = false;
    },
    hide() { this.el.hidden = true; },
    setDisabled(disabled) {
      this.scaleButtons.querySelectorAll("button").forEach((b) => (b.disabled = disabled));
      this.slider.disabled = disabled;
      this.sliderSubmit.disabled = disabled;
    },
    rate(value) { if (this.q) this.ctx.submit({ value: Number(value) }); },
    keydown(event) {
      if (!this.q) return false;
      if (this.q.scale.widget === "buttons") {
        const b = Array.from(this.scaleButtons.querySelectorAll("button")).find((x) => x.dataset.value === event.key);
        if (b) { event.preventDefault(); this.rate(b.dataset.value); return true; }
      } else if (event.key === "Enter") {
        event.preventDefault();
        this.rate(this.slider.value);
        return true;
      }
      return false;
    },
    isRight(q, answer) { return answer.value >= q.answer[0] && answer.value <= q.answer[1]; },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
