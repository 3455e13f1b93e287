"""The Train page's setup lives in the URL: a shared link fills the Setup; the Setup updates it."""

from __future__ import annotations


import pytest
from tests._pages import page_test



@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))


def test_link_fills_the_setup_and_setup_writes_the_link():
    at = page_test("train", default_timeout=60)
    at.query_params.update({"optimizer": "sgd", "hp.learning_rate": "0.05",
                            "hp.momentum": "0.9", "opt.nesterov": "true", "dataset": "moons",
                            "model": "logistic", "steps": "321", "seed": "7"})
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="optimizer").value == "sgd"
    assert at.number_input(key="hp_sgd_learning_rate").value == pytest.approx(0.05)
    assert at.slider(key="hp_sgd_momentum").value == pytest.approx(0.9)
    assert at.checkbox(key="opt_sgd_nesterov").value is True
    assert (at.selectbox(key="dataset").value, at.selectbox(key="model").value) == (
        "moons", "logistic")
    assert (at.number_input(key="steps").value, at.number_input(key="seed").value) == (321, 7)
    at.number_input(key="seed").set_value(8).run()
    assert at.query_params["seed"] == "8"
    assert at.query_params["hp.learning_rate"] == "0.05"


def test_a_link_without_label_noise_keeps_the_page_default():
    """A hand-written link names a few fields; the others are the page's defaults (label noise
    0.3, README "Default setup"), not `RunConfig()`'s 0. A link that says 0 gets 0."""
    at = page_test("train", default_timeout=60)
    at.query_params.update({"optimizer": "sgd", "hp.learning_rate": "0.05"})
    at.run()
    assert not at.exception, at.exception
    assert at.number_input(key="hp_sgd_learning_rate").value == pytest.approx(0.05)
    assert at.number_input(key="label_noise").value == pytest.approx(0.3)
    at = page_test("train", default_timeout=60)
    at.query_params.update({"optimizer": "sgd", "label_noise": "0.0"})
    at.run()
    assert at.number_input(key="label_noise").value == 0.0


def test_bad_link_is_ignored_with_a_message_naming_the_parameter():
    at = page_test("train", default_timeout=60)
    at.query_params.update({"optimizer": "adam", "hp.beta_1": "2"})
    at.run()
    assert not at.exception
    assert at.selectbox(key="optimizer").value == "adam"
    assert at.slider(key="hp_adam_beta_1").value == pytest.approx(0.9)
    assert any("shared link ignored: hp.beta_1" in e.value for e in at.error)


@pytest.mark.parametrize("device, expected, message", [
    ("CPU:0", "/device:CPU:0", False),  # short form: mapped to the canonical name
    ("/device:GPU:3", "auto", True),  # a link from a machine with GPUs: named, then auto
])
def test_link_device_is_mapped_or_named(device, expected, message):
    at = page_test("train", default_timeout=120)
    at.query_params.update({"optimizer": "adam", "device": device})
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="device").value == expected
    named = [e.value for e in at.error if f"device={device!r} is not on this machine" in e.value]
    assert bool(named) is message, [e.value for e in at.error]


def test_link_carries_dtype_and_hypergradient_settings_through_the_page():
    """Drift bugs: the page dropped the hyper-gradient settings from its link, and `dtype` had
    no widget and was not read by the setup (the page's own link is written from the setup)."""
    at = page_test("train", default_timeout=60)
    at.query_params.update({"optimizer": "adam", "dtype": "float64",
                            "hypergradients": "learning_rate,beta_1", "hypergradient_every": "3",
                            "reverse_horizon": "12", "reverse_every": "40",
                            "autotune.learning_rate": "0.02", "autotune_every": "6"})
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="dtype").value == "float64"
    assert at.checkbox(key="hg_follow").value is True
    assert at.multiselect(key="hg_names_adam").value == ["learning_rate", "beta_1"]
    assert (at.number_input(key="hg_every").value, at.number_input(key="hg_reverse_horizon").value,
            at.number_input(key="hg_reverse_every").value,
            at.number_input(key="hg_autotune_every").value) == (3, 12, 40, 6)
    at.number_input(key="seed").set_value(5).run()  # the page rewrites its link from the setup
    link = at.query_params
    assert (link["seed"], link["dtype"], link["hypergradients"], link["reverse_horizon"]) == (
        "5", "float64", "learning_rate,beta_1", "12")
    assert (link["hypergradient_every"], link["reverse_every"], link["autotune_every"]) == (
        "3", "40", "6")
    assert link["autotune.learning_rate"] == "0.02"


def test_dtype_widget_goes_into_the_setup():
    at = page_test("train", default_timeout=60)
    at.run()
    assert at.selectbox(key="dtype").value == "float32"
    at.selectbox(key="dtype").set_value("float64").run()
    assert not at.exception, at.exception
    assert at.query_params["dtype"] == "float64"
