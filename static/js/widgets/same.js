// Widget "same" (engine/kinds.py: same_different): two items and two buttons, "Same" (value 1) and
// "Different" (value 0); click or tap one, or press 1 (the same) or 2 (different).
(function (W) {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const KEYS = { "1": 1, "2": 0 };
  W.same = {
    init(ctx) {
      this.ctx = ctx;
      this.el = $("same");
      this.buttons = Array.from(this.el.querySelectorAll(".same-choice"));
      this.buttons.forEach((b) => b.addEventListener("click", () => this.answer(Number(b.dataset.value))));
    },
    items(q) { return q.items; },
    show(q) {
      this.q = q;
      $("same-prompt").textContent = q.prompt;
      this.ctx.renderItem($("same-a"), q.items[0]);
      this.ctx.renderItem($("same-b"), q.items[1]);
      this.el.hidden = false;
    },
    hide() { this.el.hidden = true; },
    setDisabled(disabled) { this.buttons.forEach((b) => (b.disabled = disabled)); },
    answer(value) { if (this.q) this.ctx.submit({ value: value }); },
    keydown(event) {
      if (!this.q || !Object.prototype.hasOwnProperty.call(KEYS, event.key)) return false;
      event.preventDefault();
      this.answer(KEYS[event.key]);
      return true;
    },
    isRight(q, answer) { return answer.value === q.answer; },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
