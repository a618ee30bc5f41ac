"""Looking runs up in the stored training sweeps by their settings."""
import pytest

from attnlib.book import stored_results, stored_runs


@pytest.fixture(scope="module")
def sweep():
    return stored_results.load("training_sweep.json")["runs"]


def test_find_returns_the_run_with_exactly_these_settings(sweep):
    found = stored_runs.find(sweep, "1/d", 64, init="torch", layernorm=True, optimizer="sgd")
    assert (found["config"]["scale_rule"], found["config"]["head_dim"], found["config"]["init"],
            found["config"]["layernorm"], found["optimizer"], found["seed"]) == ("1/d", 64, "torch", True, "sgd", 0)


def test_a_setting_with_no_run_or_an_unknown_field_is_an_error_that_names_it(sweep):
    with pytest.raises(ValueError, match="exactly one run.*got 0"):
        stored_runs.find(sweep, "1/sqrt(d)", 17)
    with pytest.raises(ValueError, match="fields of training.ModelConfig, got head_width"):
        stored_runs.find(sweep, "1/sqrt(d)", 16, head_width=3)


def test_steps_and_outcome_read_the_run():
    run = {"first_step_copy_loss_below": {"1.0": 40, "0.1": None},
           "curves": {"copy_loss": [3.0, 0.5, 0.7]}}
    assert stored_runs.steps_to(run, "1.0") == "40" and stored_runs.steps_to(run, "0.1") == "-"
    assert stored_runs.outcome(run) == "0.700 0.500   40    -"


def test_peak_is_the_index_of_the_largest_value_and_the_first_of_a_tie():
    assert stored_runs.peak([1.0, 4.0, 2.0, 4.0]) == 1
    assert stored_runs.peak([3.0]) == 0 and stored_runs.peak([0.5, 0.25, 7.5]) == 2
