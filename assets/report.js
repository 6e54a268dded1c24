/* scalify report — progressive enhancement only: every page reads fine without
 * it. Sorting and filtering tables, j/k navigation. Inlined, hashed in the CSP. */
(function () {
  "use strict";
  var doc = document.documentElement;
  window.addEventListener("error", function (e) { doc.setAttribute("data-js-error", String(e.message)); });
  function key(td) {
    if (!td) return { s: "" };  /* a folded run's row has one cell */
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "" && !isNaN(+v)) return { n: +v };
    return { s: (v !== null ? v : td.textContent).trim().toLowerCase() };
  }
  function cmp(a, b) {
    if (a.n !== undefined && b.n !== undefined) return a.n - b.n;
    var x = a.n !== undefined ? String(a.n) : a.s, y = b.n !== undefined ? String(b.n) : b.s;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      var b = document.createElement("button");
      b.className = "sort";
      b.type = "button";
      while (th.firstChild) b.appendChild(th.firstChild);
      th.appendChild(b);
      b.addEventListener("click", function () {
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.forEach(function (r, i) { r._i = i; });
        rows.sort(function (r1, r2) {
          var c = cmp(key(r1.cells[col]), key(r2.cells[col]));
          return (asc ? c : -c) || r1._i - r2._i;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll(".controls[data-for]"), function (box) {
    var table = document.getElementById(box.getAttribute("data-for"));
    if (!table) return;
    var text = box.querySelector("input"), sel = box.querySelector("select"), count = box.querySelector(".count");
    function apply() {
      var q = text ? text.value.trim().toLowerCase() : "", v = sel ? sel.value : "", shown = 0;
      var rows = table.tBodies[0].rows;
      for (var i = 0; i < rows.length; i++) {
        var r = rows[i];
        var hay = (r.textContent + " " + (r.getAttribute("data-search") || "")).toLowerCase();
        var ok = (!q || hay.indexOf(q) >= 0) && (!v || r.getAttribute("data-verdict") === v);
        r.hidden = !ok;
        if (ok) shown++;
      }
      if (count) count.textContent = shown + " of " + rows.length + " shown";
    }
    if (text) text.addEventListener("input", apply);
    if (sel) sel.addEventListener("change", apply);
    box.hidden = false;
    apply();
  });
  /* The page the keys act on: the document, or in a single-file bundle the
   * section at the top of the window. */
  function scope() {
    var secs = document.querySelectorAll("section.page"), cur = document;
    for (var i = 0; i < secs.length; i++) {
      if (i && secs[i].getBoundingClientRect().top > 80) break;
      cur = secs[i];
    }
    return cur;
  }
  var sel = -1, selScope = null;
  function rowsOf(sc) {
    var t = sc.querySelector("table.nav");
    return t ? Array.prototype.filter.call(t.tBodies[0].rows, function (r) { return !r.hidden; }) : [];
  }
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    var k = e.key;
    if (k !== "j" && k !== "k" && k !== "Enter") return;
    var sc = scope();
    var link = sc.querySelector(k === "j" ? "a[rel~=next]" : "a[rel~=prev]");
    if (k !== "Enter" && link) { link.click(); e.preventDefault(); return; }
    if (sc !== selScope) {
      if (selScope) Array.prototype.forEach.call(selScope.querySelectorAll("tr.sel"), function (r) { r.classList.remove("sel"); });
      sel = -1;
      selScope = sc;
    }
    var rows = rowsOf(sc);
    if (!rows.length) return;
    if (k === "Enter") {
      if (sel >= 0 && rows[sel]) { var a = rows[sel].querySelector("a"); if (a) a.click(); }
      return;
    }
    if (sel >= 0 && rows[sel]) rows[sel].classList.remove("sel");
    sel = Math.max(0, Math.min(rows.length - 1, sel + (k === "j" ? 1 : -1)));
    rows[sel].classList.add("sel");
    rows[sel].scrollIntoView({ block: "nearest" });
    e.preventDefault();
  });
  Array.prototype.forEach.call(document.querySelectorAll(".cmd button.copy"), function (b) {
    var code = b.parentNode.querySelector("code");
    if (!code) return;
    b.hidden = false;
    b.addEventListener("click", function () {
      var text = code.textContent, done = function () { b.textContent = "Copied"; };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { b.textContent = "Select and copy"; });
        return;
      }
      var r = document.createRange();
      r.selectNodeContents(code);
      var s = window.getSelection();
      s.removeAllRanges();
      s.addRange(r);
      b.textContent = "Selected: press Ctrl+C";
    });
  });
  doc.setAttribute("data-js", "ok");
})();
