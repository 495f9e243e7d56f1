// Widget "pick" (engine/kinds.py: triplet): a head on top and two candidates; click, tap, or ← / →.
// Widgets register in window.ProximaWidgets; rater.js calls init(ctx) once, then show/hide/keydown.
(function (W) {
  "use strict";
  W.pick = {
    init(ctx) {
      const buttons = [document.getElementById("left"), document.getElementById("right")];
      // ← and → mean the candidate drawn on that side: in a right-to-left page the first is on the right
      this.keys = () => (buttons[0].getBoundingClientRect().left <= buttons[1].getBoundingClientRect().left
        ? ["ArrowLeft", "ArrowRight"] : ["ArrowRight", "ArrowLeft"]);
      ctx.oneChoice(this, {
        el: document.getElementById("question"),
        buttons: buttons,
        offered: (q) => q.candidates,
        keys: this.keys,
      });
    },
    items(q) { return [q.head].concat(q.candidates); },
    show(q) {
      this.q = q;
      document.getElementById("prompt").textContent = q.prompt;
      this.ctx.renderItem(document.getElementById("head"), q.head);
      q.candidates.forEach((item, side) => this.ctx.renderItem(this.buttons[side], item));
      this.el.hidden = false;
      const keys = this.keys();
      this.buttons.forEach((b, side) => b.setAttribute("aria-keyshortcuts", keys[side]));
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
