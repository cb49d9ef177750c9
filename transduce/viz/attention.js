// The attention view's drawing, shared by `transduce attention`'s page and `transduce serve`'s.
"use strict";
const NAMES = {encoder: "encoder self-attention", decoder: "decoder self-attention",
               cross: "encoder-decoder attention"};
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"];
const SVG = "http://www.w3.org/2000/svg";
let data = null, kinds = [], state = null;  // set by showAttention

function colour(head) { return COLOURS[head % COLOURS.length]; }

function node(tag, attrs, parent, text) {
  const made = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) made.setAttribute(name, value);
  if (text !== undefined) made.textContent = text;
  if (parent) parent.appendChild(made);
  return made;
}

function button(label, pressed, onClick, swatch) {
  const b = document.createElement("button");
  if (swatch) {
    const s = document.createElement("span");
    s.className = "swatch";
    s.style.background = swatch;
    b.appendChild(s);
  }
  b.appendChild(document.createTextNode(label));
  b.setAttribute("aria-pressed", String(pressed));
  b.addEventListener("click", onClick);
  return b;
}

function view() { return data.views[state.kind]; }
function weights() { return view().layers[state.layer]; }  // [head][query][key]
function shownHeads() {
  const n = weights().length;
  return state.head === "all" ? [...Array(n).keys()] : [state.head];
}

function controls() {
  const kindBox = document.getElementById("kinds");
  kindBox.replaceChildren(...kinds.map(k => {
    const b = button(NAMES[k], k === state.kind, () => { state.kind = k; state.focus = null; draw(); });
    b.dataset.kind = k;
    return b;
  }));
  const select = document.getElementById("layer");
  select.replaceChildren(...view().layers.map((_, i) => {
    const option = document.createElement("option");
    option.value = i; option.textContent = i; option.selected = i === state.layer;
    return option;
  }));
  select.onchange = () => { state.layer = Number(select.value); draw(); };
  const n = weights().length;
  const heads = [button("all heads", state.head === "all", () => { state.head = "all"; draw(); })];
  for (let h = 0; h < n; h++) {
    const b = button("head " + h, state.head === h, () => { state.head = h; draw(); }, colour(h));
    b.dataset.head = h;
    heads.push(b);
  }
  document.getElementById("heads").replaceChildren(...heads);
}

const LINES = {row: 22, top: 34, left: 150, right: 430, width: 580};
const rowY = i => LINES.top + LINES.row * i;

function drawLines() {  // labels once per view; the links again on every hover
  const v = view(), svg = document.getElementById("lines");
  const height = rowY(Math.max(v.queries.length, v.keys.length)) + 10;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${LINES.width} ${height}`);
  svg.setAttribute("width", LINES.width); svg.setAttribute("height", height);
  node("text", {x: LINES.left, y: 16, "text-anchor": "end", fill: "#777"}, svg, v.queryName);
  node("text", {x: LINES.right, y: 16, fill: "#777"}, svg, v.keyName);
  node("g", {id: "links"}, svg);
  v.queries.forEach((label, q) => {
    const t = node("text", {x: LINES.left, y: rowY(q), "text-anchor": "end", class: "word",
                            "data-query": q}, svg, label);
    t.addEventListener("mouseenter", () => { state.focus = q; focusChanged(); });
    t.addEventListener("mouseleave", () => { state.focus = null; focusChanged(); });
  });
  v.keys.forEach((label, k) => node("text", {x: LINES.right, y: rowY(k), class: "key"}, svg, label));
  document.getElementById("lines-title").textContent =
    `${NAMES[state.kind]}, layer ${state.layer}, ` +
    (state.head === "all" ? "all heads" : `head ${state.head}`);
  drawLinks();
}

function drawLinks() {
  const v = view(), w = weights(), links = document.getElementById("links");
  links.replaceChildren();
  const queries = state.focus === null ? v.queries.map((_, i) => i) : [state.focus];
  const scale = state.focus === null ? 4 : 8;
  for (const h of shownHeads()) {
    for (const q of queries) {
      w[h][q].forEach((value, k) => {
        if (value < 0.01) return;
        node("line", {x1: LINES.left + 6, y1: rowY(q) - 4, x2: LINES.right - 6, y2: rowY(k) - 4,
                      stroke: colour(h), "stroke-width": (scale * value).toFixed(2),
                      "stroke-opacity": Math.min(1, 0.15 + value).toFixed(2),
                      "data-head": h}, links);
      });
    }
  }
  for (const t of document.querySelectorAll("#lines text.word")) {
    t.classList.toggle("focus", Number(t.dataset.query) === state.focus);
  }
}

function focusChanged() {
  drawLinks();
  drawHeatmap();
}

function shade(value) {  // white to dark blue
  const t = Math.max(0, Math.min(1, value));
  const c = (a, b) => Math.round(a + (b - a) * t);
  return `rgb(${c(255, 8)},${c(255, 48)},${c(255, 107)})`;
}

function drawHeatmap() {
  const v = view(), w = weights(), heads = shownHeads(), svg = document.getElementById("heatmap");
  const cell = 22, left = 120, top = 110;
  const width = left + cell * v.keys.length + 10, height = top + cell * v.queries.length + 10;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const mean = v.queries.map((_, q) => v.keys.map((_, k) =>
    heads.reduce((sum, h) => sum + w[h][q][k], 0) / heads.length));
  const top1 = Math.max(...mean.flat(), 1e-9);  // the darkest cell is the largest weight shown
  v.queries.forEach((label, q) => {
    node("text", {x: left - 6, y: top + cell * q + 15, "text-anchor": "end",
                  class: q === state.focus ? "focus" : ""}, svg, label);
    v.keys.forEach((_, k) => {
      const value = mean[q][k];
      const rect = node("rect", {x: left + cell * k, y: top + cell * q, width: cell - 1,
                                 height: cell - 1, fill: shade(value / top1), class: "cell"}, svg);
      node("title", {}, rect, `${label} → ${v.keys[k]}: ${value.toFixed(3)}`);
    });
  });
  v.keys.forEach((label, k) => {
    const x = left + cell * k + 15, yTop = top - 6;
    node("text", {x, y: yTop, transform: `rotate(-60 ${x} ${yTop})`}, svg, label);
  });
  document.getElementById("heat-title").textContent =
    state.head === "all" ? "heads averaged" : `head ${state.head}`;
}

function draw() {
  state.layer = Math.min(state.layer, view().layers.length - 1);
  if (state.head !== "all" && state.head >= weights().length) state.head = "all";
  controls();
  drawLines();
  drawHeatmap();
}

// Draw `given` (page_data's JSON: source, translation, layer, views) into the view's elements.
function showAttention(given) {
  data = given;
  kinds = ["encoder", "decoder", "cross"].filter(k => k in data.views);
  state = {kind: kinds[0], layer: data.layer, head: "all", focus: null};
  document.getElementById("source").textContent = data.source;
  document.getElementById("target").textContent = data.translation;
  draw();
}
