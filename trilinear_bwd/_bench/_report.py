"""The kernel benchmark's report: a Markdown table and a chart (``python -m trilinear_bwd.bench``)."""

import numpy as np


def format_table(report):
    """Render a report as a Markdown table."""
    torch = any("torch_s" in r for r in report["results"])
    head = ["case", "layout", "dtype", "time (ms)", "1 thread (ms)", "threads speedup"]
    if torch:
        head += ["torch (ms)", "speedup vs torch"]
    head += ["% of bandwidth limit", f"% of {report['machine']['threads']}-thread copy"]
    first = report["machine"]["kernel_variant"]
    others = report["machine"].get("other_variants", [])
    for v in others:
        head += [f"{v} (ms)", f"{v} 1 thread (ms)", f"{first} speedup over {v}",
                 "... on 1 thread", f"{v} % of limit"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["results"]:
        row = [r["case"] + ("" if r["case"].endswith("-ac") or not r["align_corners"] else " ac"),
               r["layout"].upper(), r["dtype"], f"{1e3 * r['ours_s']:.2f}",
               f"{1e3 * r['ours_1t_s']:.2f}", f"{r['thread_scaling']:.2f}x"]
        if torch:
            row += [f"{1e3 * r['torch_s']:.1f}", f"{r['speedup_vs_torch']:.1f}x"]
        row += [f"{r['percent_of_limit']:.0f}%", f"{r['percent_of_all_threads_copy']:.0f}%"]
        for v in others:
            row += [f"{1e3 * r[f'ours_{v}_s']:.2f}", f"{1e3 * r[f'ours_1t_{v}_s']:.2f}",
                    f"{r[f'speedup_over_{v}']:.2f}x", f"{r[f'speedup_over_{v}_1t']:.2f}x",
                    f"{r[f'percent_of_limit_{v}']:.0f}%"]
        lines.append("| " + " | ".join(row) + " |")
    m = report["machine"]
    lines.append("")
    lines.append(
        f"Bandwidth limit from a plain copy: {report['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s "
        f"(np.copyto, read + write, one thread); the same copy on {m['threads']} thread(s) "
        f"moves {report['all_threads_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s. "
        f"{m['threads']} thread(s), kernel variant `{m['kernel_variant']}`"
        + "".join(f" and `{v}`" for v in others) + ", "
        f"{report.get('stat', 'median')} of {report['repeat']} interleaved rounds, "
        f"{report.get('cache', 'cold')} caches"
        + (f", torch {m['torch']} on {m['torch_threads']} thread(s)" if torch else "") + "."
    )
    return "\n".join(lines)


def plot(report, path):
    """Draw the speedup over torch and the percentage of the bandwidth limit (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    labels = [f"{r['case']}\n{r['layout'].upper()} {r['dtype']}" for r in results]
    x = np.arange(len(results))
    torch = all("speedup_vs_torch" in r for r in results)
    fig, axes = plt.subplots(1, 2 if torch else 1, figsize=(13 if torch else 7, 4.5),
                             squeeze=False)
    ax = axes[0, 0]
    ax.bar(x - 0.2, [r["percent_of_limit"] for r in results], 0.4, color="#4c72b0",
           label="of a 1-thread copy (the limit)")
    ax.bar(x + 0.2, [r["percent_of_all_threads_copy"] for r in results], 0.4, color="#8fb0d8",
           label=f"of a {report['machine']['threads']}-thread copy")
    ax.axhline(100, color="k", lw=0.8, ls="--")
    ax.set_ylabel("% of memory-bandwidth limit")
    ax.set_title("Fraction of the bandwidth limit reached")
    ax.legend(fontsize=8)
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
    if torch:
        ax = axes[0, 1]
        ax.bar(x, [r["speedup_vs_torch"] for r in results], color="#dd8452")
        ax.axhline(1, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylabel("speedup over torch (x)")
        ax.set_title(f"vs torch {report['machine'].get('torch', '')}")
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
        for xi, r in zip(x, results):
            ax.text(xi, r["speedup_vs_torch"], f"{r['speedup_vs_torch']:.1f}", ha="center",
                    va="bottom", fontsize=7)
    fig.suptitle(f"trilinear_bwd {report['machine']['trilinear_bwd']}: "
                 f"{report['machine']['threads']} threads, "
                 f"{report['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s copy bandwidth")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
