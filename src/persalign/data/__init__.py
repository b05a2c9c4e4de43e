"""Data: loaders behind a registry, the Pref-LaMP builder and user splits."""
