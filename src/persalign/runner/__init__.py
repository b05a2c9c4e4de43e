"""Runner: cells (decoder × policy × seed), a resumable results store, provenance."""
