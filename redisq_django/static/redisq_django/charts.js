/* redisq_django's charts: time series drawn with the vendored uPlot (vendor/uplot/).
 *
 * The server never writes script for a chart: it writes an element
 *   a div of class "redisq-uplot" (its aria-label a summary in words) holding a script
 *   element of type "application/json" whose text is the chart's spec
 * and RedisqCharts.drawAll(root) draws every such element under root (the whole page by
 * default, once the page has loaded; a live page calls it again on the region it swapped).
 * A JSON script is data, never run, so a page under a Content-Security-Policy needs nothing
 * but this file allowed.
 *
 * The spec:
 *   title      the chart's heading (drawn by uPlot)
 *   unit       "ms" (durations, shown as people read them: 850 ms, 12 s, 4.2 min, 1.5 h),
 *              or any other text: the value axis's label and the legend's suffix
 *              ("per minute", "messages"; "" for none)
 *   x          the points' times, in seconds since the epoch
 *   xMin, xMax the time axis's ends in seconds (default: the first and last point's,
 *              widened to 10 minutes around a lone point), so that a chosen range shows
 *              whole even where it holds few points
 *   series     [{label, values: [number|null, …]}]; null is a gap
 *   empty      text shown over a chart that has no value but gaps and zeros
 *   maxSeries  at most this many lines (default 6): the largest by sum stay, the rest are
 *              summed into one "other (N)" line, so colours never repeat
 *   otherLabel that line's label, "{n}" standing for how many it sums (default
 *              "other ({n})")
 *   height     pixels (default 220); the width follows the element's
 *   tz         an IANA time zone for the time axis (default: the browser's)
 *   yMin       the scale's floor (default 0: every figure we draw is a count or a time)
 *
 * Drag across a chart to zoom in, double-click to zoom out; the legend shows the values
 * under the pointer.
 */
(function () {
  "use strict";

  // Okabe & Ito's palette: told apart with every common colour-vision deficiency.
  var COLOURS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#7F7F7F", "#000000"];

  function duration(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) { return "–"; }
    var a = Math.abs(ms);
    if (a === 0) { return "0"; }
    if (a < 1) { return ms.toFixed(2) + " ms"; }
    if (a < 1000) { return (a < 10 ? ms.toFixed(1) : Math.round(ms)) + " ms"; }
    if (a < 60000) { return trim(ms / 1000) + " s"; }
    if (a < 3600000) { return trim(ms / 60000) + " min"; }
    return trim(ms / 3600000) + " h";
  }

  function trim(v) {
    // 3 significant figures at most, no trailing zeros: 12.3, 120, 1.5
    var a = Math.abs(v);
    var s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
    return s.indexOf(".") < 0 ? s : s.replace(/\.?0+$/, "");
  }

  function count(v) {
    if (v === null || v === undefined || isNaN(v)) { return "–"; }
    var a = Math.abs(v);
    if (a >= 1e9) { return trim(v / 1e9) + "G"; }
    if (a >= 1e6) { return trim(v / 1e6) + "M"; }
    if (a >= 1e4) { return trim(v / 1e3) + "k"; }
    return Number.isInteger(v) ? v.toLocaleString() : trim(v);
  }

  function formatter(unit, suffixed) {
    if (unit === "ms") { return duration; }
    var suffix = unit && suffixed ? " " + unit : "";
    return function (v) { return v === null || v === undefined ? "–" : count(v) + suffix; };
  }

  // Wide enough for the longest tick label ("16.7 min", "1.5k per minute"): a fixed
  // width cut the first characters off long ones.
  function valueAxisSize(u, values) {
    var longest = 0;
    (values || []).forEach(function (v) { longest = Math.max(longest, String(v).length); });
    return Math.max(60, Math.ceil(longest * 7.5) + 20);
  }

  // A value between two gaps (a lone bucket with data) draws no line: give it a dot.
  function isolated(u, seriesIdx, shown) {
    if (shown) { return null; }  // every point is drawn already
    var d = u.data[seriesIdx], out = [];
    for (var i = 0; i < d.length; i++) {
      if (d[i] !== null && d[i] !== undefined && (i === 0 || d[i - 1] === null) &&
          (i === d.length - 1 || d[i + 1] === null)) { out.push(i); }
    }
    return out.length ? out : null;
  }

  // The time axis in 24-hour ISO style (2026-11-27, 13:05), as the pages' tables and
  // every operator reads it, not uPlot's US defaults (11/27/26, 1:05pm). Per tick spacing:
  // the label, then the line under it where a year, month, day... begins (uPlot's table).
  var TIME_TICKS = [
    [3600 * 24 * 365, "{YYYY}", null, null, null, null, null, null, 1],
    [3600 * 24 * 28, "{YYYY}-{MM}", "\n{YYYY}", null, null, null, null, null, 1],
    [3600 * 24, "{MM}-{DD}", "\n{YYYY}", null, null, null, null, null, 1],
    [3600, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
    [60, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
    [1, ":{ss}", "\n{YYYY}-{MM}-{DD} {HH}:{mm}", null, "\n{MM}-{DD} {HH}:{mm}", null,
     "\n{HH}:{mm}", null, 1]
  ];

  // The time axis's ticks: every step uPlot may choose (s), and the font its labels are
  // drawn in, which labelSpace measures them with.
  var TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                    21600, 43200, 86400, 172800, 604800, 2419200, 31536000];
  var AXIS_FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", ' +
                  'Arial, "Noto Sans", sans-serif';
  var LABEL_GAP = 12;  // px between two labels' text
  var measurer = null;

  function textWidth(text) {
    measurer = measurer || document.createElement("canvas").getContext("2d");
    measurer.font = AXIS_FONT;
    return measurer.measureText(text).width;
  }

  // The widest line a tick of step `incr` may draw: its own label, or the line under it
  // where a year, day or minute begins (always under the first tick). Widest digits
  // stand for every date.
  var widest = {};
  function labelWidth(incr) {
    var row = TIME_TICKS[TIME_TICKS.length - 1];
    for (var i = 0; i < TIME_TICKS.length; i++) {
      if (incr >= TIME_TICKS[i][0]) { row = TIME_TICKS[i]; break; }
    }
    if (widest[row[0]] === undefined) {
      var most = 0;
      for (var j = 1; j < 8; j++) {
        if (!row[j]) { continue; }
        row[j].replace(/\{YYYY\}/g, "8888").replace(/\{\w+\}/g, "88").split("\n")
          .forEach(function (line) { most = Math.max(most, textWidth(line)); });
      }
      widest[row[0]] = most;
    }
    return widest[row[0]];
  }

  // uPlot's space (px between ticks) chosen from the labels' width: the fixed 50 px let a
  // chart zoomed to a minute draw "2026-12-02 14:45" under one tick and "14:46" under the
  // next, one over the other. The answer lies between the last step too tight for its
  // labels and the first that fits, so that uPlot, taking the first step at least this
  // wide, takes that one.
  function labelSpace(u, axisIdx, min, max, dim) {
    var span = max - min, before = 0;
    if (!(span > 0) || !(dim > 0)) { return 50; }
    for (var i = 0; i < TIME_INCRS.length; i++) {
      var px = TIME_INCRS[i] / span * dim, need = labelWidth(TIME_INCRS[i]) + LABEL_GAP;
      if (px >= need) { return Math.max(need, before + 0.5); }
      before = px;
    }
    return dim;
  }

  function timeRange(spec) {
    var x = spec.x || [];
    var lo = spec.xMin !== undefined ? spec.xMin : x[0];
    var hi = spec.xMax !== undefined ? spec.xMax : x[x.length - 1];
    if (lo === undefined || hi === undefined) { return null; }
    if (hi - lo < 60) { lo -= 300; hi += 300; }
    return [lo, hi];
  }

  function sum(values) {
    var total = 0;
    for (var i = 0; i < values.length; i++) { if (values[i] !== null) { total += values[i]; } }
    return total;
  }

  // The largest series by sum keep their own line; the rest become one "other" line.
  function fold(series, most, label) {
    if (series.length <= most) { return series; }
    var ranked = series.slice().sort(function (a, b) { return sum(b.values) - sum(a.values); });
    var kept = ranked.slice(0, most - 1), rest = ranked.slice(most - 1);
    var n = rest[0].values.length, other = new Array(n);
    for (var i = 0; i < n; i++) {
      var v = null;
      for (var j = 0; j < rest.length; j++) {
        var w = rest[j].values[i];
        if (w !== null && w !== undefined) { v = (v || 0) + w; }
      }
      other[i] = v;
    }
    kept.push({label: (label || "other ({n})").replace("{n}", rest.length), values: other,
               other: true});
    return kept;
  }

  function isEmpty(series) {
    return series.every(function (s) {
      return s.values.every(function (v) { return v === null || v === undefined || v === 0; });
    });
  }

  function draw(el, zoom) {
    var source = el.querySelector('script[type="application/json"]');
    if (!source || !window.uPlot) { return null; }
    var spec = JSON.parse(source.textContent);
    if (el._redisqChart) { el._redisqChart.destroy(); }
    var old = el.querySelector(".redisq-uplot-empty");
    if (old) { old.remove(); }
    var series = fold(spec.series || [], spec.maxSeries || 6, spec.otherLabel);
    var unit = spec.unit || "";
    var tick = formatter(unit, false), fmt = formatter(unit, true);
    var tz = spec.tz, xRange = timeRange(spec);
    var opts = {
      title: spec.title || "",
      width: Math.max(240, el.clientWidth || 600),
      height: spec.height || 220,
      tzDate: tz ? function (ts) { return uPlot.tzDate(new Date(ts * 1000), tz); } : undefined,
      cursor: {drag: {x: true, y: false}},
      // The whole range when uPlot ranges on the data (first drawing, double-click), the
      // window asked for otherwise (a drag: always returning the whole range undid it).
      // A window reaching outside the whole range is uPlot's own: for a lone time it
      // widens to years, which squeezed the point against the edge.
      scales: {x: {time: true, range: function (u, lo, hi) {
        var x = spec.x || [];
        var auto = lo === null || lo === undefined || (lo === x[0] && hi === x[x.length - 1]) ||
          (xRange && (lo < xRange[0] || hi > xRange[1]));
        return xRange && auto ? xRange : [lo, hi];
      }},
               y: {range: function (u, lo, hi) {
        var floor = spec.yMin === undefined ? 0 : spec.yMin;
        var top = hi > floor ? hi : floor + 1;
        return [Math.min(floor, lo), top + (top - floor) * 0.05];
      }}},
      axes: [
        {values: TIME_TICKS, incrs: TIME_INCRS, space: labelSpace, font: AXIS_FONT},
        {values: function (u, ticks) { return ticks.map(tick); }, size: valueAxisSize,
         label: unit === "ms" ? "" : unit, labelSize: unit && unit !== "ms" ? 20 : 0}
      ],
      series: [{value: "{YYYY}-{MM}-{DD} {HH}:{mm}"}].concat(series.map(function (s, i) {
        var colour = s.other ? "#9a9a9a" : COLOURS[i % COLOURS.length];
        return {label: s.label, stroke: colour, width: 2, spanGaps: false,
                points: {show: (spec.x || []).length < 3, filter: isolated}, value: function (u, v) { return fmt(v); }};
      }))
    };
    var data = [spec.x || []].concat(series.map(function (s) { return s.values; }));
    var chart = new uPlot(opts, data, el);
    el._redisqChart = chart;
    el._redisqFull = xRange;
    if (zoom) { chart.setScale("x", {min: zoom[0], max: zoom[1]}); }
    el.dataset.drawn = String(series.length);
    if (spec.empty && isEmpty(series)) {
      var note = document.createElement("span");
      note.className = "redisq-uplot-empty";
      note.textContent = spec.empty;
      el.appendChild(note);
    }
    return chart;
  }

  // What names a chart across redraws: its own id, or its figure's.
  function keyOf(el) {
    return el.id || (el.parentElement && el.parentElement.id) || "";
  }

  // zooms: {key: [min, max]} from release(), the time windows to show again.
  function drawAll(root, zooms) {
    var els = (root || document).querySelectorAll(".redisq-uplot");
    for (var i = 0; i < els.length; i++) { draw(els[i], zooms ? zooms[keyOf(els[i])] : null); }
  }

  // Before a live page replaces its charts' elements: destroys their charts (each holds
  // listeners on the window) and returns the time windows the user had zoomed into, by
  // key, so that drawAll(root, zooms) keeps them.
  function release(root) {
    var zooms = {}, els = (root || document).querySelectorAll(".redisq-uplot");
    for (var i = 0; i < els.length; i++) {
      var c = els[i]._redisqChart, full = els[i]._redisqFull, key = keyOf(els[i]);
      if (!c) { continue; }
      var x = c.scales.x;
      if (key && full && (x.min > full[0] + 1 || x.max < full[1] - 1)) { zooms[key] = [x.min, x.max]; }
      c.destroy();
      els[i]._redisqChart = null;
    }
    return zooms;
  }

  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      var els = document.querySelectorAll(".redisq-uplot");
      for (var i = 0; i < els.length; i++) {
        var c = els[i]._redisqChart;
        if (c) { c.setSize({width: Math.max(240, els[i].clientWidth), height: c.height}); }
      }
    }, 150);
  });

  window.RedisqCharts = {drawAll: drawAll, draw: draw, release: release, duration: duration,
                         count: count, fold: fold};
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  } else {
    drawAll(document);
  }
})();
