"""Every setting in one list (batch_pipeline/settings.py), and docs/configuration.md generated
from it."""

import importlib
import pkgutil

import batch_pipeline
from batch_pipeline.san.settings import Setting
from batch_pipeline.settings import DOC, SETTINGS, render


def product_modules():
    for module in pkgutil.walk_packages(batch_pipeline.__path__, "batch_pipeline."):
        if not module.name.startswith("san_sandbox"):
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


def test_every_numeric_run_config_field_has_a_lower_and_an_upper_bound():
    """So every value's arithmetic stays inside Python's and PostgreSQL's ranges, and a value
    beyond is refused by the first step, naming the field, before anything is written."""
    from annotated_types import Ge, Gt, Le, Lt

    from batch_pipeline.settings import RUN_CONFIGS

    unbounded = [
        f"{job}.{name}"
        for job, _path, config in RUN_CONFIGS
        for name, field in config.model_fields.items()
        if field.annotation is int
        and not (
            any(isinstance(rule, (Gt, Ge)) for rule in field.metadata)
            and any(isinstance(rule, (Lt, Le)) for rule in field.metadata)
        )
    ]
    assert unbounded == []
