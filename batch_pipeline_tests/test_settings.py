"""Every setting in one list (batch_pipeline/settings.py), and docs/configuration.md generated
from it."""

import importlib
import pkgutil

import batch_pipeline
from batch_pipeline.san.settings import Setting
from batch_pipeline.settings import DOC, SETTINGS, render


def product_modules():
    for module in pkgutil.walk_packages(batch_pipeline.__path__, "batch_pipeline."):
        if not module.name.startswith("batch_pipeline.sandbox"):
            yield importlib.import_module(module.name)


def test_every_setting_the_code_declares_is_in_the_one_list():
    declared = {
        value.name
        for module in product_modules()
        for value in vars(module).values()
        if isinstance(value, Setting)
    }
    assert declared == {setting.name for setting in SETTINGS}
    assert len(SETTINGS) == len(declared)  # each once


def test_the_configuration_page_is_the_generated_one():
    current = DOC.read_text()
    assert render(current) == current, "run `python -m batch_pipeline.settings --write`"
    for setting in SETTINGS:
        assert f"`{setting.name}`" in current
