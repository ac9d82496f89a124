// The dashboard's one script: live logs (server-sent events) and loading a workload file
// into the plan form. Nothing is fetched from another site.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var log = document.getElementById("log");
  if (log && log.dataset.stream) {
    var status = document.getElementById("log-state");
    var events = new EventSource(log.dataset.stream);
    events.onmessage = function (e) {
      var line = JSON.parse(e.data);
      var prefix = line.stage ? line.stage + (line.item !== null && line.item !== undefined ? "[" + line.item + "]" : "") + " | " : "";
      if (line.stream === "nodus") { prefix = "nodus: "; }
      log.appendChild(document.createTextNode(prefix + line.text + "\n"));
      log.scrollTop = log.scrollHeight;
    };
    events.addEventListener("end", function (e) {
      events.close();
      if (status) { status.textContent = "the run ended (" + e.data + "): the log is complete"; }
    });
    events.onerror = function () {
      if (status && events.readyState === EventSource.CLOSED) { status.textContent = "the log stream closed"; }
    };
  }
  var file = document.getElementById("plan-file");
  if (file) {
    file.addEventListener("change", function () {
      var chosen = file.files[0];
      if (!chosen) { return; }
      var reader = new FileReader();
      reader.onload = function () {
        document.getElementById("plan-text").value = reader.result;
        document.getElementById("plan-name").value = chosen.name;
      };
      reader.readAsText(chosen);
    });
  }
});
