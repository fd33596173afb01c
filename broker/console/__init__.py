"""The web console on the ``--metrics-port`` server: every group with its rebalance timeline.

- ``routes``: the HTTP paths (``/``, ``/api/groups``, ``/api/groups/<group>``, ``/api/topics``),
  input checks (400/404), the static files;
- ``views``: the JSON, read from the running broker (shards, logs, rebalance history) in
  slices, never through the Kafka protocol;
- ``static/``: the page itself, plain HTML, CSS and JavaScript (no build step, no CDN); it polls
  the JSON every two seconds.

The rebalance events themselves are built by ``coordinator.rebalances`` and kept by
``broker.groups.runtime.GroupRuntime.rebalances``.
"""
