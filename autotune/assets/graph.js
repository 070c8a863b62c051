// The graph viewer of autotune's pages: every `.gv` block holds an SVG laid out by Graphviz
// and the data of its elements (script.gv-data). Wheel to zoom about the pointer, drag to pan,
// click an op, an edge or a box for its details, type in the search box to find an op.
(function () {
  "use strict";

  function viewer(root) {
    const svg = root.querySelector(".gv-canvas svg");
    const data = JSON.parse(root.querySelector("script.gv-data").textContent);
    const panel = root.querySelector(".gv-panel");
    const whole = svg.viewBox.baseVal;
    const full = { x: whole.x, y: whole.y, w: whole.width, h: whole.height };
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    let view = { x: full.x, y: full.y, w: full.w, h: full.h };
    let selected = [];

    function box() { return svg.getBoundingClientRect(); }
    function show() {
      const r = box();
      view.h = view.w * (r.height / Math.max(r.width, 1));
      svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
      root.dataset.zoom = (r.width / view.w).toFixed(4);
    }
    function fit() {
      const r = box();
      const aspect = r.height / Math.max(r.width, 1);
      const w = Math.max(full.w, full.h / aspect);
      view = { x: full.x - (w - full.w) / 2, y: full.y, w: w, h: w * aspect };
      show();
    }
    function actual() {  // one SVG point to one CSS pixel, from the top of the graph
      const r = box();
      view = { x: full.x + (full.w - r.width) / 2, y: full.y, w: r.width, h: r.height };
      show();
    }
    function centre(el) {  // the element in the middle of the view, at the zoom there is
      const r = el.getBoundingClientRect();
      const m = svg.getScreenCTM().inverse();
      const p = new DOMPoint(r.x + r.width / 2, r.y + r.height / 2).matrixTransform(m);
      view.x = p.x - view.w / 2;
      view.y = p.y - view.h / 2;
      show();
    }

    function table(rows) {
      const t = document.createElement("table");
      for (const [key, value] of rows) {
        const tr = t.insertRow();
        tr.insertCell().textContent = key;
        tr.insertCell().textContent = value;
      }
      return t;
    }
    function select(el) {
      for (const s of selected) s.classList.remove("gv-selected");
      selected = [el];
      el.classList.add("gv-selected");
      for (const id of (data.links[el.id] || [])) {
        const e = document.getElementById(id);
        if (e) { e.classList.add("gv-selected"); selected.push(e); }
      }
      panel.replaceChildren(table(data.rows[el.id] || [["id", el.id]]));
      root.dataset.selected = el.id;
    }

    let drag = null;
    const canvas = root.querySelector(".gv-canvas");
    canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      const r = box();
      const fx = (ev.clientX - r.left) / r.width, fy = (ev.clientY - r.top) / r.height;
      const scale = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.0015)));
      const w = view.w * scale, h = view.h * scale;
      view.x += (view.w - w) * fx;
      view.y += (view.h - h) * fy;
      view.w = w;
      show();
    }, { passive: false });
    canvas.addEventListener("pointerdown", function (ev) {
      drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y, moved: false };
    });
    window.addEventListener("pointermove", function (ev) {
      if (!drag) return;
      const k = view.w / box().width;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      drag.moved = drag.moved || Math.abs(dx) + Math.abs(dy) > 3;
      view.x = drag.vx - dx * k;
      view.y = drag.vy - dy * k;
      show();
    });
    window.addEventListener("pointerup", function () {
      setTimeout(function () { drag = null; }, 0);
    });
    canvas.addEventListener("click", function (ev) {
      if (drag && drag.moved) return;
      const el = ev.target.closest("g.node, g.edge, g.cluster");
      if (el) select(el);
    });
    root.querySelector(".gv-fit").addEventListener("click", fit);
    root.querySelector(".gv-actual").addEventListener("click", actual);
    root.querySelector(".gv-find").addEventListener("change", function (ev) {
      const want = ev.target.value.trim().toLowerCase();
      if (!want) return;
      const hit = Object.keys(data.names).find(function (id) {
        return data.names[id].toLowerCase().includes(want);
      });
      root.dataset.found = hit || "";
      if (!hit) return;
      const el = document.getElementById(hit);
      select(el);
      centre(el);
    });
    if (full.h > 3 * full.w && full.h > 2000) actual(); else fit();
    root.dataset.ready = "1";
  }

  document.querySelectorAll(".gv").forEach(viewer);
})();
