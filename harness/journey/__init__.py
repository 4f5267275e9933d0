"""The journey: what was tried, what merged, what it bought, and why everything else was dropped.

Pure functions from ledger records (:class:`~harness.ledger.Attempt`, phases, scores) to rows
and documents; nothing here reads the ledger, the clock or the disk (harness/cli/report.py
does), so the same records always give the same bytes. The modules:

- :mod:`.rows`: which attempts are rows (one that tried nothing is not), the result column,
  phases and summaries;
- :mod:`.render`: Markdown (the published table), CSV, JSON;
- :mod:`.plot`: what the plot draws, as SVG for the page and as a PNG;
- :mod:`.page`: the self-contained HTML page;
- :mod:`.text`: every string, in English and Chinese.
"""
from __future__ import annotations

from .page import AttemptFiles, commands, diff_stats, hidden_text, html, reasons, wall_s
from .plot import KINDS, Panel, PlotPoint, marker_style, outcome_kind, plot_panels, plot_png, svg
from .render import csv_text, json_obj, markdown
from .rows import (MINUS, SCORER_CHECK, JourneyRow, Section, accuracy_tag, change, describe,
                   fmt_delta, fmt_estimate, fmt_gain, headline_ms, judgment_view, ledger_view,
                   measured, remeasured, result, rows, sections, shown, summary, tried_nothing)
from .text import TEXT, check_lang

__all__ = ["AttemptFiles", "JourneyRow", "KINDS", "MINUS", "Panel",
           "PlotPoint", "SCORER_CHECK", "Section", "TEXT", "accuracy_tag",
           "change", "check_lang", "commands", "csv_text", "describe", "diff_stats", "fmt_delta",
           "fmt_estimate", "fmt_gain", "headline_ms", "hidden_text", "html", "json_obj",
           "judgment_view", "ledger_view", "markdown", "marker_style", "measured", "outcome_kind",
           "plot_panels", "plot_png", "reasons", "remeasured", "result", "rows", "sections",
           "shown", "summary", "svg", "tried_nothing", "wall_s"]
