"""PySpark jobs over the logs (offsets, lag, rebalance history)."""
