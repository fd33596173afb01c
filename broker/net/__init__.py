"""The network layer: listeners (TLS), connections and their frame loop, connection limits, the
memory budget for large requests, and keeping big requests off the event loop."""
