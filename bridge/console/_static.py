"""The console's stylesheet and its one script (served from ``/static/``; no build step).

The script follows a run page's live area over SSE (``EventSource``): each ``timeline`` event
carries the re-rendered area (escaped on the server) and replaces it, so the two lanes, the
tasks and the events move without a reload. ``EventSource`` reconnects by itself, sending the
last event id it saw; the server resumes after it.
"""

from __future__ import annotations

CONSOLE_JS = """\
"use strict";
(function () {
  const live = document.getElementById("live");
  const state = document.getElementById("live-state");
  if (!live || !live.dataset.stream || !window.EventSource) { return; }
  const source = new EventSource(live.dataset.stream + "?after=" + live.dataset.after);
  source.addEventListener("open", function () {
    if (state) { state.textContent = "live: following the run's events"; }
  });
  source.addEventListener("timeline", function (message) {
    const update = JSON.parse(message.data);
    live.innerHTML = update.html;  // rendered and escaped by the console
    live.dataset.after = String(update.seq);
    live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
    if (state) { state.textContent = "live: updated at event #" + update.seq; }
    const count = document.getElementById("attention-count");
    if (count) {
      count.textContent = String(update.attention);
      count.hidden = update.attention === 0;
    }
  });
  source.addEventListener("error", function () {
    if (state) { state.textContent = "live: reconnecting…"; }
  });
})();
"""

CONSOLE_CSS = """\
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2329; background: #f5f7fa; }
header { background: #1f3a5f; color: #fff; padding: 10px 24px; display: flex; gap: 24px;
  align-items: center; }
header nav { display: flex; gap: 16px; align-items: center; flex: 1; }
header a { color: #fff; }
header .who { margin-left: auto; opacity: .9; }
main { padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 12px; }
h2 { font-size: 16px; margin: 20px 0 8px; }
h2 small { font-weight: normal; color: #5b6670; margin-left: 6px; }
.card { background: #fff; border: 1px solid #d9dee4; border-radius: 6px; padding: 12px 16px;
  margin: 0 0 14px; max-width: 1100px; }
.attention[data-kind="input_waiting"] { border-left: 5px solid #fb8c00; }
.attention[data-kind="input_overdue"] { border-left: 5px solid #e65100; }
.attention[data-kind="orphaned_run"] { border-left: 5px solid #8e24aa; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 8px 0; font-size: 13px; }
.legend .item { display: inline-flex; align-items: center; gap: 4px; }
.question { white-space: pre-wrap; font-weight: bold; }
.attention[data-kind="unknown_outcome"] { border-left: 5px solid #fdd835; }
.attention[data-kind="lost_task"] { border-left: 5px solid #c62828; }
.attention[data-kind="anomaly"] { border-left: 5px solid #d81b60; }
.summary { font-size: 15px; }
.meta, .muted, .help, .next { color: #5b6670; font-size: 13px; }
.field { margin: 10px 0; }
.field label { font-weight: 600; }
.field .kind { color: #8a949d; font-size: 12px; }
.field input[type=text], .field input[type=email], .field input[type=url], .field select {
  padding: 5px 8px; min-width: 260px; border: 1px solid #b8c1ca; border-radius: 4px; }
.field .choice { margin-right: 16px; font-weight: normal; }
.has-error input, .has-error select { border-color: #c62828; }
.field-error, .error { color: #b71c1c; font-weight: 600; }
.required { color: #b71c1c; }
.flash { background: #e8f5e9; border: 1px solid #a5d6a7; padding: 8px 12px; border-radius: 4px;
  max-width: 1100px; }
button { padding: 5px 12px; border: 1px solid #8a949d; border-radius: 4px; background: #fff;
  cursor: pointer; }
button.primary { background: #1f6feb; color: #fff; border-color: #1f6feb; }
button.danger { border-color: #c62828; color: #c62828; }
header button { background: transparent; color: #fff; border-color: #9fb3c8; }
form.inline { display: inline; }
.buttons { margin-top: 12px; }
table { border-collapse: collapse; background: #fff; font-size: 13px; margin: 4px 0 12px; }
td, th { border-bottom: 1px solid #e6e9ed; padding: 4px 10px; text-align: left;
  vertical-align: top; }
.badge { padding: 1px 8px; border-radius: 10px; font-size: 12px; background: #9e9e9e;
  color: #fff; }
.badge[data-status=in_progress], .badge[data-status=working] { background: #1e88e5; }
.badge[data-status=input_required] { background: #fb8c00; }
.badge[data-status=completed] { background: #43a047; }
.badge[data-status=failed] { background: #e53935; }
.badge[data-status=cancelled] { background: #757575; }
.badge[data-status=incomplete] { background: #8e24aa; }
.badge[data-status=lost] { background: #424242; outline: 2px dashed #c62828; }
.count { background: #fb8c00; border-radius: 10px; padding: 0 7px; font-size: 12px; }
.timeline { overflow-x: auto; background: #fff; border: 1px solid #d9dee4; }
.filters input { min-width: 320px; padding: 4px 6px; }
"""
