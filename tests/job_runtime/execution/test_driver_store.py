"""``--store``: the address is split once, and each role reads what it needs of it.

An address of no known kind is refused only when the store is opened, so a driver
reports it where it always has; flags that need a ConfigMap store say which flag.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cjob_checkpoint.store.file import FileCheckpointStore
from cjob_checkpoint.store.memory import InMemoryCheckpointStore
from cjob_checkpoint.store.triggers import FileTriggerSource
from job_runtime.errors import ConfigurationError
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.store import (
    MEMORY_STORE,
    StoreAddress,
    StoreKind,
    open_store,
    open_triggers,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("file:/data/store", StoreAddress(text="file:/data/store", kind=StoreKind.FILE,
                                      directory="/data/store")),
    ("memory:", StoreAddress(text="memory:", kind=StoreKind.MEMORY)),
    ("configmap:team/clicks-checkpoints",
     StoreAddress(text="configmap:team/clicks-checkpoints", kind=StoreKind.CONFIGMAP,
                  namespace="team", name="clicks-checkpoints")),
    ("redis:localhost", StoreAddress(text="redis:localhost", kind=None)),
])
def test_an_address_is_split_into_its_kind_and_parts(text: str,
                                                     expected: StoreAddress) -> None:
    assert StoreAddress.parse(text) == expected


def test_a_driver_told_no_store_keeps_its_checkpoints_in_memory() -> None:
    settings = DriverSettings(job_name="j", job_uid="u", entrypoint="m:f")
    assert settings.store == MEMORY_STORE == StoreAddress.parse("memory:")
    store, _counter = open_store(settings.store, retained=1, attempt=1)
    assert isinstance(store, InMemoryCheckpointStore)
    assert open_triggers(settings.store) is None


def test_a_file_store_and_its_requests_live_in_the_directory(tmp_path: Path) -> None:
    address = StoreAddress.parse(f"file:{tmp_path / 'store'}")
    store, _counter = open_store(address, retained=1, attempt=1)
    assert isinstance(store, FileCheckpointStore)
    assert isinstance(open_triggers(address), FileTriggerSource)


def test_an_unknown_kind_is_refused_when_the_store_is_opened() -> None:
    with pytest.raises(ConfigurationError,
                       match=r"--store.*expected file:DIR, memory: or configmap:NS/NAME, "
                             r"got 'redis:localhost'"):
        open_store(StoreAddress.parse("redis:localhost"), retained=1, attempt=1)


@pytest.mark.parametrize("text", ["file:/data/store", "configmap:team", "configmap:/name"])
def test_a_flag_that_needs_a_configmap_store_names_itself_and_the_store(text: str) -> None:
    with pytest.raises(ConfigurationError,
                       match=rf"--beacon-host.*configmap:NAMESPACE/NAME.*--store '{text}'"):
        StoreAddress.parse(text).configmap(setting="--beacon-host")
    assert StoreAddress.parse("configmap:team/j").configmap(setting="--beacon-host") == (
        "team", "j")
