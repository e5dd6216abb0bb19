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


def test_each_job_takes_its_run_config_where_the_docs_say():
    """The paths docs/configuration.md gives (`ops.run_recovery.config`, ...) are the jobs' own."""
    from batch_pipeline.definitions import defs
    from batch_pipeline.settings import RUN_CONFIGS

    for job, path, config in RUN_CONFIGS:
        config_type = defs.resolve_job_def(job).run_config_schema.config_type
        for key in path.split("."):
            config_type = config_type.fields[key].config_type
        assert set(config_type.fields) == set(config.model_fields), job
