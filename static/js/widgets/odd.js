// Widget "odd" (engine/kinds.py: odd_one_out): three items, no head; click or tap the one least like the
// other two, or press 1, 2 or 3 (left to right).
(function (W) {
  "use strict";
  W.odd = {
    init(ctx) {
      const el = document.getElementById("odd");
      ctx.oneChoice(this, {
        el: el,
        buttons: Array.from(el.querySelectorAll(".odd-item")),
        offered: (q) => q.items,
        keys: ["1", "2", "3"],
      });
    },
    items(q) { return q.items; },
    show(q) {
      this.q = q;
      document.getElementById("odd-prompt").textContent = q.prompt;
      q.items.forEach((item, n) => {
        this.ctx.renderItem(this.buttons[n], item);
        this.buttons[n].setAttribute("aria-label", this.ctx.t("item_label", { n: n + 1 }) + (item.id ? ": " + item.id : ""));
      });
      this.el.hidden = false;
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
