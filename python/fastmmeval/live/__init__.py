"""LiveBench: a fresh benchmark from current web pages, built by a resumable, concurrent pipeline
(sources -> capture -> extract -> generate -> check -> finalize -> score -> select -> dataset)."""
