// Widget "pick" (engine/kinds.py: triplet): a head on top and two candidates; click, tap, or ← / →.
// Widgets register in window.ProximaWidgets; rater.js calls init(ctx) once, then show/hide/keydown.
(function (W) {
  "use strict";
  W.pick = {
    init(ctx) {
      this.ctx = ctx;
      this.el = document.getElementById("question");
      this.buttons = [document.getElementById("left"), document.getElementById("right")];
      this.buttons.forEach((b, side) => b.addEventListener("click", () => this.choose(side)));
    },
    items(q) { return [q.head].concat(q.candidates); },
    show(q) {
      this.q = q;
      document.getElementById("prompt").textContent = q.prompt;
      this.ctx.renderItem(document.getElementById("head"), q.head);
      q.candidates.forEach((item, side) => this.ctx.renderItem(this.buttons[side], item));
      this.el.hidden = false;
    },
    hide() { this.el.hidden = true; },
    setDisabled(disabled) { this.buttons.forEach((b) => (b.disabled = disabled)); },
    choose(side) { if (this.q) this.ctx.submit({ choice: this.q.candidates[side].index }); },
    keydown(event) {
      if (event.key === "ArrowLeft") { event.preventDefault(); this.choose(0); return true; }
      if (event.key === "ArrowRight") { event.preventDefault(); this.choose(1); return true; }
      return false;
    },
    isRight(q, answer) { return answer.choice === q.answer; },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
