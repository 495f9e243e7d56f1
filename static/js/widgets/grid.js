// Widget "grid" (engine/kinds.py: rank): a head and n references; pick the k most similar, most similar
// first. Click, tap or press a reference's key (1-9, 0 for the 10th, - and = for the 11th and 12th) to
// pick it: its badge shows its place in the order. Clicking a picked one (or Undo / Backspace) takes it
// back, with every pick after it. Confirm (or Enter) sends the picks once k are made.
(function (W) {
  "use strict";
  const KEYS = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "-", "="];
  W.grid = {
    init(ctx) {
      this.ctx = ctx;
      this.ordinal = (n) => ctx.tn("ordinal", n, {}, "ordinal");  // a place in the order: 1st, 2nd ... (1., 2. ...)
      this.el = document.getElementById("grid");
      this.refs = document.getElementById("grid-refs");
      this.status = document.getElementById("grid-status");
      this.confirmButton = document.getElementById("grid-confirm");
      this.undoButton = document.getElementById("grid-undo");
      this.confirmButton.addEventListener("click", () => this.confirm());
      this.undoButton.addEventListener("click", () => this.undo());
      this.buttons = [];
      this.picks = [];
      this.disabled = true;
    },
    items(q) { return [q.head].concat(q.candidates); },
    show(q) {
      this.q = q;
      this.k = q.select || 1;
      this.picks = [];
      document.getElementById("grid-prompt").textContent = q.prompt;
      this.ctx.renderItem(document.getElementById("grid-head"), q.head);
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
      if (at >= 0) this.picks = this.picks.slice(0, at);  // taken back, with every later pick
      else if (this.picks.length < this.k) this.picks.push(n);
      this.update();
      if (this.picks.length === this.k) this.confirmButton.focus();
    },
    undo() { if (!this.disabled && this.picks.length) { this.picks.pop(); this.update(); } },
    confirm() {
      if (!this.q || this.disabled || this.picks.length !== this.k) return;
      this.ctx.submit({ picks: this.picks.map((n) => this.q.candidates[n].handle) });
    },
    update() {
      this.buttons.forEach((b, n) => {
        const at = this.picks.indexOf(n);
        b.classList.toggle("picked", at >= 0);
        b.setAttribute("aria-pressed", at >= 0 ? "true" : "false");
        b.querySelector(".grid-badge").textContent = at >= 0 ? (this.k > 1 ? this.ordinal(at + 1) : "✓") : "";
        const label = at < 0 ? this.ctx.t("item_label", { n: KEYS[n] })
          : this.k > 1 ? this.ctx.t("grid_item_picked", { n: KEYS[n], place: this.ordinal(at + 1) })
            : this.ctx.t("grid_item_picked_only", { n: KEYS[n] });
        b.setAttribute("aria-label", label);
      });
      const left = this.k - this.picks.length;
      if (this.status) {
        this.status.textContent = left > 0 ? this.ctx.t("grid_picked", { picked: this.picks.length, k: this.k })
          : this.ctx.t("grid_ready");
      }
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
      const want = q.answer || [];
      return Array.isArray(answer.picks) && answer.picks.length === want.length &&
        answer.picks.every((p, n) => p === want[n]);
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
