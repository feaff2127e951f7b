"""Figure: the per-axis weights w(j -> i), drawn from the library's own tables.

Run by the docs build (matplotlib's ``plot`` directive).  Each panel is one
axis; each colour is one input point ``i`` and shows the weight every output
point ``j`` sends to it: ``l0[j]`` where ``x0[j] == i``, plus ``l1[j]`` where
``x1[j] == i``.  The column sums are 1 (every output point is fully
distributed); the row sums are what a constant ``grad_out`` gives back.
"""

import matplotlib.pyplot as plt
import numpy as np

from trilinear_bwd._core._coefficients import axis_coefficients

CASES = [
    (4, 8, False, "in=4, out=8, align_corners=False"),
    (4, 8, True, "in=4, out=8, align_corners=True"),
    (7, 3, False, "in=7, out=3, align_corners=False (downsampling)"),
]


def weight_matrix(n_in, n_out, align_corners):
    """Return W with W[i, j] = weight output point j sends to input point i."""
    x0, x1, l0, l1 = axis_coefficients(n_in, n_out, align_corners, 0.0)
    w = np.zeros((n_in, n_out))
    j = np.arange(n_out)
    np.add.at(w, (x0, j), l0)
    np.add.at(w, (x1, j), l1)
    return w


fig, axes = plt.subplots(1, len(CASES), figsize=(10.5, 3.9), sharey=True)
for ax, (n_in, n_out, corners, title) in zip(axes, CASES):
    w = weight_matrix(n_in, n_out, corners)
    j = np.arange(n_out)
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, n_in))
    for i in range(n_in):
        if w[i].any():
            ax.plot(j, w[i], "o-", color=colours[i], ms=4, lw=1.2,
                    label=f"i={i}: sum {w[i].sum():.3g}")
        else:
            ax.plot([], [], " ", label=f"i={i}: receives nothing")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("output point j")
    ax.set_xticks(j)
    ax.set_ylim(-0.05, 1.12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
              frameon=False, handlelength=1.2)
axes[0].set_ylabel("weight w(j -> i)")
fig.tight_layout()
