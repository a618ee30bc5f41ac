"""attnlib.plots: the house style applies outside a notebook, and heatmaps number rows as asked."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from attnlib import plots  # noqa: E402


def test_house_style_outside_a_notebook():
    plots.use_house_style()
    assert matplotlib.rcParams["axes.spines.top"] is False
    assert matplotlib.rcParams["legend.fontsize"] >= 9


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
    from attnlib import diagrams

    fig, (steps, tiles) = plt.subplots(2, 1)
    diagrams.four_steps(steps)
    diagrams.online_softmax_tiles(tiles, n_tiles=3)
    labels = [t.get_text() for t in steps.texts]
    assert "$Q$" in labels and "$O = AV$" in labels and "3. softmax by rows" in labels
    # per tile: its K, V box, its score tile and the state after it; then Q, the start and O
    assert len(tiles.patches) - sum(isinstance(p, diagrams.FancyArrowPatch) for p in tiles.patches) == 3 * 3 + 3
    plt.close(fig)


def test_gpu_memory_diagram_has_three_levels_and_their_contents():
    from attnlib import diagrams

    fig, ax = plt.subplots()
    diagrams.gpu_memory(ax)
    labels = [t.get_text() for t in ax.texts]
    assert sum("HBM" in t or "shared memory" in t or "registers" in t for t in labels) == 3
    assert {"$Q$", "$K_j$ tile", "acc"} <= set(labels)
    plt.close(fig)
