// Widget "choose" (engine/kinds.py: pick_k): a head and n references; pick the k most similar, in no
// order. Click, tap or press a reference's key (1-9, 0 for the 10th, - and = for the 11th and 12th) to
// pick it or take it back: a picked one carries a tick, never a number. Undo (or Backspace) takes back
// the latest pick. Confirm (or Enter) sends the picks once exactly k are made.
(function (W) {
  "use strict";
  const KEYS = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "-", "="];
  W.choose = {
    init(ctx) {
      this.ctx = ctx;
      this.el = document.getElementById("choose");
      this.refs = document.getElementById("choose-refs");
      this.status = document.getElementById("choose-status");
      this.confirmButton = document.getElementById("choose-confirm");
      this.undoButton = document.getElementById("choose-undo");
      this.confirmButton.addEventListener("click", () => this.confirm());
      this.undoButton.addEventListener("click", () => this.undo());
      this.buttons = [];
      this.picks = [];  // reference positions, in the order picked (only Undo reads the order)
      this.disabled = true;
    },
    items(q) { return [q.head].concat(q.candidates); },
    show(q) {
      this.q = q;
      this.k = q.select || 1;
      this.picks = [];
      document.getElementById("choose-prompt").textContent = q.prompt;
      this.ctx.renderItem(document.getElementById("choose-head"), q.head);
      this.refs.replaceChildren();
      this.refs.dataset.n = String(q.candidates.length);
      this.buttons = q.candidates.map((item, n) => {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "candidate grid-ref";
        b.dataset.n = String(n);
        b.dataset.handle = item.handle;
        b.setAttribute("aria-keyshortcuts", KEYS[n]);
        const box = document.createElement("span");
        box.className = "grid-item";
        this.ctx.renderItem(box, item);
        const key = document.createElement("span");
        key.className = "grid-key";
        key.textContent = KEYS[n];
        key.setAttribute("aria-hidden", "true");
        const badge = document.createElement("span");
        badge.className = "grid-badge";
        badge.setAttribute("aria-hidden", "true");
        b.append(box, key, badge);
        b.addEventListener("click", () => this.toggle(n));
        this.refs.appendChild(b);
        return b;
      });
      this.update();
      this.el.hidden = false;
    },
    hide() { this.el.hidden = true; },
    setDisabled(disabled) {
      this.disabled = disabled;
      this.buttons.forEach((b) => (b.disabled = disabled));
      this.update();
    },
    toggle(n) {
      if (!this.q || this.disabled) return;
      const at = this.picks.indexOf(n);
      if (at >= 0) this.picks.splice(at, 1);  // taken back alone: the other picks stay
      else if (this.picks.length < this.k) this.picks.push(n);
      this.update();
      if (this.picks.length === this.k) this.confirmButton.focus();
    },
    undo() { if (!this.disabled && this.picks.length) { this.picks.pop(); this.update(); } },
    confirm() {
      if (!this.q || this.disabled || this.picks.length !== this.k) return;
      // sent in the order shown: the order of picking means nothing here (the server keeps them in item order)
      const picks = this.picks.slice().sort((a, b) => a - b);
      this.ctx.submit({ picks: picks.map((n) => this.q.candidates[n].handle) });
    },
    update() {
      this.buttons.forEach((b, n) => {
        const picked = this.picks.includes(n);
        b.classList.toggle("picked", picked);
        b.setAttribute("aria-pressed", picked ? "true" : "false");
        b.querySelector(".grid-badge").textContent = picked ? "✓" : "";
        b.setAttribute("aria-label", picked ? this.ctx.t("grid_item_picked_only", { n: KEYS[n] })
          : this.ctx.t("item_label", { n: KEYS[n] }));
      });
      const left = this.k - this.picks.length;
      this.status.textContent = left > 0 ? this.ctx.t("grid_picked", { picked: this.picks.length, k: this.k })
        : this.ctx.t("grid_ready");
      this.confirmButton.disabled = this.disabled || left > 0;
      this.undoButton.disabled = this.disabled || this.picks.length === 0;
    },
    keydown(event) {
      if (event.key === "Enter") { event.preventDefault(); this.confirm(); return true; }
      if (event.key === "Backspace") { event.preventDefault(); this.undo(); return true; }
      const n = KEYS.indexOf(event.key);
      if (n < 0 || !this.q || n >= this.q.candidates.length) return false;
      event.preventDefault();
      this.toggle(n);
      return true;
    },
    isRight(q, answer) {
      // the same items, in any order
      const want = q.answer || [];
      return Array.isArray(answer.picks) && answer.picks.length === want.length &&
        want.every((p) => answer.picks.includes(p));
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
