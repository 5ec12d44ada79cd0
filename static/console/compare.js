/* An evaluation's replay: the first step where the two runs decided
 * differently is opened on both sides and scrolled to. */
(function () {
  "use strict";
  var row = document.getElementById("divergence");
  if (!row) { return; }
  row.querySelectorAll("details[data-anchor-open]").forEach(function (d) { d.open = true; });
  row.scrollIntoView({block: "start"});
})();
