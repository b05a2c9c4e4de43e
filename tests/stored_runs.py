"""Stored runs built by hand for the report tests: a run folder with a config and whatever cells a test writes."""

from persalign.runner.store import RunStore


def empty_run(folder) -> RunStore:
    """A run folder holding only a config (the demo data set's), ready for cells."""
    store = RunStore(folder)
    store.root.mkdir(parents=True)
    (store.root / "config.yaml").write_text("name: fixture\ndata: {dataset: demo}\n")
    return store


def run_of(folder, specs: list[tuple], write_cell):
    """A stored run whose cell number i is `write_cell(store, i, *specs[i])`; its root."""
    store = empty_run(folder)
    for index, spec in enumerate(specs):
        write_cell(store, index, *spec)
    return store.root
