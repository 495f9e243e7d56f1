// Widget "odd" (engine/kinds.py: odd_one_out): three items, no head; click or tap the one least like the
// other two, or press 1, 2 or 3 (left to right).
(function (W) {
  "use strict";
  W.odd = {
    init(ctx) {
      this.ctx = ctx;
      this.el = document.getElementById("odd");
      this.buttons = Array.from(this.el.querySelectorAll(".odd-item"));
      this.buttons.forEach((b, n) => b.addEventListener("click", () => this.choose(n)));
    },
    items(q) { return q.items; },
    show(q) {
      this.q = q;
      document.getElementById("odd-prompt").textContent = q.prompt;
      q.items.forEach((item, n) => {
        this.ctx.renderItem(this.buttons[n], item);
        this.buttons[n].setAttribute("aria-label", "item " + (n + 1) + ": " + item.id);
      });
      this.el.hidden = false;
    },
    hide() { this.el.hidden = true; },
    setDisabled(disabled) { this.buttons.forEach((b) => (b.disabled = disabled)); },
    choose(n) { if (this.q) this.ctx.submit({ choice: this.q.items[n].index }); },
    keydown(event) {
      const n = ["1", "2", "3"].indexOf(event.key);
      if (n < 0) return false;
      event.preventDefault();
      this.choose(n);
      return true;
    },
    isRight(q, answer) { return answer.choice === q.answer; },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
