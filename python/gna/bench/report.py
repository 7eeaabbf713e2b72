"""The benchmark's outputs: a Markdown table, JSON, and an SVG (or PNG) chart of × cuDNN."""
import json

COLUMNS = ("case", "pass", "impl", "backend", "ms", "eff. TFLOP/s", "GB/s", "% copy", "× cuDNN",
           "× Flex", "gna-sim ms", "gna-sim ×", "cos vs fp32", "rel L1 vs fp32")


def _fmt(row, key, spec):
    value = row.get(key)
    return "—" if value is None else format(value, spec)


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    last = None
    for r in rows:
        case = r["case"] if (r["case"], r["pass"]) != last else ""
        last = (r["case"], r["pass"])
        ms = _fmt(r, "ms", ".3f") if r.get("error") is None else "error: " + r["error"][:60]
        lines.append(f"| {case} | {r['pass']} | {r['impl']} | {r.get('backend') or ''} | {ms} | "
                     f"{_fmt(r, 'tflops', '.1f')} | {_fmt(r, 'gbps', '.0f')} | "
                     f"{_fmt(r, 'copy_pct', '.0f')} | {_fmt(r, 'x_cudnn', '.2f')} | "
                     f"{_fmt(r, 'x_flex', '.2f')} | {_fmt(r, 'predicted_ms', '.3f')} | "
                     f"{_fmt(r, 'predicted', '.2f')} | {_fmt(r, 'cosine', '.5f')} | "
                     f"{_fmt(r, 'rel_l1', '.4f')} |")
    return "\n".join(lines) + "\n"


def write_json(path, meta, rows):
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


def _escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_chart(rows, title):
    """Horizontal bars of speed relative to cuDNN dense, one group per (case, pass)."""
    groups = []
    for r in rows:
        if r.get("x_cudnn") is None:
            continue
        key = f"{r['case']} [{r['pass']}]"
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append((r["impl"], r["x_cudnn"]))
    colors = {}
    palette = ["#7f7f7f", "#bcbd22", "#17becf", "#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    top = max([x for _, bars in groups for _, x in bars] + [1.0])
    bar_h, gap, left, width = 16, 26, 330, 460
    height = 60 + sum(len(b) * bar_h + gap for _, b in groups)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="10" y="20" font-size="14">{_escape(title)}</text>']
    x1 = left + width / top
    out.append(f'<line x1="{x1:.1f}" y1="30" x2="{x1:.1f}" y2="{height - 10}" stroke="#000" '
               f'stroke-dasharray="3,3"/>')
    y = 40
    for key, bars in groups:
        out.append(f'<text x="10" y="{y + 11}" font-weight="bold">{_escape(key)}</text>')
        y += 16
        for impl, x in bars:
            color = colors.setdefault(impl, palette[len(colors) % len(palette)])
            w = width * x / top
            out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_escape(impl)}</text>')
            out.append(f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" '
                       f'fill="{color}"/>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + 12}">{x:.2f}×</text>')
            y += bar_h
        y += gap - 16
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_chart(path, rows, title):
    if path.endswith(".png"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        data = [r for r in rows if r.get("x_cudnn") is not None]
        labels = [f"{r['case']} [{r['pass']}] {r['impl']}" for r in data]
        fig, ax = plt.subplots(figsize=(10, 0.28 * len(data) + 1))
        ax.barh(range(len(data)), [r["x_cudnn"] for r in data])
        ax.set_yticks(range(len(data)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(1.0, color="k", linestyle="--")
        ax.set_xlabel("speed relative to cuDNN SDPA dense (×)")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return
    with open(path, "w") as f:
        f.write(svg_chart(rows, title))
