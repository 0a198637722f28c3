"""Stand-in commands run over SSH on emulated targets (``bin/<name>`` wrappers exec these)."""
