"""The context builder and summaries."""
