"""Bar chart of abc.py's JSONs (session 44): each model and thread count, ms by arm, median with the fastest call as a tick."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).parent
runs = [("resnet18", 1, "r18_t1"), ("resnet18", 2, "r18_t2"), ("resnet50", 1, "resnet50_t1"),
        ("resnet50", 2, "resnet50_t2"), ("mobilenet_v2", 1, "mobilenet_v2_t1"), ("mobilenet_v2", 2, "mobilenet_v2_t2")]
arms = [("ort", "ONNX Runtime", "tab:green"), ("B", "tunecache, store B (s36)", "tab:gray"),
        ("C", "tunecache, store C (L1 rule)", "tab:blue")]
fig, axes = plt.subplots(1, len(runs), figsize=(15, 3.8))
for ax, (model, threads, stem) in zip(axes, runs):
    d = json.loads((here / f"{stem}.json").read_text())
    for j, (arm, label, color) in enumerate(arms):
        ax.bar(j, d["ms"][arm], color=color, label=label)
        ax.plot([j - 0.3, j + 0.3], [d["min_ms"][arm]] * 2, color="black", lw=1)
        ax.text(j, d["ms"][arm], f"{d['vs_ort'][arm]:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_title(f"{model}, {threads} thread{'s' if threads > 1 else ''}", fontsize=9)
    ax.set_xticks([])
axes[0].set_ylabel("ms a call (median; tick: fastest)")
axes[0].legend(fontsize=7, loc="lower left")
fig.suptitle("Session 44, AMD EPYC Zen 3 (znver3, AVX2, 2 cores), batch 1, zoo stores at 128 trials a task", fontsize=10)
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "engines_s44.png", dpi=90)
