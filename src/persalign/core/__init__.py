"""The core every layer stands on: errors, files written atomically, the registries, row records, the typed
config and its checks, prompt templates, and what a report needs of its users (no torch, no models)."""
