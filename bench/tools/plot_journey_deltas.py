"""Plot a journey JSON's measured score changes per attempt with their bootstrap intervals
(for a run whose main never moved, where main's score-over-time plot has one point at most).

    python bench/tools/plot_journey_deltas.py JOURNEY.json OUT.png
"""
import json
import sys

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

journey = json.load(open(sys.argv[1]))
rows = [r for p in journey["phases"] for r in p["rows"] if r["score_change_ms"] is not None]
fig = Figure(figsize=(8, 3.2), dpi=100, layout="constrained")
FigureCanvasAgg(fig)
ax = fig.subplots()
colors = {"merged": "#2f855a", "abandoned": "#c53030"}
for r in rows:
    lo, hi = r["ci_ms"]
    d = r["score_change_ms"]
    ax.errorbar([r["#"]], [d], yerr=[[d - lo], [hi - d]], fmt="o", capsize=3,
                color=colors.get(r["state"], "#4a5568"))
    ax.annotate(r["reason"] or r["state"], (r["#"], hi), textcoords="offset points", xytext=(0, 4),
                fontsize=6, ha="center")
ax.axhline(0, color="#718096", linewidth=0.8)
ax.set_xlabel("attempt #", fontsize=8)
ax.set_ylabel("score change B - A (ms), 95 % CI", fontsize=8)
ax.set_title("kern loop, tuner backend: measured score change per attempt", fontsize=9, loc="left")
ax.tick_params(labelsize=7)
ax.grid(True, alpha=0.3)
fig.savefig(sys.argv[2], format="png", metadata={"Software": None})
