"""PNG plots from the results JSON (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPS = ("create", "noop", "add_node", "delete")


def _anchor_value(value: Any) -> float | None:
    """Anchors are numbers, None (not given) or a range like "8-10" (plotted at its midpoint)."""
    if value is None:
        return None
    if isinstance(value, str):
        low, high = (float(v) for v in value.split("-"))
        return (low + high) / 2
    return float(value)


def latency_cdf(latency: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = sorted(v / 1000 for v in latency["samples"])
    n = len(ours)
    # cloud-provider-aws modelled: one worker, the i-th Service waits for the i-1 before it.
    per_service = latency["anchor_model_s"] / latency["services"]
    upstream = [per_service * (i + 1) for i in range(latency["services"])]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.step(
        ours,
        [(i + 1) / n for i in range(n)],
        where="post",
        label=f"ours (measured, concurrency {latency['concurrency']})",
    )
    ax.step(upstream, [(i + 1) / len(upstream) for i in range(len(upstream))], where="post", linestyle="--",
            label="cloud-provider-aws (modelled: 1 worker x 19 calls)")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("watcher observed -> status written (s, log scale)")
    ax.set_ylabel("fraction of Services")
    ax.set_title(
        f"{latency['services']} NLB Services created at once, +{latency['injected_latency_ms']} ms per AWS call"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.text(0.01, 0.01, "one run on this machine", fontsize=7, alpha=0.6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def calls_per_operation(aws_calls: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4), dpi=110, sharey=True)
    for ax, lb_type in zip(axes, ("nlb", "clb"), strict=True):
        ours = aws_calls.get(lb_type) or {}
        anchor = (aws_calls.get("anchor") or {}).get(lb_type) or {}
        xs = range(len(OPS))
        ax.bar([x - 0.2 for x in xs], [float(ours.get(op) or 0) for op in OPS], width=0.4, label="ours")
        anchor_values = [_anchor_value(anchor.get(op)) for op in OPS]
        ax.bar([x + 0.2 for x in xs], [v or 0 for v in anchor_values], width=0.4, label="cloud-provider-aws")
        for x, op, value in zip(xs, OPS, anchor_values, strict=True):
            if value is None:
                ax.text(x + 0.2, 0.3, "n/a", ha="center", fontsize=7)
            elif isinstance(anchor.get(op), str):
                ax.text(x + 0.2, value + 0.3, anchor[op], ha="center", fontsize=7)
        for x, op in zip(xs, OPS, strict=True):
            ax.text(x - 0.2, float(ours.get(op) or 0) + 0.3, str(ours.get(op, "")), ha="center", fontsize=7)
        ax.set_xticks(list(xs), [op.replace("_", " ") for op in OPS])
        ax.set_title(f"{lb_type.upper()}: 2 TCP ports, 3 nodes")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("AWS API calls (ELB, EC2, tagging)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_all(results: dict[str, Any], directory: Path) -> list[Path]:
    written = []
    if results.get("latency_ms") and results["latency_ms"].get("samples"):
        written.append(latency_cdf(results["latency_ms"], directory / "latency_cdf.png"))
    if results.get("aws_calls"):
        written.append(calls_per_operation(results["aws_calls"], directory / "calls_per_operation.png"))
    return written
