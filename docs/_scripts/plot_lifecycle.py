"""Figure: the executor's states and the calls that move between them.

Run by the docs build (matplotlib's ``plot`` directive).  The states and
transitions are those of ``trilinear_bwd._executor.Executor``.
"""

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

fig, ax = plt.subplots(figsize=(10.0, 4.8))
ax.set_xlim(0, 10.0)
ax.set_ylim(-0.3, 4.6)
ax.axis("off")

H = 0.95  # box height
BOX = dict(boxstyle="round,pad=0.1,rounding_size=0.18", lw=1.4, edgecolor="#444444")
REFUSED = "execute, set_repeatable,\nupdate_arrays: 361001"
boxes = {
    # name: (x, y, width, title, detail, face colour)
    "start": (0.1, 3.4, 2.0, "get_workspace_size(...)", "validates and plans", "#eeeeee"),
    "ready": (3.6, 3.4, 1.9, "ready", "single-use", "#d9ead3"),
    "consumed": (7.6, 3.4, 2.1, "consumed", REFUSED, "#f4cccc"),
    "rready": (3.6, 1.25, 1.9, "ready", "repeatable", "#cfe2f3"),
    "destroyed": (7.6, 0.15, 2.1, "destroyed", REFUSED, "#dddddd"),
}
for x, y, w, title, detail, face in boxes.values():
    ax.add_patch(FancyBboxPatch((x, y), w, H, facecolor=face, **BOX))
    ax.text(x + w / 2, y + H * 0.68, title, ha="center", va="center", fontsize=10,
            weight="bold")
    ax.text(x + w / 2, y + H * 0.3, detail, ha="center", va="center", fontsize=7.5,
            color="#990000" if "361001" in detail else "#333333")


def at(name, where):
    """A point just outside box ``name``: l, r, t, b, or b/t with a fraction (b.8)."""
    x, y, w = boxes[name][:3]
    side, frac = where[0], float(where[1:] or 0.5)
    if side == "l":
        return (x - 0.12, y + H / 2)
    if side == "r":
        return (x + w + 0.12, y + H / 2)
    return (x + w * frac, y + H + 0.12 if side == "t" else y - 0.12)


def arrow(a, b, label="", colour="#222222", rad=0.0, offset=(0.0, 0.0)):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=13, lw=1.3,
                                 color=colour, connectionstyle=f"arc3,rad={rad}"))
    if label:
        ax.text((a[0] + b[0]) / 2 + offset[0], (a[1] + b[1]) / 2 + offset[1], label,
                ha="center", va="center", fontsize=8, color=colour,
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0))


arrow(at("start", "r"), at("ready", "l"), "returns\n(size, executor)")
arrow(at("ready", "r"), at("consumed", "l"), "execute(...)\nruns once")
arrow(at("ready", "b"), at("rready", "t"), "set_repeatable()")

# execute and update_arrays keep a repeatable executor ready: a loop below it.
x, y, w = boxes["rready"][:3]
ax.add_patch(FancyArrowPatch((x + 0.35, y - 0.12), (x + w - 0.35, y - 0.12),
                             arrowstyle="-|>", mutation_scale=13, lw=1.3, color="#1f4e79",
                             connectionstyle="arc3,rad=1.3"))
ax.text(x - 0.15, y - 0.45, "execute(...),\nupdate_arrays(...):\nstays ready", ha="right",
        va="center", fontsize=8, color="#1f4e79")

grey = "#777777"
arrow(at("ready", "b0.85"), at("destroyed", "l"), colour=grey, rad=0.25)
arrow(at("rready", "r"), at("destroyed", "t0.25"), colour=grey, rad=-0.25)
arrow(at("consumed", "b0.5"), at("destroyed", "t0.5"), colour=grey)
ax.text(7.1, 2.55, "destroy(), or leaving\na with-block,\nfrom any state", fontsize=8,
        color=grey, ha="center", va="center",
        bbox=dict(facecolor="white", edgecolor="none", pad=1.0))
ax.text(0.1, 2.3, "While a run is in progress (another\nthread, or a stream's worker),\n"
        "execute, set_repeatable, update_arrays\nand destroy get 361001: the executor\n"
        "is held by the run, not queued.", fontsize=8, va="top", color="#444444")
fig.tight_layout()
