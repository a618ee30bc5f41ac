"""The logic of benchmarks/tiled_window.py: its arguments, the mask torch gets, the tile counts.

Nothing here is timed; one run on a tiny sequence checks what the script writes.
"""
import json
import pathlib
import sys

import pytest
import torch

from test_window_and_sinks import window_allowed

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import tiled_window as bench  # noqa: E402  (benchmarks/ is not a package)


def test_widths_are_read_in_order_with_s_for_the_whole_length():
    assert bench.window_sizes("64, 128,S", 4096) == [64, 128, 4096]
    assert bench.window_sizes(bench.DEFAULT_WINDOWS, 4096) == [64, 128, 256, 512, 1024, 2048, 4096]


@pytest.mark.parametrize("text, words", [
    ("0,64", "got '0'"), ("64,5000", "got '5000'"), ("64,x", "got 'x'"), ("-3", "got '-3'"),
    ("64,64", "must not repeat a width"),
])
def test_bad_widths_are_refused_by_name(text, words):
    with pytest.raises(ValueError, match="--windows must") as caught:
        bench.window_sizes(text, 4096)
    assert words in str(caught.value)


def test_bad_sizes_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        bench.parse(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("width", [1, 3, 16])
def test_torch_gets_the_pattern_of_the_window(width):
    """W keys: the query itself and the W - 1 before it (transformers' sliding_window = W)."""
    expected = window_allowed(16, 16, None, 0, 0) & window_allowed(16, 16, width - 1, None, 0)
    assert torch.equal(bench.dense_mask(16, width), expected)
    assert int(bench.dense_mask(16, width)[-1].sum()) == width


def test_the_tile_count_of_a_window_as_wide_as_the_sequence_is_the_causal_triangle():
    # a 16 x 8 grid of 256 x 512 tiles: query block a reaches key block a // 2
    assert bench.tiles_visited(4096, 4096, 256, 512) == bench.tiles_visited(4096, None, 256, 512) == 72
    # W = 64: a query block starting on a key block's edge reaches back into the block before
    assert bench.tiles_visited(4096, 64, 256, 512) == 1 + 7 * 2 + 8
    assert bench.tiles_visited(4096, 64, 64, 64) == 1 + 63 * 2


def test_a_tiny_run_writes_every_width_and_the_machine(tmp_path):
    output = tmp_path / "tiled_window.json"
    result = bench.main(["--seq-len", "48", "--windows", "4,16,S", "--heads", "2", "--head-dim", "8",
                         "--rounds", "1", "--block-q", "5", "--block-k", "7", "--output", str(output)])
    stored = json.loads(output.read_text())
    assert stored == json.loads(json.dumps(result))
    assert [row["window"] for row in stored["rows"]] == [4, 16, 48]
    assert (stored["block_q"], stored["block_k"]) == (5, 7)
    assert {"cpu", "torch", "date", "commit"} <= set(stored["machine"])
    assert all(row["tiled_seconds"] > 0 and row["torch_masked_seconds"] > 0 for row in stored["rows"])
