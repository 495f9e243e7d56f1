// Widget "pick" (engine/kinds.py: triplet): a head on top and two candidates; click, tap, or ← / →.
// Widgets register in window.ProximaWidgets; rater.js calls init(ctx) once, then show/hide/keydown.
(function (W) {
  "use strict";
  W.pick = {
    init(ctx) {
      ctx.oneChoice(this, {
        el: document.getElementById("question"),
        buttons: [document.getElementById("left"), document.getElementById("right")],
        offered: (q) => q.candidates,
        keys: ["ArrowLeft", "ArrowRight"],
      });
    },
    items(q) { return [q.head].concat(q.candidates); },
    show(q) {
      this.q = q;
      document.getElementById("prompt").textContent = q.prompt;
      this.ctx.renderItem(document.getElementById("head"), q.head);
      q.candidates.forEach((item, side) => this.ctx.renderItem(this.buttons[side], item));
      this.el.hidden = false;
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
