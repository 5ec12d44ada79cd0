/* The definition editor: a plain textarea that indents.
 *
 * Tab inserts two spaces (YAML indents with spaces, never tabs), or indents
 * every selected line; Shift+Tab takes two spaces off each. Escape releases
 * the key: the next Tab moves the focus on, as in any form field.
 */
(function () {
  "use strict";
  var INDENT = "  ";

  function lineStart(text, pos) { return text.lastIndexOf("\n", pos - 1) + 1; }

  function edit(area, start, end, replacement, selStart, selEnd) {
    area.setRangeText(replacement, start, end, "preserve");
    area.setSelectionRange(selStart, selEnd);
    area.dispatchEvent(new Event("input", { bubbles: true }));
  }

  function indent(area, outdent) {
    var text = area.value;
    var s = area.selectionStart;
    var e = area.selectionEnd;
    if (!outdent && s === e) {
      edit(area, s, e, INDENT, s + INDENT.length, s + INDENT.length);
      return;
    }
    var from = lineStart(text, s);
    var block = text.slice(from, e);
    var lines = block.split("\n");
    var first = 0;
    var total = 0;
    lines = lines.map(function (line, i) {
      var delta;
      if (outdent) {
        var cut = line.startsWith(INDENT) ? INDENT.length : (line.startsWith(" ") ? 1 : 0);
        delta = -cut;
        line = line.slice(cut);
      } else {
        delta = INDENT.length;
        line = INDENT + line;
      }
      if (i === 0) { first = delta; }
      total += delta;
      return line;
    });
    edit(area, from, e, lines.join("\n"), Math.max(from, s + first), e + total);
  }

  document.querySelectorAll("textarea[data-code-editor]").forEach(function (area) {
    var released = false;
    area.addEventListener("keydown", function (ev) {
      if (ev.key === "Escape") { released = true; return; }
      if (ev.key !== "Tab" || ev.ctrlKey || ev.altKey || ev.metaKey) { released = false; return; }
      if (released) { released = false; return; }  // let the focus move on
      ev.preventDefault();
      indent(area, ev.shiftKey);
    });
    area.addEventListener("blur", function () { released = false; });
  });
})();
