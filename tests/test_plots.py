"""attnlib.book.plots: the house style applies outside a notebook, and heatmaps number rows as asked."""
import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from attnlib.book import plots  # noqa: E402


def test_house_style_outside_a_notebook():
    plots.use_house_style()
    assert matplotlib.rcParams["axes.spines.top"] is False
    for key in ("legend.fontsize", "xtick.labelsize", "ytick.labelsize", "axes.labelsize"):
        assert matplotlib.rcParams[key] >= 10, key
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    assert cycle and set(cycle) <= set(plots.OKABE_ITO.values())


# Colour difference in CAM02-UCS (Luo, Cui and Li, 2006), the uniform space of CIECAM02: a
# distance of about 1 is just noticeable side by side; 15 keeps two thin lines or markers
# apart at a glance. Deficiencies at full severity (deuteranopia, protanopia), as
# simulated by colorspacious (Machado, Oliveira and Fernandes, 2009).
MIN_DISTANCE = 15
VISIONS = {"normal vision": None, "deuteranopia": "deuteranomaly", "protanopia": "protanomaly"}


def as_seen(hex_colour: str, deficiency: str | None) -> np.ndarray:
    """The colour's CAM02-UCS coordinates as a reader with the deficiency sees it."""
    from colorspacious import cspace_convert

    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    if deficiency:
        rgb = np.clip(cspace_convert(rgb, {"name": "sRGB1+CVD", "cvd_type": deficiency, "severity": 100}, "sRGB1"), 0, 1)
    return cspace_convert(rgb, "sRGB1", "CAM02-UCS")


def closest_pair(colours: dict[str, str], deficiency: str | None) -> tuple[float, str, str]:
    seen = {name: as_seen(colour, deficiency) for name, colour in colours.items()}
    return min((float(np.linalg.norm(seen[a] - seen[b])), a, b) for a, b in itertools.combinations(seen, 2))


def test_house_colours_stay_apart_under_deuteranopia_and_protanopia():
    for vision, deficiency in VISIONS.items():
        distance, a, b = closest_pair(plots.COLORS, deficiency)
        assert distance >= MIN_DISTANCE, f"{vision}: {a} and {b} are {distance:.1f} apart in CAM02-UCS"


def test_the_old_palette_would_have_failed():
    """The check can fail: the palette before Okabe-Ito merged naive and tiled for deuteranopes."""
    old = {"naive": "#d62728", "tiled": "#2ca02c", "torch": "#ff7f0e"}
    distance, a, b = closest_pair(old, VISIONS["deuteranopia"])
    assert distance < MIN_DISTANCE and {a, b} == {"naive", "tiled"}


def test_every_path_has_its_own_colour_marker_and_line_style():
    styles = {path: plots.path_style(path) for path in ("naive", "tiled", "fused", "torch")}
    for key in ("color", "marker", "linestyle"):
        assert len({style[key] for style in styles.values()}) == len(styles), key


def tick_texts(ticks):
    return [tick.get_text() for tick in ticks]


def test_heatmap_numbers_rows_and_columns_from_first_index():
    fig, (zero, one) = plt.subplots(1, 2)
    plots.heatmap(zero, np.eye(2, 3))
    plots.heatmap(one, np.eye(2, 3), first_index=1)
    assert tick_texts(zero.get_xticklabels()) == ["0", "1", "2"]
    assert tick_texts(one.get_xticklabels()) == ["1", "2", "3"]
    assert tick_texts(one.get_yticklabels()) == ["1", "2"]
    assert [t.get_text() for t in one.texts][:2] == ["1.000", "0.000"]
    plt.close(fig)


def test_diagrams_draw_every_box():
    from attnlib.book import diagrams

    fig, (steps, tiles) = plt.subplots(2, 1)
    diagrams.four_steps(steps)
    diagrams.online_softmax_tiles(tiles, n_tiles=3)
    labels = [t.get_text() for t in steps.texts]
    assert "$Q$" in labels and "$O = PV$" in labels and "3. softmax by rows" in labels
    # per tile: its K, V box, its score tile and the state after it; then Q, the start and O
    assert len(tiles.patches) - sum(isinstance(p, diagrams.FancyArrowPatch) for p in tiles.patches) == 3 * 3 + 3
    plt.close(fig)


def test_transformer_blocks_put_layernorm_before_attention_in_pre_ln_and_after_the_sum_in_post_ln():
    from attnlib.book import diagrams

    fig, ax = plt.subplots()
    diagrams.transformer_blocks(ax)
    boxes = {}
    for text in ax.texts:
        x, y = text.get_position()
        boxes.setdefault("Pre-LN" if x < 5.1 else "Post-LN", []).append((y, text.get_text()))
    order = {name: [label.split("\n")[0] for _, label in sorted(items)] for name, items in boxes.items()}
    sublayers = {"LayerNorm", "attention", "MLP", "+"}
    assert [t for t in order["Pre-LN"] if t in sublayers] == ["LayerNorm", "attention", "+", "LayerNorm", "MLP", "+"]
    assert [t for t in order["Post-LN"] if t in sublayers] == ["attention", "+", "LayerNorm", "MLP", "+", "LayerNorm"]
    assert order["Pre-LN"][-1] == "Pre-LN" and order["Post-LN"][-1] == "Post-LN"
    plt.close(fig)


def test_gpu_memory_diagram_has_three_levels_and_their_contents():
    from attnlib.book import diagrams

    fig, ax = plt.subplots()
    diagrams.gpu_memory(ax)
    labels = [t.get_text() for t in ax.texts]
    assert sum("HBM" in t or "shared memory" in t or "registers" in t for t in labels) == 3
    assert {"$Q$", "$K_j$ tile", "acc"} <= set(labels)
    plt.close(fig)


def test_plain_log_ticks_label_data_that_lie_within_one_decade():
    """Fig 9.4's points lie at 250-620 TFLOP/s; matplotlib's default labels only 10^1 and 10^2."""
    def labels(ax):
        ax.figure.canvas.draw()
        low, high = ax.get_ylim()
        return [t.get_text() for t in ax.yaxis.get_ticklabels(which="both")
                if t.get_text() and low <= t.get_position()[1] <= high]

    fig, (default, plain) = plt.subplots(1, 2)
    for ax in (default, plain):
        ax.set_yscale("log")
        ax.plot([1, 2], [250, 620], "o")
        ax.set_ylim(1.5, 700)
    plots.plain_log_ticks(plain.yaxis)
    assert "500" not in labels(default)
    assert {"2", "10", "200", "500"} <= set(labels(plain)), labels(plain)
    plt.close(fig)
